package api

import (
	"fmt"
	"strconv"
	"strings"
)

// isGlobalPolicyName: a DNS label, optionally prefixed by a tier
// ("tier.name").
func isGlobalPolicyName(s string) bool {
	tier, name, dotted := strings.Cut(s, ".")
	if !dotted {
		return isDNSLabelChars(s)
	}
	return isDNSLabelChars(tier) && isDNSLabelChars(name)
}

// isNetworkPolicyName: as isGlobalPolicyName, or a name Calico derives
// from Kubernetes or OpenStack ("knp.default.<subdomain>",
// "ossg.default.<subdomain>").
func isNetworkPolicyName(s string) bool {
	for _, p := range []string{"knp.default.", "ossg.default."} {
		if rest, ok := strings.CutPrefix(s, p); ok && isSubdomainChars(rest) {
			return true
		}
	}
	return isGlobalPolicyName(s)
}

// Name prefixes of policies Calico derives from other APIs; these carry
// their tier implicitly.
var derivedPolicyPrefixes = []string{"knp.default.", "kanp.adminnetworkpolicy.", "kbanp.baselineadminnetworkpolicy.", "ossg."}

func policyNameChecker(valid func(string) bool) func(f *fieldErrors, path, s string) {
	return func(f *fieldErrors, path, s string) {
		switch {
		case s == "":
			f.add(path, nil, msgRequired)
		case len(s) > maxSubdomainLen:
			f.add(path, s, fmt.Sprintf("is too long: at most %d characters", maxSubdomainLen))
		case !valid(s):
			f.add(path, s, "is not a valid policy name: use lower-case letters, digits and '-' (optionally prefixed by \"<tier>.\")")
		}
	}
}

// checkTieredName checks that a dotted policy name starts with its tier,
// as libcalico-go requires.
func checkTieredName(f *fieldErrors, name, tier string) {
	if name == "" || !strings.Contains(name, ".") {
		return
	}
	for _, p := range derivedPolicyPrefixes {
		if strings.HasPrefix(name, p) {
			return
		}
	}
	if !strings.HasPrefix(name, tier+".") {
		f.add("metadata.name", name, fmt.Sprintf("must start with its tier %q followed by '.' when it contains a '.'", tier))
	}
}

// policyCommon is what NetworkPolicy and GlobalNetworkPolicy specs share.
type policyCommon struct {
	tier, selector, saSelector string
	types                      []PolicyType
	ingress, egress            []Rule
	hints                      []PolicyPerformanceHint
	global                     bool
}

func checkPolicy(f *fieldErrors, name string, p policyCommon) {
	if p.tier != "" {
		checkDNSLabel(f, "spec.tier", p.tier)
	}
	checkTieredName(f, name, tierOrDefault(p.tier))
	checkSelector(f, "spec.selector", p.selector)
	checkSelector(f, "spec.serviceAccountSelector", p.saSelector)
	if strings.Contains(p.selector, "global()") {
		f.add("spec.selector", p.selector, "cannot use global(): it is only valid in a rule's namespaceSelector")
	}
	if strings.Contains(p.saSelector, "global()") {
		f.add("spec.serviceAccountSelector", p.saSelector, "cannot use global(): it is only valid in a rule's namespaceSelector")
	}
	seen := map[PolicyType]bool{}
	for i, t := range p.types {
		path := index("spec.types", i)
		switch {
		case t != PolicyTypeIngress && t != PolicyTypeEgress:
			f.add(path, string(t), "must be Ingress or Egress")
		case seen[t]:
			f.add(path, string(t), "is listed more than once")
		}
		seen[t] = true
	}
	seenHint := map[PolicyPerformanceHint]bool{}
	for i, h := range p.hints {
		path := index("spec.performanceHints", i)
		switch {
		case h != PerfHintAssumeNeededOnEveryNode:
			f.add(path, string(h), "must be AssumeNeededOnEveryNode")
		case seenHint[h]:
			f.add(path, string(h), "is listed more than once")
		}
		seenHint[h] = true
	}
	for i := range p.ingress {
		r := &p.ingress[i]
		path := index("spec.ingress", i)
		checkRule(f, path, r)
		if r.Destination.Services != nil {
			f.add(field(path, "destination.services"), nil, "cannot be used in an ingress rule")
		}
		if p.global && r.Source.Services != nil && r.Source.Services.Namespace == "" {
			f.add(field(path, "source.services.namespace"), nil, "is required in a global policy")
		}
	}
	for i := range p.egress {
		r := &p.egress[i]
		path := index("spec.egress", i)
		checkRule(f, path, r)
		if r.Source.Services != nil {
			f.add(field(path, "source.services"), nil, "cannot be used in an egress rule")
		}
		if r.HTTP != nil {
			f.add(field(path, "http"), nil, "cannot be used in an egress rule")
		}
		if p.global && r.Destination.Services != nil && r.Destination.Services.Namespace == "" {
			f.add(field(path, "destination.services.namespace"), nil, "is required in a global policy")
		}
	}
}

