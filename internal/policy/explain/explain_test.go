package explain

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/sim"
)

// cluster: pod web on n1, pod db on n2, host endpoint n1-eth0, and the
// nodes' addresses. (The packet-level tests, against the simulator, the
// reference model and the kernel, are in package policy's tests.)
func cluster() *policy.Snapshot {
	wep := func(ns, pod, node, iface, ip string) api.WorkloadEndpoint {
		w := api.WorkloadEndpoint{}
		w.Namespace, w.Name = ns, node+"-k8s-"+pod+"-eth0"
		w.Spec = api.WorkloadEndpointSpec{Node: node, Pod: pod, InterfaceName: iface, IPNetworks: []string{ip + "/32"}}
		return w
	}
	node := func(name, ip string) api.Node {
		n := api.Node{}
		n.Name = name
		n.Spec.BGP = &api.NodeBGPSpec{IPv4Address: ip + "/24"}
		return n
	}
	hep := api.HostEndpoint{}
	hep.Name = "n1-eth0"
	hep.Spec = api.HostEndpointSpec{Node: "n1", InterfaceName: "eth0", ExpectedIPs: []string{"192.0.2.1"}}
	return &policy.Snapshot{
		WorkloadEndpoints: []api.WorkloadEndpoint{wep("shop", "web", "n1", "cali1", "10.0.0.1"), wep("shop", "db", "n2", "cali2", "10.0.1.1")},
		HostEndpoints:     []api.HostEndpoint{hep},
		Nodes:             []api.Node{node("n1", "192.0.2.1"), node("n2", "192.0.2.2")},
	}
}

func TestResolve(t *testing.T) {
	s := cluster()
	for _, tc := range []struct {
		spec, kind, name, node, iface string
	}{
		{"shop/web", KindWorkload, "shop/web", "n1", "cali1"},
		{"shop/n2-k8s-db-eth0", KindWorkload, "shop/db", "n2", "cali2"},
		{"10.0.1.1", KindWorkload, "shop/db", "n2", "cali2"},
		{"hostendpoint/n1-eth0", KindHost, "n1-eth0", "n1", "eth0"},
		{"hep/n1-eth0", KindHost, "n1-eth0", "n1", "eth0"},
		{"192.0.2.1", KindHost, "n1-eth0", "n1", "eth0"}, // the host endpoint's expected IP
		{"192.0.2.2", KindNode, "n2", "n2", ""},
		{"node/n2", KindNode, "n2", "n2", ""},
		{"203.0.113.9", KindAddress, "203.0.113.9", "", ""},
	} {
		got, err := Resolve(s, tc.spec)
		if err != nil {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		if got.Kind != tc.kind || got.Name != tc.name || got.Node != tc.node || got.Interface != tc.iface || len(got.Addrs) == 0 {
			t.Errorf("%s: %+v, want %s %s on %q, %q", tc.spec, got, tc.kind, tc.name, tc.node, tc.iface)
		}
	}
	for spec, want := range map[string]string{
		"shop/nope":      "no WorkloadEndpoint for pod nope in namespace shop",
		"hostendpoint/x": "HostEndpoint x: not found",
		"node/x":         "Node x: not found",
		"nonsense":       "want namespace/pod",
		"dev/web":        "no WorkloadEndpoint for pod web in namespace dev",
	} {
		if _, err := Resolve(s, spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", spec, err, want)
		}
	}
}

// TestPlan: the nodes a packet crosses and its way through each.
func TestPlan(t *testing.T) {
	s := cluster()
	end := func(spec string) End {
		e, err := Resolve(s, spec)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, tc := range []struct {
		from, to, only string
		want           []plannedHop
	}{
		{"shop/web", "shop/db", "", []plannedHop{
			{"n1", sim.Hop{Path: sim.Forward, In: "cali1", Out: "eth0"}},
			{"n2", sim.Hop{Path: sim.Forward, In: "eth0", Out: "cali2"}}}},
		{"shop/web", "shop/db", "n2", []plannedHop{{"n2", sim.Hop{Path: sim.Forward, In: "eth0", Out: "cali2"}}}},
		{"203.0.113.9", "hostendpoint/n1-eth0", "", []plannedHop{{"n1", sim.Hop{Path: sim.Input, In: "eth0"}}}},
		{"shop/web", "192.0.2.1", "", []plannedHop{{"n1", sim.Hop{Path: sim.Input, In: "cali1"}}}},
		{"node/n1", "shop/web", "", []plannedHop{{"n1", sim.Hop{Path: sim.Output, Out: "cali1"}}}},
		{"node/n2", "shop/web", "", []plannedHop{
			{"n2", sim.Hop{Path: sim.Output, Out: "eth0"}},
			{"n1", sim.Hop{Path: sim.Forward, In: "eth0", Out: "cali1"}}}},
		{"203.0.113.9", "198.51.100.1", "n2", []plannedHop{{"n2", sim.Hop{Path: sim.Forward, In: "eth0", Out: "eth0"}}}},
	} {
		got, err := plan(end(tc.from), end(tc.to), tc.only, "eth0")
		if err != nil {
			t.Errorf("%s -> %s: %v", tc.from, tc.to, err)
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s -> %s: %+v, want %+v", tc.from, tc.to, got, tc.want)
			continue
		}
		for i := range got {
			if got[i].node != tc.want[i].node || got[i].hop != tc.want[i].hop {
				t.Errorf("%s -> %s hop %d: %+v, want %+v", tc.from, tc.to, i, got[i], tc.want[i])
			}
		}
	}
	if _, err := plan(end("203.0.113.9"), end("198.51.100.1"), "", "eth0"); !errors.Is(err, ErrNoNode) {
		t.Errorf("two outside addresses without a node: %v, want ErrNoNode", err)
	}
	if _, err := plan(end("shop/web"), end("shop/db"), "n3", "eth0"); err == nil || !strings.Contains(err.Error(), "does not cross node n3") {
		t.Errorf("a node off the way: %v", err)
	}
	if _, _, err := pickAddrs(End{Name: "a", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}},
		End{Name: "b", Addrs: []netip.Addr{netip.MustParseAddr("fd00::1")}}); err == nil {
		t.Error("ends without a common family are refused")
	}
}
