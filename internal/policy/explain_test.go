package policy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/explain"
	"github.com/projectcalico/calico-node/internal/policy/sim"
)

// checkExplainHop explains pkt's way h through the node s describes and
// checks the explanation against the simulator's walk of the same
// packet: the same verdict, every rule it cites is the compiled rule of
// that chain and number with its hash, it cites as many Log rules as
// fired, and a dropped packet's last step cites the very rule that
// dropped it. It returns the explanation.
func checkExplainHop(t *testing.T, s *policy.Snapshot, res *policy.Result, h sim.Hop, pkt sim.Packet) explain.Hop {
	t.Helper()
	f, sets := simFamily(t, res, pkt.Src)
	want, err := sim.Walk(f, sets.WithRoutes(sim.RoutesFor(s, "eth0")), h, pkt)
	if err != nil {
		t.Fatal(err)
	}
	got, err := explain.ExplainHop(s, res, h, pkt, "eth0")
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	checkExplainedHop(t, f, got, want)
	return got
}

// checkExplainedHop checks an explained hop against the simulator's walk.
func checkExplainedHop(t *testing.T, f *policy.Family, got explain.Hop, want sim.WalkResult) {
	t.Helper()
	var text strings.Builder
	(&explain.Explanation{Hops: []explain.Hop{got}}).WriteText(&text)
	wantVerdict := explain.Allow
	if want.Verdict != sim.Accept {
		wantVerdict = explain.Deny
	}
	if got.Verdict != wantVerdict {
		t.Fatalf("explain says %s, the simulator %v (trace %v)\n%s", got.Verdict, want.Verdict, want.Trace(), text.String())
	}
	logs := 0
	var last *explain.IptablesRule
	for _, sec := range got.Sections {
		if got.Verdict == explain.Allow && sec.Verdict == explain.Deny {
			t.Errorf("allowed, but section %s %s says Deny\n%s", sec.Endpoint, sec.Direction, text.String())
		}
		for _, st := range sec.Steps {
			if st.Kind == explain.StepRule && st.Action == string(api.Log) {
				logs++
			}
			for i := range st.Rules {
				r := &st.Rules[i]
				checkCitedRule(t, f, r)
				last = r
			}
		}
	}
	checkBlocks(t, got, text.String())
	if logs != want.Logged {
		t.Errorf("explanation cites %d Log rules, %d fired\n%s", logs, want.Logged, text.String())
	}
	if want.Verdict == sim.Accept {
		return
	}
	final := want.Steps[len(want.Steps)-1]
	hits := final.Result.Hits
	drop := hits[len(hits)-1]
	if last == nil || last.Table != final.Table || last.Chain != drop.Chain || last.Number != drop.Index+1 {
		t.Errorf("dropped by %s %s #%d, but the explanation ends with %+v\n%s", final.Table, drop.Chain, drop.Index+1, last, text.String())
	}
	sec := got.Sections[len(got.Sections)-1]
	if sec.Verdict != explain.Deny {
		t.Errorf("dropped, but the last section (%s %s) says %s\n%s", sec.Endpoint, sec.Direction, sec.Verdict, text.String())
	}
}

// checkBlocks checks that each policy or profile the explanation enters
// ends either with the rule that decided (Allow, Deny, Pass) or with "no
// rule matched", never both and never neither, unless the packet's walk
// ended inside it.
func checkBlocks(t *testing.T, h explain.Hop, text string) {
	t.Helper()
	for _, sec := range h.Sections {
		open, decided, noRule := false, false, false
		closeBlock := func(at int) {
			if open && !decided && !noRule {
				t.Errorf("step %d: a policy or profile ends without a deciding rule or \"no rule matched\"\n%s", at, text)
			}
			open, decided, noRule = false, false, false
		}
		for i, st := range sec.Steps {
			switch st.Kind {
			case explain.StepPolicy, explain.StepProfile:
				closeBlock(i)
				open = true
			case explain.StepRule:
				if st.Action != string(api.Log) {
					decided = true
				}
			case explain.StepNoRule:
				if decided || noRule {
					t.Errorf("step %d: \"no rule matched\" after a rule decided\n%s", i, text)
				}
				noRule = true
			default:
				closeBlock(i)
			}
		}
		if sec.Verdict != explain.Deny || !decided {
			// A walk that ended in a policy ends with its deciding rule.
			closeBlock(len(sec.Steps))
		}
	}
}

