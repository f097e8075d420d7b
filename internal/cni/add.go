package cni

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/agent/epstatus"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

func cmdAdd(args *skel.CmdArgs) error {
	return run(&host{}, NetworkPlugin, "ADD", args, (*invocation).add)
}

// add is the network plugin's ADD. In order: open the pod's namespace
// (fail before allocating anything if it is gone), connect to etcd and look
// for the workload's existing endpoint, allocate addresses, give the pod
// its veth, write the WorkloadEndpoint (and the network's Profile when
// there is no policy section), print the result. What does not depend on
// the previous step runs beside it: the Kubernetes pod is read while etcd
// is connected to, and the veth is created while addresses are allocated
// (for a Kubernetes pod, already while etcd is connected to: its veth is
// replaced whatever the datastore holds, as in Calico).
//
// Every step registers its undo; if a later step fails they run in
// reverse, so a failed ADD leaves no address, veth or endpoint behind.
func (inv *invocation) add(ctx context.Context) (err error) {
	netns, err := openNetNS(inv.args.Netns)
	if err != nil {
		return err
	}
	defer netns.Close()
	inv.phase("open netns")

	ids := newWorkloadIDs(inv)
	tx := &addTx{inv: inv, vcfg: vethConfig{
		hostName: ids.hostVethName(),
		contName: inv.args.IfName,
		netns:    netns,
		mtu:      inv.conf.mtu(),
		allowFwd: inv.conf.ContainerSettings.AllowIPForwarding,
		logger:   inv.logger,
	}}
	defer func() {
		if err != nil {
			tx.rollback(ctx)
		}
	}()
	// Runs before the rollback above, so that a veth still being built
	// is in the undo list.
	defer tx.collectVeth()

	// In the agent, on its own Kubernetes datastore, the pod may come
	// from the agent's watch (view.go) instead of two GETs.
	viewed, vs := inv.agentPod(ctx)
	var podCh chan podResult
	if viewed == nil && inv.k8s != nil && inv.conf.k8sAPIConfigured() {
		podCh = make(chan podResult, 1)
		go func() {
			info, err := fetchPodInfo(ctx, inv.conf, inv.k8s.namespace, inv.k8s.pod)
			podCh <- podResult{info, err}
		}()
	}
	if inv.conf.IPAMConf.Type == calicoIPAMType {
		// The families the config asks for; annotations may still change
		// them, which finish makes up for.
		tx.vcfg.want4, tx.vcfg.want6 = inv.conf.assignV4() > 0, inv.conf.assignV6() > 0
		if ids.orchestrator == api.OrchestratorKubernetes {
			tx.startVeth()
		}
	}

	store, err := inv.datastore(ctx)
	if err != nil {
		return err
	}
	inv.phase("connect etcd")
	// The lock flag is read beside the endpoint and must be clear before
	// any address is allocated.
	readyCh := make(chan error, 1)
	go func() { readyCh <- checkReady(ctx, store) }()
	var existing *api.WorkloadEndpoint
	if viewed != nil {
		if viewed.ep != nil && ids.matches(viewed.ep) {
			existing = viewed.ep
		}
	} else {
		existing, err = findEndpoint(ctx, store, ids)
	}
	if rerr := <-readyCh; rerr != nil {
		return rerr
	}
	if err != nil {
		return err
	}
	inv.phase("look up endpoint")
	var pod *podInfo
	if viewed != nil {
		pod = viewed.info
	}
	if podCh != nil {
		r := <-podCh
		if r.err != nil {
			return r.err
		}
		pod = r.info
		inv.phase("read pod")
	}

	if existing != nil && ids.orchestrator == api.OrchestratorCNI {
		return inv.addToExisting(ctx, store, existing, netns)
	}
	if existing != nil {
		// A Kubernetes pod keeps the endpoint (and interface) it already
		// has, as in Calico.
		ids.endpoint = existing.Spec.Endpoint
	}
	// The endpoint's timeline on the agent (when it serves the ADD).
	var progress *addProgress
	if name, nerr := ids.name(); nerr == nil {
		progress = inv.startProgress(ids.namespace, name, ids.pod)
		defer func() { progress.done(err) }()
	}

	// 1. Addresses, and the veth beside them.
	var pn podNetwork
	if inv.conf.IPAMConf.Type == calicoIPAMType {
		pn, err = inv.assignCalico(ctx, tx, pod, existing)
	} else {
		pn, err = inv.assignDelegated(ctx, tx, pod)
	}
	if err != nil {
		return err
	}
	inv.phase("assign addresses")
	inv.logger.Debug("addresses assigned", "addresses", pn.addrs)
	progress.stage(epstatus.StageIPAM)
	if err := tx.awaitVeth(); err != nil {
		return err
	}

	// 2. The pod's addresses and routes.
	if err := tx.veth.finish(pn.addrs, pn.routes); err != nil {
		return err
	}
	inv.phase("build veth")
	progress.stage(epstatus.StageVeth)

	// 3. The WorkloadEndpoint, and the network's profile.
	ep, err := inv.writeEndpointAndProfile(ctx, tx, store, ids, pod, existing, pn.addrs)
	if err != nil {
		return err
	}
	inv.phase("write endpoint and profile")
	progress.written(ep)

	// 4. The agent's dataplane: the endpoint's policy and routes, and
	// meanwhile, for a pod from the agent's watch, the check that the
	// pod did not change under the ADD.
	checked := make(chan error, 1)
	if viewed != nil {
		go func() { checked <- inv.checkAgentPod(ctx, vs, viewed.info, ep.ResourceVersion) }()
	} else {
		checked <- nil
	}
	err = inv.waitProgrammed(ctx, ep)
	if cerr := <-checked; cerr != nil {
		return cerr
	}
	if err != nil {
		return err
	}

	// The runtime may have torn the namespace down while we worked on it
	// through our descriptor: then nothing we built is reachable.
	// (The agent, holding the runtime's descriptor, can check only when
	// it sees the runtime's namespace mounts.)
	if _, err := os.Stat(inv.sandbox()); (err == nil || inv.host.netnsName == "") && !sameNetNS(netns, inv.sandbox()) {
		return types.NewError(types.ErrUnknownContainer, fmt.Sprintf("netns %s disappeared during ADD", inv.sandbox()), "")
	}
	return printResult(inv.host.out(), inv.addResult(tx.vcfg, tx.veth, pn), inv.cniVersion())
}

