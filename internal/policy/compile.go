package policy

import (
	"slices"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
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
	// Raw and Mangle hold host endpoint policy that must act before
	// conntrack (doNotTrack) or before DNAT (preDNAT). All four tables are
	// always named.
	Raw    Table
	Mangle Table
	// IPSets are sorted by name.
	IPSets []IPSet
}

// Tables are the family's tables in the order they are written: every
// table with a name, so that a table whose chains all went away is still
// visited and its stale chains removed.
func (f *Family) Tables() []*Table {
	var out []*Table
	for _, t := range []*Table{&f.Raw, &f.Mangle, &f.NAT, &f.Filter} {
		if t.Name != "" {
			out = append(out, t)
		}
	}
	return out
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
func Compile(s *Snapshot) *Result { return compile(s, nil, nil) }

// compile is Compile, keeping endpoint chains in cc and workloads'
// selector matches in mc (nil: none kept).
func compile(s *Snapshot, cc *chainCache, mc *matchCache) *Result {
	cfg := s.Config.withDefaults()
	var ec *entityCache
	if cc != nil {
		ec = cc.ents
	}
	m := buildModel(s, mc, ec)
	mk, ok := allocMarks(cfg.MarkMask)
	if !ok {
		m.problem("iptablesMarkMask %#x has fewer than 5 bits; using 0xffff0000", cfg.MarkMask)
		mk, _ = allocMarks(0xffff0000)
	}
	rules := m.parseAllRules(cc)
	res := &Result{V4: compileFamily(4, cfg, mk, m, rules, cc)}
	if cfg.IPv6 {
		res.V6 = compileFamily(6, cfg, mk, m, rules, cc)
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

// parseAllRules parses the rules of every policy and profile a local
// endpoint uses; cc, if set, keeps each policy's parse across
// compilations (see policyCache).
func (m *model) parseAllRules(cc *chainCache) *parsedRules {
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
		for _, tiers := range ep.tierLists() {
			for _, t := range tiers {
				for _, p := range t.policies {
					usedPol[p] = true
				}
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
			r.index = i
			if r.note != "" {
				m.problem("%s rule %d: %s", what, i, r.note)
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
			if cc == nil {
				pr.policyIn[p] = parse(kind+p.key+" ingress", p.inRules, p.namespace)
				pr.policyOut[p] = parse(kind+p.key+" egress", p.outRules, p.namespace)
				continue
			}
			e := cc.policy(p)
			if !e.parsed {
				// Not parsed yet: what it adds to the problems and the
				// sets is kept with it, to be added again on a hit.
				from := len(m.problems)
				e.parsed = true
				e.in = parse(kind+p.key+" ingress", p.inRules, p.namespace)
				e.out = parse(kind+p.key+" egress", p.outRules, p.namespace)
				e.problems = slices.Clone(m.problems[from:])
				e.sets = ruleSets(e.in, e.out)
			} else {
				m.problems = append(m.problems, e.problems...)
				for _, d := range e.sets {
					if _, ok := pr.sets[d.id]; !ok {
						pr.sets[d.id] = d
					}
				}
			}
			pr.policyIn[p], pr.policyOut[p] = e.in, e.out
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

func compileFamily(version int, cfg Config, mk marks, m *model, pr *parsedRules, cc *chainCache) *Family {
	c := &famCompiler{version: version, cfg: cfg, marks: mk, encap: m.encapFor(version, cfg), orig: origins{}, cache: cc,
		groupNames: map[string]string{}}
	f := &Family{
		Version: version,
		Filter:  c.filterTable(m, pr),
		NAT:     c.natTable(m),
		Raw:     c.dropOnly().rawTable(m, pr),
		Mangle:  c.dropOnly().mangleTable(m, pr),
	}
	// Only the sets that the remaining rules use are wanted.
	var chains []Chain
	for _, t := range []*Table{&f.Filter, &f.Raw, &f.Mangle} {
		chains = append(chains, t.Chains...)
	}
	f.IPSets = append(m.ipSetsCached(version, referencedSets(chains, pr.sets, version, cc)), c.encap.sets(version)...)
	slices.SortFunc(f.IPSets, func(a, b IPSet) int { return strings.Compare(a.Name, b.Name) })
	return f
}

// workloadDispatch is the dispatch chains from root to the workload
// chains pfx+iface, unknown interfaces getting unknown (the filter
// table's, a function of the configuration); with a cache, the same
// chains for as long as the interfaces are the same.
func (c *famCompiler) workloadDispatch(root, pfx string, ifaces []string, out bool, unknown []Rule) []Chain {
	build := func() []Chain {
		return dispatchChains(root, ifaces, out, func(i string) string { return endpointChain(pfx, i) }, unknown)
	}
	if c.cache == nil {
		return build()
	}
	key := strconv.Itoa(c.version) + "\x00" + c.cfg.DenyAction + "\x00" + root + "\x00" + strings.Join(ifaces, "\x00")
	if chains, ok := c.cache.dispatch[key]; ok {
		c.cache.nextDispatch[key] = chains
		return chains
	}
	chains := build()
	c.cache.nextDispatch[key] = chains
	return chains
}

// hooks are the jumps into our chains: pairs of built-in chain and ours.
func (c *famCompiler) hooks(pairs ...string) []Hook {
	var out []Hook
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, Hook{Chain: pairs[i], Rule: Rule{Action: Jump{pairs[i+1]}}, Append: c.cfg.AppendHooks})
	}
	return out
}

// hostEndpoints are the local host endpoints, the "*" one last.
func (m *model) hostEndpoints() []*localEndpoint {
	if m.wildcardHost == nil {
		return m.hosts
	}
	return append(slices.Clone(m.hosts), m.wildcardHost)
}

// filterTable: workload policy, and normal and applyOnForward host
// endpoint policy.
func (c *famCompiler) filterTable(m *model, pr *parsedRules) Table {
	tb := newTableBuild()
	tb.chains = append(tb.chains,
		c.inputChain(), c.outputChain(), c.forwardChain(), c.workloadToHostChain(),
		c.failsafeChain(chainFailsafeIn, true, false),
		c.failsafeChain(chainFailsafeOut, false, false),
		Chain{Name: chainCIDRBlock, Rules: c.cidrBlockRules()},
	)

	// Workload endpoints: "to" is the workload's ingress, "from" its egress.
	var ifaces []string
	for _, ep := range m.workloads {
		ifaces = append(ifaces, ep.iface)
		tb.chains = append(tb.chains,
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxToWorkload, ep.iface), ep: ep, tiers: ep.ingress,
				profiles: ep.profiles, inbound: true}, tb),
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxFromWorkload, ep.iface), ep: ep, tiers: ep.egress,
				profiles: ep.profiles, inbound: false, dropEncap: true}, tb),
		)
	}
	unknown := []Rule{{Action: c.deny(), Comment: []string{"Unknown interface"}, Origin: c.orig.get(Origin{Kind: OriginUnknownInterface})}}
	tb.chains = append(tb.chains, c.workloadDispatch(chainFromWLDispatch, pfxFromWorkload, ifaces, false, unknown)...)
	tb.chains = append(tb.chains, c.workloadDispatch(chainToWLDispatch, pfxToWorkload, ifaces, true, unknown)...)

	// Host endpoints: "from" is traffic into the host (ingress policy),
	// "to" traffic out of it (egress policy); the forward chains police
	// traffic routed in or out through the endpoint with its
	// applyOnForward policies.
	var hifaces []string
	for _, ep := range m.hostEndpoints() {
		if ep != m.wildcardHost {
			hifaces = append(hifaces, ep.iface)
		}
		tb.chains = append(tb.chains,
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxFromHost, ep.iface), ep: ep, host: true, tiers: ep.ingress,
				profiles: ep.profiles, inbound: true, failsafe: chainFailsafeIn}, tb),
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxToHost, ep.iface), ep: ep, host: true, tiers: ep.egress,
				profiles: ep.profiles, inbound: false, failsafe: chainFailsafeOut}, tb),
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxFromHostForward, ep.iface), ep: ep, host: true, kind: kindForward,
				tiers: ep.fwdIngress, inbound: true}, tb),
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxToHostForward, ep.iface), ep: ep, host: true, kind: kindForward,
				tiers: ep.fwdEgress, inbound: false}, tb),
		)
	}
	// The "*" endpoint takes what no other endpoint claims. Unlike felix's
	// mangle egress dispatch, the filter one does not exempt traffic to
	// workloads: cali-OUTPUT has already returned it, and routed traffic
	// to workloads does get the "*" endpoint's applyOnForward policy.
	end := func(pfx string) []Rule {
		if m.wildcardHost == nil {
			return nil
		}
		return []Rule{{Action: Goto{endpointChain(pfx, allInterfaces)}}}
	}
	for _, d := range []struct {
		root, pfx string
		out       bool
	}{
		{chainFromHEPDispatch, pfxFromHost, false},
		{chainToHEPDispatch, pfxToHost, true},
		{chainFromHEPForward, pfxFromHostForward, false},
		{chainToHEPForward, pfxToHostForward, true},
	} {
		tb.chains = append(tb.chains, dispatchChains(d.root, hifaces, d.out,
			func(i string) string { return endpointChain(d.pfx, i) }, end(d.pfx))...)
	}

	tb.chains = append(tb.chains, c.policyChains(tb, pr)...)
	profs := map[string]bool{}
	for _, ep := range append(slices.Clone(m.workloads), m.hostEndpoints()...) {
		for _, p := range ep.profiles {
			profs[p] = true
		}
	}
	for p := range profs {
		tb.chains = append(tb.chains,
			Chain{Name: profileChain(pfxProfileIn, p), Rules: c.renderRules(pr.profileIn[p], "Profile "+p+" ingress", profileOwner(p), Origin{Profile: p, Ingress: true})},
			Chain{Name: profileChain(pfxProfileOut, p), Rules: c.renderRules(pr.profileOut[p], "Profile "+p+" egress", profileOwner(p), Origin{Profile: p})},
		)
	}
	return Table{
		Name:   TableFilter,
		Chains: reachable(tb.chains, []string{chainInput, chainForward, chainOutput}, c.cache),
		Hooks:  c.hooks("INPUT", chainInput, "FORWARD", chainForward, "OUTPUT", chainOutput),
	}
}

