package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// The Service annotations and class of Calico v3.31's LoadBalancer
// controller (kube-controllers pkg/controllers/loadbalancer).
const (
	// AnnotationIPv4Pools and AnnotationIPv6Pools name the pools (JSON
	// lists of CIDRs or LoadBalancer pool names) a Service's address comes
	// from.
	AnnotationIPv4Pools = "projectcalico.org/ipv4pools"
	AnnotationIPv6Pools = "projectcalico.org/ipv6pools"
	// AnnotationLoadBalancerIPs asks for specific addresses (a JSON list,
	// at most one IPv4 and one IPv6).
	AnnotationLoadBalancerIPs = "projectcalico.org/loadBalancerIPs"
	// LoadBalancerClass is the spec.loadBalancerClass Calico serves (with
	// none).
	LoadBalancerClass = "calico"
	// lbHandlePrefix starts a Service's IPAM handle.
	lbHandlePrefix = "lb-"
)

// lbManaged reports whether Calico assigns the Service's addresses
// (Calico's IsCalicoManagedLoadBalancer): a LoadBalancer Service of no
// class or class "calico"; with RequestedServicesOnly only one of class
// "calico" or carrying one of the annotations. warn explains a Service
// that asks with an annotation but names another class.
func lbManaged(svc *corev1.Service, mode api.AssignIPs) (managed bool, warn string) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false, ""
	}
	class := svc.Spec.LoadBalancerClass
	if mode != api.RequestedServicesOnly {
		return class == nil || *class == LoadBalancerClass, ""
	}
	if class != nil && *class == LoadBalancerClass {
		return true, ""
	}
	a := svc.Annotations
	if a[AnnotationIPv4Pools] == "" && a[AnnotationIPv6Pools] == "" && a[AnnotationLoadBalancerIPs] == "" {
		return false, ""
	}
	if class != nil {
		return false, fmt.Sprintf("Calico LoadBalancer annotations on a Service of loadBalancerClass %q are not honoured", *class)
	}
	return true, ""
}

// lbHandle is the IPAM handle of a Service's addresses, as Calico names
// it: "lb-" and the unpadded URL-safe base64 of sha256("<name>-<namespace>-<uid>"
// in lower case), with '-', '_' and '.' dropped. It depends on the UID, so
// a Service deleted and created again under its name gets a new one.
func lbHandle(svc *corev1.Service) string {
	sum := sha256.Sum256([]byte(strings.ToLower(svc.Name + "-" + svc.Namespace + "-" + string(svc.UID))))
	h := strings.NewReplacer("-", "", "_", "", ".", "").Replace(base64.RawURLEncoding.EncodeToString(sum[:]))
	name := lbHandlePrefix + h
	return name[:min(len(name), dns1123SubdomainMaxLength)]
}

// lbRequest is what a Service's annotations ask for.
type lbRequest struct {
	// ips are the requested addresses; when set, the pools are not used.
	ips []netip.Addr
	// pools4 and pools6 restrict automatic assignment (CIDRs, masked).
	pools4, pools6 []netip.Prefix
}

// parseLBRequest reads the annotations as Calico does; pool names resolve
// against the LoadBalancer pools. What does not parse is an error naming
// the annotation.
func parseLBRequest(ann map[string]string, pools []api.Pool) (lbRequest, error) {
	var r lbRequest
	var err error
	if v := ann[AnnotationIPv4Pools]; v != "" {
		if r.pools4, err = resolveLBPools(v, 4, pools); err != nil {
			return r, fmt.Errorf("annotation %s: %w", AnnotationIPv4Pools, err)
		}
	}
	if v := ann[AnnotationIPv6Pools]; v != "" {
		if r.pools6, err = resolveLBPools(v, 6, pools); err != nil {
			return r, fmt.Errorf("annotation %s: %w", AnnotationIPv6Pools, err)
		}
	}
	if v := ann[AnnotationLoadBalancerIPs]; v != "" {
		var list []string
		if err := json.Unmarshal([]byte(v), &list); err != nil {
			return r, fmt.Errorf("annotation %s: not a JSON list of addresses: %w", AnnotationLoadBalancerIPs, err)
		}
		n4, n6 := 0, 0
		for _, s := range list {
			a, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil {
				return r, fmt.Errorf("annotation %s: could not parse %s as a valid IP address", AnnotationLoadBalancerIPs, s)
			}
			a = a.Unmap()
			if a.Is4() {
				n4++
			} else {
				n6++
			}
			if !slices.Contains(r.ips, a) {
				r.ips = append(r.ips, a)
			}
		}
		if n4 > 1 || n6 > 1 {
			return r, fmt.Errorf("annotation %s: at max only one ipv4 and one ipv6 address can be specified. Received %d ipv4 and %d ipv6 addresses",
				AnnotationLoadBalancerIPs, n4, n6)
		}
	}
	return r, nil
}

