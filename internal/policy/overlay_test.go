package policy_test

import (
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/sim"
)

// denyAllHost is the node's uplink as a host endpoint with a policy that
// denies everything both ways: only the failsafe ports and what Calico
// itself must keep open get through.
func denyAllHost(s *policy.Snapshot) *policy.Snapshot {
	withHostEndpoint(s)
	s.HostEndpoints[len(s.HostEndpoints)-1].Spec.ExpectedIPs = []string{hostIP, "fd00:10::10"}
	s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, gnp("deny-all", api.GlobalNetworkPolicySpec{
		Selector: "host == 'node1'", Types: []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress},
		Ingress: []api.Rule{{Action: api.Deny}}, Egress: []api.Rule{{Action: api.Deny}},
	}))
	s.Nodes = overlayNodes()
	s.Config.IPv6 = true
	return s
}

// TestOverlayUnderHostEndpointPolicy: with a deny-all host endpoint policy
// on the uplink, the VXLAN packets between this node and the other nodes
// still flow (the pod network spans the nodes), while nobody else can send
// VXLAN to the host, and everything else stays denied.
func TestOverlayUnderHostEndpointPolicy(t *testing.T) {
	s := denyAllHost(base())
	s.IPPools = []api.IPPool{
		overlayPool("v4", "10.65.0.0/16", api.VXLANModeAlways, api.IPIPModeNever),
		overlayPool("v6", "fd00:65::/48", api.VXLANModeAlways, api.IPIPModeNever),
	}
	const vxlan = 4789
	runWalks(t, s, []walk{
		{name: "vxlan from a node", path: sim.Input, in: "eth0", src: "10.0.0.11", dst: hostIP, proto: 17, dport: vxlan, want: sim.Accept},
		{name: "vxlan from a node registered without its subnet", path: sim.Input, in: "eth0", src: "10.0.1.12", dst: hostIP, proto: 17, dport: vxlan, want: sim.Accept},
		{name: "vxlan from an outsider", path: sim.Input, in: "eth0", src: "192.0.2.1", dst: hostIP, proto: 17, dport: vxlan, want: sim.Drop, decidedIn: "filter INPUT"},
		// A node without a VXLAN tunnel address is no VXLAN peer.
		{name: "vxlan from a node without a tunnel", path: sim.Input, in: "eth0", src: "10.0.1.13", dst: hostIP, proto: 17, dport: vxlan, want: sim.Drop},
		// Nor is a pod, whatever its egress policy says.
		{name: "vxlan from a local pod", path: sim.Input, in: "cali1a2b3c4d5e6", src: "10.65.0.1", dst: hostIP, proto: 17, dport: vxlan, want: sim.Drop},
		{name: "other traffic from a node", path: sim.Input, in: "eth0", src: "10.0.0.11", dst: hostIP, proto: 6, dport: 80, want: sim.Drop},
		{name: "other udp port from a node", path: sim.Input, in: "eth0", src: "10.0.0.11", dst: hostIP, proto: 17, dport: 4790, want: sim.Drop},
		{name: "vxlan to a node", path: sim.Output, out: "eth0", src: hostIP, dst: "10.0.0.11", proto: 17, dport: vxlan, want: sim.Accept},
		{name: "vxlan to an outsider", path: sim.Output, out: "eth0", src: hostIP, dst: "192.0.2.1", proto: 17, dport: vxlan, want: sim.Drop, decidedIn: "filter OUTPUT"},
		{name: "other traffic to a node", path: sim.Output, out: "eth0", src: hostIP, dst: "10.0.0.11", proto: 6, dport: 80, want: sim.Drop},
		{name: "v6 vxlan from a node", path: sim.Input, in: "eth0", src: "fd00:10::11", dst: "fd00:10::10", proto: 17, dport: vxlan, want: sim.Accept},
		{name: "v6 vxlan from an outsider", path: sim.Input, in: "eth0", src: "2001:db8::1", dst: "fd00:10::10", proto: 17, dport: vxlan, want: sim.Drop},
		{name: "v6 vxlan to a node", path: sim.Output, out: "eth0", src: "fd00:10::10", dst: "fd00:10::11", proto: 17, dport: vxlan, want: sim.Accept},
	})
}

