package policy_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/explain"
	"github.com/projectcalico/calico-node/internal/policy/sim"
)

// probe is one packet and the verdict a user expects for it.
type probe struct {
	name        string
	chain       string // FORWARD, INPUT or OUTPUT
	in, out     string
	src, dst    string
	proto       uint8
	dport       uint16
	icmpType    uint8
	state       string
	want        sim.Verdict
	wantLogged  int
	wantNAT     string // for POSTROUTING probes
	postrouting bool
}

func runProbes(t *testing.T, s *policy.Snapshot, probes []probe) {
	t.Helper()
	res := policy.Compile(s)
	checkConsistent(t, res)
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			src := netip.MustParseAddr(p.src)
			f, sets := simFamily(t, res, src)
			pkt := sim.Packet{Src: src, Dst: netip.MustParseAddr(p.dst), Proto: p.proto, SrcPort: 40000,
				DstPort: p.dport, ICMPType: p.icmpType, State: p.state}
			if p.postrouting {
				got, err := sim.Traverse(f, sets, policy.TableNAT, "POSTROUTING", pkt, "", p.out)
				if err != nil {
					t.Fatal(err)
				}
				if got.NAT != p.wantNAT {
					t.Errorf("NAT = %q, want %q (trace %v)", got.NAT, p.wantNAT, got.Trace)
				}
				return
			}
			got, err := sim.Traverse(f, sets, policy.TableFilter, p.chain, pkt, p.in, p.out)
			if err != nil {
				t.Fatal(err)
			}
			if got.Verdict != p.want || got.Logged != p.wantLogged {
				t.Errorf("verdict %v with %d logged, want %v with %d (trace %v)", got.Verdict, got.Logged, p.want, p.wantLogged, got.Trace)
			}
			// explain, over every table on the way, tells the user the
			// same and cites the rules that did it.
			path := map[string]sim.Path{"FORWARD": sim.Forward, "INPUT": sim.Input, "OUTPUT": sim.Output}[p.chain]
			ex := checkExplainHop(t, s, res, sim.Hop{Path: path, In: p.in, Out: p.out}, pkt)
			if (ex.Verdict == explain.Allow) != (p.want == sim.Accept) {
				t.Errorf("explain says %s, want %v", ex.Verdict, p.want)
			}
		})
	}
}

// Interfaces and addresses of base(): web 10.65.0.1 (cali1a2b3c4d5e6),
// db 10.65.0.2 (cali2b3c4d5e6f7), client 10.65.0.3 (cali3c4d5e6f7a8) and
// the remote web 10.65.1.7.
const (
	ifWeb, ifDB, ifClient = "cali1a2b3c4d5e6", "cali2b3c4d5e6f7", "cali3c4d5e6f7a8"
)

// scenarioCases are the scenario tests' clusters, each an edit of
// base(), for the tests that check every pair of their ends (explain on
// real packets).
func scenarioCases() []goldenCase {
	cases := []goldenCase{
		{"deny-by-default-once-selected", denyByDefaultOnceSelected},
		{"tiers-pass-and-log", tiersPassAndLogOf("192.0.2.0/24")},
		{"host-endpoint-failsafe", hostEndpointFailsafe},
	}
	for _, action := range []string{"", "DROP", "ACCEPT", "RETURN"} {
		cases = append(cases, goldenCase{"endpoint-to-host-" + action, endpointToHost(action)})
	}
	return append(cases, goldenCase{"scenario-ipv6", dualStack}, goldenCase{"scenario-nat-outgoing", natOutgoingPools}, goldenCase{"unusable-pool", unusablePool})
}

func denyByDefaultOnceSelected(s *policy.Snapshot) {
	s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "db", api.NetworkPolicySpec{
		Selector: "app == 'db'",
		Ingress: []api.Rule{{Action: api.Allow, Protocol: proto("TCP"),
			Source: api.EntityRule{Selector: "app == 'web'"}, Destination: api.EntityRule{Ports: ports("pg")}}},
	}))
}

