package api

import (
	"net/netip"
	"regexp"
	"strconv"
)

// BGPFilter is an ordered list of import and export rules per address
// family that BGPPeers name in spec.filters (Calico v3.31's BGPFilter).
// A route is checked against the rules of each filter the peer names, in
// order; the first rule that matches accepts or rejects it. A route no
// rule matches goes on to Calico's own import (accept) and export
// (Calico's routes only) behaviour.
type BGPFilter struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       BGPFilterSpec `json:"spec,omitempty"`
}

// BGPFilterSpec holds the rules, per direction and family.
type BGPFilterSpec struct {
	ExportV4 []BGPFilterRuleV4 `json:"exportV4,omitempty"`
	ImportV4 []BGPFilterRuleV4 `json:"importV4,omitempty"`
	ExportV6 []BGPFilterRuleV6 `json:"exportV6,omitempty"`
	ImportV6 []BGPFilterRuleV6 `json:"importV6,omitempty"`
}

// BGPFilterRuleV4 matches IPv4 routes: by CIDR (with MatchOperator and an
// optional PrefixLength range), by Source and by outgoing Interface; all
// that are set must match.
type BGPFilterRuleV4 struct {
	CIDR          string                   `json:"cidr,omitempty"`
	PrefixLength  *BGPFilterPrefixLengthV4 `json:"prefixLength,omitempty"`
	Source        BGPFilterMatchSource     `json:"source,omitempty"`
	Interface     string                   `json:"interface,omitempty"`
	MatchOperator BGPFilterMatchOperator   `json:"matchOperator,omitempty"`
	Action        BGPFilterAction          `json:"action"`
}

// BGPFilterRuleV6 is BGPFilterRuleV4 for IPv6 routes.
type BGPFilterRuleV6 struct {
	CIDR          string                   `json:"cidr,omitempty"`
	PrefixLength  *BGPFilterPrefixLengthV6 `json:"prefixLength,omitempty"`
	Source        BGPFilterMatchSource     `json:"source,omitempty"`
	Interface     string                   `json:"interface,omitempty"`
	MatchOperator BGPFilterMatchOperator   `json:"matchOperator,omitempty"`
	Action        BGPFilterAction          `json:"action"`
}

// BGPFilterPrefixLengthV4 narrows a CIDR match to prefix lengths in
// [Min, Max] (0-32); unset bounds are the CIDR's own length and 32.
type BGPFilterPrefixLengthV4 struct {
	Min *int32 `json:"min,omitempty"`
	Max *int32 `json:"max,omitempty"`
}

// BGPFilterPrefixLengthV6 is BGPFilterPrefixLengthV4 for IPv6 (0-128).
type BGPFilterPrefixLengthV6 struct {
	Min *int32 `json:"min,omitempty"`
	Max *int32 `json:"max,omitempty"`
}

// BGPFilterMatchSource restricts a rule to routes of one origin.
type BGPFilterMatchSource string

// BGPFilterSourceRemotePeers: routes learned from BGP peers, not those
// this node originates.
const BGPFilterSourceRemotePeers BGPFilterMatchSource = "RemotePeers"

// BGPFilterMatchOperator compares a route's prefix with a rule's CIDR.
type BGPFilterMatchOperator string

const (
	MatchOperatorEqual    BGPFilterMatchOperator = "Equal"
	MatchOperatorNotEqual BGPFilterMatchOperator = "NotEqual"
	MatchOperatorIn       BGPFilterMatchOperator = "In"
	MatchOperatorNotIn    BGPFilterMatchOperator = "NotIn"
)

// BGPFilterAction is what a matching rule does with the route.
type BGPFilterAction string

const (
	BGPFilterAccept BGPFilterAction = "Accept"
	BGPFilterReject BGPFilterAction = "Reject"
)

// BGPFilterRule is a rule of either family, as the BGP speaker applies it.
type BGPFilterRule struct {
	CIDR          string
	PrefixMin     *int32
	PrefixMax     *int32
	Source        BGPFilterMatchSource
	Interface     string
	MatchOperator BGPFilterMatchOperator
	Action        BGPFilterAction
}