// checkCitedRule checks that r is the compiled rule it says it is.
func checkCitedRule(t *testing.T, f *policy.Family, r *explain.IptablesRule) {
	t.Helper()
	var tbl *policy.Table
	for _, tb := range f.Tables() {
		if tb.Name == r.Table {
			tbl = tb
		}
	}
	if tbl == nil {
		t.Fatalf("cites table %s, which is not compiled", r.Table)
	}
	c := tbl.Chain(r.Chain)
	if c == nil {
		t.Fatalf("cites %s %s, which is not compiled", r.Table, r.Chain)
	}
	if r.Number < 1 || r.Number > len(c.Rules) {
		t.Fatalf("cites %s %s #%d; the chain has %d rules", r.Table, r.Chain, r.Number, len(c.Rules))
	}
	if want := c.Lines()[r.Number-1]; r.Text != want {
		t.Errorf("cites %s %s #%d as %q, compiled %q", r.Table, r.Chain, r.Number, r.Text, want)
	}
	if want := policy.HashPrefix + c.Hashes()[r.Number-1]; r.Hash != want || !strings.Contains(r.Text, want) {
		t.Errorf("cites %s %s #%d with hash %s, compiled %s", r.Table, r.Chain, r.Number, r.Hash, want)
	}
}

// snapshotsOf is the explain.SnapshotFunc of a cluster: s as each node's
// agent would see it.
func snapshotsOf(s *policy.Snapshot) explain.SnapshotFunc {
	return func(node string) (*policy.Snapshot, error) {
		c := *s
		c.Node = node
		return &c, nil
	}
}

// endsOf are the ends a cluster offers: every workload and host
// endpoint, this node's host, and outside addresses that some policies
// name and some do not.
func endsOf(t *testing.T, s *policy.Snapshot) []explain.End {
	t.Helper()
	var out []explain.End
	for _, w := range s.WorkloadEndpoints {
		if len(w.Spec.IPNetworks) == 0 || w.Spec.InterfaceName == "" {
			continue
		}
		e, err := explain.Resolve(s, w.Namespace+"/"+w.Spec.Pod)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	for _, h := range s.HostEndpoints {
		e, err := explain.Resolve(s, "hostendpoint/"+h.Name)
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Addrs) > 0 {
			out = append(out, e)
		}
	}
	out = append(out, explain.End{Kind: explain.KindNode, Name: node, Node: node, Addrs: []netip.Addr{hostV4, hostV6}})
	for _, a := range []string{"192.0.2.5", "198.51.100.7", "203.0.113.9", "2001:db8::1"} {
		e, err := explain.Resolve(s, a)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// packetsFor are the protocols and ports the golden cases' policies use.
var packetsFor = []struct {
	proto uint8
	port  uint16
	icmp  uint8
}{{6, 80, 0}, {6, 5432, 0}, {6, 22, 0}, {6, 9100, 0}, {17, 53, 0}, {1, 0, 8}, {58, 0, 128}}

// TestExplainGoldenCases explains every pair of ends of every golden case
// for the protocols and ports their policies use, and checks each node's
// part against the simulator's walk of the same packet.
func TestExplainGoldenCases(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.edit(s)
			snaps := snapshotsOf(s)
			compiled := map[string]*policy.Result{}
			n := 0
			for _, from := range endsOf(t, s) {
				for _, to := range endsOf(t, s) {
					for _, p := range packetsFor {
						req := explain.Request{From: from, To: to, Protocol: p.proto, DstPort: p.port, ICMPType: p.icmp}
						ex, err := explain.Explain(req, snaps)
						if err != nil {
							// Ends without a common family or node, the same
							// host twice: nothing to explain.
							continue
						}
						if src := netip.MustParseAddr(ex.Packet.Source); (p.proto == 1 && src.Is6()) || (p.proto == 58 && src.Is4()) {
							continue
						}
						n++
						checkExplanation(t, s, compiled, ex)
					}
				}
			}
			if n < 50 {
				t.Errorf("only %d packets explained", n)
			}
		})
	}
}

