package policy_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/sim"
)

// walk is one packet's way through the host (all tables) and what a user
// expects of it.
type walk struct {
	name     string
	path     sim.Path
	in, out  string
	src, dst string
	proto    uint8
	sport    uint16 // 40000 when 0
	dport    uint16
	icmpType uint8
	state    string
	dnat     string // "addr:port" the nat table sends the packet to
	want     sim.Verdict
	// decidedIn is where a dropped packet must be dropped ("raw
	// PREROUTING", "filter FORWARD", ...); unchecked when empty.
	decidedIn string
	untracked bool
	// notVia: no rule of this "table:chain" may match on the way.
	notVia string
}

// The host endpoint most cases use: eth0, 10.0.0.10, labelled host=node1.
const hostIP = "10.0.0.10"

func withHostEndpoint(s *policy.Snapshot) *policy.Snapshot {
	s.HostEndpoints = append(s.HostEndpoints, hep("node1-eth0", "eth0", map[string]string{"host": "node1"}, []string{hostIP}))
	return s
}

func runWalks(t *testing.T, s *policy.Snapshot, walks []walk) {
	t.Helper()
	res := policy.Compile(s)
	checkConsistent(t, res)
	if len(res.Problems) > 0 {
		t.Fatalf("problems: %v", res.Problems)
	}
	for _, w := range walks {
		t.Run(w.name, func(t *testing.T) {
			src := netip.MustParseAddr(w.src)
			f, sets := simFamily(t, res, src)
			sets = sets.WithRoutes(sim.RoutesFor(s, "eth0"))
			sport := w.sport
			if sport == 0 {
				sport = 40000
			}
			h := sim.Hop{Path: w.path, In: w.in, Out: w.out}
			if w.dnat != "" {
				h.DNAT = netip.MustParseAddrPort(w.dnat)
			}
			got, err := sim.Walk(f, sets, h, sim.Packet{Src: src, Dst: netip.MustParseAddr(w.dst), Proto: w.proto,
				SrcPort: sport, DstPort: w.dport, ICMPType: w.icmpType, State: w.state})
			if err != nil {
				t.Fatal(err)
			}
			checkExplainHop(t, s, res, h, sim.Packet{Src: src, Dst: netip.MustParseAddr(w.dst), Proto: w.proto,
				SrcPort: sport, DstPort: w.dport, ICMPType: w.icmpType, State: w.state})
			trace := strings.Join(got.Trace(), " ")
			if got.Verdict != w.want {
				t.Fatalf("verdict %v (in %s), want %v; trace %s", got.Verdict, got.DecidedIn(), w.want, trace)
			}
			if w.want != sim.Accept && w.decidedIn != "" && got.DecidedIn() != w.decidedIn {
				t.Errorf("dropped in %s, want %s; trace %s", got.DecidedIn(), w.decidedIn, trace)
			}
			if w.notVia != "" && strings.Contains(trace, w.notVia+"#") {
				t.Errorf("went through %s; trace %s", w.notVia, trace)
			}
			if got.Untracked != w.untracked {
				t.Errorf("untracked = %v, want %v; trace %s", got.Untracked, w.untracked, trace)
			}
		})
	}
}