// addTx is what one ADD has done so far: the undo of each step, and the
// veth built in the background beside the address allocation.
type addTx struct {
	inv  *invocation
	undo []func(context.Context) // run in reverse by rollback

	vcfg   vethConfig
	vethCh chan vethResult // the veth being built; nil when none is
	veth   *pendingVeth    // the veth once awaitVeth has it
}

// podResult and vethResult carry what ADD starts in the background.
type podResult struct {
	info *podInfo
	err  error
}

type vethResult struct {
	v   *pendingVeth
	err error
}

// onFailure registers the undo of a step that succeeded.
func (tx *addTx) onFailure(undo func(context.Context)) { tx.undo = append(tx.undo, undo) }

// rollback undoes every step, latest first, each with its own time limit
// even when ctx has ended.
func (tx *addTx) rollback(ctx context.Context) {
	for i := len(tx.undo) - 1; i >= 0; i-- {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		tx.undo[i](uctx)
		cancel()
	}
}

// startVeth builds the veth of tx.vcfg in the background; awaitVeth
// delivers it.
func (tx *addTx) startVeth() {
	cfg, ch := tx.vcfg, make(chan vethResult, 1)
	tx.vethCh = ch
	go func() {
		v, err := createVeth(cfg)
		ch <- vethResult{v, err}
	}()
}

// awaitVeth waits for the veth being built, if any, and registers its
// undo.
func (tx *addTx) awaitVeth() error {
	if tx.vethCh == nil {
		return nil
	}
	r := <-tx.vethCh
	tx.vethCh = nil
	if r.err != nil {
		return r.err
	}
	tx.veth = r.v
	tx.onFailure(func(context.Context) { tx.veth.remove() })
	return nil
}

