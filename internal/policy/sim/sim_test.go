package sim_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/sim"
)

// family builds a hand-written ruleset exercising jump, goto, return,
// marks and sets.
func family() *policy.Family {
	return &policy.Family{
		Version: 4,
		Filter: policy.Table{
			Name: policy.TableFilter,
			Chains: []policy.Chain{
				{Name: "cali-a", Rules: []policy.Rule{
					{Action: policy.SetMark{Mark: 0x10, Mask: 0x30}},
					{Match: policy.Match{policy.MatchIface{Name: "cali+"}}, Action: policy.Goto{Chain: "cali-b"}},
					{Match: policy.Match{policy.MatchMark{Mark: 0x10, Mask: 0x10}}, Action: policy.Drop{}},
				}},
				{Name: "cali-b", Rules: []policy.Rule{
					{Match: policy.Match{policy.MatchSet{Dir: policy.Src, Set: "s"}}, Action: policy.Return{}},
					{Match: policy.Match{policy.MatchProtocol{Name: "tcp"}, policy.MatchSet{Dir: policy.Dst, Set: "p", IPPort: true}}, Action: policy.Accept{}},
					{Action: policy.Log{Prefix: "x"}},
					{Action: policy.Reject{}},
				}},
			},
			Hooks: []policy.Hook{{Chain: "FORWARD", Rule: policy.Rule{Action: policy.Jump{Chain: "cali-a"}}}},
		},
		IPSets: []policy.IPSet{
			{Name: "p", Type: policy.SetTypeIPPort, Family: "inet", Members: []string{"10.0.0.2,tcp:80"}},
			{Name: "s", Type: policy.SetTypeNet, Family: "inet", Members: []string{"10.1.0.0/16", "10.0.0.9"}},
		},
	}
}

func TestTraverse(t *testing.T) {
	f := family()
	sets := mustSets(t, f)
	a := netip.MustParseAddr
	tests := []struct {
		name   string
		p      sim.Packet
		in     string
		want   sim.Verdict
		logged int
	}{
		// Not from a workload: the mark set in cali-a drops it.
		{"mark then drop", sim.Packet{Src: a("10.9.0.1"), Dst: a("10.0.0.2"), Proto: 6, DstPort: 80}, "eth0", sim.Drop, 0},
		// A return from a goto-ed chain returns past cali-a, to FORWARD,
		// whose policy accepts.
		{"return from goto skips the caller", sim.Packet{Src: a("10.1.2.3"), Dst: a("10.0.0.2"), Proto: 6}, "cali1", sim.Accept, 0},
		{"ip,port set", sim.Packet{Src: a("10.9.0.1"), Dst: a("10.0.0.2"), Proto: 6, DstPort: 80}, "cali1", sim.Accept, 0},
		{"ip,port set wrong port", sim.Packet{Src: a("10.9.0.1"), Dst: a("10.0.0.2"), Proto: 6, DstPort: 81}, "cali1", sim.Reject, 1},
		{"ip,port set wrong protocol", sim.Packet{Src: a("10.9.0.1"), Dst: a("10.0.0.2"), Proto: 17, DstPort: 80}, "cali1", sim.Reject, 1},
		{"host member", sim.Packet{Src: a("10.0.0.9"), Dst: a("10.0.0.2"), Proto: 17}, "cali1", sim.Accept, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sim.Traverse(f, sets, policy.TableFilter, "FORWARD", tc.p, tc.in, "eth1")
			if err != nil {
				t.Fatal(err)
			}
			if got.Verdict != tc.want || got.Logged != tc.logged {
				t.Errorf("got %v (logged %d), want %v (logged %d); trace %v", got.Verdict, got.Logged, tc.want, tc.logged, got.Trace)
			}
		})
	}
}

