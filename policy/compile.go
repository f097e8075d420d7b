package policy

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/api"
)

// Result is the desired dataplane state compiled from a Snapshot.
type Result struct {
	// V4 is always compiled; V6 only with Config.IPv6.
	V4 *Family
	V6 *Family
	// Problems lists what could not be compiled and was left out (a bad
	// selector, an unsupported field), one line each, for logging.
	Problems []string
}

// Family is the desired iptables and ipset state of one IP family.
type Family struct {
	Version int
	Filter  Table
	NAT     Table
	// IPSets are sorted by name.
	IPSets []IPSet
}

// Table is the desired state of our part of one iptables table.
type Table struct {
	Name string
	// Chains are every cali-* chain we want in the table, sorted by name;
	// any other cali-* chain in the kernel is stale.
	Chains []Chain
	Hooks  []Hook
}

// Chain returns the named chain, or nil.
func (t *Table) Chain(name string) *Chain {
	i, ok := slices.BinarySearchFunc(t.Chains, name, func(c Chain, n string) int { return strings.Compare(c.Name, n) })
	if !ok {
		return nil
	}
	return &t.Chains[i]
}

// IPSet returns the named set, or nil.
func (f *Family) IPSet(name string) *IPSet {
	i, ok := slices.BinarySearchFunc(f.IPSets, name, func(s IPSet, n string) int { return strings.Compare(s.Name, n) })
	if !ok {
		return nil
	}
	return &f.IPSets[i]
}

// Compile computes the desired chains, hooks and IP sets for the node. It
// is pure: the same snapshot always gives the same result, and it neither
// reads nor changes anything outside its argument.
func Compile(s *Snapshot) *Result {
	cfg := s.Config.withDefaults()
	m := buildModel(s)
	mk, ok := allocMarks(cfg.MarkMask)
	if !ok {
		m.problem("iptablesMarkMask %#x has fewer than 5 bits; using 0xffff0000", cfg.MarkMask)
		mk, _ = allocMarks(0xffff0000)
	}
	rules := m.parseAllRules()
	res := &Result{V4: compileFamily(4, cfg, mk, m, rules)}
	if cfg.IPv6 {
		res.V6 = compileFamily(6, cfg, mk, m, rules)
	}
	res.Problems = m.problems
	return res
}

// parsedRules holds every policy's and profile's rules, resolved once for
// both families.
type parsedRules struct {
	policyIn, policyOut   map[*policyInfo][]*parsedRule
	profileIn, profileOut map[string][]*parsedRule
	sets                  map[string]*setDef
}

func (m *model) parseAllRules() *parsedRules {
	pr := &parsedRules{
		policyIn: map[*policyInfo][]*parsedRule{}, policyOut: map[*policyInfo][]*parsedRule{},
		profileIn: map[string][]*parsedRule{}, profileOut: map[string][]*parsedRule{},
		sets: map[string]*setDef{},
	}
	// Only what local endpoints use is compiled: other policies cannot
	// affect this node, and their bad rules are not worth reporting here.
	usedPol := map[*policyInfo]bool{}
	usedProf := map[string]bool{}
	for _, ep := range m.allLocal() {
		for _, t := range append(append([]epTier{}, ep.ingress...), ep.egress...) {
			for _, p := range t.policies {
				usedPol[p] = true
			}
		}
		for _, p := range ep.profiles {
			usedProf[p] = true
		}
	}
	parse := func(what string, rules []api.Rule, ns string) []*parsedRule {
		var out []*parsedRule
		for i := range rules {
			r, err := m.parseRule(&rules[i], ns, pr.sets)
			if err != nil {
				m.problem("%s rule %d: left out: %v", what, i, err)
				continue
			}
			out = append(out, r)
		}
		return out
	}
	for _, t := range m.tiers {
		for _, p := range t.policies {
			if !usedPol[p] {
				continue
			}
			kind := "GlobalNetworkPolicy "
			if p.namespace != "" {
				kind = "NetworkPolicy "
			}
			pr.policyIn[p] = parse(kind+p.key+" ingress", p.inRules, p.namespace)
			pr.policyOut[p] = parse(kind+p.key+" egress", p.outRules, p.namespace)
		}
	}
	names := make([]string, 0, len(usedProf))
	for n := range usedProf {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := m.profiles[n]
		if p == nil {
			// felix has nothing to jump to either; an empty profile
			// allows nothing, which is what a missing one should do.
			m.problem("Profile %s: not found; endpoints using it get an empty profile", n)
			continue
		}
		pr.profileIn[n] = parse("Profile "+n+" ingress", p.Spec.Ingress, "")
		pr.profileOut[n] = parse("Profile "+n+" egress", p.Spec.Egress, "")
	}
	return pr
}