// checkExplanation checks every hop of ex against the simulator and the
// overall verdict against the hops'.
func checkExplanation(t *testing.T, s *policy.Snapshot, compiled map[string]*policy.Result, ex *explain.Explanation) {
	t.Helper()
	if got := checkHops(t, s, compiled, ex.Packet, ex.Hops, nil); ex.Verdict != got {
		t.Errorf("%s -> %s: verdict %s, hops say %s", ex.From.Name, ex.To.Name, ex.Verdict, got)
	}
	if (ex.Reply != nil) != (ex.Verdict == explain.Allow) {
		t.Fatalf("%s -> %s: verdict %s, reply %+v: replies are explained exactly for allowed packets", ex.From.Name, ex.To.Name, ex.Verdict, ex.Reply)
	}
	if ex.Reply == nil {
		return
	}
	untracked := map[string]bool{}
	for _, h := range ex.Hops {
		untracked[h.Node] = h.Untracked
	}
	if got := checkHops(t, s, compiled, ex.Reply.Packet, ex.Reply.Hops, untracked); ex.Reply.Verdict != got {
		t.Errorf("%s -> %s: reply verdict %s, hops say %s", ex.From.Name, ex.To.Name, ex.Reply.Verdict, got)
	}
}

// checkHops checks each hop of a packet's way against the simulator and
// returns the verdict they add up to. untracked (replies only) says on
// which nodes the connection is untracked: the replies are NEW there,
// ESTABLISHED elsewhere.
func checkHops(t *testing.T, s *policy.Snapshot, compiled map[string]*policy.Result, packet explain.Packet, hops []explain.Hop, untracked map[string]bool) string {
	t.Helper()
	verdict := explain.Allow
	for _, h := range hops {
		ns := *s
		ns.Node = h.Node
		res := compiled[h.Node]
		if res == nil {
			res = policy.Compile(&ns)
			compiled[h.Node] = res
		}
		pkt := sim.Packet{Src: netip.MustParseAddr(packet.Source), Dst: netip.MustParseAddr(packet.Destination),
			Proto: protoOf(packet.Protocol), SrcPort: packet.SourcePort, DstPort: packet.DestinationPort}
		if packet.ICMPType != nil {
			pkt.ICMPType, pkt.ICMPCode = *packet.ICMPType, *packet.ICMPCode
		}
		if untracked != nil {
			pkt.State = "ESTABLISHED"
			if untracked[h.Node] {
				pkt.State = "NEW"
			}
		}
		f, sets := simFamily(t, res, pkt.Src)
		hop := sim.Hop{Path: pathOf(h.Path), In: h.In, Out: h.Out}
		want, err := sim.Walk(f, sets.WithRoutes(sim.RoutesFor(&ns, "eth0")), hop, pkt)
		if err != nil {
			t.Fatal(err)
		}
		checkExplainedHop(t, f, h, want)
		if h.Verdict != explain.Allow {
			verdict = explain.Deny
		}
	}
	return verdict
}

// trailOf is the explanation's rules in the reference model's terms.
func trailOf(h explain.Hop) []string {
	var out []string
	for _, sec := range h.Sections {
		for _, st := range sec.Steps {
			switch st.Kind {
			case explain.StepRule:
				if st.Profile != "" {
					out = append(out, fmt.Sprintf("profile %s#%d %s", st.Profile, *st.Rule, st.Action))
				} else {
					out = append(out, fmt.Sprintf("%s#%d %s", st.Policy, *st.Rule, st.Action))
				}
			case explain.StepTierDefault:
				out = append(out, "end of tier "+st.Tier)
			}
		}
	}
	return out
}

func protoOf(name string) uint8 {
	n, err := explain.ProtocolNumber(name)
	if err != nil {
		panic(err)
	}
	return n
}

func pathOf(p string) sim.Path {
	switch p {
	case "input":
		return sim.Input
	case "output":
		return sim.Output
	}
	return sim.Forward
}