// resolveLBPools reads a pools annotation: each entry a CIDR, or the name
// of a LoadBalancer pool, of IP version v.
func resolveLBPools(v string, version int, pools []api.Pool) ([]netip.Prefix, error) {
	var list []string
	if err := json.Unmarshal([]byte(v), &list); err != nil {
		return nil, fmt.Errorf("not a JSON list of pools: %w", err)
	}
	var out []netip.Prefix
	for _, s := range list {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			i := slices.IndexFunc(pools, func(q api.Pool) bool { return q.Name == s })
			if i < 0 {
				return nil, fmt.Errorf("error parsing pool %q: neither a CIDR nor the name of a LoadBalancer IP pool", s)
			}
			p = pools[i].CIDR
		}
		p = p.Masked()
		if got := ipVersionOf(p.Addr()); got != version {
			return nil, fmt.Errorf("%q isn't a IPv%d address", p.Addr(), version)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, errors.New("failed to resolve pools: the list is empty")
	}
	return out, nil
}

func ipVersionOf(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// lbPlan is what one sync does to a managed Service's addresses.
type lbPlan struct {
	// release are addresses of the Service's handle to give back.
	release []netip.Addr
	// assign are requested addresses to allocate.
	assign []netip.Addr
	// auto4 and auto6: allocate one address of the family automatically.
	auto4, auto6 bool
}

// planLB compares the addresses the Service's handle holds (have) with
// what it asks for, following Calico: with loadBalancerIPs exactly those;
// otherwise one address per family of spec.ipFamilies, from the annotated
// pools when there are any, never from a Manual pool the annotations no
// longer name. An address of a family the Service no longer has, or a
// second one of a family, is released too (Calico would keep it).
func planLB(svc *corev1.Service, req lbRequest, have []netip.Addr, pools []api.Pool) lbPlan {
	var p lbPlan
	if len(req.ips) > 0 {
		for _, a := range have {
			if !slices.Contains(req.ips, a) {
				p.release = append(p.release, a)
			}
		}
		for _, a := range req.ips {
			if !slices.Contains(have, a) {
				p.assign = append(p.assign, a)
			}
		}
		return p
	}
	want := map[int]bool{}
	for _, f := range svc.Spec.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			want[4] = true
		case corev1.IPv6Protocol:
			want[6] = true
		}
	}
	annotated := len(req.pools4) > 0 || len(req.pools6) > 0
	kept := map[int]bool{}
	for _, a := range have {
		v := ipVersionOf(a)
		in := func(ps []netip.Prefix) bool {
			return slices.ContainsFunc(ps, func(q netip.Prefix) bool { return q.Contains(a) })
		}
		keep := want[v] && !kept[v]
		switch {
		case !keep:
		case annotated:
			keep = in(req.pools4) || in(req.pools6)
		default:
			if i := slices.IndexFunc(pools, func(q api.Pool) bool { return q.CIDR.Contains(a) }); i >= 0 {
				keep = pools[i].AssignmentMode != api.AssignmentModeManual
			}
		}
		if keep {
			kept[v] = true
		} else {
			p.release = append(p.release, a)
		}
	}
	p.auto4, p.auto6 = want[4] && !kept[4], want[6] && !kept[6]
	return p
}

// lbIngress is the status Calico writes: one ingress entry per address,
// IPv4 first.
func lbIngress(ips []netip.Addr) []corev1.LoadBalancerIngress {
	sorted := slices.Clone(ips)
	slices.SortFunc(sorted, netip.Addr.Compare)
	out := make([]corev1.LoadBalancerIngress, 0, len(sorted))
	for _, a := range sorted {
		out = append(out, corev1.LoadBalancerIngress{IP: a.String()})
	}
	return out
}

// sameIngressIPs compares the addresses of a status with ips, as sets.
func sameIngressIPs(ing []corev1.LoadBalancerIngress, ips []netip.Addr) bool {
	if len(ing) != len(ips) {
		return false
	}
	for _, i := range ing {
		a, err := netip.ParseAddr(i.IP)
		if err != nil || !slices.Contains(ips, a.Unmap()) {
			return false
		}
	}
	return true
}

