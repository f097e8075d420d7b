package policy

// The raw and mangle chains, as felix's static.go builds them, less what
// this compiler leaves out (the workload reverse-path check, VXLAN and
// WireGuard rules, mangle POSTROUTING for DNAT-ed host traffic).
//
// The packet mark is how the tables talk to each other: raw clears our
// bits, then an untracked or preDNAT allow sets the accept bit, which the
// filter table's INPUT, OUTPUT and FORWARD chains honour instead of
// applying normal host endpoint ingress policy again. Raw's ACCEPT and
// mangle's ACCEPT only end their own table; without the bit, the filter
// table would still judge (and, with a default deny, drop) an untracked
// packet it has no conntrack entry for.

// rawPreroutingChain sends packets arriving on host endpoints through
// their doNotTrack ingress policy. Packets from workloads are marked (with
// scratch0, which nothing in raw uses) and skip it: untracked policy is
// host endpoint policy only.
func (c *famCompiler) rawPreroutingChain(untracked bool) Chain {
	m := c.marks
	// Another program's rules (in append mode, before ours) may have left
	// our bits set; the accept bit must only ever mean our verdict.
	rules := []Rule{{Action: SetMark{Mark: 0, Mask: m.all()}}}
	if !untracked {
		// No doNotTrack policy on this node: every packet walks this
		// chain, so it does nothing else.
		return Chain{Name: chainPrerouting, Rules: rules}
	}
	for _, w := range c.wildcards() {
		rules = append(rules, Rule{Match: Match{MatchIface{Name: w}}, Action: SetMark{Mark: m.scratch0, Mask: m.scratch0}})
	}
	rules = append(rules,
		Rule{Match: Match{MatchMark{Mark: 0, Mask: m.scratch0}}, Action: Jump{chainFromHEPDispatch}},
		Rule{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: Accept{}},
	)
	return Chain{Name: chainPrerouting, Rules: rules}
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
		{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: Accept{}},
	}}
}

// manglePreroutingChain applies preDNAT policy to packets arriving on host
// endpoints, before the nat table can rewrite their destination (a
// NodePort's, say). Established traffic, and traffic untracked policy
// allowed, is not judged again.
func (c *famCompiler) manglePreroutingChain() Chain {
	m := c.marks
	allow := c.mangleAllow()
	return Chain{Name: chainPrerouting, Rules: []Rule{
		{Match: Match{MatchConntrack{States: "RELATED,ESTABLISHED"}}, Action: allow},
		{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: allow},
		{Action: Jump{chainFromHEPDispatch}},
		{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: allow, Comment: []string{"Host endpoint policy accepted packet."}},
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
