package policy

// The raw and mangle chains, as felix's static.go builds them, less what
// this compiler leaves out (VXLAN, WireGuard, IPVS, DSCP and Istio rules).
//
// The packet mark is how the tables talk to each other: raw clears our
// bits, then an untracked or preDNAT allow sets the accept bit, which the
// filter table's INPUT, OUTPUT and FORWARD chains honour instead of
// applying normal host endpoint ingress policy again. Raw's ACCEPT and
// mangle's ACCEPT only end their own table; without the bit, the filter
// table would still judge (and, with a default deny, drop) an untracked
// packet it has no conntrack entry for.
//
// Raw PREROUTING is also where workloads' spoofed packets die: a packet
// from a workload interface whose source address the host would not route
// back out of that interface (another pod's address, say) is dropped by
// the rpfilter match, unless it is from one of the workload's
// allowSpoofedSourcePrefixes (cali-rpf-skip accepts those first). This is
// felix's strict reverse-path check (the rp_filter sysctl has no IPv6
// counterpart). Without it a pod with NET_RAW or NET_ADMIN could pass for
// any other pod in policy that matches by address. IPv6 gets the same
// rule: the kernel's match lets the unspecified source and link-local
// sources (neighbour discovery, DHCPv6, which start from those) through
// on an interface with a link-local route, so felix has no special case
// for them and neither has this compiler.

// rawPreroutingChain drops spoofed packets from workloads and sends
// packets arriving on host endpoints through their doNotTrack ingress
// policy (untracked: some host endpoint has such policy). skip says the
// cali-rpf-skip chain has rules. Without doNotTrack policy the chain is
// kept as short as felix's checks allow, since every packet walks it: the
// interface match is cheap, and only packets from workloads pay for the
// rpfilter route lookup.
func (c *famCompiler) rawPreroutingChain(untracked, skip bool) Chain {
	m := c.marks
	// Another program's rules (in append mode, before ours) may have left
	// our bits set; the accept bit must only ever mean our verdict.
	rules := []Rule{{Action: SetMark{Mark: 0, Mask: m.all()}}}
	rpf := MatchRPFilter{Not: true, ValidMark: true}
	if !untracked {
		for _, w := range c.wildcards() {
			if skip {
				rules = append(rules, Rule{Match: Match{MatchIface{Name: w}}, Action: Jump{chainRPFSkip}})
			}
			rules = append(rules, Rule{Match: Match{MatchIface{Name: w}, rpf}, Action: Drop{}, Origin: c.orig.get(Origin{Kind: OriginSpoofed})})
		}
		return Chain{Name: chainPrerouting, Rules: rules}
	}
	// felix's layout: packets from workloads are marked (with scratch0,
	// which nothing else in raw uses), checked, and skip the untracked
	// policy, which is host endpoint policy only.
	fromWL := MatchMark{Mark: m.scratch0, Mask: m.scratch0}
	for _, w := range c.wildcards() {
		rules = append(rules, Rule{Match: Match{MatchIface{Name: w}}, Action: SetMark{Mark: m.scratch0, Mask: m.scratch0}})
	}
	if skip {
		rules = append(rules, Rule{Match: Match{fromWL}, Action: Jump{chainRPFSkip}})
	}
	rules = append(rules,
		Rule{Match: Match{fromWL, rpf}, Action: Drop{}, Origin: c.orig.get(Origin{Kind: OriginSpoofed})},
		Rule{Match: Match{MatchMark{Mark: 0, Mask: m.scratch0}}, Action: Jump{chainFromHEPDispatch}},
		Rule{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: Accept{}, Origin: c.orig.get(Origin{Kind: OriginAccepted})},
	)
	return Chain{Name: chainPrerouting, Rules: rules}
}