func TestDenyByDefaultOnceSelected(t *testing.T) {
	s := base()
	denyByDefaultOnceSelected(s)
	runProbes(t, s, []probe{
		{name: "web to db on the named port", chain: "FORWARD", in: ifWeb, out: ifDB, src: "10.65.0.1", dst: "10.65.0.2", proto: 6, dport: 5432, want: sim.Accept},
		{name: "web to db on another port", chain: "FORWARD", in: ifWeb, out: ifDB, src: "10.65.0.1", dst: "10.65.0.2", proto: 6, dport: 22, want: sim.Drop},
		{name: "client (other namespace) to db", chain: "FORWARD", in: ifClient, out: ifDB, src: "10.65.0.3", dst: "10.65.0.2", proto: 6, dport: 5432, want: sim.Drop},
		{name: "established reply is accepted", chain: "FORWARD", in: ifClient, out: ifDB, src: "10.65.0.3", dst: "10.65.0.2", proto: 6, dport: 5432, state: "ESTABLISHED", want: sim.Accept},
		{name: "unselected web still uses its profile", chain: "FORWARD", in: ifClient, out: ifWeb, src: "10.65.0.3", dst: "10.65.0.1", proto: 6, dport: 22, want: sim.Accept},
		{name: "db egress is not governed", chain: "FORWARD", in: ifDB, out: "eth0", src: "10.65.0.2", dst: "8.8.8.8", proto: 17, dport: 53, want: sim.Accept},
		{name: "unknown workload interface", chain: "FORWARD", in: "cali0000000000", out: "eth0", src: "10.65.0.99", dst: "8.8.8.8", proto: 17, dport: 53, want: sim.Drop},
	})
}

// tiersPassAndLogOf is a security tier that logs TCP to web, denies nets
// and passes the red team on to the default tier, where web allows TCP 80.
func tiersPassAndLogOf(nets ...string) func(*policy.Snapshot) {
	return func(s *policy.Snapshot) {
		s.Tiers = append(s.Tiers, tier("security", 100, api.Deny))
		s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, gnp("security.gate", api.GlobalNetworkPolicySpec{
			Tier: "security", Selector: "app == 'web'",
			Ingress: []api.Rule{
				{Action: api.Log, Protocol: proto("TCP")},
				{Action: api.Deny, Source: api.EntityRule{Nets: nets}},
				{Action: api.Pass, Source: api.EntityRule{NamespaceSelector: "team == 'red'"}},
			},
		}))
		s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "web", api.NetworkPolicySpec{
			Selector: "app == 'web'",
			Ingress:  []api.Rule{{Action: api.Allow, Protocol: proto("TCP"), Destination: api.EntityRule{Ports: ports("80")}}},
		}))
	}
}

func TestTiersPassAndLog(t *testing.T) {
	s := base()
	tiersPassAndLogOf("192.0.2.0/24")(s)
	runProbes(t, s, []probe{
		{name: "passed then allowed by the default tier", chain: "FORWARD", in: ifClient, out: ifWeb, src: "10.65.0.3", dst: "10.65.0.1", proto: 6, dport: 80, want: sim.Accept, wantLogged: 1},
		{name: "passed then denied by the default tier", chain: "FORWARD", in: ifClient, out: ifWeb, src: "10.65.0.3", dst: "10.65.0.1", proto: 6, dport: 81, want: sim.Drop, wantLogged: 1},
		{name: "not passed: end of security tier", chain: "FORWARD", in: ifDB, out: ifWeb, src: "10.65.0.2", dst: "10.65.0.1", proto: 6, dport: 80, want: sim.Drop, wantLogged: 1},
		{name: "denied before pass", chain: "FORWARD", in: "eth0", out: ifWeb, src: "192.0.2.5", dst: "10.65.0.1", proto: 17, dport: 80, want: sim.Drop},
	})
}

