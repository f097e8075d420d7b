package controllers

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

func TestForDatastore(t *testing.T) {
	tests := []struct {
		datastore   string
		enabled     []string
		wantRun     []string
		wantSkipped []string
	}{
		{datastore.TypeEtcd, All, All, nil},
		{datastore.TypeKubernetes, All, []string{Node, IPAMGC, LoadBalancer}, []string{Namespace, ServiceAccount, WorkloadEndpoint, Policy}},
		{datastore.TypeKubernetes, []string{Node, IPAMGC}, []string{Node, IPAMGC}, nil},
		{datastore.TypeKubernetes, []string{Policy}, nil, []string{Policy}},
	}
	for _, tt := range tests {
		t.Run(tt.datastore+":"+strings.Join(tt.enabled, ","), func(t *testing.T) {
			run, skipped := ForDatastore(tt.enabled, tt.datastore)
			if !slices.Equal(run, tt.wantRun) {
				t.Errorf("run = %v, want %v", run, tt.wantRun)
			}
			if got := slices.Sorted(maps.Keys(skipped)); !slices.Equal(got, slices.Sorted(slices.Values(tt.wantSkipped))) {
				t.Errorf("skipped = %v, want %v", got, tt.wantSkipped)
			}
			for name, why := range skipped {
				if why == "" {
					t.Errorf("%s skipped without a reason", name)
				}
			}
		})
	}
}

