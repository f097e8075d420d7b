package overlay

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// threeNodes: node1 and node2 share subnet a, node3 is behind the router.
var threeNodes = []labNodeSpec{
	{name: "node1", addr: "192.0.2.11/24", subnet: "a"},
	{name: "node2", addr: "192.0.2.12/24", subnet: "a"},
	{name: "node3", addr: "198.51.100.13/24", subnet: "b"},
}

// vtep is what the datastore says about one node's tunnel endpoint.
type vtep struct {
	tunnel, mac, ip string
}

func (l *lab) vtep(name string) vtep {
	l.t.Helper()
	n := l.nodeOf(name)
	if n.Spec.IPv4VXLANTunnelAddr == "" || n.Spec.VXLANTunnelMACAddr == "" {
		l.t.Fatalf("%s has no VTEP: %+v", name, n.Spec)
	}
	ip, _, _ := NodeAddr(n, 4)
	return vtep{n.Spec.IPv4VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddr, ip.String()}
}

// waitVTEPs waits until the named nodes have tunnel addresses.
func (l *lab) waitVTEPs(names ...string) {
	l.t.Helper()
	eventually(l.t, "tunnel addresses allocated", func() error {
		for _, name := range names {
			if n := l.nodeOf(name); n.Spec.IPv4VXLANTunnelAddr == "" || n.Spec.VXLANTunnelMACAddr == "" {
				return fmt.Errorf("%s has none yet", name)
			}
		}
		return nil
	})
}

// waitKernel waits until node's overlay state is want (routes, neighbour
// and FDB entries; the device line only when want.device is set).
func (l *lab) waitKernel(node string, want kernelState) {
	l.t.Helper()
	n := l.nodes[node]
	eventually(l.t, node+" kernel state", func() error {
		got := n.kernel(l.t)
		switch {
		case !slices.Equal(got.routes, want.routes):
			return fmt.Errorf("routes\n got %q\nwant %q", got.routes, want.routes)
		case !slices.Equal(got.neigh, want.neigh):
			return fmt.Errorf("neighbours\n got %q\nwant %q", got.neigh, want.neigh)
		case !slices.Equal(got.fdb, want.fdb):
			return fmt.Errorf("FDB\n got %q\nwant %q", got.fdb, want.fdb)
		case want.device != "" && got.device != want.device:
			return fmt.Errorf("device\n got %q\nwant %q", got.device, want.device)
		}
		return nil
	})
}

func block(a netip.Addr) string { return netip.PrefixFrom(a, 26).Masked().String() }

func viaTunnel(blk string, v vtep) string {
	return blk + " via " + v.tunnel + " dev vxlan.calico onlink"
}
func neighOf(v vtep) string { return v.tunnel + " lladdr " + v.mac }
func fdbOf(v vtep) string   { return v.mac + " dst " + v.ip }

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

// TestVXLAN: three nodes in two subnets, one VXLAN pool. Always: every
// pod reaches every other through the tunnel; CrossSubnet: same-subnet
// nodes route natively; a deleted node's entries go.
func TestVXLAN(t *testing.T) { onBothLabs(t, testVXLAN, threeNodes...) }