func TestTraverseRejectsWhatIptablesRejects(t *testing.T) {
	tests := []struct {
		name string
		rule policy.Rule
	}{
		{"missing chain", policy.Rule{Action: policy.Jump{Chain: "cali-nope"}}},
		{"missing set", policy.Rule{Match: policy.Match{policy.MatchSet{Set: "nope"}}}},
		{"ports without protocol", policy.Rule{Match: policy.Match{policy.MatchPorts{Ports: []policy.PortRange{{First: 80, Last: 80}}}}}},
		{"two sources", policy.Rule{Match: policy.Match{
			policy.MatchNet{Net: netip.MustParsePrefix("10.0.0.0/8")}, policy.MatchNet{Not: true, Net: netip.MustParsePrefix("10.1.0.0/16")}}}},
		{"icmp without protocol", policy.Rule{Match: policy.Match{policy.MatchICMP{Type: 8}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &policy.Family{Version: 4, Filter: policy.Table{
				Chains: []policy.Chain{{Name: "cali-a", Rules: []policy.Rule{tc.rule}}},
				Hooks:  []policy.Hook{{Chain: "INPUT", Rule: policy.Rule{Action: policy.Jump{Chain: "cali-a"}}}},
			}}
			sets := mustSets(t, f)
			p := sim.Packet{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Proto: 6, DstPort: 80}
			if _, err := sim.Traverse(f, sets, policy.TableFilter, "INPUT", p, "eth0", ""); err == nil {
				t.Error("no error")
			}
		})
	}
}

// walkFamily has a rule in every table a walk crosses, each recording
// what it saw in the mark, so that the order, the mark hand-over, NOTRACK
// and DNAT can be checked.
func walkFamily() *policy.Family {
	hook := func(builtin, chain string) []policy.Hook {
		return []policy.Hook{{Chain: builtin, Rule: policy.Rule{Action: policy.Jump{Chain: chain}}}}
	}
	m := func(mark uint32) policy.Match { return policy.Match{policy.MatchMark{Mark: mark, Mask: mark}} }
	ct := func(states string) policy.Match { return policy.Match{policy.MatchConntrack{States: states}} }
	dst := func(p string) policy.Match {
		return policy.Match{policy.MatchNet{Dir: policy.Dst, Net: netip.MustParsePrefix(p)}}
	}
	return &policy.Family{
		Version: 4,
		Raw: policy.Table{Name: policy.TableRaw, Hooks: append(hook("PREROUTING", "cali-pre"), hook("OUTPUT", "cali-pre")...),
			Chains: []policy.Chain{{Name: "cali-pre", Rules: []policy.Rule{
				// raw sees no conntrack state yet.
				{Match: ct("INVALID"), Action: policy.SetMark{Mark: 0x1, Mask: 0x1}},
				{Match: dst("10.9.0.0/16"), Action: policy.NoTrack{}},
				{Match: ct("UNTRACKED"), Action: policy.SetMark{Mark: 0x2, Mask: 0x2}},
				{Match: dst("10.8.0.0/16"), Action: policy.Drop{}},
			}}}},
		Mangle: policy.Table{Name: policy.TableMangle, Hooks: append(hook("PREROUTING", "cali-pre"), hook("POSTROUTING", "cali-post")...),
			Chains: []policy.Chain{{Name: "cali-post", Rules: []policy.Rule{
				// Only packets that leave get here.
				{Action: policy.SetMark{Mark: 0x40, Mask: 0x40}},
				// Sees the filter table's mark and the DNAT.
				{Match: append(m(0x10), ct("DNAT")...), Action: policy.SetMark{Mark: 0x80, Mask: 0x80}},
				// Before nat POSTROUTING: a drop here leaves it unNAT-ed.
				{Match: dst("10.66.0.0/16"), Action: policy.Drop{}},
			}}, {Name: "cali-pre", Rules: []policy.Rule{
				// Sees raw's mark and the original destination.
				{Match: append(m(0x1), dst("10.0.0.10/32")...), Action: policy.SetMark{Mark: 0x4, Mask: 0x4}},
			}}}},
		Filter: policy.Table{Name: policy.TableFilter,
			Hooks: append(hook("INPUT", "cali-in"), hook("FORWARD", "cali-in")...),
			Chains: []policy.Chain{{Name: "cali-in", Rules: []policy.Rule{
				{Match: m(0x4), Action: policy.SetMark{Mark: 0x8, Mask: 0x8}},
				// The filter table sees the DNAT.
				{Match: ct("DNAT"), Action: policy.SetMark{Mark: 0x10, Mask: 0x10}},
				{Match: dst("10.65.0.0/16"), Action: policy.SetMark{Mark: 0x20, Mask: 0x20}},
				{Match: m(0x2), Action: policy.Accept{}},
				{Match: ct("UNTRACKED"), Action: policy.Drop{}},
			}}}},
		NAT: policy.Table{Name: policy.TableNAT, Hooks: hook("POSTROUTING", "cali-post"),
			Chains: []policy.Chain{{Name: "cali-post", Rules: []policy.Rule{{Action: policy.Masquerade{}}}}}},
	}
}

func TestWalk(t *testing.T) {
	f := walkFamily()
	sets := mustSets(t, f)
	a := netip.MustParseAddr
	tests := []struct {
		name      string
		hop       sim.Hop
		p         sim.Packet
		want      sim.Verdict
		mark      uint32
		untracked bool
		nat       string
		decided   string
	}{
		{"mark carries, DNAT seen by filter only, then NAT",
			sim.Hop{Path: sim.Forward, In: "eth0", Out: "cali1", DNAT: netip.MustParseAddrPort("10.65.0.2:5432")},
			sim.Packet{Src: a("192.0.2.1"), Dst: a("10.0.0.10"), Proto: 6, DstPort: 30080, State: "ESTABLISHED"},
			sim.Accept, 0x1 | 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80, false, "MASQUERADE", "nat POSTROUTING"},
		{"input path has no POSTROUTING",
			sim.Hop{Path: sim.Input, In: "eth0"},
			sim.Packet{Src: a("192.0.2.1"), Dst: a("10.0.0.10"), Proto: 6, DstPort: 22},
			sim.Accept, 0x1 | 0x4 | 0x8, false, "", "filter INPUT"},
		{"untracked: later tables see UNTRACKED, no DNAT, no NAT",
			sim.Hop{Path: sim.Forward, In: "eth0", Out: "eth1", DNAT: netip.MustParseAddrPort("10.65.0.2:5432")},
			sim.Packet{Src: a("192.0.2.1"), Dst: a("10.9.0.1"), Proto: 6, DstPort: 80},
			sim.Accept, 0x1 | 0x2 | 0x40, true, "", "mangle POSTROUTING"},
		{"drop in raw ends the walk",
			sim.Hop{Path: sim.Forward, In: "eth0", Out: "eth1"},
			sim.Packet{Src: a("192.0.2.1"), Dst: a("10.8.0.1"), Proto: 6, DstPort: 80},
			sim.Drop, 0x1, false, "", "raw PREROUTING"},
		{"output: mangle POSTROUTING sees the DNAT-ed destination and runs before nat",
			sim.Hop{Path: sim.Output, Out: "eth0", DNAT: netip.MustParseAddrPort("10.66.0.5:443")},
			sim.Packet{Src: a("10.0.0.10"), Dst: a("10.96.0.1"), Proto: 6, DstPort: 443},
			sim.Drop, 0x1 | 0x40, false, "", "mangle POSTROUTING"},
		{"output starts in raw OUTPUT",
			sim.Hop{Path: sim.Output, Out: "eth0"},
			sim.Packet{Src: a("10.0.0.10"), Dst: a("10.8.0.1"), Proto: 6, DstPort: 80},
			sim.Drop, 0x1, false, "", "raw OUTPUT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sim.Walk(f, sets, tc.hop, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if got.Verdict != tc.want || got.Mark != tc.mark || got.Untracked != tc.untracked || got.NAT != tc.nat || got.DecidedIn() != tc.decided {
				t.Errorf("got %v mark %#x untracked %v nat %q at %q, want %v mark %#x untracked %v nat %q at %q; trace %v",
					got.Verdict, got.Mark, got.Untracked, got.NAT, got.DecidedIn(), tc.want, tc.mark, tc.untracked, tc.nat, tc.decided, got.Trace())
			}
		})
	}
}

