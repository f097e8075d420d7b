package policy_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// mutate applies one random change of the kinds the agent sees: a policy
// added, changed (rules, selector, order, tier) or deleted, an endpoint
// added, relabelled or deleted, a network set or profile changed, a host
// endpoint or tier coming and going, a configuration switch flipped. It
// replaces what it changes rather than modifying it in place, as
// confwatch delivers new objects.
func (g gen) mutate(s *policy.Snapshot, step int) string {
	labelsOf := func() map[string]string {
		l := map[string]string{}
		if app := g.pick("web", "db", "cache", ""); app != "" {
			l["app"] = app
		}
		if t := g.pick("front", "back", ""); t != "" {
			l["tier"] = t
		}
		return l
	}
	switch g.r.IntN(17) {
	case 14: // one rule of a policy replaced: same number of rules
		if len(s.NetworkPolicies) == 0 {
			return "none"
		}
		i := g.r.IntN(len(s.NetworkPolicies))
		p := s.NetworkPolicies[i]
		if len(p.Spec.Egress) == 0 {
			return "none"
		}
		p.Spec.Egress = slices.Clone(p.Spec.Egress)
		p.Spec.Egress[g.r.IntN(len(p.Spec.Egress))] = g.rule(p.Namespace)
		s.NetworkPolicies = slices.Clone(s.NetworkPolicies)
		s.NetworkPolicies[i] = p
		return "np rule replaced " + p.Name
	case 15: // a global policy moves tier, its rules untouched
		if len(s.GlobalNetworkPolicies) == 0 {
			return "none"
		}
		i := g.r.IntN(len(s.GlobalNetworkPolicies))
		p := s.GlobalNetworkPolicies[i]
		p.Spec.Tier = g.pick("", "security")
		s.GlobalNetworkPolicies = slices.Clone(s.GlobalNetworkPolicies)
		s.GlobalNetworkPolicies[i] = p
		return "gnp tier " + p.Name
	case 16: // a namespace's profile rules, and a pod's ports
		if len(s.WorkloadEndpoints) == 0 {
			return "none"
		}
		i := g.r.IntN(len(s.WorkloadEndpoints))
		w := s.WorkloadEndpoints[i]
		w.Spec.Ports = []api.WorkloadEndpointPort{{Name: g.pick("http", "dns", "metrics"), Protocol: api.ProtocolFromString(g.pick("TCP", "UDP")), Port: uint16(8000 + g.r.IntN(3))}}
		s.WorkloadEndpoints = slices.Clone(s.WorkloadEndpoints)
		s.WorkloadEndpoints[i] = w
		return "wep ports " + w.Name
	case 0, 1: // a policy's rules change (a port, an action)
		if len(s.NetworkPolicies) == 0 {
			return "none"
		}
		i := g.r.IntN(len(s.NetworkPolicies))
		p := s.NetworkPolicies[i]
		p.Spec.Ingress = slices.Clone(p.Spec.Ingress)
		p.Spec.Ingress = append(p.Spec.Ingress, g.rule(p.Namespace))
		if g.chance(0.3) {
			p.Spec.Egress = nil
		}
		s.NetworkPolicies = slices.Clone(s.NetworkPolicies)
		s.NetworkPolicies[i] = p
		return "np rules " + p.Name
	case 2: // a policy's selector or order changes
		if len(s.GlobalNetworkPolicies) == 0 {
			return "none"
		}
		i := g.r.IntN(len(s.GlobalNetworkPolicies))
		p := s.GlobalNetworkPolicies[i]
		p.Spec.Selector = g.pick("", "all()", "app == 'web'", "app == 'db'", "has(app)", "role == 'node'", "has(host)")
		if g.chance(0.3) {
			p.Spec.Order = ptr(float64(g.r.IntN(3) * 50))
		}
		if g.chance(0.2) {
			p.Spec.ApplyOnForward = !p.Spec.ApplyOnForward
		}
		s.GlobalNetworkPolicies = slices.Clone(s.GlobalNetworkPolicies)
		s.GlobalNetworkPolicies[i] = p
		return "gnp selector " + p.Name
	case 3: // a new policy
		ns := g.pick("ns1", "ns2", "ns3")
		var in []api.Rule
		for j := 1 + g.r.IntN(3); j > 0; j-- {
			in = append(in, g.rule(ns))
		}
		s.NetworkPolicies = append(slices.Clone(s.NetworkPolicies), np2(ns, fmt.Sprintf("new%d", step), api.NetworkPolicySpec{
			Selector: g.pick("all()", "app == 'web'", "app == 'db'", "has(app)", "tier == 'back'"),
			Order:    ptr(float64(g.r.IntN(4) * 25)), Ingress: in, Egress: []api.Rule{g.rule(ns)}}))
		return "np add"
	case 4: // a deleted policy
		if len(s.NetworkPolicies) == 0 {
			return "none"
		}
		s.NetworkPolicies = slices.Delete(slices.Clone(s.NetworkPolicies), 0, 1)
		return "np delete"
	case 5, 6: // a label on one pod
		if len(s.WorkloadEndpoints) == 0 {
			return "none"
		}
		i := g.r.IntN(len(s.WorkloadEndpoints))
		w := s.WorkloadEndpoints[i]
		w.Labels = labelsOf()
		w.Labels["projectcalico.org/namespace"] = w.Namespace
		s.WorkloadEndpoints = slices.Clone(s.WorkloadEndpoints)
		s.WorkloadEndpoints[i] = w
		return "wep labels " + w.Name
	case 7: // a pod comes or goes
		if len(s.WorkloadEndpoints) > 2 && g.chance(0.5) {
			s.WorkloadEndpoints = slices.Delete(slices.Clone(s.WorkloadEndpoints), 0, 1)
			return "wep delete"
		}
		ns := g.pick("ns1", "ns2", "ns3")
		var opts []wepOpt
		if g.chance(0.3) {
			opts = append(opts, onNode("node2"))
		}
		s.WorkloadEndpoints = append(slices.Clone(s.WorkloadEndpoints), wep(ns, fmt.Sprintf("new%d", step),
			fmt.Sprintf("cali%011x", 0xdef000+step), labelsOf(), []string{fmt.Sprintf("10.66.%d.%d", step/250, step%250+1)}, opts...))
		return "wep add"
	case 8: // a network set's nets
		if len(s.GlobalNetworkSets) == 0 {
			return "none"
		}
		n := s.GlobalNetworkSets[0]
		n.Spec.Nets = []string{g.pick("198.51.100.0/24", "203.0.113.0/25", "10.65.0.0/24"), "2001:db8:bad::/48"}
		s.GlobalNetworkSets = slices.Clone(s.GlobalNetworkSets)
		s.GlobalNetworkSets[0] = n
		return "gnetset nets"
	case 9: // a namespace's labels (its profile)
		i := slices.IndexFunc(s.Profiles, func(p api.Profile) bool { return p.Name == "kns.ns2" })
		team := g.pick("blue", "red")
		s.Profiles = slices.Clone(s.Profiles)
		s.Profiles[i] = nsProfile("ns2", map[string]string{"team": team, "env": "dev"})
		return "profile " + team
	case 10: // a profile's rules
		i := slices.IndexFunc(s.Profiles, func(p api.Profile) bool { return p.Name == "extra" })
		p := s.Profiles[i]
		p.Spec.Ingress = []api.Rule{g.rule("")}
		s.Profiles = slices.Clone(s.Profiles)
		s.Profiles[i] = p
		return "profile rules"
	case 11: // a host endpoint comes or goes
		i := slices.IndexFunc(s.HostEndpoints, func(h api.HostEndpoint) bool { return h.Spec.Node == node })
		if i >= 0 {
			s.HostEndpoints = slices.Delete(slices.Clone(s.HostEndpoints), i, i+1)
			return "hep delete"
		}
		s.HostEndpoints = append(slices.Clone(s.HostEndpoints), hep("node1-eth0", g.pick("eth0", "*"),
			map[string]string{"role": "node", "host": "node1"}, []string{hostV4.String()}))
		return "hep add"
	case 12: // a tier's order or default action (the default tier's too)
		name := g.pick("security", "default")
		order := float64(g.r.IntN(3) * 100)
		if name == "default" {
			order = api.DefaultTierOrder
		}
		t := tier(name, order, api.Action(g.pick("Deny", "Pass")))
		ts := slices.DeleteFunc(slices.Clone(s.Tiers), func(x api.Tier) bool { return x.Name == name })
		s.Tiers = append(ts, t)
		return "tier " + name + " " + string(*t.Spec.DefaultAction)
	default: // a configuration switch
		switch g.r.IntN(3) {
		case 0:
			s.Config.DenyAction = g.pick("DROP", "REJECT")
		case 1:
			s.Config.EndpointToHostAction = g.pick("DROP", "ACCEPT", "RETURN")
		default:
			s.Config.AllowIPIPFromWorkloads = !s.Config.AllowIPIPFromWorkloads
		}
		return "config"
	}
}