func TestUntrackedPolicy(t *testing.T) {
	s := withHostEndpoint(base())
	s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies,
		// A memcached port the host serves untracked, both ways, and a
		// source it never wants to hear from, whatever normal policy says.
		gnp("untracked", api.GlobalNetworkPolicySpec{
			Selector: "host == 'node1'", DoNotTrack: true, ApplyOnForward: true,
			Types: []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress},
			Ingress: []api.Rule{
				{Action: api.Deny, Source: api.EntityRule{Nets: []string{"192.0.2.0/24"}}},
				{Action: api.Allow, Protocol: proto("TCP"), Destination: api.EntityRule{Ports: ports("11211")}},
			},
			Egress: []api.Rule{{Action: api.Allow, Protocol: proto("TCP"), Destination: api.EntityRule{Nets: []string{"198.51.100.0/24"}, Ports: ports("11211")}}},
		}),
		// Normal policy: deny everything but SSH out of the failsafe
		// range (2222), and allow everything from 192.0.2.0/24.
		gnp("normal", api.GlobalNetworkPolicySpec{
			Selector: "host == 'node1'",
			Types:    []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress},
			Ingress: []api.Rule{
				{Action: api.Allow, Source: api.EntityRule{Nets: []string{"192.0.2.0/24"}}},
				{Action: api.Allow, Protocol: proto("TCP"), Destination: api.EntityRule{Ports: ports("2222")}},
			},
		}),
	)
	runWalks(t, s, []walk{
		// The filter table has no conntrack entry and a default deny for
		// it: only the accept mark from raw lets it in.
		{name: "untracked allow in passes the filter table's default deny", path: sim.Input, in: "eth0",
			src: "203.0.113.5", dst: hostIP, proto: 6, dport: 11211, want: sim.Accept, untracked: true},
		{name: "untracked allow out passes too", path: sim.Output, out: "eth0",
			src: hostIP, dst: "198.51.100.7", proto: 6, dport: 11211, want: sim.Accept, untracked: true},
		// Untracked traffic has no reply direction: the reply of an
		// untracked connection needs an untracked allow of its own.
		{name: "reply without its own untracked allow is dropped", path: sim.Output, out: "eth0",
			src: hostIP, dst: "203.0.113.5", proto: 6, sport: 11211, dport: 40000, want: sim.Drop, decidedIn: "filter OUTPUT"},
		{name: "untracked deny drops before any filter policy", path: sim.Input, in: "eth0",
			src: "192.0.2.9", dst: hostIP, proto: 6, dport: 2222, want: sim.Drop, decidedIn: "raw PREROUTING"},
		{name: "undecided by untracked policy: normal policy applies, tracked", path: sim.Input, in: "eth0",
			src: "203.0.113.5", dst: hostIP, proto: 6, dport: 2222, want: sim.Accept},
		{name: "undecided and denied by normal policy", path: sim.Input, in: "eth0",
			src: "203.0.113.5", dst: hostIP, proto: 6, dport: 80, want: sim.Drop, decidedIn: "filter INPUT"},
		{name: "failsafe ssh is tracked whatever untracked policy says", path: sim.Input, in: "eth0",
			src: "192.0.2.9", dst: hostIP, proto: 6, dport: 22, want: sim.Accept},
		{name: "workload traffic skips untracked policy", path: sim.Forward, in: ifWeb, out: "eth0",
			src: "10.65.0.1", dst: "192.0.2.9", proto: 6, dport: 443, want: sim.Accept},
		{name: "other interfaces are not host endpoints", path: sim.Input, in: "eth1",
			src: "192.0.2.9", dst: hostIP, proto: 6, dport: 80, want: sim.Accept},
	})
}