func TestTraverseRejectsActionsOutsideTheirTable(t *testing.T) {
	for _, tc := range []struct {
		table  string
		action policy.Action
	}{
		{policy.TableRaw, policy.Reject{}},
		{policy.TableMangle, policy.Reject{}},
		{policy.TableFilter, policy.NoTrack{}},
		{policy.TableMangle, policy.NoTrack{}},
	} {
		t.Run(fmt.Sprintf("%T in %s", tc.action, tc.table), func(t *testing.T) {
			tbl := policy.Table{Name: tc.table,
				Chains: []policy.Chain{{Name: "cali-a", Rules: []policy.Rule{{Action: tc.action}}}},
				Hooks:  []policy.Hook{{Chain: "PREROUTING", Rule: policy.Rule{Action: policy.Jump{Chain: "cali-a"}}}},
			}
			f := &policy.Family{Version: 4, Raw: tbl, Mangle: tbl, Filter: tbl}
			p := sim.Packet{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Proto: 6, DstPort: 80}
			if _, err := sim.Traverse(f, &sim.Sets{}, tc.table, "PREROUTING", p, "eth0", ""); err == nil {
				t.Errorf("%T in %s: no error", tc.action, tc.table)
			}
		})
	}
}

// TestReversePath: the rpfilter match against routes derived from a
// snapshot: a workload interface's packet passes only with that
// workload's own address, or a source the kernel's match always passes.
func TestReversePath(t *testing.T) {
	snap := &policy.Snapshot{Node: "node1", WorkloadEndpoints: []api.WorkloadEndpoint{
		{Spec: api.WorkloadEndpointSpec{Node: "node1", InterfaceName: "cali1", IPNetworks: []string{"10.65.0.1/32", "fd00::1/128"}}},
		{Spec: api.WorkloadEndpointSpec{Node: "node1", InterfaceName: "cali2", IPNetworks: []string{"10.65.0.2"}}},
		// Another node's workload is reached through the uplink.
		{Spec: api.WorkloadEndpointSpec{Node: "node2", InterfaceName: "cali3", IPNetworks: []string{"10.65.1.3/32"}}},
	}}
	routes := sim.RoutesFor(snap, "eth0")
	if got := routes.Via(netip.MustParseAddr("10.65.1.3")); got != "eth0" {
		t.Errorf("remote workload via %q, want eth0", got)
	}
	raw := func(v int) *policy.Family {
		return &policy.Family{Version: v, Raw: policy.Table{Name: policy.TableRaw,
			Chains: []policy.Chain{{Name: "cali-pre", Rules: []policy.Rule{
				{Match: policy.Match{policy.MatchRPFilter{Not: true, ValidMark: true}}, Action: policy.Drop{}},
			}}},
			Hooks: []policy.Hook{{Chain: "PREROUTING", Rule: policy.Rule{Action: policy.Jump{Chain: "cali-pre"}}}},
		}}
	}
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name     string
		in       string
		src, dst string
		want     sim.Verdict
	}{
		{"own address", "cali1", "10.65.0.1", "10.65.0.2", sim.Accept},
		{"own bare address", "cali2", "10.65.0.2", "10.65.0.1", sim.Accept},
		{"another local pod's address", "cali1", "10.65.0.2", "10.65.0.9", sim.Drop},
		{"a remote pod's address", "cali1", "10.65.1.3", "10.65.0.2", sim.Drop},
		{"an outside address", "cali1", "192.0.2.1", "10.65.0.2", sim.Drop},
		{"remote address on the uplink", "eth0", "192.0.2.1", "10.65.0.2", sim.Accept},
		{"local pod's address on the uplink", "eth0", "10.65.0.1", "10.65.0.2", sim.Drop},
		{"loopback", "lo", "192.0.2.1", "127.0.0.1", sim.Accept},
		{"DHCP discover", "cali1", "0.0.0.0", "255.255.255.255", sim.Accept},
		{"unspecified to link-local multicast", "cali1", "0.0.0.0", "224.0.0.22", sim.Accept},
		{"unspecified to unicast", "cali1", "0.0.0.0", "10.65.0.2", sim.Drop},
		{"v6 own address", "cali1", "fd00::1", "fd00::2", sim.Accept},
		{"v6 another address", "cali1", "fd00::2", "fd00::1", sim.Drop},
		{"v6 link-local", "cali1", "fe80::1", "ff02::2", sim.Accept},
		{"v6 unspecified", "cali2", "::", "ff02::1:ff00:2", sim.Accept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := 4
			if a(tc.src).Is6() {
				v = 6
			}
			f := raw(v)
			sets := mustSets(t, f)
			p := sim.Packet{Src: a(tc.src), Dst: a(tc.dst), Proto: 17, SrcPort: 68, DstPort: 67}
			got, err := sim.Traverse(f, sets.WithRoutes(routes), policy.TableRaw, "PREROUTING", p, tc.in, "")
			if err != nil {
				t.Fatal(err)
			}
			if got.Verdict != tc.want {
				t.Errorf("got %v, want %v", got.Verdict, tc.want)
			}
			// Without routes the simulator cannot decide: an error, not a
			// guess.
			if _, err := sim.Traverse(f, sets, policy.TableRaw, "PREROUTING", p, tc.in, ""); err == nil {
				t.Error("no error without routes")
			}
		})
	}
}

