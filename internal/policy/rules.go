package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/selector"
)

// setDef defines an IP set a rule refers to: the addresses of everything a
// selector matches, or, for a named port, the (address, protocol, port) of
// every endpoint the selector matches that publishes that port.
type setDef struct {
	id        string
	sel       selector.Selector
	namedPort string
	proto     uint8 // 6, 17 or 132; only for named ports
}

func protoName(n uint8) string {
	switch n {
	case 17:
		return "udp"
	case 132:
		return "sctp"
	}
	return "tcp"
}

// namedPortSetID is felix's ID of a named port set:
// hash.MakeUniqueID("n", selectorID + "," + proto + "," + port).
func namedPortSetID(sel selector.Selector, proto uint8, port string) string {
	return makeUniqueID("n", sel.UniqueID()+","+protoName(proto)+","+port)
}

// side is one end (source or destination) of a parsed rule.
type side struct {
	nets, notNets       []netip.Prefix
	ports, notPorts     []PortRange
	sets, notSets       []*setDef
	namedSets, notNamed []*setDef
}

// parsedRule is a policy or profile rule resolved into the pieces felix's
// renderer works with (its proto.Rule), before it is split per IP family.
type parsedRule struct {
	action      api.Action
	ipVersion   int // 0: both
	protocol    *api.Protocol
	notProtocol *api.Protocol
	icmp        *api.ICMPFields
	notICMP     *api.ICMPFields
	src, dst    side
	comments    []string
	// index is the rule's position in its policy's or profile's ingress
	// or egress list.
	index int
	// note explains how a rule with an unsupported match was changed; it
	// is reported as a problem.
	note string
}

// parseRule resolves one rule of a policy in namespace ns ("" for global
// policies and profiles). It returns an error for a rule that cannot be
// compiled; the caller leaves such a rule out, so it matches nothing.
func (m *model) parseRule(r *api.Rule, ns string, sets map[string]*setDef) (*parsedRule, error) {
	pr := &parsedRule{
		action:      r.Action,
		protocol:    r.Protocol,
		notProtocol: r.NotProtocol,
		icmp:        r.ICMP,
		notICMP:     r.NotICMP,
	}
	switch pr.action {
	case "":
		pr.action = api.Allow
	case api.Allow, api.Deny, api.Pass, api.Log:
	default:
		return nil, fmt.Errorf("unknown action %q", r.Action)
	}
	if r.IPVersion != nil {
		pr.ipVersion = *r.IPVersion
	} else if r.Protocol != nil {
		// felix limits ICMP rules to IPv4 and ICMPv6 rules to IPv6 (by
		// name; we do the same for the numbers, which can only match in
		// their own family anyway).
		switch n, _ := protoNumber(*r.Protocol); n {
		case 1:
			pr.ipVersion = 4
		case 58:
			pr.ipVersion = 6
		}
	}
	if r.Protocol != nil && r.NotProtocol != nil {
		// iptables takes one -p per rule. A protocol already excludes
		// every other one, so the notProtocol adds nothing, unless it names
		// the same protocol and the rule can never match.
		p, _ := protoNumber(*r.Protocol)
		np, _ := protoNumber(*r.NotProtocol)
		if p == np {
			return nil, fmt.Errorf("protocol and notProtocol are both %s: the rule matches nothing", r.Protocol)
		}
		pr.notProtocol = nil
	}
	if r.Metadata != nil {
		for k, v := range r.Metadata.Annotations {
			pr.comments = append(pr.comments, k+"="+v)
		}
		slices.Sort(pr.comments)
	}

	// Named ports default to TCP unless the rule's protocol is UDP or
	// SCTP.
	namedProto := uint8(6)
	if r.Protocol != nil {
		if n, ok := protoNumber(*r.Protocol); ok && (n == 17 || n == 132) {
			namedProto = n
		}
	}
	hasPorts := func(e *api.EntityRule) bool { return len(e.Ports) > 0 || len(e.NotPorts) > 0 }
	if (hasPorts(&r.Source) || hasPorts(&r.Destination)) && (r.Protocol == nil || !r.Protocol.SupportsPorts()) {
		return nil, fmt.Errorf("ports need protocol TCP, UDP or SCTP")
	}
	if (r.ICMP != nil || r.NotICMP != nil) && pr.ipVersion == 0 {
		return nil, fmt.Errorf("icmp and notICMP need protocol ICMP or ICMPv6")
	}
	var err error
	if pr.src, err = m.parseSide(&r.Source, ns, namedProto, sets); err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	if pr.dst, err = m.parseSide(&r.Destination, ns, namedProto, sets); err != nil {
		return nil, fmt.Errorf("destination: %w", err)
	}
	if what := unsupportedMatches(r); what != "" {
		// The rest of the rule is compiled without the unsupported match,
		// which makes it match more. Which way that errs depends on the
		// action, and it must err towards denying: a policy that a node
		// enforces more loosely than written is a hole nobody asked for,
		// one enforced more strictly is a visible outage the problem
		// report explains.
		switch pr.action {
		case api.Allow, api.Log:
			// Leaving an Allow out allows less; leaving a Log out only
			// loses log lines. Matching more would allow or log what the
			// rule does not cover.
			return nil, fmt.Errorf("%s", what)
		case api.Deny:
			// Leaving a Deny out would let later rules (or a later
			// policy) allow what it denies; so would leaving out the
			// whole policy. Without the match it denies a superset.
			pr.note = what + ": the rule is enforced without it, so it denies more than written"
		case api.Pass:
			// Neither leaving a Pass out nor passing more is safe: the
			// rest of this tier, or the next one, may allow what the
			// other would deny. Denying the superset is.
			pr.action = api.Deny
			pr.note = what + ": the rule is enforced as a Deny without it (passing more, or not at all, could allow what a tier denies)"
		}
	}
	return pr, nil
}