func TestPreDNATPolicy(t *testing.T) {
	s := withHostEndpoint(base())
	s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies,
		gnp("nodeports", api.GlobalNetworkPolicySpec{
			Selector: "host == 'node1'", PreDNAT: true, ApplyOnForward: true,
			Ingress: []api.Rule{
				{Action: api.Allow, Source: api.EntityRule{Nets: []string{"198.51.100.0/24"}}},
				{Action: api.Deny, Protocol: proto("TCP"), Destination: api.EntityRule{Ports: ports("30000:32767")}},
			},
		}),
		// A normal host endpoint policy cannot do this: by the time the
		// filter table sees the NodePort connection it goes to the pod's
		// address and port, and is routed, not for the host.
		gnp("normal-nodeport-deny", api.GlobalNetworkPolicySpec{
			Selector: "host == 'node1'",
			Ingress: []api.Rule{
				{Action: api.Deny, Protocol: proto("TCP"), Destination: api.EntityRule{Ports: ports("30000:32767")}},
				{Action: api.Allow, Protocol: proto("TCP"), Destination: api.EntityRule{Ports: ports("443")}},
			},
		}),
	)
	// kube-proxy sends NodePort 30080 on the host to db's 5432.
	const nodePort, backend = 30080, "10.65.0.2:5432"
	runWalks(t, s, []walk{
		{name: "NodePort denied before DNAT", path: sim.Forward, in: "eth0", out: ifDB,
			src: "203.0.113.5", dst: hostIP, proto: 6, dport: nodePort, dnat: backend, want: sim.Drop, decidedIn: "mangle PREROUTING"},
		{name: "NodePort allowed for the allowed source", path: sim.Forward, in: "eth0", out: ifDB,
			src: "198.51.100.7", dst: hostIP, proto: 6, dport: nodePort, dnat: backend, want: sim.Accept},
		{name: "established NodePort traffic is not judged again", path: sim.Forward, in: "eth0", out: ifDB,
			src: "203.0.113.5", dst: hostIP, proto: 6, dport: nodePort, dnat: backend, state: "ESTABLISHED", want: sim.Accept},
		// preDNAT allow skips normal ingress policy of the host endpoint.
		{name: "preDNAT allow skips normal host policy", path: sim.Input, in: "eth0",
			src: "198.51.100.7", dst: hostIP, proto: 6, dport: 80, want: sim.Accept},
		{name: "undecided by preDNAT policy: normal policy applies", path: sim.Input, in: "eth0",
			src: "203.0.113.5", dst: hostIP, proto: 6, dport: 80, want: sim.Drop, decidedIn: "filter INPUT"},
		{name: "undecided and allowed by normal policy", path: sim.Input, in: "eth0",
			src: "203.0.113.5", dst: hostIP, proto: 6, dport: 443, want: sim.Accept},
		{name: "failsafe ssh stays open", path: sim.Input, in: "eth0",
			src: "203.0.113.5", dst: hostIP, proto: 6, dport: 22, want: sim.Accept},
	})

	// Without the preDNAT policy, the normal one does not stop the
	// NodePort: the point of preDNAT.
	s.GlobalNetworkPolicies = slices.DeleteFunc(s.GlobalNetworkPolicies, func(p api.GlobalNetworkPolicy) bool { return p.Name == "nodeports" })
	runWalks(t, s, []walk{
		{name: "normal policy does not see the NodePort", path: sim.Forward, in: "eth0", out: ifDB,
			src: "203.0.113.5", dst: hostIP, proto: 6, dport: nodePort, dnat: backend, want: sim.Accept},
	})
}