// TestCompilerMatchesCompile runs long random change sequences through one
// incremental Compiler and checks after every step that its result is
// exactly Compile's for the same snapshot: chains, rules (with their
// origins), rule hashes, hooks, IP sets and problems.
func TestCompilerMatchesCompile(t *testing.T) {
	const worlds, steps = 12, 120
	for w := range worlds {
		seed := uint64(1000 + w)
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			g := gen{rand.New(rand.NewPCG(seed, 7))}
			s, _ := g.world()
			ic := policy.NewCompiler()
			for step := range steps {
				what := "initial"
				if step > 0 {
					what = g.mutate(s, step)
				}
				got, want := ic.Compile(s), policy.Compile(s)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d (%s): incremental result differs from Compile:\n%s", step, what, diffDump(dump(got), dump(want)))
				}
				for _, fam := range []*policy.Family{want.V4, want.V6} {
					if fam == nil {
						continue
					}
					gf := got.V4
					if fam.Version == 6 {
						gf = got.V6
					}
					for ti, tb := range fam.Tables() {
						for ci := range tb.Chains {
							if g, w := gf.Tables()[ti].Chains[ci].Hashes(), tb.Chains[ci].Hashes(); !slices.Equal(g, w) {
								t.Fatalf("step %d (%s): chain %s hashes differ", step, what, tb.Chains[ci].Name)
							}
						}
					}
				}
			}
		})
	}
}

