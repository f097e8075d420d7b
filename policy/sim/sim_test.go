package sim_test

import (
	"net/netip"
	"testing"

	"github.com/projectcalico/calico-node/policy"
	"github.com/projectcalico/calico-node/policy/sim"
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
	sets, err := sim.NewSets(f)
	if err != nil {
		t.Fatal(err)
	}
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
			sets, err := sim.NewSets(f)
			if err != nil {
				t.Fatal(err)
			}
			p := sim.Packet{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Proto: 6, DstPort: 80}
			if _, err := sim.Traverse(f, sets, policy.TableFilter, "INPUT", p, "eth0", ""); err == nil {
				t.Error("no error")
			}
		})
	}
}