// TestExplainRandomCorpus explains random packets in random clusters (the
// property test's generator) and checks each against the simulator and
// against the reference model of Calico's semantics: the verdict, the
// endpoint whose policy decided, and the Log rules on the way.
func TestExplainRandomCorpus(t *testing.T) {
	worlds, packets := 200, 40
	if testing.Short() {
		worlds = 30
	}
	checked, allowed := 0, 0
	for w := 0; w < worlds; w++ {
		g := gen{rand.New(rand.NewPCG(uint64(w), 1414))}
		s, addrs := g.world()
		res := policy.Compile(s)
		r := newRef(s, hostV4, hostV6)
		for i := 0; i < packets; i++ {
			p := g.packet(addrs)
			pt, ok := r.route(p)
			if !ok {
				continue
			}
			h := sim.Hop{In: pt.in, Out: pt.out}
			switch pt.chain {
			case "INPUT":
				h.Path = sim.Input
			case "OUTPUT":
				h.Path = sim.Output
			default:
				h.Path = sim.Forward
			}
			pkt := sim.Packet{Src: p.src, Dst: p.dst, Proto: p.proto, SrcPort: p.sport, DstPort: p.dport, ICMPType: p.icmpType, ICMPCode: p.icmpCode}
			got := checkExplainHop(t, s, res, h, pkt)
			want := r.decide(p)
			checked++
			if want {
				allowed++
			}
			if (got.Verdict == explain.Allow) != want {
				var b bytes.Buffer
				(&explain.Explanation{Hops: []explain.Hop{got}}).WriteText(&b)
				t.Fatalf("world %d packet %+v: explain says %s, the reference allows=%v\n%s", w, p, got.Verdict, want, b.String())
			}
			// The policies' and profiles' rules that matched, and the
			// tiers whose default action applied, are the reference's.
			if tr := trailOf(got); strings.Join(tr, "; ") != strings.Join(r.trail, "; ") {
				t.Fatalf("world %d packet %+v: explain's rules %q, the reference's %q", w, p, tr, r.trail)
			}
			// Between two local workloads, the section that decided is
			// the one whose endpoint's policy the reference says denies.
			src, dst := r.localWEP(p.src), r.localWEP(p.dst)
			if src != nil && dst != nil && !want {
				egressOK := r.verdict(src, false, p)
				last := got.Sections[len(got.Sections)-1]
				wantDir := "ingress"
				if !egressOK {
					wantDir = "egress"
				}
				if last.Direction != wantDir {
					t.Fatalf("world %d packet %+v: denied in the %s section, the reference denies on %s", w, p, last.Direction, wantDir)
				}
			}
		}
	}
	if checked < worlds*packets/4 || allowed < checked/10 || allowed > checked*9/10 {
		t.Errorf("weak test: %d packets checked, %d allowed", checked, allowed)
	}
	t.Logf("%d packets explained, %d allowed", checked, allowed)
}

// TestExplainGoldenOutput pins what a user reads for a few cases, as text
// and as YAML and JSON.
func TestExplainGoldenOutput(t *testing.T) {
	cases := []struct {
		name, golden string
		edit         func(*policy.Snapshot)
		from, to     string
		proto        uint8
		port         uint16
	}{
		{"tiers pass and log, allowed", "explain-tiers-allowed", tiersPassAndLog, "ns2/client", "ns1/web", 6, 80},
		{"tiers pass and log, end of tier", "explain-tiers-denied", tiersPassAndLog, "ns1/db", "ns1/web", 6, 80},
		{"to another node", "explain-two-nodes", tiersPassAndLog, "ns1/db", "ns2/remote", 6, 8080},
		{"failsafe port to a host endpoint", "explain-failsafe", hostDenied, "192.0.2.1", "hostendpoint/node1-eth0", 6, 22},
		{"host endpoint denies", "explain-host-denied", hostDenied, "192.0.2.1", "hostendpoint/node1-eth0", 6, 80},
		{"untracked policy denies the replies", "explain-reply-denied", goldenEdit("untracked"), "ns1/web", "192.0.2.5", 6, 80},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.edit(s)
			from, err := explain.Resolve(s, tc.from)
			if err != nil {
				t.Fatal(err)
			}
			to, err := explain.Resolve(s, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			ex, err := explain.Explain(explain.Request{From: from, To: to, Protocol: tc.proto, DstPort: tc.port}, snapshotsOf(s))
			if err != nil {
				t.Fatal(err)
			}
			checkExplanation(t, s, map[string]*policy.Result{}, ex)
			var text bytes.Buffer
			if err := ex.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.golden+".txt", text.String())
			y, err := yaml.Marshal(ex)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.golden+".yaml", string(y))
			// JSON is the same document.
			var fromJSON, fromYAML any
			js, _ := json.Marshal(ex)
			if err := json.Unmarshal(js, &fromJSON); err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(y, &fromYAML); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(fromJSON) != fmt.Sprint(fromYAML) {
				t.Error("JSON and YAML differ")
			}
		})
	}
}

// goldenEdit is the edit of the golden case with that name.
func goldenEdit(name string) func(*policy.Snapshot) {
	for _, c := range goldenCases() {
		if c.name == name {
			return c.edit
		}
	}
	panic("no golden case " + name)
}

// tiersPassAndLog is TestTiersPassAndLog's cluster, with a remote pod
// that the security tier selects too.
var tiersPassAndLog = tiersPassAndLogOf("192.0.2.0/24", "198.51.100.0/24")

// hostDenied is denyAllHost's cluster as a golden case's edit.
func hostDenied(s *policy.Snapshot) { denyAllHost(s) }