// TestCompilerReusesUnchangedChains checks what the incremental compiler
// is for: an unchanged endpoint chain comes back as the same rules (so a
// programmer need not hash it again), a changed one does not.
func TestCompilerReusesUnchangedChains(t *testing.T) {
	s := &policy.Snapshot{Node: node, Profiles: []api.Profile{nsProfile("ns1", nil)}}
	s.WorkloadEndpoints = []api.WorkloadEndpoint{
		wep("ns1", "a", "calia", map[string]string{"app": "a"}, []string{"10.65.0.1"}),
		wep("ns1", "b", "calib", map[string]string{"app": "b"}, []string{"10.65.0.2"}),
	}
	s.NetworkPolicies = []api.NetworkPolicy{np("ns1", "pa", api.NetworkPolicySpec{Selector: "app == 'a'", Ingress: []api.Rule{{Action: api.Allow}}})}
	ic := policy.NewCompiler()
	first := ic.Compile(s)
	// b now has a's labels, so policy pa selects it too: b's ingress
	// chain changes, the others do not.
	s.WorkloadEndpoints = slices.Clone(s.WorkloadEndpoints)
	s.WorkloadEndpoints[1] = wep("ns1", "b", "calib", map[string]string{"app": "a"}, []string{"10.65.0.2"})
	second := ic.Compile(s)
	id := func(r *policy.Result, chain string) policy.RulesIdentity { return filterChainID(t, r, chain) }
	for _, tc := range []struct {
		chain string
		same  bool
	}{
		{"cali-tw-calia", true},
		{"cali-fw-calia", true},
		{"cali-tw-calib", false},
		{"cali-fw-calib", true},
	} {
		if got := id(first, tc.chain) == id(second, tc.chain); got != tc.same {
			t.Errorf("%s reused = %v, want %v", tc.chain, got, tc.same)
		}
	}
}

// filterChainID is the identity of the rules of r's IPv4 filter chain.
func filterChainID(t *testing.T, r *policy.Result, chain string) policy.RulesIdentity {
	t.Helper()
	c := r.V4.Filter.Chain(chain)
	if c == nil {
		t.Fatalf("no chain %s", chain)
	}
	i, _ := c.Identity()
	return i
}

func diffDump(got, want string) string {
	gl, wl := splitLines(got), splitLines(want)
	for i := 0; i < max(len(gl), len(wl)); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			return fmt.Sprintf("line %d:\n got: %s\nwant: %s", i+1, g, w)
		}
	}
	return "(dumps equal: a difference in origins or endpoints)"
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