// collectVeth runs however ADD ends: a veth still being built is
// collected (on error its undo, registered by awaitVeth, removes it), and
// the veth's handles are closed.
func (tx *addTx) collectVeth() {
	if tx.vethCh != nil {
		if err := tx.awaitVeth(); err != nil {
			tx.inv.logger.Debug("background veth failed", "err", err)
		}
	}
	if tx.veth != nil {
		tx.veth.close()
	}
}

// podNetwork is what ADD gives the pod: addresses, the routes its
// interface gets, and the DNS settings to report.
type podNetwork struct {
	addrs  []netip.Prefix
	routes []netip.Prefix
	dns    types.DNS
}

// assignCalico allocates the pod's addresses with Calico IPAM (in this
// process), starting the veth beside it if it is not already being built.
func (inv *invocation) assignCalico(ctx context.Context, tx *addTx, pod *podInfo, existing *api.WorkloadEndpoint) (podNetwork, error) {
	pn := podNetwork{routes: defaultRoutes(), dns: inv.conf.DNS}
	req := ipamRequestFromConf(inv.conf)
	var nsLabels map[string]string
	if pod != nil {
		if err := req.applyAnnotations(pod); err != nil {
			return pn, err
		}
		nsLabels = pod.NSLabels
	}
	if len(req.ips) > 0 && existing != nil && existing.Spec.ContainerID != inv.args.ContainerID {
		// The pod's previous sandbox still holds the requested
		// addresses; Calico frees them for the new one.
		if err := inv.releaseEndpointIPs(ctx, existing); err != nil {
			return pn, err
		}
	}
	if tx.vethCh == nil {
		tx.startVeth()
	}
	addrs, err := inv.calicoAssign(ctx, req, nsLabels)
	if err != nil {
		return pn, err
	}
	tx.onFailure(func(ctx context.Context) {
		if err := inv.calicoRelease(ctx, inv.args.ContainerID); err != nil {
			inv.logger.Warn("undo: release addresses", "err", err)
		}
	})
	pn.addrs = addrs
	return pn, nil
}

// assignDelegated has the configured IPAM plugin allocate the pod's
// addresses, then starts the veth for the families it gave.
func (inv *invocation) assignDelegated(ctx context.Context, tx *addTx, pod *podInfo) (podNetwork, error) {
	pn := podNetwork{dns: inv.conf.DNS}
	if pod != nil && pod.Annotations[annotationIPAddrs] != "" {
		return pn, configError("annotation "+annotationIPAddrs, "needs calico-ipam, not %s", inv.conf.IPAMConf.Type)
	}
	res, err := inv.delegateAdd(ctx)
	if err != nil {
		return pn, err
	}
	tx.onFailure(func(ctx context.Context) {
		if err := inv.delegateDel(ctx); err != nil {
			inv.logger.Warn("undo: release addresses", "err", err)
		}
	})
	pn.addrs = hostPrefixes(res.IPs)
	pn.routes = delegatedRoutes(res, inv.conf.IncludeDefaultRoutes)
	if len(res.DNS.Nameservers) > 0 || res.DNS.Domain != "" || len(res.DNS.Search) > 0 {
		pn.dns = res.DNS
	}
	tx.vcfg.want4, tx.vcfg.want6 = hasFamily(pn.addrs, true), hasFamily(pn.addrs, false)
	tx.startVeth()
	return pn, nil
}