func TestApplyOnForward(t *testing.T) {
	s := withHostEndpoint(base())
	s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies,
		gnp("host-only", api.GlobalNetworkPolicySpec{
			Selector: "host == 'node1'", Order: ptr(1.0),
			Ingress: []api.Rule{{Action: api.Deny, Source: api.EntityRule{Nets: []string{"198.51.100.0/24"}}}},
		}),
		gnp("forward-too", api.GlobalNetworkPolicySpec{
			Selector: "host == 'node1'", Order: ptr(2.0), ApplyOnForward: true,
			Types: []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress},
			Ingress: []api.Rule{
				{Action: api.Deny, Source: api.EntityRule{Nets: []string{"192.0.2.0/24"}}},
				{Action: api.Allow},
			},
			Egress: []api.Rule{
				{Action: api.Deny, Destination: api.EntityRule{Nets: []string{"203.0.113.0/24"}}},
				{Action: api.Allow},
			},
		}),
	)
	runWalks(t, s, []walk{
		{name: "applyOnForward ingress policy stops routed traffic", path: sim.Forward, in: "eth0", out: ifDB,
			src: "192.0.2.9", dst: "10.65.0.2", proto: 6, dport: 5432, want: sim.Drop, decidedIn: "filter FORWARD"},
		{name: "policy without applyOnForward does not", path: sim.Forward, in: "eth0", out: ifDB,
			src: "198.51.100.7", dst: "10.65.0.2", proto: 6, dport: 5432, want: sim.Accept},
		{name: "but does police traffic to the host", path: sim.Input, in: "eth0",
			src: "198.51.100.7", dst: hostIP, proto: 6, dport: 80, want: sim.Drop, decidedIn: "filter INPUT"},
		{name: "applyOnForward ingress policy polices the host too", path: sim.Input, in: "eth0",
			src: "192.0.2.9", dst: hostIP, proto: 6, dport: 80, want: sim.Drop, decidedIn: "filter INPUT"},
		{name: "applyOnForward egress policy stops routed traffic out", path: sim.Forward, in: ifWeb, out: "eth0",
			src: "10.65.0.1", dst: "203.0.113.5", proto: 6, dport: 443, want: sim.Drop, decidedIn: "filter FORWARD"},
		{name: "and allows the rest", path: sim.Forward, in: ifWeb, out: "eth0",
			src: "10.65.0.1", dst: "8.8.8.8", proto: 6, dport: 443, want: sim.Accept},
		{name: "workload policy still applies after host endpoint policy allowed", path: sim.Forward, in: "eth0", out: ifDB,
			src: "8.8.8.8", dst: "10.65.0.2", proto: 6, dport: 5432, want: sim.Accept},
		{name: "traffic routed between other interfaces is not policed", path: sim.Forward, in: "eth1", out: "eth2",
			src: "192.0.2.9", dst: "203.0.113.5", proto: 6, dport: 443, want: sim.Accept},
	})

	// An endpoint no applyOnForward policy selects lets routed traffic
	// through whatever its other policy says.
	s.GlobalNetworkPolicies = s.GlobalNetworkPolicies[:len(s.GlobalNetworkPolicies)-1]
	runWalks(t, s, []walk{
		{name: "without applyOnForward policy, routed traffic passes", path: sim.Forward, in: "eth0", out: ifDB,
			src: "192.0.2.9", dst: "10.65.0.2", proto: 6, dport: 5432, want: sim.Accept},
	})
}