// rawTable: the workload reverse-path check, and doNotTrack policy of the
// host endpoints that have some (felix keeps the others out of the raw
// table, which every packet crosses).
func (c *famCompiler) rawTable(m *model, pr *parsedRules) Table {
	tb := newTableBuild()
	var ifaces []string
	for _, ep := range m.hosts {
		if len(ep.untrackedIn)+len(ep.untrackedOut) == 0 {
			continue
		}
		ifaces = append(ifaces, ep.iface)
	}
	skip := c.rpfSkipChain(m)
	tb.chains = append(tb.chains, skip, c.rawPreroutingChain(len(ifaces) > 0, len(skip.Rules) > 0), c.rawOutputChain(len(ifaces) > 0),
		c.failsafeChain(chainFailsafeIn, true, true),
		c.failsafeChain(chainFailsafeOut, false, true),
	)
	for _, ep := range m.hosts {
		if len(ep.untrackedIn)+len(ep.untrackedOut) == 0 {
			continue
		}
		tb.chains = append(tb.chains,
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxFromHost, ep.iface), ep: ep, host: true, kind: kindUntracked,
				tiers: ep.untrackedIn, inbound: true, failsafe: chainFailsafeIn}, tb),
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxToHost, ep.iface), ep: ep, host: true, kind: kindUntracked,
				tiers: ep.untrackedOut, inbound: false, failsafe: chainFailsafeOut}, tb),
		)
	}
	// Other interfaces' packets return undecided.
	tb.chains = append(tb.chains, dispatchChains(chainFromHEPDispatch, ifaces, false,
		func(i string) string { return endpointChain(pfxFromHost, i) }, nil)...)
	tb.chains = append(tb.chains, dispatchChains(chainToHEPDispatch, ifaces, true,
		func(i string) string { return endpointChain(pfxToHost, i) }, nil)...)
	tb.chains = append(tb.chains, c.policyChains(tb, pr)...)
	return Table{
		Name:   TableRaw,
		Chains: reachable(tb.chains, []string{chainPrerouting, chainOutput}, c.cache),
		Hooks:  c.hooks("PREROUTING", chainPrerouting, "OUTPUT", chainOutput),
	}
}