// loadBalancerController assigns the addresses of LoadBalancer Services
// from the IP pools that allow the LoadBalancer use, through Calico IPAM
// (the virtual host "load-balancer", one handle per Service, lbHandle),
// and writes them to status.loadBalancer.ingress, as Calico v3.31's
// LoadBalancer controller does. IPAM is the record of what is assigned:
// a sync reads the Service's handle, so a restart (or another leader)
// picks up the assignments as they are.
//
// Triggers: Service events (a deleted Service's handle is remembered for
// its key), and a full pass at the start, every Resync and on a change of
// IP pools or of assignIPs, which also finds the allocations of Services
// that no longer exist (a delete missed while no controller ran) or were
// created again under their name.
type loadBalancerController struct {
	c          *Controllers
	src        *kccSource
	log        *slog.Logger
	services   corelisters.ServiceLister
	namespaces corelisters.NamespaceLister
	q          *queue
	kick       kicker

	// stale are handles to release per Service key: those of deleted
	// Services and allocations whose Service has another UID now, each
	// with the addresses a full pass saw it hold.
	mu    sync.Mutex
	stale map[string]map[string][]netip.Addr
	// warned is the last problem logged per key, so that a Service's
	// bad annotation is logged once, not at every sync.
	warned map[string]string
}

func newLoadBalancerController(c *Controllers, f *informers, src *kccSource, log *slog.Logger) (*loadBalancerController, error) {
	svcs := f.services()
	nss := f.namespaces()
	lb := &loadBalancerController{c: c, src: src, log: log,
		services:   corelisters.NewServiceLister(svcs.GetIndexer()),
		namespaces: corelisters.NewNamespaceLister(nss.GetIndexer()),
		kick:       newKicker(), stale: map[string]map[string][]netip.Addr{}, warned: map[string]string{}}
	lb.q = c.newQueue(LoadBalancer, log, nil, lb.sync, lb.keys)
	// Only LoadBalancer Services (before or after the change) concern the
	// controller; anything else holding addresses is found by the full
	// pass.
	isLB := func(obj any) bool {
		svc, ok := obj.(*corev1.Service)
		return ok && svc.Spec.Type == corev1.ServiceTypeLoadBalancer
	}
	if _, err := svcs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if isLB(obj) {
				lb.enqueue(obj)
			}
		},
		UpdateFunc: func(old, obj any) {
			if isLB(old) || isLB(obj) {
				lb.enqueue(obj)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if svc, ok := obj.(*corev1.Service); ok && isLB(svc) {
				lb.addStale(svc.Namespace+"/"+svc.Name, lbHandle(svc))
				lb.enqueue(svc)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watch services: %w", err)
	}
	return lb, nil
}

func (lb *loadBalancerController) enqueue(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		lb.q.add(key)
	}
}

// addStale records handle as one to release for key, with the addresses
// a full pass saw it hold (none from a delete event).
func (lb *loadBalancerController) addStale(key, handle string, addrs ...netip.Addr) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.stale[key] == nil {
		lb.stale[key] = map[string][]netip.Addr{}
	}
	lb.stale[key][handle] = append(lb.stale[key][handle], addrs...)
}

// takeStale hands over (and forgets) key's handles to release, with the
// addresses seen held by each.
func (lb *loadBalancerController) takeStale(key string) map[string][]netip.Addr {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	hs := lb.stale[key]
	delete(lb.stale, key)
	return hs
}

// releaseStale releases what a gone (or replaced) Service's handle holds:
// by handle, then each address the full pass saw the handle hold, by
// address conditional on that handle. The second step frees an
// allocation whose handle object is gone (on the Kubernetes datastore,
// where the block and the handle are separate writes, an interrupted
// write can leave one), which a release by handle cannot see; an address
// reassigned since names another handle and is left alone.
func (lb *loadBalancerController) releaseStale(ctx context.Context, key, h string, addrs []netip.Addr) error {
	if err := lb.c.ipam.ReleaseByHandle(ctx, h); err != nil {
		return err
	}
	if len(addrs) > 0 {
		opts := make([]ipam.ReleaseOptions, len(addrs))
		for i, a := range addrs {
			opts[i] = ipam.ReleaseOptions{Addr: a, Handle: h}
		}
		unallocated, err := lb.c.ipam.Release(ctx, opts...)
		if err != nil {
			return err
		}
		if n := len(addrs) - len(unallocated); n > 0 {
			lb.log.Warn("released LoadBalancer addresses that their handle no longer counted", "service", key, "handle", h, "addresses", n)
		}
	}
	lb.log.Info("released the addresses of a service that is gone", "service", key, "handle", h)
	return nil
}