// writeEndpointAndProfile writes the pod's WorkloadEndpoint and, when it
// names the network's profile, that profile, both at once, and returns
// the endpoint as written (with its revision).
func (inv *invocation) writeEndpointAndProfile(ctx context.Context, tx *addTx, store datastore.Store, ids workloadIDs, pod *podInfo, existing *api.WorkloadEndpoint, addrs []netip.Prefix) (*api.WorkloadEndpoint, error) {
	ep, err := inv.newEndpoint(ids, pod, existing, addrs, tx.vcfg.hostName, tx.veth.contMAC.String())
	if err != nil {
		return nil, err
	}
	profileDone := make(chan error, 1)
	if slices.Contains(ep.Spec.Profiles, profileName(inv.conf.Name)) {
		go func() { profileDone <- inv.ensureProfile(ctx, store, ids) }()
	} else {
		profileDone <- nil
	}
	created, err := writeEndpoint(ctx, store, ep, existing)
	profileErr := <-profileDone
	if err != nil {
		return nil, err
	}
	if existing == nil {
		tx.onFailure(func(ctx context.Context) {
			if _, err := store.Delete(ctx, "WorkloadEndpoint", created.Namespace, created.Name, created.ResourceVersion); err != nil && !errors.Is(err, datastore.ErrNotFound) {
				inv.logger.Warn("undo: delete workload endpoint", "name", created.Name, "err", err)
			}
		})
	}
	return created, profileErr
}

// addResult is ADD's answer to the runtime: both ends of the veth, the
// pod's addresses, and its routes of the families it has an address in.
func (inv *invocation) addResult(vcfg vethConfig, veth *pendingVeth, pn podNetwork) *types100.Result {
	result := &types100.Result{
		CNIVersion: types100.ImplementedSpecVersion,
		Interfaces: []*types100.Interface{
			{Name: vcfg.hostName, Mac: HostVethMAC().String()},
			{Name: inv.args.IfName, Mac: veth.contMAC.String(), Mtu: vcfg.mtu, Sandbox: inv.sandbox()},
		},
		DNS: pn.dns,
	}
	has4, has6 := hasFamily(pn.addrs, true), hasFamily(pn.addrs, false)
	for _, a := range pn.addrs {
		result.IPs = append(result.IPs, &types100.IPConfig{Interface: types100.Int(1), Address: *ipNet(a)})
	}
	for _, r := range pn.routes {
		switch {
		case r.Addr().Is4() && has4:
			result.Routes = append(result.Routes, &types.Route{Dst: *ipNet(r), GW: gatewayV4().AsSlice()})
		case !r.Addr().Is4() && has6:
			result.Routes = append(result.Routes, &types.Route{Dst: *ipNet(r), GW: gatewayV6().AsSlice()})
		}
	}
	return result
}

// addToExisting is Calico's answer to a second ADD for a plain-CNI
// container that already has an endpoint (the container joining another
// network, or a new interface name): no new veth or address; the
// endpoint gains this network's profile and the result reports the
// endpoint's addresses.
func (inv *invocation) addToExisting(ctx context.Context, store datastore.Store, ep *api.WorkloadEndpoint, netns ns.NetNS) error {
	inv.logger.Info("container already has an endpoint: reusing it", "endpoint", ep.Name)
	profile := profileName(inv.conf.Name)
	if !slices.Contains(ep.Spec.Profiles, profile) {
		ep.Spec.Profiles = append(ep.Spec.Profiles, profile)
		written, err := writeEndpoint(ctx, store, ep, ep)
		if err != nil {
			return err
		}
		ep = written
	}
	if err := inv.ensureProfile(ctx, store, newWorkloadIDs(inv)); err != nil {
		return err
	}
	// The new profile's rules must be in the dataplane too.
	if err := inv.waitProgrammed(ctx, ep); err != nil {
		return err
	}
	result := &types100.Result{
		CNIVersion: types100.ImplementedSpecVersion,
		Interfaces: []*types100.Interface{
			{Name: ep.Spec.InterfaceName, Mac: HostVethMAC().String()},
			{Name: ep.Spec.Endpoint, Mac: ep.Spec.MAC, Sandbox: inv.sandbox()},
		},
		DNS: inv.conf.DNS,
	}
	for _, n := range ep.Spec.IPNetworks {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return fmt.Errorf("workload endpoint %s: bad ipNetworks entry %q", ep.Name, n)
		}
		result.IPs = append(result.IPs, &types100.IPConfig{Interface: types100.Int(1), Address: *ipNet(p)})
	}
	return printResult(inv.host.out(), result, inv.cniVersion())
}

