package etcdscale

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent/overlay"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/scaletest"
)

// The cluster the harness seeds: what a Calico etcd cluster of N nodes
// holds, configured as Calico's documentation recommends above 100 nodes
// (no node-to-node mesh; a few nodes are route reflectors that every node
// peers with), with a VXLAN pool so that every node's routes to the
// others' pods come from the datastore (the IPAM blocks), per namespace
// profiles as kube-controllers write them, and policies whose rules
// select pods by label (so every node's compile fills IP sets with the
// cluster's pods).
type shape struct {
	nodes       int
	podsPerNode int // seeded before the fleet starts
	namespaces  int
	gnps        int // GlobalNetworkPolicies besides the probe
	reflectors  int // route reflector nodes
}

const (
	poolCIDR      = "10.64.0.0/12" // 16,384 blocks of /26
	rrClusterID   = "244.0.0.1"    // the value Calico's route reflector docs use
	rrLabel       = "route-reflector"
	probeGNP      = "bench-probe"
	apps          = 20
	seedWorkers   = 16
	podLabelApp   = "app"
	cniHandlePref = "k8s-pod-network."
)

func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// nodeAddr is node i's address: 172.16.0.0/16 holds 64,000 of them.
func nodeAddr(i int) string { return fmt.Sprintf("172.16.%d.%d/16", i/250, i%250+1) }

func isReflector(s shape, i int) bool { return i >= s.nodes-s.reflectors }

func namespace(i int) string { return fmt.Sprintf("ns-%02d", i) }

func tcp() *api.Protocol { p := api.ProtocolFromString("TCP"); return &p }

func order(f float64) *float64 { return &f }

// probePolicy is the probe GlobalNetworkPolicy at generation gen: it
// selects every pod and allows TCP to port probePortBase+gen, so that a
// node's compiled rules show which generation it has.
func probePolicy(gen int) *api.GlobalNetworkPolicy {
	p := &api.GlobalNetworkPolicy{}
	p.Kind, p.APIVersion, p.Name = "GlobalNetworkPolicy", api.GroupVersion, probeGNP
	p.Spec = api.GlobalNetworkPolicySpec{
		Order: order(1), Selector: "all()", Types: []api.PolicyType{api.PolicyTypeIngress},
		Ingress: []api.Rule{{Action: api.Allow, Protocol: tcp(),
			Destination: api.EntityRule{Ports: []api.Port{api.SinglePort(uint16(probePortBase + gen))}}}},
	}
	return p
}

// seedConfig writes the cluster-wide resources.
func seedConfig(ctx context.Context, store datastore.Store, s shape) error {
	f := false
	as := api.ASNumber(64512)
	var objs []api.Object
	pool := &api.IPPool{}
	pool.Kind, pool.APIVersion, pool.Name = "IPPool", api.GroupVersion, "default-ipv4-ippool"
	pool.Spec = api.IPPoolSpec{CIDR: poolCIDR, VXLANMode: api.VXLANModeAlways, IPIPMode: api.IPIPModeNever, NATOutgoing: true, BlockSize: 26}
	objs = append(objs, pool)
	bc := &api.BGPConfiguration{}
	bc.Kind, bc.APIVersion, bc.Name = "BGPConfiguration", api.GroupVersion, "default"
	bc.Spec = api.BGPConfigurationSpec{NodeToNodeMeshEnabled: &f, ASNumber: &as}
	objs = append(objs, bc)
	// Calico's route reflector recipe: every node peers with the nodes
	// labelled route-reflector=true (which carry a routeReflectorClusterID).
	peer := &api.BGPPeer{}
	peer.Kind, peer.APIVersion, peer.Name = "BGPPeer", api.GroupVersion, "peer-with-route-reflectors"
	peer.Spec = api.BGPPeerSpec{NodeSelector: "all()", PeerSelector: rrLabel + " == 'true'"}
	objs = append(objs, peer)
	for i := range s.namespaces {
		ns := namespace(i)
		pr := &api.Profile{}
		pr.Kind, pr.APIVersion, pr.Name = "Profile", api.GroupVersion, "kns."+ns
		pr.Spec = api.ProfileSpec{Ingress: []api.Rule{{Action: api.Allow}}, Egress: []api.Rule{{Action: api.Allow}},
			LabelsToApply: map[string]string{"pcns.projectcalico.org/name": ns}}
		sa := &api.Profile{}
		sa.Kind, sa.APIVersion, sa.Name = "Profile", api.GroupVersion, "ksa."+ns+".default"
		sa.Spec = api.ProfileSpec{LabelsToApply: map[string]string{"pcsa.projectcalico.org/name": "default"}}
		objs = append(objs, pr, sa)
		np := &api.NetworkPolicy{}
		np.Kind, np.APIVersion, np.Name, np.Namespace = "NetworkPolicy", api.GroupVersion, "allow-same-namespace", ns
		np.Spec = api.NetworkPolicySpec{Selector: "all()", Types: []api.PolicyType{api.PolicyTypeIngress},
			Ingress: []api.Rule{{Action: api.Allow, Source: api.EntityRule{Selector: "all()"}}}}
		objs = append(objs, np)
	}
	for i := range s.gnps {
		p := &api.GlobalNetworkPolicy{}
		p.Kind, p.APIVersion, p.Name = "GlobalNetworkPolicy", api.GroupVersion, fmt.Sprintf("app-%02d", i)
		p.Spec = api.GlobalNetworkPolicySpec{
			Order: order(float64(100 + i)), Selector: fmt.Sprintf("%s == 'app%d'", podLabelApp, i%apps),
			Types: []api.PolicyType{api.PolicyTypeIngress},
			Ingress: []api.Rule{{Action: api.Allow, Protocol: tcp(),
				Source:      api.EntityRule{Selector: fmt.Sprintf("%s == 'app%d'", podLabelApp, (i+1)%apps)},
				Destination: api.EntityRule{Ports: []api.Port{api.SinglePort(8080)}}}},
		}
		objs = append(objs, p)
	}
	objs = append(objs, probePolicy(0))
	for _, o := range objs {
		if _, err := store.Create(ctx, o); err != nil {
			return fmt.Errorf("seed %s %s: %w", o.Type().Kind, o.Meta().Name, err)
		}
	}
	return nil
}

