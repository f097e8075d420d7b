package policy

import (
	"slices"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// policyRef is a use of a policy's chain by an endpoint chain; the
// compiler renders the chains of exactly the referenced policies.
type policyRef struct {
	pol     *policyInfo
	inbound bool
}

// chainKind is which of felix's endpoint chain flavours to render.
type chainKind int

const (
	// kindNormal: filter table; tiers, then profiles, then drop.
	kindNormal chainKind = iota
	// kindForward: filter table, routed traffic through a host endpoint
	// (applyOnForward policy); no profiles, and with no such policy at
	// all the traffic is allowed.
	kindForward
	// kindUntracked: raw table (doNotTrack policy); no conntrack, an
	// allowed packet is exempted from conntrack, and a packet no policy
	// decided returns undecided, to meet normal policy later.
	kindUntracked
	// kindPreDNAT: mangle table (preDNAT policy); like untracked, but
	// tracked.
	kindPreDNAT
)

// endpointChainSpec is what an endpoint chain is built from.
type endpointChainSpec struct {
	name      string
	kind      chainKind
	ep        *localEndpoint // whose chain it is
	host      bool           // ep is a host endpoint
	tiers     []epTier
	profiles  []string
	inbound   bool   // policy direction: ingress (cali-pi-) or egress (cali-po-)
	failsafe  string // failsafe chain to jump to first (host endpoints)
	dropEncap bool   // drop VXLAN and IPIP sent by a workload
	// allow is what established traffic gets: ACCEPT, or RETURN with the
	// accept bit set (mangle POSTROUTING always, mangle PREROUTING with
	// iptablesMangleAllowAction Return).
	allow Action
}

// tableBuild collects one table's chains and the policies (and policy
// groups) its endpoint chains use, whose chains it then renders.
type tableBuild struct {
	chains []Chain
	groups map[string]Chain
	used   map[policyRef]bool
	// usedTiers are the tier lists already recorded in used, by
	// direction: endpoints with equal labels share one (buildLocal).
	usedTiers map[usedTiersRef]bool
}

// usedTiersRef is a tier list by identity, or, with a cache, by content
// (tiersID: label sets that select the same policies have equal lists).
type usedTiersRef struct {
	ref     tiersRef
	id      int
	inbound bool
}

func newTableBuild() *tableBuild {
	return &tableBuild{groups: map[string]Chain{}, used: map[policyRef]bool{}, usedTiers: map[usedTiersRef]bool{}}
}

// endpointChain renders a workload or host endpoint chain as felix's
// endpointIptablesChain does: established traffic passes, then each tier's
// policies in order until one allows (return) or passes (next tier), the
// tier's default action otherwise, then the profiles, then drop; with the
// differences of each kind (see chainKind).
func (c *famCompiler) endpointChain(spec endpointChainSpec, tb *tableBuild) Chain {
	c.usePolicies(&spec, tb)
	ch := Chain{Name: spec.name}
	if spec.ep != nil {
		ch.Endpoint = &ChainEndpoint{Name: spec.ep.name, Host: spec.host, Iface: spec.ep.iface, Ingress: spec.inbound, Kind: spec.kind.String()}
	}
	if c.cache == nil {
		ch.Rules = c.endpointRules(&spec)
		return ch
	}
	key := c.cache.endpointKey(c, &spec)
	rules, ok := c.cache.get(key)
	if !ok {
		rules = c.endpointRules(&spec)
		c.cache.put(key, rules)
	}
	ch.Rules = rules
	return ch
}

// usePolicies records in tb the policies and policy groups the endpoint
// chain jumps to, whose chains the table then renders.
func (c *famCompiler) usePolicies(spec *endpointChainSpec, tb *tableBuild) {
	if len(spec.tiers) == 0 {
		return
	}
	ref := usedTiersRef{ref: tiersRef{&spec.tiers[0], len(spec.tiers)}, inbound: spec.inbound}
	if c.cache != nil {
		ref = usedTiersRef{id: c.cache.tiersID(spec.tiers), inbound: spec.inbound}
	}
	if tb.usedTiers[ref] {
		return
	}
	tb.usedTiers[ref] = true
	polPrefix := pfxPolicyOut
	if spec.inbound {
		polPrefix = pfxPolicyIn
	}
	for _, t := range spec.tiers {
		for _, g := range groupPolicies(t.policies) {
			for _, p := range g {
				tb.used[policyRef{p, spec.inbound}] = true
			}
			if len(g) == 1 {
				continue
			}
			keys := make([]string, len(g))
			for i, p := range g {
				keys[i] = p.key
			}
			target := c.groupName(spec.inbound, t.name, g[0].selectorText, keys)
			if _, ok := tb.groups[target]; !ok {
				tb.groups[target] = c.groupChain(target, polPrefix, t.name, spec.inbound, g)
			}
		}
	}
}

// endpointRules renders the rules of an endpoint chain: a function of
// spec (see chainCache.endpointKey) and c's configuration alone.
func (c *famCompiler) endpointRules(spec *endpointChainSpec) []Rule {
	m := c.marks
	o := c.orig.get
	// Every endpoint gets one: sized up front rather than grown.
	size := 8 + 2*len(spec.profiles)
	for _, t := range spec.tiers {
		size += 2 + 3*len(t.policies)
	}
	rules := make([]Rule, 0, size)
	if spec.kind != kindUntracked {
		allow := spec.allow
		if allow == nil {
			allow = c.filterAllow()
		}
		established := Match{MatchConntrack{States: "RELATED,ESTABLISHED"}}
		est := o(Origin{Kind: OriginEstablished})
		if _, ok := allow.(Accept); !ok {
			// The caller learns of the verdict from the mark.
			rules = append(rules, Rule{Match: established, Action: SetMark{Mark: m.accept, Mask: m.accept}, Origin: est})
		}
		rules = append(rules, Rule{Match: established, Action: allow, Origin: est})
		if !c.cfg.DisableConntrackInvalid {
			rules = append(rules, Rule{Match: Match{MatchConntrack{States: "INVALID"}}, Action: c.deny(), Origin: o(Origin{Kind: OriginInvalid})})
		}
	}
	if spec.failsafe != "" {
		rules = append(rules, Rule{Action: Jump{spec.failsafe}, Origin: o(Origin{Kind: OriginFailsafe})})
	}
	rules = append(rules, Rule{Action: SetMark{Mark: 0, Mask: m.accept | m.pass}})
	if spec.dropEncap {
		if !c.cfg.AllowVXLANFromWorkloads {
			rules = append(rules, Rule{
				Match:   Match{MatchProtocol{Num: 17}, MatchPorts{Dir: Dst, Ports: []PortRange{{uint16(c.cfg.VXLANPort), uint16(c.cfg.VXLANPort)}}}},
				Action:  c.deny(),
				Comment: []string{c.denyName() + " VXLAN encapped packets originating in workloads"},
				Origin:  o(Origin{Kind: OriginWorkloadEncap, Detail: "VXLAN"}),
			})
		}
		if !c.cfg.AllowIPIPFromWorkloads {
			rules = append(rules, Rule{
				Match:   Match{MatchProtocol{Num: 4}},
				Action:  c.deny(),
				Comment: []string{c.denyName() + " IPinIP encapped packets originating in workloads"},
				Origin:  o(Origin{Kind: OriginWorkloadEncap, Detail: "IP-in-IP"}),
			})
		}
	}
	polPrefix := pfxPolicyOut
	profPrefix := pfxProfileOut
	if spec.inbound {
		polPrefix, profPrefix = pfxPolicyIn, pfxProfileIn
	}
	for _, t := range spec.tiers {
		rules = append(rules, Rule{Action: SetMark{Mark: 0, Mask: m.pass}, Comment: []string{"Start of tier " + t.name},
			Origin: o(Origin{Kind: OriginTierStart, Tier: t.name, Ingress: spec.inbound})})
		for _, g := range groupPolicies(t.policies) {
			var target string
			var jump *Origin
			if len(g) == 1 {
				// A group of one is not worth its own chain.
				target = policyChain(polPrefix, t.name, g[0].key)
				jump = o(Origin{Kind: OriginPolicy, Tier: t.name, Policy: g[0].key, Ingress: spec.inbound})
			} else {
				keys := make([]string, len(g))
				for i, p := range g {
					keys[i] = p.key
				}
				target = c.groupName(spec.inbound, t.name, g[0].selectorText, keys)
				jump = o(Origin{Kind: OriginPolicyGroup, Tier: t.name, Ingress: spec.inbound})
			}
			rules = append(rules, Rule{Match: Match{MatchMark{Mark: 0, Mask: m.pass}}, Action: Jump{target}, Origin: jump})
			if spec.kind == kindUntracked {
				// Allow means "allow, untracked": the reply will not
				// match a conntrack entry, so it needs its own allow.
				rules = append(rules, Rule{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: NoTrack{},
					Origin: o(Origin{Kind: OriginNoTrack, Tier: t.name, Ingress: spec.inbound})})
			}
			rules = append(rules, Rule{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: Return{}, Comment: []string{"Return if policy accepted"},
				Origin: o(Origin{Kind: OriginPolicyAccepted, Tier: t.name, Ingress: spec.inbound})})
		}
		if (spec.kind == kindNormal || spec.kind == kindForward) && t.defaultAction != api.Pass {
			// Untracked and preDNAT policy leaves what it did not decide
			// to the normal policy in the filter table.
			rules = append(rules, Rule{
				Match:   Match{MatchMark{Mark: 0, Mask: m.pass}},
				Action:  c.deny(),
				Comment: []string{"End of tier " + t.name + ". " + c.denyName() + " if no policies passed packet"},
				Origin:  o(Origin{Kind: OriginTierEnd, Tier: t.name, Ingress: spec.inbound, Action: t.defaultAction}),
			})
		}
	}
	switch spec.kind {
	case kindForward:
		if len(spec.tiers) == 0 {
			// No applyOnForward policy governs this endpoint in this
			// direction: routed traffic is not its business.
			fwd := o(Origin{Kind: OriginForwardDefault, Ingress: spec.inbound})
			rules = append(rules,
				Rule{Action: SetMark{Mark: m.accept, Mask: m.accept}, Comment: []string{"Allow forwarded traffic by default"}, Origin: fwd},
				Rule{Action: Return{}, Comment: []string{"Return for accepted forward traffic"}, Origin: fwd},
			)
		}
	case kindNormal:
		for _, p := range spec.profiles {
			rules = append(rules,
				Rule{Action: Jump{profileChain(profPrefix, p)}, Origin: o(Origin{Kind: OriginProfile, Profile: p, Ingress: spec.inbound})},
				Rule{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: Return{}, Comment: []string{"Return if profile accepted"},
					Origin: o(Origin{Kind: OriginProfileAccepted, Profile: p, Ingress: spec.inbound})},
			)
		}
		rules = append(rules, Rule{Action: c.deny(), Comment: []string{c.denyName() + " if no profiles matched"},
			Origin: o(Origin{Kind: OriginNoProfile, Ingress: spec.inbound})})
	}
	// Endpoint chains share their rules (chainCache.endpointKey): no
	// room to append into another chain's rules.
	return slices.Clip(rules)
}

// policyChains renders the chains of the policies the table's endpoint
// chains use, and its group chains.
func (c *famCompiler) policyChains(tb *tableBuild, pr *parsedRules) []Chain {
	var out []Chain
	for _, g := range tb.groups {
		out = append(out, g)
	}
	for r := range tb.used {
		p := r.pol
		name := policyChain(pfxPolicyOut, p.tier, p.key)
		if r.inbound {
			name = policyChain(pfxPolicyIn, p.tier, p.key)
		}
		out = append(out, Chain{Name: name, Rules: c.policyRules(p, r.inbound, pr)})
	}
	return out
}

// policyRules renders the chain of p in one direction; with a cache,
// once for as long as p's rules stay the same.
func (c *famCompiler) policyRules(p *policyInfo, inbound bool, pr *parsedRules) []Rule {
	render := func() []Rule {
		origin := Origin{Tier: p.tier, Policy: p.key, Ingress: inbound}
		if inbound {
			return c.renderRules(pr.policyIn[p], "Policy "+p.key+" ingress", policyOwner(p), origin)
		}
		return c.renderRules(pr.policyOut[p], "Policy "+p.key+" egress", policyOwner(p), origin)
	}
	if c.cache == nil {
		return render()
	}
	// parseAllRules made the entry in this compilation.
	e := c.cache.pols[policyID{p.key, p.namespace, p.tier}]
	if e == nil {
		return render()
	}
	k := renderKey{c.version, c.cfg.DenyAction, inbound}
	rules, ok := e.rendered[k]
	if !ok {
		rules = render()
		e.rendered[k] = rules
	}
	return rules
}

// groupPolicies splits a tier's policies into runs with the same selector:
// such a run selects exactly the same endpoints, so endpoints can share one
// chain that jumps to each policy in turn.
func groupPolicies(pols []*policyInfo) [][]*policyInfo {
	var groups [][]*policyInfo
	for i, p := range pols {
		if i > 0 && p.selectorText == pols[i-1].selectorText {
			groups[len(groups)-1] = append(groups[len(groups)-1], p)
			continue
		}
		groups = append(groups, []*policyInfo{p})
	}
	return groups
}

// groupChain renders a policy group chain (felix's PolicyGroupToIptablesChains):
// jump to each policy unless an earlier one already decided, returning
// early every five policies to keep the common case short.
func (c *famCompiler) groupChain(name, polPrefix, tier string, inbound bool, pols []*policyInfo) Chain {
	m := c.marks
	const stride = 5
	var rules []Rule
	for i, p := range pols {
		if i != 0 && i%stride == 0 {
			rules = append(rules, Rule{
				Match:   Match{MatchMark{Not: true, Mark: 0, Mask: m.pass | m.accept}},
				Action:  Return{},
				Comment: []string{"Return on verdict"},
			})
		}
		var match Match
		if i%stride != 0 {
			match = Match{MatchMark{Mark: 0, Mask: m.pass | m.accept}}
		}
		rules = append(rules, Rule{Match: match, Action: Jump{policyChain(polPrefix, tier, p.key)},
			Origin: c.orig.get(Origin{Kind: OriginPolicy, Tier: tier, Policy: p.key, Ingress: inbound})})
	}
	return Chain{Name: name, Rules: rules}
}

// dispatchChains renders the chains that send a packet to the chain of its
// interface: a root chain with a rule per interface, except that
// interfaces sharing the next character after the common prefix get a
// child chain (felix's shallow prefix tree, which keeps the number of rules
// a packet traverses low with many endpoints). Non-matching packets get
// endRules.
func dispatchChains(root string, ifaces []string, out bool, target func(iface string) string, endRules []Rule) []Chain {
	ifaces = slices.Clone(ifaces)
	slices.Sort(ifaces)
	ifaces = slices.Compact(ifaces)
	common := commonPrefix(ifaces)
	var prefixes []string
	byPrefix := map[string][]string{}
	for _, n := range ifaces {
		p := common
		if len(n) > len(common) {
			p = n[:len(common)+1]
		}
		if _, ok := byPrefix[p]; !ok {
			prefixes = append(prefixes, p)
		}
		byPrefix[p] = append(byPrefix[p], n)
	}
	match := func(name string) Match { return Match{MatchIface{Out: out, Name: name}} }
	var chains []Chain
	var rootRules []Rule
	for _, p := range prefixes {
		names := byPrefix[p]
		if len(names) == 1 {
			rootRules = append(rootRules, Rule{Match: match(names[0]), Action: Goto{target(names[0])}})
			continue
		}
		child := root + "-" + p[len(common):]
		rootRules = append(rootRules, Rule{Match: match(p + "+"), Action: Goto{child}})
		var rules []Rule
		for _, n := range names {
			rules = append(rules, Rule{Match: match(n), Action: Goto{target(n)}})
		}
		// A goto into the child skips the rest of the root, so the child
		// needs the end rules too.
		rules = append(rules, endRules...)
		chains = append(chains, Chain{Name: child, Rules: rules})
	}
	rootRules = append(rootRules, endRules...)
	return append(chains, Chain{Name: root, Rules: rootRules})
}

func commonPrefix(names []string) string {
	if len(names) == 0 {
		return ""
	}
	p := names[0]
	for _, n := range names[1:] {
		i := 0
		for i < len(p) && i < len(n) && p[i] == n[i] {
			i++
		}
		p = p[:i]
	}
	return p
}