// TestKDD runs the controllers on the Kubernetes datastore, where the
// Calico Nodes, endpoints and profiles are the Kubernetes objects
// themselves and IPAM is stored in Calico's IPAM CRDs.
func TestKDD(t *testing.T) {
	e := newKDDEnv(t)
	k := e.kube.Client
	e.create(t, ippool("10.40.0.0/16"))
	e.kube.CreateNamespace(t, "apps", nil)

	// Before the controllers start: a node deleted while no controller
	// watched, with its block, a pod address and a BGP peer left behind.
	e.k8sNode(t, "kdd-gone", nil)
	goneIP := e.allocate(t, "kdd-gone", "k8s-pod-network.gone", "apps", "vanished")
	e.create(t, bgpPeer("tor-gone", "kdd-gone"))
	if err := k.CoreV1().Nodes().Delete(e.ctx, "kdd-gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Configuration made ahead of a node that has yet to join: no IPAM,
	// nothing says the node ever existed, so it stays.
	future := &api.FelixConfiguration{}
	future.Kind, future.APIVersion, future.Name = "FelixConfiguration", api.GroupVersion, "node.kdd-future"
	e.create(t, bgpPeer("tor-future", "kdd-future"), future)

	in := e.start(t, e.fastConfig("kdd", All...))

	t.Run("only node, ipamgc and loadbalancer run", func(t *testing.T) {
		if got := in.c.cfg.Enabled; !slices.Equal(got, []string{Node, IPAMGC, LoadBalancer}) {
			t.Errorf("enabled = %v, want [node ipamgc loadbalancer]", got)
		}
		// One warning for each controller left out, with the reason.
		for _, name := range []string{Namespace, ServiceAccount, WorkloadEndpoint, Policy} {
			if !e.logged("level=WARN", `msg="controller does not apply to the Kubernetes datastore; not starting it"`, "controller="+name+" ", "reason=") {
				t.Errorf("no warning that %s is not started", name)
			}
		}
		eventually(t, deadline, func() error {
			if !e.logged(`msg="kube-controllers standing for election"`, `controllers="[node ipamgc loadbalancer]"`) {
				return errors.New("election not stood for node, ipamgc and loadbalancer alone")
			}
			return nil
		})
	})

	t.Run("node deleted while no controller watched", func(t *testing.T) {
		eventually(t, deadline, e.released(goneIP))
		eventually(t, deadline, e.gone("BGPPeer", "", "tor-gone"))
		eventually(t, deadline, e.noAffinities("kdd-gone"))
		eventually(t, deadline, e.noHandle("k8s-pod-network.gone"))
	})

	t.Run("node", func(t *testing.T) {
		testNodeKDD(t, e)
	})

	t.Run("configuration of a node that never existed stays", func(t *testing.T) {
		// Several full reconciles have run by now (the first at start).
		checkAll(t,
			e.exists("BGPPeer", "", "tor-future"),
			e.exists("FelixConfiguration", "", "node.kdd-future"),
		)
	})

	t.Run("ipamgc", func(t *testing.T) {
		testIPAMGCKDD(t, e)
	})

	t.Run("calicoctl delete node", func(t *testing.T) {
		testRemoveNodeKDD(t, e)
	})
}

// testNodeKDD: the Calico Node has the Kubernetes labels with no sync;
// a deleted node's IPAM, peers, host endpoints and configuration go once
// its last pod is gone.
func testNodeKDD(t *testing.T, e *env) {
	k := e.kube.Client
	kn := e.k8sNode(t, "kdd-b", map[string]string{"zone": "z1"})
	e.k8sNode(t, "kdd-c", nil) // a live neighbour whose peer stays

	// Labels: the Calico Node shows the Kubernetes Node's, and the
	// controller writes nothing to the Node for them.
	kn.Labels = map[string]string{"disk": "ssd"}
	kn, err := k.CoreV1().Nodes().Update(e.ctx, kn, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o, err := e.get("Node", "", "kdd-b")
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Meta().Labels; !maps.Equal(got, map[string]string{"disk": "ssd"}) {
		t.Errorf("calico node labels = %v, want the Kubernetes node's", got)
	}
	if got := K8sNodeName(o.(*api.Node)); got != "kdd-b" {
		t.Errorf("orchRef of the Calico Node names %q, want kdd-b", got)
	}

	// A pod with its address and endpoint (the pod's annotations), the
	// node's VXLAN tunnel address, a BGP peer, a host endpoint, the node's
	// own Felix and BGP configuration.
	e.pod(t, "apps", "db", "kdd-b", nil)
	ip := e.allocate(t, "kdd-b", "k8s-pod-network.db1", "apps", "db")
	e.create(t, endpoint(t, "apps", "kdd-b", "db", "db1", nil, ip.String()+"/32"))
	tunnel := e.allocateTunnel(t, "kdd-b")
	node := o.(*api.Node)
	node.Spec.IPv4VXLANTunnelAddr = tunnel.String()
	if _, err := e.store.Update(e.ctx, node); err != nil {
		t.Fatalf("record tunnel address: %v", err)
	}
	hep := &api.HostEndpoint{}
	hep.Kind, hep.APIVersion, hep.Name = "HostEndpoint", api.GroupVersion, "kdd-b-eth0"
	hep.Spec.Node, hep.Spec.InterfaceName = "kdd-b", "eth0"
	fc := &api.FelixConfiguration{}
	fc.Kind, fc.APIVersion, fc.Name = "FelixConfiguration", api.GroupVersion, "node.kdd-b"
	bc := &api.BGPConfiguration{}
	bc.Kind, bc.APIVersion, bc.Name = "BGPConfiguration", api.GroupVersion, "node.kdd-b"
	e.create(t, bgpPeer("tor-b", "kdd-b"), bgpPeer("tor-c", "kdd-c"), hep, fc, bc)
	if blocks, err := e.ipam.AffineBlocks(e.ctx, "kdd-b"); err != nil || len(blocks) != 1 {
		t.Fatalf("affine blocks = %v, %v", blocks, err)
	}

	// Nothing was written to the Kubernetes Node but the tunnel address.
	kn, err = k.CoreV1().Nodes().Get(e.ctx, "kdd-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"projectcalico.org/labels", KubeLabelsAnnotation} {
		if v, ok := kn.Annotations[a]; ok {
			t.Errorf("Kubernetes node annotated %s=%s: labels need no sync on KDD", a, v)
		}
	}

	if err := k.CoreV1().Nodes().Delete(e.ctx, "kdd-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, deadline, e.gone("Node", "", "kdd-b"))
	// The pod is still in the API: nothing is removed.
	never(t, 3*time.Second, "the node's peer removed while its pod exists", e.gone("BGPPeer", "", "tor-b"))
	if err := e.allocated(ip)(); err != nil {
		t.Fatalf("address released while its pod exists: %v", err)
	}

	if err := k.CoreV1().Pods("apps").Delete(e.ctx, "db", kubetest.ForceDelete()); err != nil {
		t.Fatal(err)
	}
	eventually(t, deadline, e.gone("BGPPeer", "", "tor-b"))
	eventually(t, deadline, e.gone("BGPConfiguration", "", "node.kdd-b"))
	checkAll(t,
		e.gone("HostEndpoint", "", "kdd-b-eth0"),
		e.gone("FelixConfiguration", "", "node.kdd-b"),
		e.released(ip),
		e.released(tunnel),
		e.noHandle("k8s-pod-network.db1"),
		e.noHandle("vxlan-tunnel-addr-kdd-b"),
		e.noAffinities("kdd-b"),
		e.exists("BGPPeer", "", "tor-c"),
	)
	logs := e.logs.String()
	texttest.Contains(t, "logs", logs, "released address of removed node", "ip="+ip.String(), "ip="+tunnel.String())
}

// testIPAMGCKDD: on KDD an address is in use when its pod's annotations
// (the computed endpoint) list it; only the address of a pod that is gone
// is released, after the grace period.
func testIPAMGCKDD(t *testing.T, e *env) {
	kcc := leakGracePeriod(2 * time.Second)
	e.k8sNode(t, "kdd-gc", nil)
	e.kube.CreateNamespace(t, "gc", nil)

	// Live pod with its endpoint.
	e.pod(t, "gc", "live", "kdd-gc", nil)
	live := e.allocate(t, "kdd-gc", "k8s-pod-network.live", "gc", "live")
	e.create(t, endpoint(t, "gc", "kdd-gc", "live", "live", nil, live.String()+"/32"))
	// Live pod whose address the plugin has not recorded yet.
	e.pod(t, "gc", "starting", "kdd-gc", nil)
	starting := e.allocate(t, "kdd-gc", "k8s-pod-network.starting", "gc", "starting")
	// Not a pod's address.
	other := e.allocate(t, "kdd-gc", "someone-else", "", "")
	// The node's own tunnel address.
	tunnel := e.allocateTunnel(t, "kdd-gc")
	// The leak: its pod is gone.
	leaked := e.allocate(t, "kdd-gc", "k8s-pod-network.leaked", "gc", "leaked")

	start := time.Now()
	e.create(t, kcc)
	eventually(t, deadline, e.released(leaked))
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("leak released after %s, before the 2s grace period", d)
	}
	if err := e.noHandle("k8s-pod-network.leaked")(); err != nil {
		t.Error(err)
	}
	e.onlyLeakReleased(t, leaked, map[string]netip.Addr{"live": live, "starting": starting, "other": other, "tunnel": tunnel})
}

// testRemoveNodeKDD: `calicoctl delete node` on KDD removes what Calico
// keeps for the node, then reports that the Node itself cannot be
// deleted, as Calico's calicoctl does there; the Kubernetes Node stays.
func testRemoveNodeKDD(t *testing.T, e *env) {
	e.k8sNode(t, "kdd-d", nil)
	e.pod(t, "apps", "web", "kdd-d", nil)
	ip := e.allocate(t, "kdd-d", "k8s-pod-network.web1", "apps", "web")
	w := endpoint(t, "apps", "kdd-d", "web", "web1", nil, ip.String()+"/32")
	e.create(t, w, bgpPeer("tor-d", "kdd-d"))

	err := RemoveNode(e.ctx, e.store, e.ipam, "kdd-d", e.logger("calicoctl"))
	if !errors.Is(err, datastore.ErrNotSupported) {
		t.Fatalf("RemoveNode on KDD = %v, want ErrNotSupported", err)
	}
	if !strings.Contains(err.Error(), "delete the Kubernetes Node") {
		t.Errorf("error does not say what to do: %v", err)
	}
	checkAll(t,
		e.released(ip),
		e.noHandle("k8s-pod-network.web1"),
		e.noAffinities("kdd-d"),
		e.gone("BGPPeer", "", "tor-d"),
		e.exists("Node", "", "kdd-d"),
	)
	// The endpoint lives on with its pod, without addresses.
	o, err := e.get("WorkloadEndpoint", "apps", w.Name)
	if err != nil {
		t.Fatal(err)
	}
	if nets := o.(*api.WorkloadEndpoint).Spec.IPNetworks; len(nets) != 0 {
		t.Errorf("endpoint keeps addresses %v", nets)
	}
}

// logged reports whether one log line has every part.
func (e *env) logged(parts ...string) bool {
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			return true
		}
	}
	return false
}