// TestDNATedHostEgress: a connection the host makes to a Service address
// that the nat table sends to a backend elsewhere leaves by a host
// endpoint whose egress policy filter OUTPUT cannot apply (the kernel has
// not rerouted the packet yet there); mangle POSTROUTING applies it.
func TestDNATedHostEgress(t *testing.T) {
	s := withHostEndpoint(base())
	s.Config.DenyAction = "REJECT" // mangle can only drop
	s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies,
		gnp("host-egress", api.GlobalNetworkPolicySpec{
			Selector: "host == 'node1'", Types: []api.PolicyType{api.PolicyTypeEgress},
			Egress: []api.Rule{
				{Action: api.Deny, Destination: api.EntityRule{Nets: []string{"203.0.113.0/24"}}},
				{Action: api.Allow, Protocol: proto("TCP"), Destination: api.EntityRule{Nets: []string{"198.51.100.0/24"}}},
			},
		}),
	)
	const svc = "10.96.0.10"
	const mangleDispatch = "mangle:cali-to-host-endpoint"
	runWalks(t, s, []walk{
		{name: "DNAT-ed to a denied backend: dropped in mangle POSTROUTING", path: sim.Output, out: "eth0",
			src: hostIP, dst: svc, proto: 6, dport: 80, dnat: "203.0.113.5:8080", want: sim.Drop, decidedIn: "mangle POSTROUTING"},
		{name: "DNAT-ed to an allowed backend: allowed", path: sim.Output, out: "eth0",
			src: hostIP, dst: svc, proto: 6, dport: 80, dnat: "198.51.100.7:8080", want: sim.Accept},
		{name: "DNAT-ed to a backend no rule allows: the tier's default deny", path: sim.Output, out: "eth0",
			src: hostIP, dst: svc, proto: 17, dport: 80, dnat: "198.51.100.7:8080", want: sim.Drop, decidedIn: "mangle POSTROUTING"},
		{name: "established DNAT-ed connection flows", path: sim.Output, out: "eth0",
			src: hostIP, dst: svc, proto: 6, dport: 80, dnat: "203.0.113.5:8080", state: "ESTABLISHED", want: sim.Accept},
		{name: "failsafe port stays open through DNAT", path: sim.Output, out: "eth0",
			src: hostIP, dst: svc, proto: 6, dport: 443, dnat: "203.0.113.5:6443", want: sim.Accept},
		{name: "failsafe dns stays open through DNAT", path: sim.Output, out: "eth0",
			src: hostIP, dst: svc, proto: 17, dport: 53, dnat: "203.0.113.53:53", want: sim.Accept},
		// Not DNAT-ed: filter OUTPUT decides (with REJECT), as before.
		{name: "not DNAT-ed: denied in filter OUTPUT", path: sim.Output, out: "eth0",
			src: hostIP, dst: "203.0.113.5", proto: 6, dport: 8080, want: sim.Reject, decidedIn: "filter OUTPUT", notVia: mangleDispatch},
		{name: "not DNAT-ed: allowed in filter OUTPUT, mangle leaves it alone", path: sim.Output, out: "eth0",
			src: hostIP, dst: "198.51.100.7", proto: 6, dport: 8080, want: sim.Accept, notVia: mangleDispatch},
		// Routed NodePort traffic is the filter FORWARD chain's business
		// (applyOnForward policy); its accept bit skips mangle's check.
		{name: "routed DNAT-ed traffic is not judged again", path: sim.Forward, in: "eth1", out: "eth0",
			src: "192.0.2.9", dst: hostIP, proto: 6, dport: 30080, dnat: "203.0.113.5:8080", want: sim.Accept, notVia: mangleDispatch},
		{name: "DNAT-ed to a local workload: not host endpoint egress", path: sim.Output, out: ifWeb,
			src: hostIP, dst: svc, proto: 6, dport: 80, dnat: "10.65.0.1:80", want: sim.Accept},
		{name: "DNAT-ed out of an interface without an endpoint", path: sim.Output, out: "eth1",
			src: hostIP, dst: svc, proto: 6, dport: 80, dnat: "203.0.113.5:8080", want: sim.Accept},
	})

	// The "*" endpoint covers every interface but workloads'.
	s = base()
	s.HostEndpoints = append(s.HostEndpoints, hep("node1-all", "*", map[string]string{"host": "node1"}, nil))
	s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies,
		gnp("deny-egress", api.GlobalNetworkPolicySpec{Selector: "host == 'node1'", Types: []api.PolicyType{api.PolicyTypeEgress}}))
	runWalks(t, s, []walk{
		{name: "wildcard: DNAT-ed out of any interface is policed", path: sim.Output, out: "eth1",
			src: hostIP, dst: svc, proto: 6, dport: 80, dnat: "203.0.113.5:8080", want: sim.Drop, decidedIn: "mangle POSTROUTING"},
		{name: "wildcard: DNAT-ed to a local workload is not", path: sim.Output, out: ifWeb,
			src: hostIP, dst: svc, proto: 6, dport: 80, dnat: "10.65.0.1:80", want: sim.Accept},
		{name: "wildcard: failsafe stays open", path: sim.Output, out: "eth1",
			src: hostIP, dst: svc, proto: 6, dport: 179, dnat: "203.0.113.5:179", want: sim.Accept},
	})

	// Without host endpoints there is nothing to police: the chain is not
	// hooked, and DNAT-ed traffic leaves freely.
	s = base()
	res := policy.Compile(s)
	for _, f := range []*policy.Family{res.V4} {
		if len(f.Mangle.Hooks) != 0 || len(f.Mangle.Chains) != 0 {
			t.Errorf("mangle without host endpoints: hooks %v, %d chains; want none", f.Mangle.Hooks, len(f.Mangle.Chains))
		}
	}
}