func hostEndpointFailsafe(s *policy.Snapshot) {
	s.HostEndpoints = append(s.HostEndpoints, hep("node1-eth0", "eth0", map[string]string{"host": "node1"}, []string{"10.0.0.10"}))
	s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, gnp("deny-host", api.GlobalNetworkPolicySpec{
		Selector: "has(host)",
		Types:    []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress},
		Ingress:  []api.Rule{{Action: api.Deny}},
		Egress:   []api.Rule{{Action: api.Deny}},
	}))
}

func TestHostEndpointFailsafeStaysOpen(t *testing.T) {
	s := base()
	hostEndpointFailsafe(s)
	runProbes(t, s, []probe{
		{name: "ssh in is failsafe", chain: "INPUT", in: "eth0", src: "192.0.2.1", dst: "10.0.0.10", proto: 6, dport: 22, want: sim.Accept},
		{name: "kube-apiserver in is failsafe", chain: "INPUT", in: "eth0", src: "192.0.2.1", dst: "10.0.0.10", proto: 6, dport: 6443, want: sim.Accept},
		{name: "http in is denied", chain: "INPUT", in: "eth0", src: "192.0.2.1", dst: "10.0.0.10", proto: 6, dport: 80, want: sim.Drop},
		{name: "dns out is failsafe", chain: "OUTPUT", out: "eth0", src: "10.0.0.10", dst: "192.0.2.53", proto: 17, dport: 53, want: sim.Accept},
		{name: "https out is denied", chain: "OUTPUT", out: "eth0", src: "10.0.0.10", dst: "192.0.2.1", proto: 6, dport: 443, want: sim.Drop},
		{name: "other interfaces are not host endpoints", chain: "INPUT", in: "eth1", src: "192.0.2.1", dst: "10.0.0.10", proto: 6, dport: 80, want: sim.Accept},
		{name: "host to its workloads is not policed", chain: "OUTPUT", out: ifDB, src: "10.0.0.10", dst: "10.65.0.2", proto: 6, dport: 5432, want: sim.Accept},
	})
}

func endpointToHost(action string) func(*policy.Snapshot) {
	return func(s *policy.Snapshot) {
		s.Config.EndpointToHostAction = action
		s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "db-egress", api.NetworkPolicySpec{
			Selector: "app == 'db'",
			Egress:   []api.Rule{{Action: api.Allow, Protocol: proto("TCP")}},
		}))
	}
}

func TestEndpointToHostAction(t *testing.T) {
	for action, want := range map[string]sim.Verdict{"": sim.Drop, "DROP": sim.Drop, "ACCEPT": sim.Accept, "RETURN": sim.Accept} {
		t.Run("action "+action, func(t *testing.T) {
			s := base()
			endpointToHost(action)(s)
			runProbes(t, s, []probe{
				{name: "allowed by egress", chain: "INPUT", in: ifDB, src: "10.65.0.2", dst: "10.0.0.10", proto: 6, dport: 10250, want: want},
				{name: "denied by egress", chain: "INPUT", in: ifDB, src: "10.65.0.2", dst: "10.0.0.10", proto: 17, dport: 53, want: sim.Drop},
			})
		})
	}
}

func dualStack(s *policy.Snapshot) {
	s.Config.IPv6 = true
	s.WorkloadEndpoints = append(s.WorkloadEndpoints,
		wep("ns1", "dual", "cali5e6f7a8b9c0", map[string]string{"app": "dual"}, []string{"10.65.0.5", "fd00:65::5"}))
	s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "dual", api.NetworkPolicySpec{
		Selector: "app == 'dual'",
		Ingress: []api.Rule{
			{Action: api.Allow, Protocol: proto("ICMPv6"), ICMP: &api.ICMPFields{Type: ptr(128)}},
			{Action: api.Allow, Protocol: proto("ICMP"), ICMP: &api.ICMPFields{Type: ptr(8)}},
		},
		Egress: []api.Rule{{Action: api.Deny}},
	}))
}