// unsupportedMatches describes the matches of r that this dataplane
// cannot enforce, or returns "": service matches need the endpoints of
// Kubernetes Services and http matches an application-layer proxy.
func unsupportedMatches(r *api.Rule) string {
	var what []string
	if r.Source.Services != nil {
		what = append(what, "source.services")
	}
	if r.Destination.Services != nil {
		what = append(what, "destination.services")
	}
	if len(what) > 0 {
		what = []string{strings.Join(what, " and ") + " (Kubernetes Service endpoints)"}
	}
	if r.HTTP != nil {
		what = append(what, "http (application-layer policy)")
	}
	if len(what) == 0 {
		return ""
	}
	return strings.Join(what, " and ") + " is not supported"
}

func (m *model) parseSide(e *api.EntityRule, ns string, namedProto uint8, sets map[string]*setDef) (side, error) {
	var s side
	var err error
	if s.nets, err = parseNets(e.Nets); err != nil {
		return s, err
	}
	if s.notNets, err = parseNets(e.NotNets); err != nil {
		return s, err
	}
	posText, err := m.sels.entitySelector(e, ns)
	if err != nil {
		return s, err
	}
	negText := e.NotSelector
	// felix folds a notSelector into the positive selector when there is
	// one, so that a single IP set does the whole match.
	if posText != "" && negText != "" {
		posText = fmt.Sprintf("(%s) && (!(%s))", posText, negText)
		negText = ""
	}
	var pos, neg selector.Selector
	if posText != "" {
		if pos, err = m.sels.parse(posText); err != nil {
			return s, err
		}
	}
	if negText != "" {
		if neg, err = m.sels.parse(negText); err != nil {
			return s, err
		}
	}
	set := func(sel selector.Selector) *setDef {
		id := sel.UniqueID()
		if d, ok := sets[id]; ok {
			return d
		}
		d := &setDef{id: id, sel: sel}
		sets[id] = d
		return d
	}
	namedSet := func(name string) *setDef {
		sel := pos
		if sel == nil {
			sel, _ = m.sels.parse("all()")
		}
		id := namedPortSetID(sel, namedProto, name)
		if d, ok := sets[id]; ok {
			return d
		}
		d := &setDef{id: id, sel: sel, namedPort: name, proto: namedProto}
		sets[id] = d
		return d
	}
	var named, notNamed []string
	for _, p := range e.Ports {
		if p.PortName != "" {
			named = append(named, p.PortName)
			continue
		}
		s.ports = append(s.ports, PortRange{p.MinPort, p.MaxPort})
	}
	for _, p := range e.NotPorts {
		if p.PortName != "" {
			notNamed = append(notNamed, p.PortName)
			continue
		}
		s.notPorts = append(s.notPorts, PortRange{p.MinPort, p.MaxPort})
	}
	for _, n := range named {
		s.namedSets = append(s.namedSets, namedSet(n))
	}
	for _, n := range notNamed {
		s.notNamed = append(s.notNamed, namedSet(n))
	}
	// With only named ports, the named port sets already hold just the
	// selected endpoints, so felix leaves the selector set out.
	if pos != nil && (len(s.ports) > 0 || len(named) == 0) {
		s.sets = append(s.sets, set(pos))
	}
	if neg != nil {
		s.notSets = append(s.notSets, set(neg))
	}
	return s, nil
}