// TestOverlayClosedToOutsiders: even with no host endpoint at all, the
// host accepts VXLAN only from the nodes, so nobody else can inject
// packets into the pod network; its other traffic is not policed.
func TestOverlayClosedToOutsiders(t *testing.T) {
	s := base()
	s.Nodes = overlayNodes()
	s.IPPools = []api.IPPool{overlayPool("v4", "10.65.0.0/16", api.VXLANModeAlways, api.IPIPModeAlways)}
	runWalks(t, s, []walk{
		{name: "vxlan from a node", path: sim.Input, in: "eth0", src: "10.0.0.11", dst: "10.0.0.10", proto: 17, dport: 4789, want: sim.Accept},
		{name: "vxlan from an outsider", path: sim.Input, in: "eth0", src: "192.0.2.1", dst: "10.0.0.10", proto: 17, dport: 4789, want: sim.Drop, decidedIn: "filter INPUT"},
		{name: "ipip from an outsider", path: sim.Input, in: "eth0", src: "192.0.2.1", dst: "10.0.0.10", proto: 4, want: sim.Drop, decidedIn: "filter INPUT"},
		{name: "ipip from a node", path: sim.Input, in: "eth0", src: "10.0.1.13", dst: "10.0.0.10", proto: 4, want: sim.Accept},
		{name: "other traffic from an outsider", path: sim.Input, in: "eth0", src: "192.0.2.1", dst: "10.0.0.10", proto: 6, dport: 80, want: sim.Accept},
	})
}

// TestIPIPUnderHostEndpointPolicy: the same for IP-in-IP, whose peers are
// all nodes with an IPv4 address.
func TestIPIPUnderHostEndpointPolicy(t *testing.T) {
	s := denyAllHost(base())
	s.IPPools = []api.IPPool{overlayPool("v4", "10.65.0.0/16", api.VXLANModeNever, api.IPIPModeAlways)}
	runWalks(t, s, []walk{
		{name: "ipip from a node", path: sim.Input, in: "eth0", src: "10.0.1.13", dst: hostIP, proto: 4, want: sim.Accept},
		{name: "ipip from an outsider", path: sim.Input, in: "eth0", src: "192.0.2.1", dst: hostIP, proto: 4, want: sim.Drop, decidedIn: "filter INPUT"},
		{name: "ipip to a node", path: sim.Output, out: "eth0", src: hostIP, dst: "10.0.1.13", proto: 4, want: sim.Accept},
		{name: "ipip to an outsider", path: sim.Output, out: "eth0", src: hostIP, dst: "192.0.2.1", proto: 4, want: sim.Drop, decidedIn: "filter OUTPUT"},
		// No VXLAN pool: VXLAN is ordinary traffic, denied by the policy.
		{name: "vxlan from a node", path: sim.Input, in: "eth0", src: "10.0.0.11", dst: hostIP, proto: 17, dport: 4789, want: sim.Drop},
	})
}