// TestAddrTypeLocal: the addrtype LOCAL match holds for the host's own
// addresses (from the snapshot's Node, host endpoints and interfaces) and
// loopback, and cannot be decided without routes.
func TestAddrTypeLocal(t *testing.T) {
	snap := &policy.Snapshot{Node: "node1",
		Nodes: []api.Node{
			{ObjectMeta: api.ObjectMeta{Name: "node1"}, Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: "10.0.0.10/24", IPv6Address: "fd00::10/64"}}},
			{ObjectMeta: api.ObjectMeta{Name: "node2"}, Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: "10.0.0.11/24"}}},
		},
		HostEndpoints: []api.HostEndpoint{
			{Spec: api.HostEndpointSpec{Node: "node1", InterfaceName: "eth1", ExpectedIPs: []string{"192.168.1.1"}}},
			{Spec: api.HostEndpointSpec{Node: "node2", InterfaceName: "eth1", ExpectedIPs: []string{"192.168.1.2"}}},
		},
		HostInterfaces: map[string][]netip.Addr{"eth2": {netip.MustParseAddr("172.16.0.1")}},
	}
	routes := sim.RoutesFor(snap, "eth0")
	in := func(v int) *policy.Family {
		return &policy.Family{Version: v, Filter: policy.Table{Name: policy.TableFilter,
			Chains: []policy.Chain{{Name: "cali-in", Rules: []policy.Rule{
				{Match: policy.Match{policy.MatchAddrType{Dir: policy.Dst, Type: policy.AddrTypeLocal}}, Action: policy.Drop{}},
			}}},
			Hooks: []policy.Hook{{Chain: "INPUT", Rule: policy.Rule{Action: policy.Jump{Chain: "cali-in"}}}},
		}}
	}
	for _, tc := range []struct {
		dst   string
		local bool
	}{
		{"10.0.0.10", true}, {"fd00::10", true}, {"192.168.1.1", true}, {"172.16.0.1", true},
		{"127.0.0.53", true}, {"::1", true},
		{"10.0.0.11", false}, {"192.168.1.2", false}, {"10.0.0.0", false}, {"fd00::11", false},
	} {
		t.Run(tc.dst, func(t *testing.T) {
			dst := netip.MustParseAddr(tc.dst)
			src := netip.MustParseAddr("192.0.2.1")
			v := 4
			if dst.Is6() {
				src, v = netip.MustParseAddr("2001:db8::1"), 6
			}
			f := in(v)
			sets := mustSets(t, f)
			p := sim.Packet{Src: src, Dst: dst, Proto: 17, SrcPort: 40000, DstPort: 4789}
			got, err := sim.Traverse(f, sets.WithRoutes(routes), policy.TableFilter, "INPUT", p, "eth0", "")
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]sim.Verdict{true: sim.Drop, false: sim.Accept}[tc.local]; got.Verdict != want {
				t.Errorf("got %v, want %v (local %v)", got.Verdict, want, tc.local)
			}
			if _, err := sim.Traverse(f, sets, policy.TableFilter, "INPUT", p, "eth0", ""); err == nil {
				t.Error("no error without routes")
			}
		})
	}
}

func mustSets(t *testing.T, f *policy.Family) *sim.Sets {
	t.Helper()
	sets, err := sim.NewSets(f)
	if err != nil {
		t.Fatal(err)
	}
	return sets
}
