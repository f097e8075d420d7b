package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// DefaultLeakGracePeriod is Calico's default
// spec.controllers.node.leakGracePeriod.
const DefaultLeakGracePeriod = 15 * time.Minute

// tunnelTypes are the allocation "type" attributes of a node's own
// tunnel addresses.
var tunnelTypes = []string{
	"ipipTunnelAddress", "vxlanTunnelAddress", "vxlanV6TunnelAddress",
	"wireguardTunnelAddress", "wireguardV6TunnelAddress",
}

func isPodAllocation(a *ipam.Allocation) bool { return a.Pod != "" && a.Namespace != "" }

func isTunnelAllocation(a *ipam.Allocation) bool { return slices.Contains(tunnelTypes, a.Type) }

func podOf(a *ipam.Allocation) string {
	if !isPodAllocation(a) {
		return ""
	}
	return a.Namespace + "/" + a.Pod
}

// allocKey identifies one allocation: an address handed out again gets a
// new sequence number, so it is a new allocation.
type allocKey struct {
	ip, handle string
	seq        uint64
}

func keyOf(a *ipam.Allocation) allocKey {
	k := allocKey{ip: a.IP, handle: a.Handle}
	if a.SequenceNumber != nil {
		k.seq = *a.SequenceNumber
	}
	return k
}

// ipamGC releases leaked addresses after the grace period.
type ipamGC struct {
	c    *Controllers
	pods listersv1.PodLister
	log  *slog.Logger
	kick chan struct{}
	now  func() time.Time
	// candidates are allocations seen leaked, with when they were first
	// seen so; owned by run.
	candidates map[allocKey]time.Time
	// badPools holds the error of each IP pool api.ParsePools refused
	// at the last listing, by pool name, so that each is logged once per
	// change; owned by run.
	badPools map[string]string
}

func newIPAMGC(c *Controllers, f *informers, log *slog.Logger) (runner, error) {
	podInf := f.pods()
	gc := &ipamGC{c: c, pods: listersv1.NewPodLister(podInf.GetIndexer()), log: log, kick: make(chan struct{}, 1), now: time.Now,
		candidates: map[allocKey]time.Time{}}
	kick := cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { gc.poke() }}
	if _, err := podInf.AddEventHandler(kick); err != nil {
		return nil, err
	}
	if _, err := f.nodes().AddEventHandler(kick); err != nil {
		return nil, err
	}
	return gc, nil
}

// poke asks for a pass soon; requests coalesce.
func (gc *ipamGC) poke() {
	select {
	case gc.kick <- struct{}{}:
	default:
	}
}

// leakGracePeriod reads the grace period from the KubeControllersConfiguration;
// ok is false when garbage collection is disabled (a period of 0).
func (gc *ipamGC) leakGracePeriod(ctx context.Context) (time.Duration, bool, error) {
	obj, err := gc.c.store.Get(ctx, "KubeControllersConfiguration", "", "default")
	if errors.Is(err, datastore.ErrNotFound) {
		return DefaultLeakGracePeriod, true, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read KubeControllersConfiguration: %w", err)
	}
	kcc := obj.(*api.KubeControllersConfiguration)
	if n := kcc.Spec.Controllers.Node; n != nil && n.LeakGracePeriod != nil {
		d := n.LeakGracePeriod.Duration
		return d, d > 0, nil
	}
	return DefaultLeakGracePeriod, true, nil
}

func (gc *ipamGC) interval(grace time.Duration, enabled bool) time.Duration {
	if !enabled {
		return gc.c.cfg.Resync // look at the configuration again later
	}
	if gc.c.cfg.GCInterval > 0 {
		return gc.c.cfg.GCInterval
	}
	return min(max(grace/2, time.Second), 5*time.Minute)
}