func testVXLAN(t *testing.T, l *lab) {
	pool := testPool("pool1", "10.244.0.0/16", vxlanMode(api.VXLANModeAlways))
	l.ds.apply(t, pool)
	for _, s := range threeNodes {
		l.start(s.name)
	}
	pod1, a1 := l.addPod("node1")
	pod2, a2 := l.addPod("node2")
	pod3, a3 := l.addPod("node3")
	l.waitVTEPs("node1", "node2", "node3")
	v1, v2, v3 := l.vtep("node1"), l.vtep("node2"), l.vtep("node3")
	b1, b2, b3 := block(a1), block(a2), block(a3)
	for _, v := range []vtep{v1, v2, v3} {
		if !netip.MustParsePrefix("10.244.0.0/16").Contains(netip.MustParseAddr(v.tunnel)) {
			t.Fatalf("tunnel address %s outside the pool", v.tunnel)
		}
	}

	t.Run("Always", func(t *testing.T) {
		l.waitKernel("node1", kernelState{
			routes: sorted(viaTunnel(b2, v2), viaTunnel(b3, v3)),
			neigh:  sorted(neighOf(v2), neighOf(v3)),
			fdb:    sorted(fdbOf(v2), fdbOf(v3)),
			device: fmt.Sprintf("vni 4096 port 4789 local 192.0.2.11 learning false mtu 1450 mac %s up addrs [%s/32]", v1.mac, v1.tunnel),
		})
		l.waitKernel("node3", kernelState{
			routes: sorted(viaTunnel(b1, v1), viaTunnel(b2, v2)),
			neigh:  sorted(neighOf(v1), neighOf(v2)),
			fdb:    sorted(fdbOf(v1), fdbOf(v2)),
		})
		l.reach(pod1, pod2, a2)
		l.reach(pod1, pod3, a3)
		l.reach(pod3, pod2, a2)
		l.reach(pod2, pod1, a1)
		eventually(t, "node1 ready", func() error {
			want := "vxlan.calico " + v1.tunnel + ", 2 peers; 2 routes"
			if live, ready, detail := l.nodes["node1"].health.get(); !live || !ready || detail != want {
				return fmt.Errorf("live=%v ready=%v detail=%q, want ready %q", live, ready, detail, want)
			}
			return nil
		})
	})

	t.Run("entries removed by hand come back", func(t *testing.T) {
		n1 := l.nodes["node1"]
		for _, args := range [][]string{
			{"neigh", "del", v2.tunnel, "dev", VXLANDevice},
			{"link", "set", VXLANDevice, "mtu", "1300"},
		} {
			l.ip(append([]string{"-n", n1.ns}, args...)...)
		}
		if out, err := exec.Command("bridge", "-n", n1.ns, "fdb", "del", v3.mac, "dev", VXLANDevice, "dst", v3.ip).CombinedOutput(); err != nil {
			t.Fatalf("bridge fdb del: %v %s", err, out)
		}
		l.waitKernel("node1", kernelState{
			routes: sorted(viaTunnel(b2, v2), viaTunnel(b3, v3)),
			neigh:  sorted(neighOf(v2), neighOf(v3)),
			fdb:    sorted(fdbOf(v2), fdbOf(v3)),
			device: fmt.Sprintf("vni 4096 port 4789 local 192.0.2.11 learning false mtu 1450 mac %s up addrs [%s/32]", v1.mac, v1.tunnel),
		})
	})

	t.Run("CrossSubnet", func(t *testing.T) {
		pool.Spec.VXLANMode = api.VXLANModeCrossSubnet
		l.ds.apply(t, pool)
		l.waitKernel("node1", kernelState{
			routes: sorted(b2+" via 192.0.2.12 dev eth0", viaTunnel(b3, v3)),
			neigh:  sorted(neighOf(v2), neighOf(v3)),
			fdb:    sorted(fdbOf(v2), fdbOf(v3)),
		})
		l.waitKernel("node2", kernelState{
			routes: sorted(b1+" via 192.0.2.11 dev eth0", viaTunnel(b3, v3)),
			neigh:  sorted(neighOf(v1), neighOf(v3)),
			fdb:    sorted(fdbOf(v1), fdbOf(v3)),
		})
		l.waitKernel("node3", kernelState{
			routes: sorted(viaTunnel(b1, v1), viaTunnel(b2, v2)),
			neigh:  sorted(neighOf(v1), neighOf(v2)),
			fdb:    sorted(fdbOf(v1), fdbOf(v2)),
		})
		// The tunnel addresses stay: the pool still wants VXLAN.
		if got := l.vtep("node1"); got != v1 {
			t.Errorf("node1 VTEP changed from %+v to %+v", v1, got)
		}
		l.reach(pod1, pod2, a2)
		l.reach(pod2, pod1, a1)
		l.reach(pod1, pod3, a3)
		l.reach(pod3, pod2, a2)
	})

	t.Run("node removed", func(t *testing.T) {
		if l.ds.kube != nil {
			// Calico deletes no Nodes on KDD: the Kubernetes Node goes.
			if err := l.ds.kube.Client.CoreV1().Nodes().Delete(l.ds.ctx, "node3", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		} else if _, err := l.ds.store.Delete(l.ds.ctx, "Node", "", "node3", ""); err != nil {
			t.Fatal(err)
		}
		l.waitKernel("node1", kernelState{
			routes: []string{b2 + " via 192.0.2.12 dev eth0"},
			neigh:  []string{neighOf(v2)},
			fdb:    []string{fdbOf(v2)},
		})
		l.waitKernel("node2", kernelState{
			routes: []string{b1 + " via 192.0.2.11 dev eth0"},
			neigh:  []string{neighOf(v1)},
			fdb:    []string{fdbOf(v1)},
		})
		// node3's own agent no longer has a Node to serve: its device goes.
		l.waitKernel("node3", kernelState{})
		if _, err := dial(pod1, a3); err == nil {
			t.Error("pod on the removed node still reachable")
		}
	})

	t.Run("VXLAN off", func(t *testing.T) {
		pool.Spec.VXLANMode = api.VXLANModeNever
		l.ds.apply(t, pool)
		eventually(t, "tunnel addresses released", func() error {
			for _, name := range []string{"node1", "node2"} {
				if a := l.nodeOf(name).Spec.IPv4VXLANTunnelAddr; a != "" {
					return fmt.Errorf("%s still has %s", name, a)
				}
			}
			return nil
		})
		l.waitKernel("node1", kernelState{})
		l.waitKernel("node2", kernelState{})
		for _, name := range []string{"node1", "node2"} {
			if _, err := l.nodes[name].nl.LinkByName(VXLANDevice); err == nil {
				t.Errorf("%s still has %s", name, VXLANDevice)
			}
			if _, ready, detail := l.nodes[name].health.get(); !ready {
				t.Errorf("%s not ready: %s", name, detail)
			}
		}
	})
}

// load003Pools reads the seed document's pools, with addresses moved into
// test ranges (the document's 172.10.0.0/16 is public space) and, unless
// keepIPIP, the overlay pool turned from IP-in-IP into VXLAN.
func load003Pools(t *testing.T, keepIPIP bool) []*api.IPPool {
	t.Helper()
	data, err := os.ReadFile("testdata/003-ippools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := api.DecodeAndValidate(data)
	if err != nil {
		t.Fatal(err)
	}
	cidrs := map[string]string{"ippool1": "10.101.0.0/16", "ippool2": "10.102.0.0/16"}
	var out []*api.IPPool
	for _, d := range docs {
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		p := d.Object.(*api.IPPool)
		p.Spec.CIDR = cidrs[p.Name]
		if p.Name == "ippool2" && !keepIPIP {
			if p.Spec.IPIPMode != api.IPIPModeAlways {
				t.Fatalf("ippool2 ipipMode %q, the document says Always", p.Spec.IPIPMode)
			}
			p.Spec.IPIPMode, p.Spec.VXLANMode = api.IPIPModeNever, api.VXLANModeAlways
		}
		out = append(out, p)
	}
	if len(out) != 2 {
		t.Fatalf("%d pools in the document", len(out))
	}
	return out
}

// Test003OverlayPool: the seed scenario's overlay pool (VXLAN instead of
// IP-in-IP) with its nodeSelector: only the nodes it selects get a tunnel
// address and the device, and their pods reach each other across the
// router.
func Test003OverlayPool(t *testing.T) {
	l := newLab(t,
		labNodeSpec{name: "node1", addr: "192.0.2.11/24", subnet: "a", labels: map[string]string{"calico": "1"}},
		labNodeSpec{name: "node2", addr: "192.0.2.12/24", subnet: "a", labels: map[string]string{"calico": "2"}},
		labNodeSpec{name: "node3", addr: "198.51.100.13/24", subnet: "b", labels: map[string]string{"calico": "2"}},
	)
	for _, p := range load003Pools(t, false) {
		l.ds.apply(t, p)
	}
	for _, name := range []string{"node1", "node2", "node3"} {
		l.start(name)
	}
	pod2, a2 := l.addPod("node2")
	pod3, a3 := l.addPod("node3")
	_, a1 := l.addPod("node1")
	for name, cidr := range map[string]string{"node1": "10.101.0.0/16", "node2": "10.102.0.0/16", "node3": "10.102.0.0/16"} {
		if a := map[string]netip.Addr{"node1": a1, "node2": a2, "node3": a3}[name]; !netip.MustParsePrefix(cidr).Contains(a) {
			t.Fatalf("pod on %s got %s, not from %s", name, a, cidr)
		}
	}
	l.waitVTEPs("node2", "node3")
	v2, v3 := l.vtep("node2"), l.vtep("node3")
	for _, v := range []vtep{v2, v3} {
		if !netip.MustParsePrefix("10.102.0.0/16").Contains(netip.MustParseAddr(v.tunnel)) {
			t.Errorf("tunnel address %s not from ippool2", v.tunnel)
		}
	}
	l.waitKernel("node2", kernelState{routes: []string{viaTunnel(block(a3), v3)}, neigh: []string{neighOf(v3)}, fdb: []string{fdbOf(v3)}})
	l.waitKernel("node3", kernelState{routes: []string{viaTunnel(block(a2), v2)}, neigh: []string{neighOf(v2)}, fdb: []string{fdbOf(v2)}})
	l.reach(pod2, pod3, a3)
	l.reach(pod3, pod2, a2)

	// node1 is not selected: no address, no device, no routes.
	l.waitKernel("node1", kernelState{})
	if n := l.nodeOf("node1"); n.Spec.IPv4VXLANTunnelAddr != "" || n.Spec.VXLANTunnelMACAddr != "" {
		t.Errorf("node1 got tunnel state %q %q", n.Spec.IPv4VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddr)
	}
	if _, err := l.nodes["node1"].nl.LinkByName(VXLANDevice); err == nil {
		t.Errorf("node1 has %s", VXLANDevice)
	}

	// Relabelling node1 into the group gives it a tunnel, and the others
	// learn it.
	n1 := l.nodeOf("node1")
	n1.Labels["calico"] = "2"
	l.ds.apply(t, n1)
	l.waitVTEPs("node1")
	v1 := l.vtep("node1")
	if !netip.MustParsePrefix("10.102.0.0/16").Contains(netip.MustParseAddr(v1.tunnel)) {
		t.Errorf("node1 tunnel address %s not from ippool2", v1.tunnel)
	}
	// Its tunnel address claimed it a block of ippool2: routed too.
	l.waitKernel("node2", kernelState{
		routes: sorted(viaTunnel(block(a3), v3), viaTunnel(block(netip.MustParseAddr(v1.tunnel)), v1)),
		neigh:  sorted(neighOf(v1), neighOf(v3)),
		fdb:    sorted(fdbOf(v1), fdbOf(v3)),
	})
}

// ipipAvailable reports whether this kernel can create an IP-in-IP device
// (tried in a throwaway namespace).
func ipipAvailable(t *testing.T) bool {
	t.Helper()
	out, err := exec.Command("unshare", "-n", "ip", "link", "add", "tunl9", "type", "ipip").CombinedOutput()
	if err != nil && !strings.Contains(strings.ToLower(string(out)), "unknown device type") &&
		!strings.Contains(strings.ToLower(string(out)), "not supported") {
		t.Fatalf("probe IP-in-IP: %v %s", err, out)
	}
	return err == nil
}

// TestIPIPUnsupported: the seed scenario's IP-in-IP pool on a kernel
// without IP-in-IP is reported, naming the pool, through readiness and
// the log; the agent keeps running and VXLAN still works beside it.
func TestIPIPUnsupported(t *testing.T) {
	requireRoot(t)
	if ipipAvailable(t) {
		t.Skip("this kernel has IP-in-IP; the error path cannot be exercised")
	}
	l := newLab(t,
		labNodeSpec{name: "node1", addr: "192.0.2.11/24", subnet: "a", labels: map[string]string{"calico": "2"}},
		labNodeSpec{name: "node2", addr: "198.51.100.12/24", subnet: "b", labels: map[string]string{"calico": "2"}},
	)
	for _, p := range load003Pools(t, true) {
		l.ds.apply(t, p)
	}
	l.ds.apply(t, testPool("vxlan", "10.103.0.0/16", vxlanMode(api.VXLANModeAlways)))
	l.start("node1")
	l.start("node2")

	const want = `IPPool "ippool2" has ipipMode Always but this kernel has no IP-in-IP support (module ipip); use vxlanMode`
	eventually(t, "readiness reports the IP-in-IP problem", func() error {
		live, ready, detail := l.nodes["node1"].health.get()
		if !live || ready || !strings.Contains(detail, want) {
			return fmt.Errorf("live=%v ready=%v detail=%q", live, ready, detail)
		}
		return nil
	})
	if logs := l.nodes["node1"].logs.String(); !strings.Contains(logs, "ippool2") || !strings.Contains(logs, "module ipip") {
		t.Errorf("log does not explain the problem:\n%s", logs)
	}
	// Calico still records the IP-in-IP tunnel address (the datastore does
	// not depend on one node's kernel).
	if a := l.nodeOf("node1").Spec.BGP.IPv4IPIPTunnelAddr; !netip.MustParsePrefix("10.102.0.0/16").Contains(netip.MustParseAddr(a)) {
		t.Errorf("IP-in-IP tunnel address %q", a)
	}

	// VXLAN beside it works: pods in the VXLAN pool reach each other.
	eventually(t, "VXLAN tunnel addresses", func() error {
		for _, n := range []string{"node1", "node2"} {
			if l.nodeOf(n).Spec.IPv4VXLANTunnelAddr == "" {
				return fmt.Errorf("%s has none", n)
			}
		}
		return nil
	})
	podA, a := l.addPodIn("node1", "10.103.0.0/16")
	podB, b := l.addPodIn("node2", "10.103.0.0/16")
	l.reach(podA, podB, b)
	l.reach(podB, podA, a)
	if _, err := l.nodes["node1"].nl.LinkByName(IPIPDevice); err == nil {
		t.Error("tunl0 exists on a kernel without IP-in-IP")
	}
}