// TestFailsafeSurvivesDenyAllInEveryTable puts a deny-all host endpoint
// policy in each table in turn: the failsafe ports must stay open, and
// the deny-all must be what drops the rest.
func TestFailsafeSurvivesDenyAllInEveryTable(t *testing.T) {
	for _, tc := range []struct {
		kind           string
		spec           api.GlobalNetworkPolicySpec
		inTable        string
		outTable       string // "" when the kind has no egress
		dnatOutTable   string // where DNAT-ed egress is dropped ("": raw, which sees the original destination, decides)
		trackedReplies bool
	}{
		{"doNotTrack", api.GlobalNetworkPolicySpec{DoNotTrack: true, ApplyOnForward: true,
			Ingress: []api.Rule{{Action: api.Deny}}, Egress: []api.Rule{{Action: api.Deny}}}, "raw PREROUTING", "raw OUTPUT", "", true},
		{"preDNAT", api.GlobalNetworkPolicySpec{PreDNAT: true, ApplyOnForward: true,
			Ingress: []api.Rule{{Action: api.Deny}}}, "mangle PREROUTING", "", "", true},
		{"normal", api.GlobalNetworkPolicySpec{ApplyOnForward: true,
			Ingress: []api.Rule{{Action: api.Deny}}, Egress: []api.Rule{{Action: api.Deny}}}, "filter INPUT", "filter OUTPUT", "mangle POSTROUTING", true},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			s := withHostEndpoint(base())
			tc.spec.Selector = "host == 'node1'"
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, gnp("deny-all", tc.spec))
			walks := []walk{
				{name: "ssh in", path: sim.Input, in: "eth0", src: "192.0.2.1", dst: hostIP, proto: 6, dport: 22, want: sim.Accept},
				{name: "kube-apiserver in", path: sim.Input, in: "eth0", src: "192.0.2.1", dst: hostIP, proto: 6, dport: 6443, want: sim.Accept},
				{name: "http in", path: sim.Input, in: "eth0", src: "192.0.2.1", dst: hostIP, proto: 6, dport: 80, want: sim.Drop, decidedIn: tc.inTable},
				// The replies of the host's failsafe connections: raw lets
				// them through (tracked), the rest needs conntrack.
				{name: "ssh reply out", path: sim.Output, out: "eth0", src: hostIP, dst: "192.0.2.1", proto: 6, sport: 22, dport: 40000,
					state: "ESTABLISHED", want: sim.Accept},
				{name: "dns reply in", path: sim.Input, in: "eth0", src: "192.0.2.53", dst: hostIP, proto: 17, sport: 53, dport: 40000,
					state: "ESTABLISHED", want: sim.Accept},
			}
			if tc.outTable != "" {
				walks = append(walks,
					walk{name: "dns out", path: sim.Output, out: "eth0", src: hostIP, dst: "192.0.2.53", proto: 17, dport: 53, want: sim.Accept},
					walk{name: "bgp out", path: sim.Output, out: "eth0", src: hostIP, dst: "192.0.2.2", proto: 6, dport: 179, want: sim.Accept},
					walk{name: "https out", path: sim.Output, out: "eth0", src: hostIP, dst: "192.0.2.1", proto: 6, dport: 443, want: sim.Drop, decidedIn: tc.outTable},
				)
			}
			if tc.dnatOutTable != "" {
				walks = append(walks,
					walk{name: "DNAT-ed kube-apiserver out", path: sim.Output, out: "eth0", src: hostIP, dst: "10.96.0.1", proto: 6, dport: 443,
						dnat: "192.0.2.2:6443", want: sim.Accept},
					walk{name: "DNAT-ed https out", path: sim.Output, out: "eth0", src: hostIP, dst: "10.96.0.2", proto: 6, dport: 443,
						dnat: "192.0.2.1:443", want: sim.Drop, decidedIn: tc.dnatOutTable},
				)
			}
			runWalks(t, s, walks)
		})
	}
}