// k8sNode creates a Kubernetes Node: on KDD, the Calico Node too.
func (e *env) k8sNode(t *testing.T, name string, labels map[string]string) *corev1.Node {
	t.Helper()
	n, err := e.kube.Client.CoreV1().Nodes().Create(e.ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	return n
}

// allocateTunnel assigns node's VXLAN tunnel address, as the agent does.
func (e *env) allocateTunnel(t *testing.T, node string) netip.Addr {
	t.Helper()
	v4, _, err := e.ipam.AutoAssign(e.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "vxlan-tunnel-addr-" + node, Node: node,
		Attrs: map[string]string{"type": "vxlanTunnelAddress"}})
	if err != nil || len(v4) != 1 {
		t.Fatalf("allocate tunnel address on %s: %v %v", node, v4, err)
	}
	return v4[0].Addr()
}

func (e *env) noAffinities(node string) func() error {
	return func() error {
		blocks, err := e.ipam.AffineBlocks(e.ctx, node)
		if err != nil {
			return err
		}
		if len(blocks) > 0 {
			return fmt.Errorf("blocks %v still affine to %s", blocks, node)
		}
		return nil
	}
}

func (e *env) noHandle(id string) func() error {
	return func() error {
		kvs, err := e.kv.Get(e.ctx, ipam.HandleKey(id))
		if err != nil {
			return err
		}
		if kvs[0].Rev != 0 {
			return fmt.Errorf("handle %s still exists: %s", id, kvs[0].Value)
		}
		return nil
	}
}

func bgpPeer(name, node string) *api.BGPPeer {
	p := &api.BGPPeer{}
	p.Kind, p.APIVersion, p.Name = "BGPPeer", api.GroupVersion, name
	p.Spec.Node, p.Spec.PeerIP, p.Spec.ASNumber = node, "192.0.2.1", api.ASNumber(64512)
	return p
}