func (gc *ipamGC) run(ctx context.Context) {
	// Another instance leads (and reports) once this one stops.
	defer gc.c.metrics.ipam.clear()
	logged := false
	for {
		grace, enabled, err := gc.leakGracePeriod(ctx)
		wait := gc.interval(grace, enabled)
		switch {
		case err != nil:
			gc.log.Warn("IPAM garbage collection skipped", "err", err)
			wait = min(wait, 10*time.Second)
		case !enabled:
			if !logged {
				gc.log.Info("IPAM garbage collection disabled (leakGracePeriod 0)")
				logged = true
			}
			clear(gc.candidates)
			// Collection is off; the IPAM gauges are still kept, as
			// Calico's IPAM controller keeps them.
			if err := gc.publish(ctx, nil, nil, nil); err != nil && ctx.Err() == nil {
				gc.log.Warn("IPAM metrics not updated", "err", err)
			}
		default:
			logged = false
			if err := gc.pass(ctx, grace); err != nil && ctx.Err() == nil {
				gc.log.Warn("IPAM garbage collection pass failed, will retry", "err", err)
				wait = min(wait, 10*time.Second)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		case <-gc.kick:
		}
	}
}

// pass looks at every allocation once and releases the confirmed leaks.
func (gc *ipamGC) pass(ctx context.Context, grace time.Duration) error {
	report, err := gc.c.ipam.Check(ctx)
	if err != nil {
		return fmt.Errorf("read IPAM: %w", err)
	}
	if report.DatastoreLocked {
		// A migration is copying IPAM: what looks leaked here may be in
		// use on the other side. Calico's IPAM controller waits too.
		gc.log.Warn("datastore is locked, skipping IPAM garbage collection")
		clear(gc.candidates) // the grace period starts again after the unlock
		gc.c.metrics.ipam.clear()
		return nil
	}
	nodeObjs, _, err := gc.c.store.List(ctx, "Node", "")
	if err != nil {
		return fmt.Errorf("list calico nodes: %w", err)
	}
	pools, err := gc.pools(ctx) // for the metrics' ippool label
	if err != nil {
		return err
	}
	k8sName := map[string]string{} // calico node -> kubernetes node
	for _, o := range nodeObjs {
		n := o.(*api.Node)
		k8sName[n.Name] = K8sNodeName(n)
	}

	now := gc.now()
	seen := map[allocKey]bool{}
	byHandle := map[string][]*ipam.Allocation{}
	for _, a := range report.SortedAllocations() {
		k := keyOf(a)
		seen[k] = true
		if a.Handle != "" {
			byHandle[a.Handle] = append(byHandle[a.Handle], a)
		}
		if gc.valid(ctx, a, k8sName, false) {
			delete(gc.candidates, k)
			continue
		}
		if _, ok := gc.candidates[k]; !ok {
			gc.candidates[k] = now
			gc.log.Info("IP allocation looks leaked; releasing it after the grace period unless it comes back into use",
				"ip", a.IP, "handle", a.Handle, "pod", podOf(a), "node", a.Node, "grace", grace)
		}
	}
	for k := range gc.candidates {
		if !seen[k] {
			delete(gc.candidates, k) // released by someone else
		}
	}
	if err := gc.publish(ctx, report, pools, nil); err != nil {
		return err
	}

	confirmed := func(a *ipam.Allocation) bool {
		first, ok := gc.candidates[keyOf(a)]
		return ok && now.Sub(first) >= grace
	}
	var allocs []*ipam.Allocation
	for _, a := range report.SortedAllocations() {
		if !confirmed(a) {
			continue
		}
		// All or nothing per handle: a handle still holding a valid
		// address keeps all of them, or its counts would go wrong.
		if a.Handle != "" && !allConfirmed(byHandle[a.Handle], confirmed) {
			continue
		}
		// Last check against the API server itself, not the cache: a pod
		// that came back must keep its address.
		if gc.valid(ctx, a, k8sName, true) {
			delete(gc.candidates, keyOf(a))
			continue
		}
		if _, err := netip.ParseAddr(a.IP); err != nil {
			continue
		}
		allocs = append(allocs, a)
	}
	released, err := gc.c.releaseAllocations(ctx, allocs)
	if err != nil {
		return fmt.Errorf("release leaked addresses: %w", err)
	}
	gone := map[allocKey]bool{}
	for i, a := range allocs {
		k := keyOf(a)
		first := gc.candidates[k]
		delete(gc.candidates, k)
		if !released[i] {
			continue // changed since the check: not ours to release
		}
		gone[k] = true
		gc.c.metrics.ipam.reclaimed(pools, a)
		gc.log.Info("released leaked IP address", "ip", a.IP, "handle", a.Handle, "pod", podOf(a),
			"node", a.Node, "type", a.Type, "leakedFor", now.Sub(first).Round(time.Second))
	}
	return gc.publish(ctx, report, pools, gone)
}

// pools lists the IP pools, for the IPAM metrics' ippool label, read by
// api.ParsePools as every other consumer reads them. A pool it cannot read
// is left out (its blocks count under no_ippool) and logged once per
// change of its error. Never nil, so that publish can tell "listed, none"
// from "not listed yet".
func (gc *ipamGC) pools(ctx context.Context) ([]api.Pool, error) {
	objs, _, err := gc.c.store.List(ctx, "IPPool", "")
	if err != nil {
		return nil, fmt.Errorf("list IP pools: %w", err)
	}
	pools, errs := api.ParsePools(objs)
	bad := make(map[string]string, len(errs))
	for _, err := range errs {
		name := err.Error()
		if pe, ok := errors.AsType[*api.PoolError](err); ok {
			name = pe.Name
		}
		bad[name] = err.Error()
		if gc.badPools[name] != err.Error() {
			gc.log.Warn("IP pool left out of the IPAM metrics", "pool", name, "err", err)
		}
	}
	gc.badPools = bad
	if pools == nil {
		pools = []api.Pool{}
	}
	return pools, nil
}

// publish sets the IPAM gauges from report (nil: read IPAM now) and pools
// (nil: list them), leaving out the allocations released since the report
// was made (gone).
func (gc *ipamGC) publish(ctx context.Context, report *ipam.CheckReport, pools []api.Pool, gone map[allocKey]bool) error {
	if report == nil {
		r, err := gc.c.ipam.Check(ctx)
		if err != nil {
			return fmt.Errorf("read IPAM: %w", err)
		}
		report = r
	}
	if pools == nil {
		var err error
		if pools, err = gc.pools(ctx); err != nil {
			return err
		}
	}
	nodeObjs, _, err := gc.c.store.List(ctx, "Node", "")
	if err != nil {
		return fmt.Errorf("list calico nodes: %w", err)
	}
	nodes := make([]string, 0, len(nodeObjs))
	for _, o := range nodeObjs {
		nodes = append(nodes, o.(*api.Node).Name)
	}
	if len(gone) > 0 {
		kept := *report
		kept.Allocations = map[string][]*ipam.Allocation{}
		for ip, as := range report.Allocations {
			for _, a := range as {
				if !gone[keyOf(a)] {
					kept.Allocations[ip] = append(kept.Allocations[ip], a)
				}
			}
		}
		report = &kept
	}
	gc.c.metrics.ipam.set(countIPAM(report, pools, nodes, func(a *ipam.Allocation) bool {
		_, ok := gc.candidates[keyOf(a)]
		return ok
	}))
	return nil
}

// releaseAllocations releases allocs, each only while its handle and
// sequence number still match, so that an address allocated again since
// the caller read it is kept. released[i] reports whether allocs[i] was
// released.
func (c *Controllers) releaseAllocations(ctx context.Context, allocs []*ipam.Allocation) (released []bool, err error) {
	opts := make([]ipam.ReleaseOptions, len(allocs))
	for i, a := range allocs {
		addr, err := netip.ParseAddr(a.IP)
		if err != nil {
			return nil, fmt.Errorf("allocation %q: %w", a.IP, err)
		}
		opts[i] = ipam.ReleaseOptions{Addr: addr, Handle: a.Handle, SequenceNumber: a.SequenceNumber}
	}
	released = make([]bool, len(allocs))
	if len(opts) == 0 {
		return released, nil
	}
	unallocated, err := c.ipam.Release(ctx, opts...)
	if err != nil {
		return nil, err
	}
	for i, o := range opts {
		released[i] = !slices.Contains(unallocated, o.Addr)
	}
	return released, nil
}

func allConfirmed(as []*ipam.Allocation, confirmed func(*ipam.Allocation) bool) bool {
	for _, a := range as {
		if !confirmed(a) {
			return false
		}
	}
	return true
}

// valid reports whether an allocation is (or may be) in use. live asks
// the API server instead of the informer cache. Anything uncertain is
// valid: a wrong "leaked" takes a live pod's address.
func (gc *ipamGC) valid(ctx context.Context, a *ipam.Allocation, k8sName map[string]string, live bool) bool {
	if a.InUse {
		return true // an endpoint or a node uses the address
	}
	switch {
	case isTunnelAllocation(a):
		_, nodeExists := k8sName[a.Node]
		return nodeExists
	case !isPodAllocation(a):
		return true // not a pod's: we cannot tell who uses it
	}
	var pod *corev1.Pod
	var err error
	if live {
		pod, err = gc.c.kube.Pods(a.Namespace).Get(ctx, a.Pod)
	} else {
		pod, err = gc.pods.Pods(a.Namespace).Get(a.Pod)
	}
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		gc.log.Warn("cannot look up pod of an IP allocation; assuming it is in use", "pod", podOf(a), "err", err)
		return true
	}
	// The pod exists. If it now runs on another node (a StatefulSet pod
	// recreated elsewhere), this node's allocation is no longer its.
	knode := a.Node
	if k, ok := k8sName[a.Node]; ok && k != "" {
		knode = k
	}
	if pod.Spec.NodeName != "" && knode != "" && pod.Spec.NodeName != knode {
		return false
	}
	return true
}