// releaseEndpointIPs frees the addresses an endpoint records (used when a
// pod's ipAddrs annotation asks for the addresses its old sandbox had).
func (inv *invocation) releaseEndpointIPs(ctx context.Context, ep *api.WorkloadEndpoint) error {
	var ips []netip.Addr
	for _, n := range ep.Spec.IPNetworks {
		if p, err := netip.ParsePrefix(n); err == nil {
			ips = append(ips, p.Addr())
		}
	}
	if len(ips) == 0 {
		return nil
	}
	store, err := inv.datastore(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, ipamTimeout)
	defer cancel()
	unlock := lockIPAM(inv.conf.ipamLockFile(), inv.logger)
	defer unlock()
	if _, err := ipam.New(store.IPAM(), store, inv.logger).ReleaseIPs(ctx, ips...); err != nil {
		return ipamError(fmt.Errorf("release the old addresses of %s: %w", ep.Name, err))
	}
	return nil
}

// newEndpoint builds the WorkloadEndpoint exactly as Calico writes it.
func (inv *invocation) newEndpoint(ids workloadIDs, pod *podInfo, existing *api.WorkloadEndpoint, addrs []netip.Prefix, hostName, mac string) (*api.WorkloadEndpoint, error) {
	name, err := ids.name()
	if err != nil {
		return nil, configError("CNI_CONTAINERID/K8S_POD_NAME", "%v", err)
	}
	ep := &api.WorkloadEndpoint{
		TypeMeta:   api.TypeMeta{Kind: "WorkloadEndpoint", APIVersion: api.GroupVersion},
		ObjectMeta: api.ObjectMeta{Name: name, Namespace: ids.namespace},
		Spec: api.WorkloadEndpointSpec{
			Orchestrator:  ids.orchestrator,
			Node:          ids.node,
			ContainerID:   ids.containerID,
			Endpoint:      ids.endpoint,
			InterfaceName: hostName,
			MAC:           mac,
		},
	}
	if existing != nil {
		ep.Name = existing.Name
		ep.ResourceVersion = existing.ResourceVersion
		ep.UID = existing.UID
		ep.CreationTimestamp = existing.CreationTimestamp
	}
	for _, a := range addrs {
		ep.Spec.IPNetworks = append(ep.Spec.IPNetworks, a.String())
	}
	switch {
	case pod != nil:
		ep.Spec.Pod = ids.pod
		ep.Labels = pod.endpointLabels(ids.namespace)
		ep.GenerateName = pod.GenerateName
		ep.Spec.ServiceAccountName = pod.ServiceAccount
		ep.Spec.Ports = pod.Ports
		ep.Spec.Profiles = pod.profiles(ids.namespace)
		prefixes, err := pod.allowedSourcePrefixes()
		if err != nil {
			return nil, err
		}
		ep.Spec.AllowSpoofedSourcePrefixes = prefixes
	default:
		if ids.orchestrator == api.OrchestratorKubernetes {
			ep.Spec.Pod = ids.pod
		}
		ep.Labels = map[string]string{
			api.LabelNamespace:    ids.namespace,
			api.LabelOrchestrator: ids.orchestrator,
		}
		ep.Spec.Profiles = []string{profileName(inv.conf.Name)}
	}
	return ep, nil
}

// writeEndpoint creates the endpoint, or updates the one the workload
// already has (a Kubernetes pod's new sandbox), conditional on the
// revision read.
func writeEndpoint(ctx context.Context, store datastore.Store, ep, existing *api.WorkloadEndpoint) (*api.WorkloadEndpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout(store))
	defer cancel()
	if existing != nil {
		out, err := store.Update(ctx, ep)
		if err != nil {
			return nil, writeError("update workload endpoint "+ep.Name, err)
		}
		return out.(*api.WorkloadEndpoint), nil
	}
	out, err := store.Create(ctx, ep)
	if err != nil {
		return nil, writeError("create workload endpoint "+ep.Name, err)
	}
	return out.(*api.WorkloadEndpoint), nil
}