// run runs the queue; IP pool and configuration changes bring a full
// pass forward.
func (lb *loadBalancerController) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	lb.kick.pokeOnEvents(ctx, &wg, lb.c.store, "IPPool")
	wg.Go(func() {
		mode := api.AssignIPs("")
		for {
			rc, changed := lb.src.current()
			if mode != "" && rc.assignIPs != mode {
				lb.kick.poke()
			}
			mode = rc.assignIPs
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-lb.kick:
			}
			keys, err := lb.keys(ctx)
			if err != nil {
				if ctx.Err() == nil {
					lb.log.Warn("LoadBalancer pass after an IP pool or configuration change failed; the next full reconcile retries", "err", err)
				}
				continue
			}
			for _, k := range keys {
				lb.q.add(k)
			}
		}
	})
	lb.q.run(ctx)
}

// keys is every LoadBalancer Service and every Service named by a
// LoadBalancer allocation; allocations whose handle is not their
// Service's current one are recorded as stale for its key.
func (lb *loadBalancerController) keys(ctx context.Context) ([]string, error) {
	allocs, err := lb.c.ipam.LoadBalancerAllocations(ctx)
	if err != nil {
		return nil, err
	}
	svcs, err := lb.services.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	keys := map[string]bool{}
	current := map[string]string{}
	for _, s := range svcs {
		key := s.Namespace + "/" + s.Name
		current[key] = lbHandle(s)
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			keys[key] = true
		}
	}
	for _, a := range allocs {
		ns, name := a.Attrs[ipam.AttrNamespace], a.Attrs[ipam.AttrService]
		if ns == "" || name == "" || a.Handle == "" {
			// As Calico: not one of the controller's allocations.
			lb.log.Debug("LoadBalancer allocation without service attributes; leaving it", "ip", a.Addr, "handle", a.Handle)
			continue
		}
		key := ns + "/" + name
		keys[key] = true
		if current[key] != a.Handle {
			lb.addStale(key, a.Handle, a.Addr)
		}
	}
	return slices.Sorted(maps.Keys(keys)), nil
}

// lbPools are the IP pools that allow the LoadBalancer use.
func (lb *loadBalancerController) lbPools(ctx context.Context) ([]api.Pool, error) {
	objs, _, err := lb.c.store.List(ctx, "IPPool", "")
	if err != nil {
		return nil, fmt.Errorf("list IP pools: %w", err)
	}
	pools, _ := api.ParsePools(objs) // unusable pools: IPAM warns about them
	return slices.DeleteFunc(pools, func(p api.Pool) bool { return !p.Allows(api.IPPoolAllowedUseLoadBalancer) }), nil
}

// warnOnce logs a Service's problem when it differs from the last one
// logged for the key; "" forgets it.
func (lb *loadBalancerController) warnOnce(key, problem string) {
	lb.mu.Lock()
	last := lb.warned[key]
	if problem == "" {
		delete(lb.warned, key)
	} else {
		lb.warned[key] = problem
	}
	lb.mu.Unlock()
	if problem != "" && problem != last {
		lb.log.Warn("LoadBalancer service not served", "service", key, "problem", problem)
	}
}