// Rules returns the rules of one direction ("import" or "export") and
// family, in order.
func (s *BGPFilterSpec) Rules(export, v4 bool) []BGPFilterRule {
	var out []BGPFilterRule
	switch {
	case v4:
		l := s.ImportV4
		if export {
			l = s.ExportV4
		}
		for _, r := range l {
			g := BGPFilterRule{CIDR: r.CIDR, Source: r.Source, Interface: r.Interface, MatchOperator: r.MatchOperator, Action: r.Action}
			if r.PrefixLength != nil {
				g.PrefixMin, g.PrefixMax = r.PrefixLength.Min, r.PrefixLength.Max
			}
			out = append(out, g)
		}
	default:
		l := s.ImportV6
		if export {
			l = s.ExportV6
		}
		for _, r := range l {
			g := BGPFilterRule{CIDR: r.CIDR, Source: r.Source, Interface: r.Interface, MatchOperator: r.MatchOperator, Action: r.Action}
			if r.PrefixLength != nil {
				g.PrefixMin, g.PrefixMax = r.PrefixLength.Min, r.PrefixLength.Max
			}
			out = append(out, g)
		}
	}
	return out
}

// Default implements Object; Calico defaults nothing in a BGPFilter.
func (f *BGPFilter) Default() {}

// bgpFilterInterface is Calico's pattern for a rule's interface: a name
// that may hold BIRD's "*" wildcard.
var bgpFilterInterface = regexp.MustCompile(`^[a-zA-Z0-9_.*-]{1,15}$`)

// Validate implements Object, with Calico's checks: action Accept or
// Reject; cidr and matchOperator set together; prefixLength only with a
// cidr, within the family's bounds; a cidr of the rule's family.
func (f *BGPFilter) Validate() error {
	var fe fieldErrors
	checkMeta(&fe, &f.ObjectMeta, "BGPFilter", metaRules{})
	for _, d := range []struct {
		path   string
		export bool
		v4     bool
	}{{"spec.exportV4", true, true}, {"spec.importV4", false, true}, {"spec.exportV6", true, false}, {"spec.importV6", false, false}} {
		for i, r := range f.Spec.Rules(d.export, d.v4) {
			checkBGPFilterRule(&fe, index(d.path, i), r, d.v4)
		}
	}
	return fe.err()
}

func checkBGPFilterRule(f *fieldErrors, path string, r BGPFilterRule, v4 bool) {
	if r.Action == "" {
		f.add(field(path, "action"), nil, msgRequired)
	}
	checkEnum(f, field(path, "action"), r.Action, BGPFilterAccept, BGPFilterReject)
	checkEnum(f, field(path, "matchOperator"), r.MatchOperator, MatchOperatorEqual, MatchOperatorNotEqual, MatchOperatorIn, MatchOperatorNotIn)
	checkEnum(f, field(path, "source"), r.Source, BGPFilterSourceRemotePeers)
	if r.Interface != "" && !bgpFilterInterface.MatchString(r.Interface) {
		f.add(field(path, "interface"), r.Interface, `is not a valid interface pattern: 1-15 letters, digits, '_', '.', '-' or '*'`)
	}
	// Calico's struct-level reasons, word for word.
	switch {
	case r.CIDR != "" && r.MatchOperator == "":
		f.add(field(path, "cidr"), r.CIDR, "MatchOperator cannot be empty when CIDR is not")
	case r.CIDR == "" && r.MatchOperator != "":
		f.add(field(path, "matchOperator"), string(r.MatchOperator), "CIDR cannot be empty when MatchOperator is not")
	}
	maxLen := int32(128)
	if v4 {
		maxLen = 32
	}
	if r.CIDR != "" {
		p, err := netip.ParsePrefix(r.CIDR)
		switch {
		case err != nil:
			f.add(field(path, "cidr"), r.CIDR, "is not a valid CIDR")
		case p.Addr().Is4() != v4:
			fam := "IPv6"
			if v4 {
				fam = "IPv4"
			}
			f.add(field(path, "cidr"), r.CIDR, "is not an "+fam+" CIDR")
		case p.Masked() != p:
			// Calico's netv4/netv6: strictly masked.
			f.add(field(path, "cidr"), r.CIDR, "is not a network address: host bits are set (did you mean "+p.Masked().String()+"?)")
		}
	} else if r.PrefixMin != nil || r.PrefixMax != nil {
		f.add(field(path, "prefixLength"), nil, "CIDR cannot be empty when PrefixLength is not")
	}
	for _, b := range []struct {
		name string
		v    *int32
	}{{"min", r.PrefixMin}, {"max", r.PrefixMax}} {
		if b.v != nil && (*b.v < 0 || *b.v > maxLen) {
			f.add(field(field(path, "prefixLength"), b.name), *b.v, "must be between 0 and "+strconv.Itoa(int(maxLen)))
		}
	}
}