// seedNodes registers the nodes as calico-node's start-up does: the Node
// with its BGP address (route reflectors labelled and given their cluster
// ID), then its VXLAN tunnel address and MAC (overlay.EnsureTunnelAddrs,
// the start-up's own code).
func seedNodes(ctx context.Context, store datastore.Store, ipamc *ipam.Client, s shape) error {
	return scaletest.Parallel(seedWorkers, s.nodes, func(i int) error {
		n := &api.Node{}
		n.Kind, n.APIVersion, n.Name = "Node", api.GroupVersion, nodeName(i)
		n.Labels = map[string]string{"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux"}
		n.Spec.BGP = &api.NodeBGPSpec{IPv4Address: nodeAddr(i)}
		if isReflector(s, i) {
			n.Labels[rrLabel] = "true"
			n.Spec.BGP.RouteReflectorClusterID = rrClusterID
		}
		n.Spec.OrchRefs = []api.OrchRef{{Orchestrator: "k8s", NodeName: n.Name}}
		if _, err := store.Create(ctx, n); err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		if _, err := overlay.EnsureTunnelAddrs(ctx, store, ipamc, n.Name, nil); err != nil {
			return fmt.Errorf("tunnel address of %s: %w", n.Name, err)
		}
		return nil
	})
}

// pod is one workload as the CNI plugin sets it up.
type pod struct {
	namespace, name, node string
	app                   int
	probe                 bool // a churn pod: its endpoint carries its write time
}

func (p pod) containerID() string {
	sum := sha256.Sum256([]byte(p.namespace + "/" + p.name))
	return hex.EncodeToString(sum[:])
}

func (p pod) handle() string { return cniHandlePref + p.containerID() }

func (p pod) spec() api.WorkloadEndpointSpec {
	id := p.containerID()
	return api.WorkloadEndpointSpec{
		Orchestrator: api.OrchestratorKubernetes, Node: p.node, Pod: p.name, Endpoint: "eth0",
		ContainerID: id, ServiceAccountName: "default",
		Profiles:      []string{"kns." + p.namespace, "ksa." + p.namespace + ".default"},
		InterfaceName: "cali" + id[:11], MAC: "ee:ee:ee:ee:ee:ee",
		Ports: []api.WorkloadEndpointPort{{Name: "http", Protocol: api.ProtocolFromString("TCP"), Port: 8080}},
	}
}

// wepName is the endpoint's name as Calico derives it.
func (p pod) wepName() string {
	spec := p.spec()
	name, err := api.WorkloadEndpointName(&spec)
	if err != nil {
		panic(fmt.Sprintf("endpoint name of %s/%s: %v", p.namespace, p.name, err))
	}
	return name
}

// cni is the CNI plugin's work for pods, on a datastore connection of its
// own: ADD allocates an address from Calico IPAM for the pod's node and
// writes the WorkloadEndpoint, DEL deletes it and releases the handle. A
// step that fails is retried as kubelet retries a failed ADD or DEL: the
// allocation with Replace (the handle ends up with exactly one address
// even when a write whose answer was lost had gone through), the endpoint
// write until it exists (or is gone) as intended.
type cni struct {
	store datastore.Store
	ipam  *ipam.Client
}

// opStats counts the retries a member's death cost.
type opStats struct {
	retries int
	took    time.Duration
}

const (
	opTimeout = 2 * time.Minute
	opBackoff = 250 * time.Millisecond
)