// mangleTable: preDNAT policy of the host endpoints that have some
// (PREROUTING), and normal egress policy for DNAT-ed traffic leaving by a
// host endpoint (POSTROUTING; see manglePostroutingChain). As in felix,
// the "*" endpoint's preDNAT policy covers every interface whose own
// endpoint has none (workload interfaces too), not just the interfaces
// without an endpoint. Each half is hooked only when it has something to
// police, since every packet walks a hooked chain: PREROUTING when some
// endpoint has preDNAT policy, POSTROUTING when there is a host endpoint
// at all (one without egress policy still denies by default).
func (c *famCompiler) mangleTable(m *model, pr *parsedRules) Table {
	tb := newTableBuild()
	var roots []string
	var hooks []string
	if c.manglePreDNAT(m, tb) {
		roots = append(roots, chainPrerouting)
		hooks = append(hooks, "PREROUTING", chainPrerouting)
	}
	if c.mangleEgress(m, tb, pr) {
		roots = append(roots, chainManglePostrouting)
		hooks = append(hooks, "POSTROUTING", chainManglePostrouting)
	}
	if len(roots) == 0 {
		// Nothing to do in mangle. The table keeps its name so that
		// chains of an earlier state are removed.
		return Table{Name: TableMangle}
	}
	tb.chains = append(tb.chains, c.policyChains(tb, pr)...)
	return Table{
		Name:   TableMangle,
		Chains: reachable(tb.chains, roots, c.cache),
		Hooks:  c.hooks(hooks...),
	}
}