func compileFamily(version int, cfg Config, mk marks, m *model, pr *parsedRules) *Family {
	c := &famCompiler{version: version, cfg: cfg, marks: mk}
	groups := map[string]Chain{}
	used := map[policyRef]bool{}
	var chains []Chain

	chains = append(chains,
		c.inputChain(), c.outputChain(), c.forwardChain(), c.workloadToHostChain(),
		c.failsafeChain(chainFailsafeIn, cfg.FailsafeInbound, true),
		c.failsafeChain(chainFailsafeOut, cfg.FailsafeOutbound, false),
	)

	// Workload endpoints: "to" is the workload's ingress, "from" its egress.
	var ifaces []string
	for _, ep := range m.workloads {
		ifaces = append(ifaces, ep.iface)
		chains = append(chains,
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxToWorkload, ep.iface), tiers: ep.ingress,
				profiles: ep.profiles, inbound: true}, groups, used),
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxFromWorkload, ep.iface), tiers: ep.egress,
				profiles: ep.profiles, inbound: false, dropEncap: true}, groups, used),
		)
	}
	unknown := []Rule{{Action: c.deny(), Comment: []string{"Unknown interface"}}}
	chains = append(chains, dispatchChains(chainFromWLDispatch, ifaces, false,
		func(i string) string { return endpointChain(pfxFromWorkload, i) }, unknown)...)
	chains = append(chains, dispatchChains(chainToWLDispatch, ifaces, true,
		func(i string) string { return endpointChain(pfxToWorkload, i) }, unknown)...)

	// Host endpoints: "from" is traffic into the host (ingress policy),
	// "to" traffic out of it (egress policy).
	hostEPs := m.hosts
	if m.wildcardHost != nil {
		hostEPs = append(append([]*localEndpoint{}, hostEPs...), m.wildcardHost)
	}
	var hifaces []string
	for _, ep := range hostEPs {
		if ep != m.wildcardHost {
			hifaces = append(hifaces, ep.iface)
		}
		chains = append(chains,
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxFromHost, ep.iface), tiers: ep.ingress,
				profiles: ep.profiles, inbound: true, failsafe: chainFailsafeIn}, groups, used),
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxToHost, ep.iface), tiers: ep.egress,
				profiles: ep.profiles, inbound: false, failsafe: chainFailsafeOut}, groups, used),
		)
	}
	var fromEnd, toEnd []Rule
	if m.wildcardHost != nil {
		fromEnd = []Rule{{Action: Goto{endpointChain(pfxFromHost, allInterfaces)}}}
		toEnd = []Rule{{Action: Goto{endpointChain(pfxToHost, allInterfaces)}}}
	}
	chains = append(chains, dispatchChains(chainFromHEPDispatch, hifaces, false,
		func(i string) string { return endpointChain(pfxFromHost, i) }, fromEnd)...)
	chains = append(chains, dispatchChains(chainToHEPDispatch, hifaces, true,
		func(i string) string { return endpointChain(pfxToHost, i) }, toEnd)...)

	for _, g := range groups {
		chains = append(chains, g)
	}

	// The chains of the policies and profiles in use.
	refs := make([]policyRef, 0, len(used))
	for r := range used {
		refs = append(refs, r)
	}
	for _, r := range refs {
		p := r.pol
		if r.inbound {
			chains = append(chains, Chain{Name: policyChain(pfxPolicyIn, p.tier, p.key),
				Rules: c.renderRules(pr.policyIn[p], "Policy "+p.key+" ingress")})
		} else {
			chains = append(chains, Chain{Name: policyChain(pfxPolicyOut, p.tier, p.key),
				Rules: c.renderRules(pr.policyOut[p], "Policy "+p.key+" egress")})
		}
	}
	profs := map[string]bool{}
	for _, ep := range append(append([]*localEndpoint{}, m.workloads...), hostEPs...) {
		for _, p := range ep.profiles {
			profs[p] = true
		}
	}
	for p := range profs {
		chains = append(chains,
			Chain{Name: profileChain(pfxProfileIn, p), Rules: c.renderRules(pr.profileIn[p], "Profile "+p+" ingress")},
			Chain{Name: profileChain(pfxProfileOut, p), Rules: c.renderRules(pr.profileOut[p], "Profile "+p+" egress")},
		)
	}

	hookRule := func(chain string) Rule { return Rule{Action: Jump{chain}} }
	filter := Table{
		Name:   TableFilter,
		Chains: reachable(chains, []string{chainInput, chainForward, chainOutput}),
		Hooks: []Hook{
			{Chain: "INPUT", Rule: hookRule(chainInput), Append: cfg.AppendHooks},
			{Chain: "FORWARD", Rule: hookRule(chainForward), Append: cfg.AppendHooks},
			{Chain: "OUTPUT", Rule: hookRule(chainOutput), Append: cfg.AppendHooks},
		},
	}
	natActive := false
	for _, p := range m.pools {
		if pfx, err := netip.ParsePrefix(p.Spec.CIDR); err == nil && pfx.Addr().Is6() == (version == 6) && p.Spec.NATOutgoing {
			natActive = true
		}
	}
	nat := Table{
		Name:   TableNAT,
		Chains: c.natChains(natActive),
		// felix appends its POSTROUTING hook whatever the insert mode, so
		// that kube-proxy's MASQUERADE (which clears its mark) runs first.
		Hooks: []Hook{{Chain: "POSTROUTING", Rule: hookRule(chainNATPostrouting), Append: true}},
	}
	sortChains(nat.Chains)
	return &Family{
		Version: version,
		Filter:  filter,
		NAT:     nat,
		// Only the sets that the remaining rules use are wanted.
		IPSets: m.ipSets(version, referencedSets(filter.Chains, pr.sets, version)),
	}
}