// TestImpact: adding a policy that lets only web reach db on its named
// port changes exactly db's ingress: everything else into db is denied
// from then on, and nothing else changes.
func TestImpact(t *testing.T) {
	before := base()
	after := base()
	after.NetworkPolicies = append(after.NetworkPolicies, np("ns1", "db", api.NetworkPolicySpec{
		Selector: "app == 'db'",
		Ingress: []api.Rule{{Action: api.Allow, Protocol: proto("TCP"),
			Source: api.EntityRule{Selector: "app == 'web'"}, Destination: api.EntityRule{Ports: ports("pg")}}},
	}))
	rep, err := explain.Impact(snapshotsOf(before), snapshotsOf(after), "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Endpoints != 4 || rep.Ports < 3 {
		t.Errorf("compared %d endpoints, %d ports; want the 4 pods and TCP 5432 (pg), another TCP and another UDP port", rep.Endpoints, rep.Ports)
	}
	allowedPg := false
	for _, c := range rep.Changes {
		if c.To.Name != "ns1/db" || c.Before != explain.Allow || c.After != explain.Deny {
			t.Errorf("unexpected change %+v", c)
		}
		if !slices.Equal(c.Because, []string{"ingress of WorkloadEndpoint ns1/node1-k8s-db-eth0"}) {
			t.Errorf("change %+v: because %q, want db's ingress", c, c.Because)
		}
		if c.From.Name == "ns1/web" && c.Protocol == "TCP" && c.Port == 5432 {
			allowedPg = true
		}
	}
	if allowedPg {
		t.Error("web to db on pg is still allowed, but was reported changed")
	}
	// Every other pod and the outside, on every port tried: 3 peers that
	// are pods, at least one address, each on every port.
	if len(rep.Changes) < 4*rep.Ports-1 {
		t.Errorf("%d changes; want every peer of db on every port (%d ports) but web on pg", len(rep.Changes), rep.Ports)
	}
}

// TestImpactAgreesWithReference: in random clusters, removing a random
// policy changes exactly the verdicts the reference model says it
// changes, for the packets both can judge (between local pods, the host
// and the outside).
func TestImpactAgreesWithReference(t *testing.T) {
	worlds := 30
	if testing.Short() {
		worlds = 5
	}
	checked := 0
	for w := 0; w < worlds; w++ {
		g := gen{rand.New(rand.NewPCG(uint64(w), 77))}
		before, _ := g.world()
		after := *before
		// Drop one policy (a network policy when there is one).
		if n := len(before.NetworkPolicies); n > 0 {
			i := g.r.IntN(n)
			after.NetworkPolicies = append(slices.Clone(before.NetworkPolicies[:i]), before.NetworkPolicies[i+1:]...)
		} else {
			i := g.r.IntN(len(before.GlobalNetworkPolicies))
			after.GlobalNetworkPolicies = append(slices.Clone(before.GlobalNetworkPolicies[:i]), before.GlobalNetworkPolicies[i+1:]...)
		}
		rep, err := explain.Impact(snapshotsOf(before), snapshotsOf(&after), "")
		if err != nil {
			t.Fatal(err)
		}
		rb, ra := newRef(before, hostV4, hostV6), newRef(&after, hostV4, hostV6)
		for _, c := range rep.Changes {
			src, dst := netip.MustParseAddr(c.From.Address), netip.MustParseAddr(c.To.Address)
			p := refPacket{v6: src.Is6(), src: src, dst: dst, proto: protoOf(c.Protocol), sport: 40000, dport: c.Port}
			if p.proto == 1 || p.proto == 58 {
				p.icmpType = map[bool]uint8{false: 8, true: 128}[p.v6]
			}
			if _, ok := rb.route(p); !ok || remote(c.From) || remote(c.To) {
				// The reference judges this node only.
				continue
			}
			checked++
			vb, va := rb.decide(p), ra.decide(p)
			if vb == va || (c.After == explain.Allow) != va {
				t.Errorf("world %d: reported %s -> %s %s/%d: %s -> %s; the reference says %v -> %v", w,
					c.From.Name, c.To.Name, c.Protocol, c.Port, c.Before, c.After, vb, va)
			}
		}
	}
	if checked == 0 {
		t.Error("no change checked")
	}
	t.Logf("%d changes confirmed", checked)
}

// remote says e lives on another node than the reference's.
func remote(e explain.End) bool { return e.Node != "" && e.Node != node }