func parseNets(nets []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, n := range nets {
		p, err := parsePrefix(n)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR", n)
		}
		out = append(out, p)
	}
	return out, nil
}

// filterNets keeps the nets of one family. It reports whether the rule
// cannot apply to this family: it had nets but none of this family, or a
// negated catch-all (which would match nothing).
func filterNets(nets []netip.Prefix, v6, negated bool) ([]netip.Prefix, bool) {
	if len(nets) == 0 {
		return nil, false
	}
	var out []netip.Prefix
	for _, n := range nets {
		if n.Addr().Is6() != v6 {
			continue
		}
		if negated && n.Bits() == 0 {
			return nil, true
		}
		out = append(out, n)
	}
	return out, len(out) == 0
}

// splitPorts groups ports into multiport matches of at most
// MultiportSlots slots (a range takes two), iptables' limit.
func splitPorts(ports []PortRange) [][]PortRange {
	var splits [][]PortRange
	var cur []PortRange
	free := MultiportSlots
	for _, p := range ports {
		need := p.slots()
		if free < need {
			splits = append(splits, cur)
			cur, free = nil, MultiportSlots
		}
		cur = append(cur, p)
		free -= need
	}
	if cur != nil {
		splits = append(splits, cur)
	}
	return splits
}

// famCompiler renders rules for one IP family.
type famCompiler struct {
	version int
	cfg     Config
	marks   marks
	// encap says which of the overlay's host rules the family has.
	encap encap
	// orig interns the rules' origins.
	orig origins
	// cache, if set, keeps endpoint chains across compilations (Compiler).
	cache *chainCache
	// groupNames memoises groupChain: every endpoint a group selects
	// names it, and the name is a SHA3 hash.
	groupNames map[string]string
}

// groupName is groupChain(inbound, tier, sel, keys), memoised.
func (c *famCompiler) groupName(inbound bool, tier, sel string, keys []string) string {
	if c.groupNames == nil {
		return groupChain(inbound, tier, sel, keys)
	}
	k := strconv.FormatBool(inbound) + "\x00" + tier + "\x00" + sel + "\x00" + strings.Join(keys, "\x00")
	if n, ok := c.groupNames[k]; ok {
		return n
	}
	n := groupChain(inbound, tier, sel, keys)
	c.groupNames[k] = n
	return n
}

func (c *famCompiler) deny() Action {
	if c.cfg.DenyAction == "REJECT" {
		return Reject{}
	}
	return Drop{}
}

func (c *famCompiler) denyName() string {
	if c.cfg.DenyAction == "REJECT" {
		return "Reject"
	}
	return "Drop"
}

func (c *famCompiler) setName(d *setDef) string {
	return setName(c.version, d.id)
}