func TestIPv6(t *testing.T) {
	s := base()
	dualStack(s)
	runProbes(t, s, []probe{
		{name: "echo request v6", chain: "FORWARD", in: "eth0", out: "cali5e6f7a8b9c0", src: "2001:db8::1", dst: "fd00:65::5", proto: 58, icmpType: 128, want: sim.Accept},
		{name: "echo request v4", chain: "FORWARD", in: "eth0", out: "cali5e6f7a8b9c0", src: "192.0.2.1", dst: "10.65.0.5", proto: 1, icmpType: 8, want: sim.Accept},
		{name: "tcp v6 denied", chain: "FORWARD", in: "eth0", out: "cali5e6f7a8b9c0", src: "2001:db8::1", dst: "fd00:65::5", proto: 6, dport: 80, want: sim.Drop},
		{name: "neighbour solicitation to the host despite egress deny", chain: "INPUT", in: "cali5e6f7a8b9c0", src: "fd00:65::5", dst: "fe80::1", proto: 58, icmpType: 135, want: sim.Accept},
		{name: "other traffic to the host follows egress", chain: "INPUT", in: "cali5e6f7a8b9c0", src: "fd00:65::5", dst: "fe80::1", proto: 6, dport: 80, want: sim.Drop},
	})
}

func natOutgoingPools(s *policy.Snapshot) {
	s.Config.IPv6 = true
	s.IPPools = []api.IPPool{pool("nat", "10.65.0.0/16", true), pool("other", "10.66.0.0/16", false), pool("v6", "fd00:65::/64", false)}
}

func TestNATOutgoing(t *testing.T) {
	s := base()
	natOutgoingPools(s)
	runProbes(t, s, []probe{
		{name: "pool to internet is masqueraded", postrouting: true, out: "eth0", src: "10.65.0.1", dst: "8.8.8.8", proto: 6, dport: 443, wantNAT: "MASQUERADE"},
		{name: "pool to pool is not", postrouting: true, out: "eth0", src: "10.65.0.1", dst: "10.66.3.4", proto: 6, dport: 443, wantNAT: ""},
		{name: "non-nat pool is not", postrouting: true, out: "eth0", src: "10.66.0.1", dst: "8.8.8.8", proto: 6, dport: 443, wantNAT: ""},
		{name: "v6 pool without natOutgoing is not", postrouting: true, out: "eth0", src: "fd00:65::1", dst: "2001:db8::1", proto: 6, dport: 443, wantNAT: ""},
	})
}

// TestUnusablePool: a pool written behind validation is left out of the
// pool sets (so its traffic is not masqueraded) and reported once, by
// name, like every other consumer of pools leaves it out.
func unusablePool(s *policy.Snapshot) {
	bad := pool("bad", "10.66.0.0/16", true)
	bad.Spec.BlockSize = 50
	s.IPPools = []api.IPPool{pool("nat", "10.65.0.0/16", true), bad}
}

func TestUnusablePool(t *testing.T) {
	s := base()
	unusablePool(s)
	res := policy.Compile(s)
	wantProblem := "IPPool bad: blockSize 50 is out of range: IPv4 block sizes are 20-32; ignored"
	if !slices.Equal(res.Problems, []string{wantProblem}) {
		t.Errorf("problems %q, want [%q]", res.Problems, wantProblem)
	}
	for _, set := range res.V4.IPSets {
		if (set.ID == "masq-ipam-pools" || set.ID == "network-ip-pools") && !slices.Equal(set.Members, []string{"10.65.0.0/16"}) {
			t.Errorf("IP set %s members %q, want only the usable pool", set.Name, set.Members)
		}
	}
	runProbes(t, s, []probe{
		{name: "usable pool is masqueraded", postrouting: true, out: "eth0", src: "10.65.0.1", dst: "8.8.8.8", proto: 6, dport: 443, wantNAT: "MASQUERADE"},
		{name: "unusable pool is not", postrouting: true, out: "eth0", src: "10.66.0.1", dst: "8.8.8.8", proto: 6, dport: 443, wantNAT: ""},
	})
}