// referencedSets returns the definitions of the selector and named port
// sets the chains use.
func referencedSets(chains []Chain, defs map[string]*setDef, version int) []*setDef {
	byName := map[string]*setDef{}
	for _, d := range defs {
		byName[setName(version, d.id)] = d
	}
	seen := map[string]bool{}
	var out []*setDef
	for i := range chains {
		for _, r := range chains[i].Rules {
			for _, cr := range r.Match {
				ms, ok := cr.(MatchSet)
				if !ok || seen[ms.Set] {
					continue
				}
				seen[ms.Set] = true
				if d := byName[ms.Set]; d != nil {
					out = append(out, d)
				}
			}
		}
	}
	return out
}

func sortChains(chains []Chain) {
	slices.SortFunc(chains, func(a, b Chain) int { return strings.Compare(a.Name, b.Name) })
}

// reachable returns the chains reachable from the roots, sorted by name.
// felix only programs chains that something refers to; so do we (a policy
// of types [Ingress] has no referenced egress chain, for example).
func reachable(chains []Chain, roots []string) []Chain {
	byName := make(map[string]int, len(chains))
	for i := range chains {
		byName[chains[i].Name] = i
	}
	seen := map[string]bool{}
	stack := slices.Clone(roots)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		i, ok := byName[n]
		if !ok || seen[n] {
			continue
		}
		seen[n] = true
		for _, r := range chains[i].Rules {
			switch a := r.Action.(type) {
			case Jump:
				stack = append(stack, a.Chain)
			case Goto:
				stack = append(stack, a.Chain)
			}
		}
	}
	var out []Chain
	for i := range chains {
		if seen[chains[i].Name] {
			out = append(out, chains[i])
			seen[chains[i].Name] = false // keep the first of duplicates only
		}
	}
	sortChains(out)
	return out
}

// ipSets computes the members of the given sets and the pool sets.
func (m *model) ipSets(version int, defs []*setDef) []IPSet {
	family := "inet"
	if version == 6 {
		family = "inet6"
	}
	is6 := version == 6
	var sets []IPSet
	for _, d := range defs {
		members := map[string]bool{}
		for _, e := range m.entities {
			if d.namedPort != "" && e.kind != "wep" && e.kind != "hep" {
				continue
			}
			if !d.sel.Evaluate(e.labels) {
				continue
			}
			for _, n := range e.nets {
				if n.Addr().Is6() != is6 {
					continue
				}
				if d.namedPort == "" {
					members[netMember(n)] = true
					continue
				}
				for _, p := range e.ports {
					if p.name == d.namedPort && p.proto == d.proto {
						members[n.Addr().String()+","+protoName(p.proto)+":"+strconv.Itoa(int(p.port))] = true
					}
				}
			}
		}
		typ := SetTypeNet
		if d.namedPort != "" {
			typ = SetTypeIPPort
		}
		sets = append(sets, IPSet{Name: setName(version, d.id), ID: d.id, Type: typ, Family: family, Members: sortedKeys(members)})
	}
	all, masq := map[string]bool{}, map[string]bool{}
	for _, p := range m.pools {
		pfx, err := netip.ParsePrefix(p.Spec.CIDR)
		if err != nil || pfx.Addr().Is6() != is6 {
			continue
		}
		pfx = pfx.Masked()
		if !loadBalancerOnly(p.Spec.AllowedUses) {
			all[netMember(pfx)] = true
		}
		if p.Spec.NATOutgoing {
			masq[netMember(pfx)] = true
		}
	}
	sets = append(sets,
		IPSet{Name: setName(version, setIDAllPools), ID: setIDAllPools, Type: SetTypeNet, Family: family, Members: sortedKeys(all)},
		IPSet{Name: setName(version, setIDMasqPools), ID: setIDMasqPools, Type: SetTypeNet, Family: family, Members: sortedKeys(masq)},
	)
	slices.SortFunc(sets, func(a, b IPSet) int { return strings.Compare(a.Name, b.Name) })
	return sets
}

// loadBalancerOnly pools hold service addresses, not workloads; felix
// leaves them out of the all-pools set.
func loadBalancerOnly(uses []api.IPPoolAllowedUse) bool {
	return len(uses) == 1 && uses[0] == api.IPPoolAllowedUseLoadBalancer
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