// Validate implements Object.
func (p *NetworkPolicy) Validate() error {
	var f fieldErrors
	checkMeta(&f, &p.ObjectMeta, "NetworkPolicy", metaRules{namespaced: true, name: policyNameChecker(isNetworkPolicyName)})
	s := &p.Spec
	checkPolicy(&f, p.Name, policyCommon{
		tier: s.Tier, selector: s.Selector, saSelector: s.ServiceAccountSelector, types: s.Types,
		ingress: s.Ingress, egress: s.Egress, hints: s.PerformanceHints,
	})
	return f.err()
}

// Validate implements Object.
func (p *GlobalNetworkPolicy) Validate() error {
	var f fieldErrors
	checkMeta(&f, &p.ObjectMeta, "GlobalNetworkPolicy", metaRules{name: policyNameChecker(isGlobalPolicyName)})
	s := &p.Spec
	checkPolicy(&f, p.Name, policyCommon{
		tier: s.Tier, selector: s.Selector, saSelector: s.ServiceAccountSelector, types: s.Types,
		ingress: s.Ingress, egress: s.Egress, hints: s.PerformanceHints, global: true,
	})
	checkSelector(&f, "spec.namespaceSelector", s.NamespaceSelector)
	if strings.Contains(s.NamespaceSelector, "global()") {
		f.add("spec.namespaceSelector", s.NamespaceSelector, "cannot use global(): it is only valid in a rule's namespaceSelector")
	}
	if s.DoNotTrack && s.PreDNAT {
		f.add("spec.preDNAT", nil, "cannot be true together with doNotTrack")
	}
	if s.PreDNAT && len(s.Egress) > 0 {
		f.add("spec.egress", nil, "must be empty in a preDNAT policy")
	}
	if s.PreDNAT {
		for i, t := range s.Types {
			if t == PolicyTypeEgress {
				f.add(index("spec.types", i), string(t), "cannot be used in a preDNAT policy")
			}
		}
	}
	if !s.ApplyOnForward && (s.DoNotTrack || s.PreDNAT) {
		f.add("spec.applyOnForward", nil, "must be true when doNotTrack or preDNAT is true")
	}
	return f.err()
}

// Validate implements Object.
func (p *Profile) Validate() error {
	var f fieldErrors
	checkMeta(&f, &p.ObjectMeta, "Profile", metaRules{})
	for i := range p.Spec.Ingress {
		checkRule(&f, index("spec.ingress", i), &p.Spec.Ingress[i])
	}
	for i := range p.Spec.Egress {
		checkRule(&f, index("spec.egress", i), &p.Spec.Egress[i])
	}
	checkLabels(&f, "spec.labelsToApply", p.Spec.LabelsToApply)
	return f.err()
}

// Validate implements Object.
func (t *Tier) Validate() error {
	var f fieldErrors
	checkMeta(&f, &t.ObjectMeta, "Tier", metaRules{name: checkDNSLabel})
	checkOptEnum(&f, "spec.defaultAction", t.Spec.DefaultAction, Deny, Pass)
	reserved := map[string]float64{
		DefaultTierName:                    DefaultTierOrder,
		AdminNetworkPolicyTierName:         AdminNetworkPolicyTierOrder,
		BaselineAdminNetworkPolicyTierName: BaselineAdminNetworkPolicyTierOrder,
	}
	if want, ok := reserved[t.Name]; ok && (t.Spec.Order == nil || *t.Spec.Order != want) {
		f.add("spec.order", nil, fmt.Sprintf("must be %s for the %s tier", strconv.FormatFloat(want, 'f', -1, 64), t.Name))
	}
	return f.err()
}