// manglePreDNAT adds the PREROUTING chains of preDNAT policy to tb, and
// reports whether any endpoint has such policy.
func (c *famCompiler) manglePreDNAT(m *model, tb *tableBuild) bool {
	var ifaces []string
	var end []Rule
	for _, ep := range m.hostEndpoints() {
		if len(ep.preDNATIn) == 0 {
			continue
		}
		if ep == m.wildcardHost {
			end = []Rule{{Action: Goto{endpointChain(pfxFromHost, allInterfaces)}}}
		} else {
			ifaces = append(ifaces, ep.iface)
		}
		tb.chains = append(tb.chains,
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxFromHost, ep.iface), ep: ep, host: true, kind: kindPreDNAT,
				tiers: ep.preDNATIn, inbound: true, failsafe: chainFailsafeIn, allow: c.mangleAllow()}, tb))
	}
	if len(ifaces) == 0 && end == nil {
		return false
	}
	tb.chains = append(tb.chains, c.manglePreroutingChain(), c.failsafeChain(chainFailsafeIn, true, false))
	tb.chains = append(tb.chains, dispatchChains(chainFromHEPDispatch, ifaces, false,
		func(i string) string { return endpointChain(pfxFromHost, i) }, end)...)
	return true
}

// mangleEgress adds the POSTROUTING chains that apply host endpoints'
// normal egress policy to DNAT-ed traffic (felix's
// HostEndpointToMangleEgressChains and ToHostDispatchChains), and reports
// whether there is any host endpoint to police. The endpoint chains are
// the filter table's egress chains, with RETURN for allow and DROP for
// deny: tiers, then profiles, then drop, after the failsafe ports.
func (c *famCompiler) mangleEgress(m *model, tb *tableBuild, pr *parsedRules) bool {
	eps := m.hostEndpoints()
	if len(eps) == 0 {
		return false
	}
	var ifaces []string
	var end []Rule
	profs := map[string]bool{}
	for _, ep := range eps {
		if ep == m.wildcardHost {
			// Only interfaces that are not workloads' fall to the "*"
			// endpoint: the host may always reach its workloads.
			for _, w := range c.wildcards() {
				end = append(end, Rule{Match: Match{MatchIface{Out: true, Name: w}}, Action: Return{},
					Comment: []string{"Skip egress WHEP policy for traffic to local workload"},
					Origin:  c.orig.get(Origin{Kind: OriginHostToWorkload, Detail: w})})
			}
			end = append(end, Rule{Action: Goto{endpointChain(pfxToHost, allInterfaces)}})
		} else {
			ifaces = append(ifaces, ep.iface)
		}
		for _, p := range ep.profiles {
			profs[p] = true
		}
		tb.chains = append(tb.chains,
			c.endpointChain(endpointChainSpec{name: endpointChain(pfxToHost, ep.iface), ep: ep, host: true, tiers: ep.egress,
				profiles: ep.profiles, inbound: false, failsafe: chainFailsafeOut, allow: Return{}}, tb))
	}
	tb.chains = append(tb.chains, c.manglePostroutingChain(), c.failsafeChain(chainFailsafeOut, false, false))
	tb.chains = append(tb.chains, dispatchChains(chainToHEPDispatch, ifaces, true,
		func(i string) string { return endpointChain(pfxToHost, i) }, end)...)
	for p := range profs {
		tb.chains = append(tb.chains,
			Chain{Name: profileChain(pfxProfileOut, p), Rules: c.renderRules(pr.profileOut[p], "Profile "+p+" egress", profileOwner(p), Origin{Profile: p})})
	}
	return true
}

// natTable: masquerade traffic from natOutgoing pools.
func (c *famCompiler) natTable(m *model) Table {
	natActive := false
	for _, p := range m.pools {
		if p.Version() == c.version && p.NATOutgoing {
			natActive = true
		}
	}
	nat := Table{
		Name:   TableNAT,
		Chains: c.natChains(natActive),
		// felix appends its POSTROUTING hook whatever the insert mode, so
		// that kube-proxy's MASQUERADE (which clears its mark) runs first.
		Hooks: []Hook{{Chain: "POSTROUTING", Rule: Rule{Action: Jump{chainNATPostrouting}}, Append: true}},
	}
	sortChains(nat.Chains)
	return nat
}