// TestOverlayRulesOnlyWithOverlay: the rules and their sets exist exactly
// when a pool of the family uses the overlay, or FelixConfiguration's
// vxlanEnabled/ipipEnabled says so; without them the host endpoint policy
// decides encapsulated packets like any other.
func TestOverlayRulesOnlyWithOverlay(t *testing.T) {
	v4vxlan := overlayPool("v4", "10.65.0.0/16", api.VXLANModeCrossSubnet, api.IPIPModeNever)
	v6vxlan := overlayPool("v6", "fd00:65::/48", api.VXLANModeAlways, api.IPIPModeNever)
	v4ipip := overlayPool("v4", "10.65.0.0/16", api.VXLANModeNever, api.IPIPModeCrossSubnet)
	plain := pool("v4", "10.65.0.0/16", false)
	for _, tc := range []struct {
		name    string
		pools   []api.IPPool
		felix   api.FelixConfigurationSpec
		v4, v6  []string // the overlay's sets wanted
		v4Rules int      // overlay rules in cali-INPUT and cali-OUTPUT
	}{
		{name: "no overlay pool", pools: []api.IPPool{plain}},
		{name: "ipv4 vxlan", pools: []api.IPPool{v4vxlan}, v4: []string{"cali40all-vxlan-net"}, v4Rules: 3},
		{name: "ipv6 vxlan only", pools: []api.IPPool{plain, v6vxlan}, v6: []string{"cali60all-vxlan-net"}},
		{name: "ipip", pools: []api.IPPool{v4ipip}, v4: []string{"cali40all-hosts-net"}, v4Rules: 3},
		{name: "vxlanEnabled false", pools: []api.IPPool{v4vxlan}, felix: api.FelixConfigurationSpec{VXLANEnabled: ptr(false)}},
		{name: "ipipEnabled false", pools: []api.IPPool{v4ipip}, felix: api.FelixConfigurationSpec{IPIPEnabled: ptr(false)}},
		{name: "vxlanEnabled without a pool", pools: []api.IPPool{plain}, felix: api.FelixConfigurationSpec{VXLANEnabled: ptr(true)},
			v4: []string{"cali40all-vxlan-net"}, v4Rules: 3},
		{name: "both", pools: []api.IPPool{v4ipip, v6vxlan}, felix: api.FelixConfigurationSpec{VXLANEnabled: ptr(true)},
			v4: []string{"cali40all-hosts-net", "cali40all-vxlan-net"}, v6: []string{"cali60all-vxlan-net"}, v4Rules: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := denyAllHost(base())
			s.IPPools = tc.pools
			s.Config = policy.ConfigFromFelix(&tc.felix)
			res := policy.Compile(s)
			checkConsistent(t, res)
			for _, fc := range []struct {
				f     *policy.Family
				sets  []string
				rules int
			}{{res.V4, tc.v4, tc.v4Rules}, {res.V6, tc.v6, -1}} {
				var got []string
				for _, set := range fc.f.IPSets {
					if strings.Contains(set.Name, "all-") {
						got = append(got, set.Name)
					}
				}
				if strings.Join(got, " ") != strings.Join(fc.sets, " ") {
					t.Errorf("IPv%d overlay sets %v, want %v", fc.f.Version, got, fc.sets)
				}
				n := 0
				for _, name := range []string{"cali-INPUT", "cali-OUTPUT"} {
					for _, r := range fc.f.Filter.Chain(name).Rules {
						for _, c := range r.Match {
							if _, ok := c.(policy.MatchAddrType); ok || c == (policy.MatchProtocol{Num: 4}) {
								n++
								break
							}
						}
					}
				}
				if want := fc.rules; want >= 0 && n != want {
					t.Errorf("IPv%d: %d overlay rules, want %d", fc.f.Version, n, want)
				}
				if fc.rules < 0 && (n > 0) != (len(fc.sets) > 0) {
					t.Errorf("IPv%d: %d overlay rules with sets %v", fc.f.Version, n, fc.sets)
				}
			}
		})
	}
	// Without an overlay nothing exempts VXLAN from the policy: a node's
	// is denied like an outsider's.
	s := denyAllHost(base())
	runWalks(t, s, []walk{
		{name: "no overlay: vxlan from a node", path: sim.Input, in: "eth0", src: "10.0.0.11", dst: hostIP, proto: 17, dport: 4789, want: sim.Drop},
		{name: "no overlay: vxlan to a node", path: sim.Output, out: "eth0", src: hostIP, dst: "10.0.0.11", proto: 17, dport: 4789, want: sim.Drop},
	})
}