func protocolMatch(p api.Protocol, negate bool) MatchProtocol {
	if n, err := p.NumValue(); err == nil {
		return MatchProtocol{Not: negate, Num: n}
	}
	return MatchProtocol{Not: negate, Name: strings.ToLower(p.StrVal)}
}

// renderRules renders a policy's or profile's rules into one chain's
// worth of iptables rules, as felix's ProtoRulesToIptablesRules does:
// trailing RETURNs are dropped (falling off the end returns anyway) and
// the first rule carries the chain's comment. owner is the policy or
// profile, for logPrefix's %-specifiers; origin names it (and the
// direction) in the rules' origins.
func (c *famCompiler) renderRules(rules []*parsedRule, comment string, owner logOwner, origin Origin) []Rule {
	var out []Rule
	for _, r := range rules {
		out = append(out, c.renderRule(r, origin)...)
	}
	if strings.Contains(c.cfg.LogPrefix, "%") {
		for i := range out {
			if l, ok := out[i].Action.(Log); ok {
				out[i].Action = Log{Prefix: owner.expand(l.Prefix)}
			}
		}
	}
	for len(out) > 0 {
		if _, ok := out[len(out)-1].Action.(Return); !ok {
			break
		}
		out = out[:len(out)-1]
	}
	if len(out) == 0 {
		out = append(out, Rule{})
	}
	out[0].Comment = append(out[0].Comment, comment)
	return out
}

// logOwner is the policy or profile a chain's rules come from, for the
// %-specifiers of logPrefix.
type logOwner struct {
	name, namespace, tier string
	profile               bool
}

func policyOwner(p *policyInfo) logOwner {
	return logOwner{name: strings.TrimPrefix(p.key, p.namespace+"/"), namespace: p.namespace, tier: p.tier}
}

func profileOwner(name string) logOwner { return logOwner{name: name, profile: true} }

// expand replaces felix's logPrefix specifiers: %t the tier, %k the kind
// (gnp, np, knp, pro), %n the name and %p namespace/name (the name alone
// for kinds without a namespace). As in felix, a policy name's "<tier>."
// prefix is not part of %n and %p, and a Kubernetes policy keeps its
// knp.default. prefix; a profile has no tier.
func (o logOwner) expand(format string) string {
	kind, name := "gnp", o.name
	switch {
	case o.profile:
		kind = "pro"
	case strings.HasPrefix(o.name, "knp.default."):
		kind = "knp"
	case o.namespace != "":
		kind = "np"
	}
	if kind != "pro" && kind != "knp" {
		name = strings.TrimPrefix(name, o.tier+".")
	}
	qualified := name
	if o.namespace != "" {
		qualified = o.namespace + "/" + name
	}
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		switch format[i+1] {
		case 't':
			b.WriteString(o.tier)
		case 'k':
			b.WriteString(kind)
		case 'n':
			b.WriteString(name)
		case 'p':
			b.WriteString(qualified)
		default:
			b.WriteByte('%')
			continue
		}
		i++
	}
	return b.String()
}

// blockBuilder emits the extra rules felix needs when a rule's match
// cannot be written as one iptables rule: several positive CIDRs or port
// groups are OR-ed into the scratch0 ("all blocks pass") mark bit, using
// scratch1 for blocks after the first; negated CIDR lists clear the bit.
type blockBuilder struct {
	c           *famCompiler
	used        bool
	donePosFrst bool
	rules       []Rule
}

func (b *blockBuilder) start(initial uint32) {
	if b.used {
		return
	}
	m := b.c.marks
	b.rules = append(b.rules, Rule{Action: SetMark{Mark: initial, Mask: m.scratch0 | m.scratch1}})
	b.used = true
}

func (b *blockBuilder) positiveMark() uint32 {
	if !b.donePosFrst {
		return b.c.marks.scratch0
	}
	return b.c.marks.scratch1
}