// checkRule checks one rule at path ("spec.ingress[0]").
func checkRule(f *fieldErrors, path string, r *Rule) {
	switch r.Action {
	case "":
		f.add(field(path, "action"), nil, msgRequired)
	case Allow, Deny, Log, Pass:
	default:
		f.add(field(path, "action"), string(r.Action), "must be one of Allow, Deny, Log, Pass")
	}
	if r.IPVersion != nil && *r.IPVersion != 4 && *r.IPVersion != 6 {
		f.add(field(path, "ipVersion"), *r.IPVersion, "must be 4 or 6")
	}
	checkProtocol(f, field(path, "protocol"), r.Protocol)
	checkProtocol(f, field(path, "notProtocol"), r.NotProtocol)
	checkICMP(f, field(path, "icmp"), r.ICMP)
	checkICMP(f, field(path, "notICMP"), r.NotICMP)

	icmp, icmpv6 := ProtocolFromString(ProtocolICMP), ProtocolFromString(ProtocolICMPv6)
	if r.ICMP != nil && (r.Protocol == nil || (*r.Protocol != icmp && *r.Protocol != icmpv6)) {
		f.add(field(path, "icmp"), nil, "requires protocol ICMP or ICMPv6")
	}
	is := func(p *Protocol, want Protocol) bool { return p != nil && *p == want }
	if r.IPVersion != nil {
		if (is(r.Protocol, icmp) || is(r.NotProtocol, icmp)) && *r.IPVersion != 4 {
			f.add(field(path, "ipVersion"), *r.IPVersion, "must be 4 with protocol ICMP")
		}
		if (is(r.Protocol, icmpv6) || is(r.NotProtocol, icmpv6)) && *r.IPVersion != 6 {
			f.add(field(path, "ipVersion"), *r.IPVersion, "must be 6 with protocol ICMPv6")
		}
	}

	portsOK := r.Protocol != nil && r.Protocol.SupportsPorts()
	for _, e := range []struct {
		name string
		ent  *EntityRule
	}{{"source", &r.Source}, {"destination", &r.Destination}} {
		ep := field(path, e.name)
		checkEntity(f, ep, e.ent)
		if !portsOK {
			if len(e.ent.Ports) > 0 {
				f.add(field(ep, "ports"), nil, "require protocol TCP, UDP or SCTP")
			}
			if len(e.ent.NotPorts) > 0 {
				f.add(field(ep, "notPorts"), nil, "require protocol TCP, UDP or SCTP")
			}
		}
	}
	checkRuleNets(f, path, r)

	if d := &r.Destination; d.Services != nil {
		if len(d.Ports) > 0 {
			f.add(field(path, "destination.ports"), nil, "cannot be used with destination.services: the service's ports apply")
		}
		if len(d.NotPorts) > 0 {
			f.add(field(path, "destination.notPorts"), nil, "cannot be used with destination.services")
		}
	}
	if h := r.HTTP; h != nil {
		hp := field(path, "http")
		if r.Action != Allow {
			f.add(hp, nil, "can only be used in Allow rules")
		}
		if r.Protocol != nil && *r.Protocol != ProtocolFromString(ProtocolTCP) {
			f.add(field(path, "protocol"), r.Protocol.String(), "must be TCP when http is set")
		}
		seen := map[string]bool{}
		for i, m := range h.Methods {
			if seen[m] {
				f.add(index(field(hp, "methods"), i), m, "is listed more than once")
			}
			seen[m] = true
		}
		for i, p := range h.Paths {
			checkHTTPPath(f, index(field(hp, "paths"), i), p)
		}
	}
	if r.Metadata != nil {
		checkAnnotations(f, field(path, "metadata.annotations"), r.Metadata.Annotations)
	}
}

func checkProtocol(f *fieldErrors, path string, p *Protocol) {
	if p == nil {
		return
	}
	if msg := p.validate(); msg != "" {
		if n, err := p.NumValue(); err == nil {
			f.add(path, n, msg)
		} else {
			f.add(path, p.StrVal, msg)
		}
	}
}