// rpfSkipChain accepts, before the reverse-path check, the packets each
// local workload may send from its allowSpoofedSourcePrefixes of this
// family (felix's per-interface rules, in interface order). It is empty
// when no workload has any.
func (c *famCompiler) rpfSkipChain(m *model) Chain {
	var rules []Rule
	for _, ep := range m.workloads {
		for _, p := range ep.spoofable {
			if p.Addr().Is6() != (c.version == 6) {
				continue
			}
			rules = append(rules, Rule{Match: Match{MatchIface{Name: ep.iface}, MatchNet{Dir: Src, Net: p}}, Action: Accept{},
				Origin: c.orig.get(Origin{Kind: OriginSpoofAllowed, Detail: ep.name})})
		}
	}
	return Chain{Name: chainRPFSkip, Rules: rules}
}

// rawOutputChain sends packets the host sends through the doNotTrack
// egress policy of the host endpoint they leave by.
func (c *famCompiler) rawOutputChain(untracked bool) Chain {
	m := c.marks
	if !untracked {
		return Chain{Name: chainOutput, Rules: []Rule{{Action: SetMark{Mark: 0, Mask: m.all()}}}}
	}
	return Chain{Name: chainOutput, Rules: []Rule{
		{Action: SetMark{Mark: 0, Mask: m.all()}},
		{Action: Jump{chainToHEPDispatch}},
		{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: Accept{}, Origin: c.orig.get(Origin{Kind: OriginAccepted})},
	}}
}

// manglePreroutingChain applies preDNAT policy to packets arriving on host
// endpoints, before the nat table can rewrite their destination (a
// NodePort's, say). Established traffic, and traffic untracked policy
// allowed, is not judged again.
func (c *famCompiler) manglePreroutingChain() Chain {
	m := c.marks
	allow := c.mangleAllow()
	accepted := c.orig.get(Origin{Kind: OriginAccepted})
	return Chain{Name: chainPrerouting, Rules: []Rule{
		{Match: Match{MatchConntrack{States: "RELATED,ESTABLISHED"}}, Action: allow, Origin: c.orig.get(Origin{Kind: OriginEstablished})},
		{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: allow, Origin: accepted},
		{Action: Jump{chainFromHEPDispatch}},
		{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: allow, Comment: []string{"Host endpoint policy accepted packet."}, Origin: accepted},
	}}
}

// manglePostroutingChain applies host endpoint egress policy to traffic
// that was DNAT-ed on this host and leaves by a host endpoint: the filter
// table cannot, because for a packet the host sends, the kernel picks the
// outgoing interface for the new destination only after filter OUTPUT has
// run (so cali-OUTPUT skips DNAT-ed packets). Packets with the accept bit
// were already allowed on their way (routed traffic that passed
// cali-FORWARD, untracked allows) and are left alone. Allow is RETURN
// rather than ACCEPT here, whatever iptablesMangleAllowAction says, as in
// felix: other software's mangle rules may still need to see the packet.
// Traffic to local workloads returns undecided from the dispatch chain.
func (c *famCompiler) manglePostroutingChain() Chain {
	m := c.marks
	accepted := c.orig.get(Origin{Kind: OriginAccepted})
	return Chain{Name: chainManglePostrouting, Rules: []Rule{
		{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: Return{}, Origin: accepted},
		{Action: SetMark{Mark: 0, Mask: m.all()}},
		{Match: Match{MatchConntrack{States: "DNAT"}}, Action: Jump{chainToHEPDispatch}},
		{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: Return{}, Comment: []string{"Host endpoint policy accepted packet."}, Origin: accepted},
	}}
}

func (c *famCompiler) mangleAllow() Action {
	if c.cfg.MangleAllowAction == "RETURN" {
		return Return{}
	}
	return Accept{}
}

// dropOnly returns a copy of c that denies with DROP: REJECT is only valid
// in the filter table (felix's raw rules with REJECT fail to load; see
// projectcalico/calico#7914).
func (c *famCompiler) dropOnly() *famCompiler {
	d := *c
	d.cfg.DenyAction = "DROP"
	return &d
}