func (b *blockBuilder) finishPositive() {
	if !b.donePosFrst {
		b.donePosFrst = true
		return
	}
	m := b.c.marks
	b.rules = append(b.rules, Rule{
		Match:  Match{MatchMark{Mark: 0, Mask: m.scratch1}},
		Action: SetMark{Mark: 0, Mask: m.scratch0},
	})
}

func (b *blockBuilder) ports(proto *api.Protocol, splits [][]PortRange, named []string, dir Dir) {
	b.start(0)
	mark := b.positiveMark()
	for _, split := range splits {
		var m Match
		if proto != nil {
			m = append(m, protocolMatch(*proto, false))
		}
		m = append(m, MatchPorts{Dir: dir, Ports: split})
		b.rules = append(b.rules, Rule{Match: m, Action: SetMark{Mark: mark, Mask: mark}})
	}
	for _, set := range named {
		b.rules = append(b.rules, Rule{
			Match:  Match{MatchSet{Dir: dir, Set: set, IPPort: true}},
			Action: SetMark{Mark: mark, Mask: mark},
		})
	}
	b.finishPositive()
}

func (b *blockBuilder) nets(nets []netip.Prefix, dir Dir) {
	b.start(0)
	mark := b.positiveMark()
	for _, n := range nets {
		b.rules = append(b.rules, Rule{Match: Match{MatchNet{Dir: dir, Net: n}}, Action: SetMark{Mark: mark, Mask: mark}})
	}
	b.finishPositive()
}

func (b *blockBuilder) notNets(nets []netip.Prefix, dir Dir) {
	m := b.c.marks
	b.start(m.scratch0)
	for _, n := range nets {
		b.rules = append(b.rules, Rule{Match: Match{MatchNet{Dir: dir, Net: n}}, Action: SetMark{Mark: 0, Mask: m.scratch0}})
	}
}

// renderRule renders one rule for this family (nothing if the rule does
// not apply to it), following felix's ProtoRuleToIptablesRules. owner is
// the origin of the policy or profile the rule belongs to.
func (c *famCompiler) renderRule(r *parsedRule, owner Origin) []Rule {
	v6 := c.version == 6
	if r.ipVersion != 0 && r.ipVersion != c.version {
		return nil
	}
	var skip bool
	src, dst := r.src, r.dst
	if src.nets, skip = filterNets(r.src.nets, v6, false); skip {
		return nil
	}
	if src.notNets, skip = filterNets(r.src.notNets, v6, true); skip {
		return nil
	}
	if dst.nets, skip = filterNets(r.dst.nets, v6, false); skip {
		return nil
	}
	if dst.notNets, skip = filterNets(r.dst.notNets, v6, true); skip {
		return nil
	}
	setNames := func(ds []*setDef) []string {
		var out []string
		for _, d := range ds {
			out = append(out, c.setName(d))
		}
		return out
	}
	srcNamed, dstNamed := setNames(src.namedSets), setNames(dst.namedSets)

	b := &blockBuilder{c: c}
	srcSplits := splitPorts(src.ports)
	if len(srcSplits)+len(srcNamed) > 1 {
		b.ports(r.protocol, srcSplits, srcNamed, Src)
		srcSplits, srcNamed = nil, nil
	}
	dstSplits := splitPorts(dst.ports)
	if len(dstSplits)+len(dstNamed) > 1 {
		b.ports(r.protocol, dstSplits, dstNamed, Dst)
		dstSplits, dstNamed = nil, nil
	}
	if len(src.nets) > 1 {
		b.nets(src.nets, Src)
		src.nets = nil
	}
	if len(dst.nets) > 1 {
		b.nets(dst.nets, Dst)
		dst.nets = nil
	}
	if len(src.nets)+len(src.notNets) > 1 {
		b.notNets(src.notNets, Src)
		src.notNets = nil
	}
	if len(dst.nets)+len(dst.notNets) > 1 {
		b.notNets(dst.notNets, Dst)
		dst.notNets = nil
	}

	// The main match, in felix's order: positive criteria, then negated.
	var m Match
	if r.protocol != nil {
		m = append(m, protocolMatch(*r.protocol, false))
	}
	m = append(m, endMatch(Src, false, src.nets, setNames(src.sets), srcSplits, srcNamed)...)
	m = append(m, endMatch(Dst, false, dst.nets, setNames(dst.sets), dstSplits, dstNamed)...)
	if r.icmp != nil && r.icmp.Type != nil {
		m = append(m, icmpMatch(r.icmp, v6, false))
	}
	if r.notProtocol != nil {
		m = append(m, protocolMatch(*r.notProtocol, true))
	}
	m = append(m, endMatch(Src, true, src.notNets, setNames(src.notSets), splitPorts(src.notPorts), setNames(src.notNamed))...)
	m = append(m, endMatch(Dst, true, dst.notNets, setNames(dst.notSets), splitPorts(dst.notPorts), setNames(dst.notNamed))...)
	if r.notICMP != nil && r.notICMP.Type != nil {
		m = append(m, icmpMatch(r.notICMP, v6, true))
	}
	if b.used {
		m = append(m, MatchMark{Mark: c.marks.scratch0, Mask: c.marks.scratch0})
	}

	out := b.rules
	act := c.actionRules(r.action, m)
	owner.Rule, owner.Action = r.index, r.action
	for i := range out {
		owner.Kind = OriginRulePart
		out[i].Origin = c.orig.get(owner)
	}
	for i := range act {
		// The first rule carries the match, the second (if any) acts on
		// the verdict mark it set.
		owner.Kind = OriginRule
		if i > 0 {
			owner.Kind = OriginRuleVerdict
		}
		act[i].Origin = c.orig.get(owner)
	}
	out = append(out, act...)
	for i := range out {
		out[i].Comment = append(out[i].Comment, r.comments...)
	}
	return out
}