func checkICMP(f *fieldErrors, path string, i *ICMPFields) {
	if i == nil {
		return
	}
	if i.Type != nil && (*i.Type < 0 || *i.Type > 254) {
		f.add(field(path, "type"), *i.Type, "is out of range: must be 0-254")
	}
	if i.Code != nil {
		if *i.Code < 0 || *i.Code > 255 {
			f.add(field(path, "code"), *i.Code, "is out of range: must be 0-255")
		}
		if i.Type == nil {
			f.add(field(path, "code"), *i.Code, "requires a type")
		}
	}
}

func checkEntity(f *fieldErrors, path string, e *EntityRule) {
	checkSelector(f, field(path, "selector"), e.Selector)
	checkSelector(f, field(path, "notSelector"), e.NotSelector)
	checkSelector(f, field(path, "namespaceSelector"), e.NamespaceSelector)
	if strings.Contains(e.Selector, "global()") {
		f.add(field(path, "selector"), e.Selector, "cannot use global(): it is only valid in namespaceSelector")
	}
	if strings.Contains(e.NamespaceSelector, "global(") && strings.TrimSpace(e.NamespaceSelector) != "global()" {
		f.add(field(path, "namespaceSelector"), e.NamespaceSelector, "cannot combine global() with other expressions")
	}
	checkPorts(f, field(path, "ports"), e.Ports)
	checkPorts(f, field(path, "notPorts"), e.NotPorts)
	if sa := e.ServiceAccounts; sa != nil {
		checkSelector(f, field(path, "serviceAccounts.selector"), sa.Selector)
	}
	if s := e.Services; s != nil {
		sp := field(path, "services")
		if s.Name == "" {
			f.add(field(sp, "name"), nil, msgRequired)
		} else {
			checkSubdomain(f, field(sp, "name"), s.Name)
		}
		checkOptName(f, field(sp, "namespace"), s.Namespace)
		if e.NamespaceSelector != "" {
			f.add(sp, nil, "cannot be combined with namespaceSelector")
		}
		if e.Selector != "" || e.NotSelector != "" {
			f.add(sp, nil, "cannot be combined with selector or notSelector")
		}
		if e.ServiceAccounts != nil {
			f.add(sp, nil, "cannot be combined with serviceAccounts")
		}
		if len(e.Nets) > 0 || len(e.NotNets) > 0 {
			f.add(sp, nil, "cannot be combined with nets or notNets")
		}
	}
}

// checkRuleNets checks the CIDRs of a rule: each must be a strictly masked
// CIDR, all of one IP version (matching ipVersion when set), and a negated
// match must not be a catch-all.
func checkRuleNets(f *fieldErrors, path string, r *Rule) {
	var seen4, seen6 bool
	for _, l := range []struct {
		name    string
		nets    []string
		negated bool
	}{
		{"source.nets", r.Source.Nets, false},
		{"source.notNets", r.Source.NotNets, true},
		{"destination.nets", r.Destination.Nets, false},
		{"destination.notNets", r.Destination.NotNets, true},
	} {
		lp := field(path, l.name)
		var v4, v6 bool
		for i, n := range l.nets {
			p, ok := parseCIDR(n)
			switch {
			case !ok:
				f.add(index(lp, i), n, "is not a valid CIDR")
				continue
			case p.Masked() != p:
				f.add(index(lp, i), n, "is not a network address: host bits are set (did you mean "+p.Masked().String()+"?)")
			}
			v4 = v4 || p.Addr().Is4()
			v6 = v6 || p.Addr().Is6()
			if l.negated && p.Bits() == 0 {
				f.add(index(lp, i), n, "matches everything: negating it makes the rule match nothing")
			}
		}
		if r.IPVersion != nil && ((v4 && *r.IPVersion != 4) || (v6 && *r.IPVersion != 6)) {
			f.add(lp, nil, fmt.Sprintf("do not match ipVersion %d", *r.IPVersion))
		}
		if (v4 && seen6) || (v6 && seen4) || (v4 && v6) {
			f.add(lp, nil, "mix IPv4 and IPv6 within one rule")
		}
		seen4, seen6 = seen4 || v4, seen6 || v6
	}
}