// referencedSets returns the definitions of the selector and named port
// sets the chains use; cc, if set, remembers each chain's sets by its
// rules' identity.
func referencedSets(chains []Chain, defs map[string]*setDef, version int, cc *chainCache) []*setDef {
	byName := map[string]*setDef{}
	for _, d := range defs {
		byName[setName(version, d.id)] = d
	}
	seen := map[string]bool{}
	var out []*setDef
	for i := range chains {
		for _, set := range cc.chainSets(&chains[i]) {
			if seen[set] {
				continue
			}
			seen[set] = true
			if d := byName[set]; d != nil {
				out = append(out, d)
			}
		}
	}
	return out
}

// jumpTargets are the chains the rules jump or go to, in order.
func jumpTargets(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		switch a := r.Action.(type) {
		case Jump:
			out = append(out, a.Chain)
		case Goto:
			out = append(out, a.Chain)
		}
	}
	return out
}

// matchedSets are the names of the IP sets the rules match on, in order.
func matchedSets(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		for _, cr := range r.Match {
			if ms, ok := cr.(MatchSet); ok {
				out = append(out, ms.Set)
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
// cc, if set, remembers each chain's jump targets by its rules' identity.
func reachable(chains []Chain, roots []string, cc *chainCache) []Chain {
	// Of chains with the same name, the walk follows the last one's
	// jumps and the result keeps the first one.
	byName := make(map[string]int, len(chains))
	for i := range chains {
		byName[chains[i].Name] = i
	}
	seen := make([]bool, len(chains))
	n := 0
	stack := slices.Clone(roots)
	for len(stack) > 0 {
		name := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		i, ok := byName[name]
		if !ok || seen[i] {
			continue
		}
		seen[i] = true
		n++
		stack = append(stack, cc.chainTargets(&chains[i])...)
	}
	out := make([]Chain, 0, n)
	for i := range chains {
		if last := byName[chains[i].Name]; seen[last] {
			out = append(out, chains[i])
			seen[last] = false
		}
	}
	sortChains(out)
	return out
}

// ipSetsCached is ipSets, reusing unchanged sets with a cache.
func (m *model) ipSetsCached(version int, defs []*setDef) []IPSet {
	if m.ents == nil {
		return m.ipSets(version, defs)
	}
	return m.ipSetsWith(version, defs, func(d *setDef) IPSet { return m.ents.selectorSet(m, version, d) })
}

// ipSets computes the members of the given sets and the pool sets.
func (m *model) ipSets(version int, defs []*setDef) []IPSet {
	return m.ipSetsWith(version, defs, func(d *setDef) IPSet { return m.selectorSet(version, d) })
}

// ipSetsWith is ipSets with each selector set made by set.
func (m *model) ipSetsWith(version int, defs []*setDef, set func(*setDef) IPSet) []IPSet {
	family := "inet"
	if version == 6 {
		family = "inet6"
	}
	is6 := version == 6
	var sets []IPSet
	for _, d := range defs {
		sets = append(sets, set(d))
	}
	all, masq := map[string]bool{}, map[string]bool{}
	for _, p := range m.pools {
		if p.CIDR.Addr().Is6() != is6 {
			continue
		}
		if !loadBalancerOnly(p.AllowedUses) {
			all[netMember(p.CIDR)] = true
		}
		if p.NATOutgoing {
			masq[netMember(p.CIDR)] = true
		}
	}
	sets = append(sets,
		IPSet{Name: setName(version, setIDAllPools), ID: setIDAllPools, Type: SetTypeNet, Family: family, Members: sortedKeys(all)},
		IPSet{Name: setName(version, setIDMasqPools), ID: setIDMasqPools, Type: SetTypeNet, Family: family, Members: sortedKeys(masq)},
	)
	slices.SortFunc(sets, func(a, b IPSet) int { return strings.Compare(a.Name, b.Name) })
	return sets
}

// selectorSet is the IP set of a selector or named port: the matching
// entities' addresses (and ports).
func (m *model) selectorSet(version int, d *setDef) IPSet {
	family := "inet"
	if version == 6 {
		family = "inet6"
	}
	is6 := version == 6
	members := map[string]bool{}
	for _, e := range m.entities {
		if !d.selects(e) {
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
	return IPSet{Name: setName(version, d.id), ID: d.id, Type: typ, Family: family, Members: sortedKeys(members)}
}

// selects reports whether e's addresses belong in d's set: named ports
// are only endpoints'.
func (d *setDef) selects(e *entity) bool {
	if d.namedPort != "" && e.kind != "wep" && e.kind != "hep" {
		return false
	}
	return d.sel.Evaluate(e.labels)
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