// add sets the pod up and returns its address; t0 is when its endpoint
// write started.
func (c cni) add(ctx context.Context, p pod) (netip.Addr, time.Time, opStats, error) {
	start := time.Now()
	var st opStats
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var ip netip.Addr
	for {
		v4, _, err := c.ipam.AutoAssign(ctx, ipam.AutoAssignArgs{
			Num4: 1, HandleID: p.handle(), Node: p.node, Replace: true,
			Attrs: map[string]string{"namespace": p.namespace, "pod": p.name},
		})
		if err == nil && len(v4) == 1 {
			ip = v4[0].Addr()
			break
		}
		if err == nil {
			err = fmt.Errorf("got %d addresses", len(v4))
		}
		if !retry(ctx, &st, err) {
			return ip, time.Time{}, st, fmt.Errorf("assign for %s/%s: %w", p.namespace, p.name, err)
		}
	}
	w := &api.WorkloadEndpoint{}
	w.Kind, w.APIVersion, w.Namespace = "WorkloadEndpoint", api.GroupVersion, p.namespace
	w.Spec = p.spec()
	w.Name = p.wepName()
	w.Spec.IPNetworks = []string{netip.PrefixFrom(ip, 32).String()}
	w.Labels = map[string]string{
		podLabelApp:                        fmt.Sprintf("app%d", p.app%apps),
		"projectcalico.org/serviceaccount": "default",
		"pod-template-hash":                "7d9f8b6c5",
		api.LabelNamespace:                 p.namespace,
		api.LabelOrchestrator:              api.OrchestratorKubernetes,
	}
	var t0 time.Time
	for {
		t0 = time.Now()
		if p.probe {
			w.Labels[probeLabel] = fmt.Sprint(t0.UnixNano())
		}
		_, err := c.store.Create(ctx, w)
		if err == nil {
			break
		}
		if errors.Is(err, datastore.ErrAlreadyExists) {
			// An earlier attempt went through and its answer was lost.
			got, gerr := c.store.Get(ctx, "WorkloadEndpoint", p.namespace, w.Name)
			if gerr == nil && len(got.(*api.WorkloadEndpoint).Spec.IPNetworks) == 1 && got.(*api.WorkloadEndpoint).Spec.IPNetworks[0] == w.Spec.IPNetworks[0] {
				if p.probe {
					t0 = time.Unix(0, parseInt(got.Meta().Labels[probeLabel]))
				}
				break
			}
			if gerr == nil {
				return ip, t0, st, fmt.Errorf("endpoint %s/%s exists with another address", p.namespace, w.Name)
			}
			err = gerr
		}
		if !retry(ctx, &st, err) {
			return ip, t0, st, fmt.Errorf("create endpoint %s/%s: %w", p.namespace, w.Name, err)
		}
	}
	st.took = time.Since(start)
	return ip, t0, st, nil
}

// del tears the pod down.
func (c cni) del(ctx context.Context, p pod) (opStats, error) {
	start := time.Now()
	var st opStats
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	for {
		_, err := c.store.Delete(ctx, "WorkloadEndpoint", p.namespace, p.wepName(), "")
		if err == nil || errors.Is(err, datastore.ErrNotFound) {
			break
		}
		if !retry(ctx, &st, err) {
			return st, fmt.Errorf("delete endpoint of %s/%s: %w", p.namespace, p.name, err)
		}
	}
	for {
		err := c.ipam.ReleaseByHandle(ctx, p.handle())
		if err == nil {
			break
		}
		if !retry(ctx, &st, err) {
			return st, fmt.Errorf("release %s: %w", p.handle(), err)
		}
	}
	st.took = time.Since(start)
	return st, nil
}

// retry waits before the next attempt after err; false when ctx ends.
func retry(ctx context.Context, st *opStats, err error) bool {
	st.retries++
	select {
	case <-ctx.Done():
		return false
	case <-time.After(opBackoff):
		return true
	}
}

func parseInt(s string) int64 {
	var n int64
	fmt.Sscan(s, &n)
	return n
}

// seedPods starts podsPerNode pods on every node.
func seedPods(ctx context.Context, c cni, s shape) ([]pod, error) {
	pods := make([]pod, s.nodes*s.podsPerNode)
	err := scaletest.Parallel(seedWorkers, len(pods), func(i int) error {
		p := pod{namespace: namespace(i % s.namespaces), name: fmt.Sprintf("seed-%06d", i), node: nodeName(i % s.nodes), app: i}
		if _, _, _, err := c.add(ctx, p); err != nil {
			return err
		}
		pods[i] = p
		return nil
	})
	return pods, err
}

// seedCluster writes everything on store; tb fails on error.
func seedCluster(tb testing.TB, ctx context.Context, c cni, s shape) []pod {
	tb.Helper()
	if err := seedConfig(ctx, c.store, s); err != nil {
		tb.Fatal(err)
	}
	if err := seedNodes(ctx, c.store, c.ipam, s); err != nil {
		tb.Fatal(err)
	}
	pods, err := seedPods(ctx, c, s)
	if err != nil {
		tb.Fatal(err)
	}
	return pods
}