// endMatch is the criteria on one end (dir) of a rule, in felix's order:
// nets, IP sets, port groups, named-port sets; all negated when not.
func endMatch(dir Dir, not bool, nets []netip.Prefix, sets []string, portSplits [][]PortRange, named []string) Match {
	var m Match
	for _, n := range nets {
		m = append(m, MatchNet{Not: not, Dir: dir, Net: n})
	}
	for _, s := range sets {
		m = append(m, MatchSet{Not: not, Dir: dir, Set: s})
	}
	for _, split := range portSplits {
		m = append(m, MatchPorts{Not: not, Dir: dir, Ports: split})
	}
	for _, s := range named {
		m = append(m, MatchSet{Not: not, Dir: dir, Set: s, IPPort: true})
	}
	return m
}

func icmpMatch(f *api.ICMPFields, v6, negate bool) MatchICMP {
	m := MatchICMP{Not: negate, V6: v6, Type: uint8(*f.Type)}
	if f.Code != nil {
		m.HasCode, m.Code = true, uint8(*f.Code)
	}
	return m
}

// actionRules turns a match and a rule action into rules. Allow and Pass
// set their mark bit and return, so that the endpoint chain sees the
// verdict; Deny sets the drop bit and drops; Log logs and carries on.
func (c *famCompiler) actionRules(action api.Action, m Match) []Rule {
	switch action {
	case api.Log:
		return []Rule{{Match: m, Action: Log{Prefix: c.cfg.LogPrefix}}}
	case api.Deny:
		mk := c.marks.drop
		return []Rule{
			{Match: m, Action: SetMark{Mark: mk, Mask: mk}},
			{Match: Match{MatchMark{Mark: mk, Mask: mk}}, Action: c.deny()},
		}
	case api.Pass:
		mk := c.marks.pass
		return []Rule{
			{Match: m, Action: SetMark{Mark: mk, Mask: mk}},
			{Match: Match{MatchMark{Mark: mk, Mask: mk}}, Action: Return{}},
		}
	default:
		mk := c.marks.accept
		return []Rule{
			{Match: m, Action: SetMark{Mark: mk, Mask: mk}},
			{Match: Match{MatchMark{Mark: mk, Mask: mk}}, Action: Return{}},
		}
	}
}