// TestUnsupportedMatchesFailClosed: a rule this dataplane cannot enforce
// is reported by policy and rule, and never makes the policy allow more
// than written.
func TestUnsupportedMatchesFailClosed(t *testing.T) {
	svc := &api.ServiceMatch{Name: "kube-dns", Namespace: "kube-system"}
	for _, tc := range []struct {
		name    string
		egress  []api.Rule
		problem string
		// want: verdicts for db's egress to 8.8.8.8:53/udp and :443/tcp.
		dns, https sim.Verdict
	}{
		{"deny to a service denies more", []api.Rule{{Action: api.Deny, Destination: api.EntityRule{Services: svc}}, {Action: api.Allow}},
			"NetworkPolicy ns1/p egress rule 0: destination.services (Kubernetes Service endpoints) is not supported: the rule is enforced without it, so it denies more than written",
			sim.Drop, sim.Drop},
		{"deny with more criteria keeps them", []api.Rule{{Action: api.Deny, Protocol: proto("UDP"), Destination: api.EntityRule{Services: svc}}, {Action: api.Allow}},
			"NetworkPolicy ns1/p egress rule 0: destination.services (Kubernetes Service endpoints) is not supported: the rule is enforced without it, so it denies more than written",
			sim.Drop, sim.Accept},
		{"allow to a service is left out", []api.Rule{{Action: api.Allow, Destination: api.EntityRule{Services: svc}}, {Action: api.Allow, Protocol: proto("TCP")}},
			"NetworkPolicy ns1/p egress rule 0: left out: destination.services (Kubernetes Service endpoints) is not supported",
			sim.Drop, sim.Accept},
		{"allow with http is left out", []api.Rule{{Action: api.Allow, Protocol: proto("TCP"), HTTP: &api.HTTPMatch{Methods: []string{"GET"}}}, {Action: api.Allow, Protocol: proto("UDP")}},
			"NetworkPolicy ns1/p egress rule 0: left out: http (application-layer policy) is not supported",
			sim.Accept, sim.Drop},
		{"pass to a service denies", []api.Rule{{Action: api.Pass, Protocol: proto("UDP"), Destination: api.EntityRule{Services: svc}}, {Action: api.Allow}},
			"NetworkPolicy ns1/p egress rule 0: destination.services (Kubernetes Service endpoints) is not supported: the rule is enforced as a Deny without it (passing more, or not at all, could allow what a tier denies)",
			sim.Drop, sim.Accept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "p", api.NetworkPolicySpec{Selector: "app == 'db'", Egress: tc.egress}))
			res := policy.Compile(s)
			checkConsistent(t, res)
			if !slices.Contains(res.Problems, tc.problem) {
				t.Errorf("problems %q\ndo not contain %q", res.Problems, tc.problem)
			}
			sets := mustSets(t, res.V4)
			sets = sets.WithRoutes(sim.RoutesFor(s, "eth0"))
			for _, p := range []struct {
				proto uint8
				port  uint16
				want  sim.Verdict
			}{{17, 53, tc.dns}, {6, 443, tc.https}} {
				hop := sim.Hop{Path: sim.Forward, In: ifDB, Out: "eth0"}
				pkt := sim.Packet{Src: netip.MustParseAddr("10.65.0.2"), Dst: netip.MustParseAddr("8.8.8.8"), Proto: p.proto, SrcPort: 40000, DstPort: p.port}
				got, err := sim.Walk(res.V4, sets, hop, pkt)
				if err != nil {
					t.Fatal(err)
				}
				checkExplainHop(t, s, res, hop, pkt)
				if got.Verdict != p.want {
					t.Errorf("proto %d port %d: %v, want %v; trace %v", p.proto, p.port, got.Verdict, p.want, got.Trace())
				}
			}
		})
	}
}