// writeError classifies a failed datastore write: losing a race to
// another writer is worth retrying, an invalid object is a configuration
// problem.
func writeError(what string, err error) error {
	var verr api.ValidationError
	switch {
	case errors.Is(err, datastore.ErrConflict), errors.Is(err, datastore.ErrAlreadyExists):
		return types.NewError(types.ErrTryAgainLater, what+": "+err.Error(), "")
	case errors.As(err, &verr):
		return types.NewError(types.ErrInvalidNetworkConfig, what+": "+err.Error(), "")
	}
	return datastoreError(fmt.Errorf("%s: %w", what, err))
}

// profileName is the profile a network without a policy section puts its
// endpoints in: the network name, as in Calico. Calico resource names are
// lower-case DNS names; a network name such as "any_name" is mapped onto
// one ("any-name") so that its endpoints stay valid.
func profileName(network string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(network) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-.")
}

// ensureProfile creates the profile named after the network, which
// endpoints get when their policy does not come from Kubernetes, when the
// config has no policy section, as Calico does: egress open, ingress from the network's
// own endpoints (from anywhere for Kubernetes pods), and the network name
// as a label on every member. An existing profile is never changed.
//
// On the Kubernetes datastore profiles are computed from Namespaces and
// ServiceAccounts and cannot be written; Calico's plugin writes none there.
func (inv *invocation) ensureProfile(ctx context.Context, store datastore.Store, ids workloadIDs) error {
	if inv.conf.Policy.Type != "" || store.Type() == datastore.TypeKubernetes {
		return nil
	}
	name := profileName(inv.conf.Name)
	ingress := api.Rule{Action: api.Allow}
	if ids.orchestrator != api.OrchestratorKubernetes {
		ingress.Source.Selector = "has(" + name + ")"
	}
	profile := &api.Profile{
		TypeMeta:   api.TypeMeta{Kind: "Profile", APIVersion: api.GroupVersion},
		ObjectMeta: api.ObjectMeta{Name: name},
		Spec: api.ProfileSpec{
			Ingress:       []api.Rule{ingress},
			Egress:        []api.Rule{{Action: api.Allow}},
			LabelsToApply: map[string]string{name: ""},
		},
	}
	// One conditional create: an existing profile is left as it is.
	ctx, cancel := context.WithTimeout(ctx, requestTimeout(store))
	defer cancel()
	if _, err := store.Create(ctx, profile); err != nil && !errors.Is(err, datastore.ErrAlreadyExists) {
		return writeError("create profile "+name, err)
	}
	return nil
}

// openNetNS opens the pod's namespace, telling a missing one (code 3,
// the container is gone) from a path that is no namespace (code 8).
func openNetNS(path string) (ns.NetNS, error) {
	netns, err := ns.GetNS(path)
	if err != nil {
		var notExist ns.NSPathNotExistErr
		if errors.As(err, &notExist) {
			return nil, types.NewError(types.ErrUnknownContainer, fmt.Sprintf("netns %s does not exist", path), "")
		}
		return nil, types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("open netns %s: %v", path, err), "")
	}
	return netns, nil
}

// sameNetNS reports whether path still names the namespace we hold open.
func sameNetNS(netns ns.NetNS, path string) bool {
	var held, named unix.Stat_t
	if err := unix.Fstat(int(netns.Fd()), &held); err != nil {
		return false
	}
	if err := unix.Stat(path, &named); err != nil {
		return false
	}
	return held.Dev == named.Dev && held.Ino == named.Ino
}

// printResult prints the result in the version the runtime asked for.
func printResult(w io.Writer, r *types100.Result, version string) error {
	res, err := r.GetAsVersion(version)
	if err != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion, "print result: "+err.Error(), "")
	}
	if err := res.PrintTo(w); err != nil {
		return types.NewError(types.ErrIOFailure, "print result: "+err.Error(), "")
	}
	return nil
}