// TestCompilerReusesUnchangedPolicies: an untouched policy's chain and
// the IP set of its rule come back as the same slices after another
// policy changed (nothing to re-render, re-hash or rewrite), the changed
// policy's chain does not; a pod entering the set's selector changes the
// set.
func TestCompilerReusesUnchangedPolicies(t *testing.T) {
	s := &policy.Snapshot{Node: node, Profiles: []api.Profile{nsProfile("ns1", nil)}}
	s.WorkloadEndpoints = []api.WorkloadEndpoint{
		wep("ns1", "a", "calia", map[string]string{"app": "a"}, []string{"10.65.0.1"}),
		wep("ns1", "b", "calib", map[string]string{"app": "b"}, []string{"10.65.0.2"}),
	}
	fromA := []api.Rule{{Action: api.Allow, Source: api.EntityRule{Selector: "role == 'client'"}}}
	s.NetworkPolicies = []api.NetworkPolicy{
		np("ns1", "pa", api.NetworkPolicySpec{Selector: "app == 'a'", Ingress: fromA}),
		np("ns1", "pb", api.NetworkPolicySpec{Selector: "app == 'b'", Ingress: []api.Rule{{Action: api.Allow}}}),
	}
	ic := policy.NewCompiler()
	first := ic.Compile(s)
	s.NetworkPolicies = slices.Clone(s.NetworkPolicies)
	s.NetworkPolicies[1].Spec.Ingress = []api.Rule{{Action: api.Deny}}
	second := ic.Compile(s)
	chainID := func(r *policy.Result, chain string) policy.RulesIdentity { return filterChainID(t, r, chain) }
	if chainID(first, "cali-pi-default/ns1/pa") != chainID(second, "cali-pi-default/ns1/pa") {
		t.Error("the untouched policy's chain was rendered again")
	}
	if chainID(first, "cali-pi-default/ns1/pb") == chainID(second, "cali-pi-default/ns1/pb") {
		t.Error("the changed policy's chain was reused")
	}
	set := func(r *policy.Result) *policy.IPSet {
		for i := range r.V4.IPSets {
			if strings.HasPrefix(r.V4.IPSets[i].ID, "s:") {
				return &r.V4.IPSets[i]
			}
		}
		t.Fatal("no selector set")
		return nil
	}
	if a, b := set(first), set(second); len(a.Members) != 0 || len(b.Members) != 0 {
		t.Fatalf("role == 'client' selects %v, then %v; want nothing", a.Members, b.Members)
	}
	// A client pod arrives: the set gains it.
	s.WorkloadEndpoints = append(slices.Clone(s.WorkloadEndpoints),
		wep("ns1", "c", "calic", map[string]string{"role": "client"}, []string{"10.65.0.3"}))
	if got := set(ic.Compile(s)).Members; !slices.Equal(got, []string{"10.65.0.3"}) {
		t.Errorf("after a client pod arrived the set holds %v, want [10.65.0.3]", got)
	}
}

// TestCompilerSharesEndpointRules: endpoints whose chains would have the
// same rules (same labels, so the same policies, and the same profiles)
// share one rules slice, while their rule hashes stay per chain; moving
// one of them to other labels gives it the other group's rules and leaves
// the rest, and every earlier result, as they were: shared rules are
// never modified.
func TestCompilerSharesEndpointRules(t *testing.T) {
	s := &policy.Snapshot{Node: node, Profiles: []api.Profile{nsProfile("ns1", nil)}}
	s.WorkloadEndpoints = []api.WorkloadEndpoint{
		wep("ns1", "a1", "calia1", map[string]string{"app": "a"}, []string{"10.65.0.1"}),
		wep("ns1", "a2", "calia2", map[string]string{"app": "a"}, []string{"10.65.0.2"}),
		wep("ns1", "b", "calib", map[string]string{"app": "b"}, []string{"10.65.0.3"}),
	}
	s.NetworkPolicies = []api.NetworkPolicy{
		np("ns1", "pa", api.NetworkPolicySpec{Selector: "app == 'a'", Ingress: []api.Rule{{Action: api.Allow}}}),
		np("ns1", "pb", api.NetworkPolicySpec{Selector: "app == 'b'", Ingress: []api.Rule{{Action: api.Deny}}}),
	}
	ic := policy.NewCompiler()
	first := ic.Compile(s)
	firstDump := dump(first)
	if want := dump(policy.Compile(s)); firstDump != want {
		t.Fatalf("incremental result differs from Compile:\n%s", diffDump(firstDump, want))
	}
	id := func(r *policy.Result, chain string) policy.RulesIdentity { return filterChainID(t, r, chain) }
	if id(first, "cali-tw-calia1") != id(first, "cali-tw-calia2") {
		t.Error("two pods with the same labels got two copies of the same ingress rules")
	}
	if id(first, "cali-tw-calia1") == id(first, "cali-tw-calib") {
		t.Error("pods selected by different policies share rules")
	}
	if slices.Equal(first.V4.Filter.Chain("cali-tw-calia1").Hashes(), first.V4.Filter.Chain("cali-tw-calia2").Hashes()) {
		t.Error("chains sharing rules have the same rule hashes; felix's hashes name the chain")
	}

	s.WorkloadEndpoints = slices.Clone(s.WorkloadEndpoints)
	s.WorkloadEndpoints[1] = wep("ns1", "a2", "calia2", map[string]string{"app": "b"}, []string{"10.65.0.2"})
	second := ic.Compile(s)
	if got, want := dump(second), dump(policy.Compile(s)); got != want {
		t.Fatalf("after a2 moved to app b, incremental result differs from Compile:\n%s", diffDump(got, want))
	}
	if id(second, "cali-tw-calia2") != id(second, "cali-tw-calib") {
		t.Error("a2, now labelled as b, does not share b's rules")
	}
	if id(second, "cali-tw-calia1") != id(first, "cali-tw-calia1") {
		t.Error("a1's unchanged chain was rendered again")
	}
	if got := dump(first); got != firstDump {
		t.Errorf("the first result changed under a later compilation:\n%s", diffDump(got, firstDump))
	}
}