// sync brings one Service's addresses in line with what it asks for.
func (lb *loadBalancerController) sync(ctx context.Context, key string) (err error) {
	ns, name := splitKey(key)
	svc, err := lb.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		svc, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("get service %s: %w", key, err)
	}
	stale := lb.takeStale(key)
	for _, h := range slices.Sorted(maps.Keys(stale)) {
		if svc != nil && h == lbHandle(svc) {
			continue
		}
		if err := lb.releaseStale(ctx, key, h, stale[h]); err != nil {
			lb.addStale(key, h, stale[h]...)
			return fmt.Errorf("release addresses of %s (handle %s): %w", key, h, err)
		}
	}
	if svc == nil {
		lb.warnOnce(key, "")
		return nil
	}
	handle := lbHandle(svc)
	have, err := lb.c.ipam.IPsByHandle(ctx, handle)
	if err != nil {
		return fmt.Errorf("addresses of service %s: %w", key, err)
	}
	rc, _ := lb.src.current()
	managed, warn := lbManaged(svc, rc.assignIPs)
	pools, err := lb.lbPools(ctx)
	if err != nil {
		return err
	}
	if !managed || len(pools) == 0 {
		if !managed {
			lb.warnOnce(key, warn)
		} else {
			lb.warnOnce(key, "no IP pool allows the LoadBalancer use")
		}
		if len(have) == 0 {
			return nil
		}
		// No longer Calico's to serve (another type or class, or the
		// last LoadBalancer pool is gone): give the addresses back and
		// take them out of the status, leaving others' entries.
		if err := lb.c.ipam.ReleaseByHandle(ctx, handle); err != nil {
			return fmt.Errorf("release addresses of %s: %w", key, err)
		}
		lb.log.Info("released the addresses of a service Calico no longer serves", "service", key, "ips", have)
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			return nil
		}
		var keep []corev1.LoadBalancerIngress
		for _, i := range svc.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(i.IP); err != nil || !slices.Contains(have, a.Unmap()) {
				keep = append(keep, i)
			}
		}
		return lb.writeStatus(ctx, svc, keep)
	}
	req, err := parseLBRequest(svc.Annotations, pools)
	if err != nil {
		// A user's mistake: retrying does not help, a change to the
		// Service or the pools brings it here again.
		lb.warnOnce(key, err.Error())
		return nil
	}
	p := planLB(svc, req, have, pools)
	var errs []error
	if len(p.release) > 0 {
		opts := make([]ipam.ReleaseOptions, len(p.release))
		for i, a := range p.release {
			opts[i] = ipam.ReleaseOptions{Addr: a, Handle: handle}
		}
		if _, err := lb.c.ipam.Release(ctx, opts...); err != nil {
			return fmt.Errorf("release addresses %v of %s: %w", p.release, key, err)
		}
		lb.log.Info("released LoadBalancer addresses the service no longer asks for", "service", key, "ips", p.release)
		have = slices.DeleteFunc(have, func(a netip.Addr) bool { return slices.Contains(p.release, a) })
	}
	attrs := map[string]string{ipam.AttrService: svc.Name, ipam.AttrNamespace: svc.Namespace,
		ipam.AttrType: string(svc.Spec.Type), ipam.AttrTimestamp: time.Now().UTC().String()}
	var problems []string
	for _, a := range p.assign {
		err := lb.c.ipam.AssignIP(ctx, ipam.AssignIPArgs{IP: a, HandleID: handle, Attrs: attrs, Use: api.IPPoolAllowedUseLoadBalancer})
		switch {
		case err == nil:
			have = append(have, a)
			lb.log.Info("assigned the requested LoadBalancer address", "service", key, "ip", a)
		case errors.Is(err, ipam.ErrAddressInUse), errors.Is(err, ipam.ErrNotInPool), errors.Is(err, ipam.ErrPoolDisabled):
			problems = append(problems, err.Error())
		default:
			errs = append(errs, fmt.Errorf("assign %s to %s: %w", a, key, err))
		}
	}
	for _, f := range []struct {
		want  bool
		v     int
		pools []netip.Prefix
	}{{p.auto4, 4, req.pools4}, {p.auto6, 6, req.pools6}} {
		if !f.want {
			continue
		}
		args := ipam.AutoAssignArgs{HandleID: handle, Attrs: attrs, Use: api.IPPoolAllowedUseLoadBalancer,
			NamespaceLabels: lb.namespaceLabels(svc.Namespace)}
		var named []string
		for _, q := range f.pools {
			named = append(named, q.String())
		}
		if f.v == 4 {
			args.Num4, args.IPv4Pools = 1, named
		} else {
			args.Num6, args.IPv6Pools = 1, named
		}
		v4, v6, err := lb.c.ipam.AutoAssign(ctx, args)
		switch {
		case err == nil:
			for _, q := range append(v4, v6...) {
				have = append(have, q.Addr())
				lb.log.Info("assigned a LoadBalancer address", "service", key, "ip", q.Addr())
			}
		case errors.Is(err, ipam.ErrNoPools), errors.Is(err, ipam.ErrNoFreeAddresses), errors.Is(err, ipam.ErrPoolNotFound),
			errors.Is(err, ipam.ErrPoolDisabled), errors.Is(err, ipam.ErrBlockLimit):
			problems = append(problems, err.Error())
		default:
			errs = append(errs, fmt.Errorf("assign an IPv%d address to %s: %w", f.v, key, err))
		}
	}
	lb.warnOnce(key, strings.Join(problems, "; "))
	if !sameIngressIPs(svc.Status.LoadBalancer.Ingress, have) {
		if err := lb.writeStatus(ctx, svc, lbIngress(have)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (lb *loadBalancerController) namespaceLabels(ns string) map[string]string {
	if n, err := lb.namespaces.Get(ns); err == nil {
		return n.Labels
	}
	return nil
}

// writeStatus replaces the Service's ingress list, on a copy of the
// cached object (a conflict is retried by the queue with the newer one).
func (lb *loadBalancerController) writeStatus(ctx context.Context, svc *corev1.Service, ing []corev1.LoadBalancerIngress) error {
	out := svc.DeepCopy()
	out.Status.LoadBalancer.Ingress = ing
	if _, err := lb.c.kube.Services(svc.Namespace).UpdateStatus(ctx, out); err != nil {
		return fmt.Errorf("update status of service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}
