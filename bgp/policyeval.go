package bgp

import (
	"fmt"
	"net/netip"

	api "github.com/osrg/gobgp/v3/api"
)

// The policy evaluator names the statement that decides a route. It reads
// the very SetPoliciesRequest the speaker hands gobgp (policyDefs) and
// follows gobgp's rules for the conditions that request uses (its
// table/policy.go): the assignment's policies in order, each one's
// statements in order, the first statement whose conditions all hold and
// that has a route action decides; statements with only a next-hop action
// change the route and go on; when none decides, the assignment's default
// action does. gobgp itself does not say which statement rejected a path,
// only that it was filtered: `bgp why` shows both, and says so when they
// disagree.

// policyRoute is what gobgp's policy conditions look at.
type policyRoute struct {
	Prefix netip.Prefix
	// Neighbor is, on export, the peer the route goes to; on import, the
	// peer it came from.
	Neighbor netip.Addr
	// Type is LOCAL (originated here), INTERNAL (learned over iBGP) or
	// EXTERNAL (over eBGP).
	Type api.Conditions_RouteType
}

// verdict is a policy decision.
type verdict struct {
	Accept bool
	// Statement is the deciding statement's name; defaultLabel(direction)
	// when the default action decided.
	Statement string
}

func defaultLabel(dir api.PolicyDirection) string {
	if dir == api.PolicyDirection_IMPORT {
		return "(import default)"
	}
	return "(export default)"
}

// evalPolicy decides r under req's assignment for dir.
func evalPolicy(req *api.SetPoliciesRequest, dir api.PolicyDirection, r policyRoute) (verdict, error) {
	sets := map[string]*api.DefinedSet{}
	for _, ds := range req.DefinedSets {
		sets[ds.Name] = ds
	}
	policies := map[string]*api.Policy{}
	for _, p := range req.Policies {
		policies[p.Name] = p
	}
	var as *api.PolicyAssignment
	for _, a := range req.Assignments {
		if a.Direction == dir {
			as = a
		}
	}
	if as == nil {
		return verdict{Accept: true, Statement: defaultLabel(dir)}, nil
	}
	for _, ref := range as.Policies {
		p, ok := policies[ref.Name]
		if !ok {
			return verdict{}, fmt.Errorf("policy %s is assigned but not defined", ref.Name)
		}
		for _, st := range p.Statements {
			match, err := conditionsHold(st.Conditions, sets, r)
			if err != nil {
				return verdict{}, fmt.Errorf("statement %s: %w", st.Name, err)
			}
			if !match || st.Actions == nil {
				continue
			}
			switch st.Actions.RouteAction {
			case api.RouteAction_ACCEPT:
				return verdict{Accept: true, Statement: st.Name}, nil
			case api.RouteAction_REJECT:
				return verdict{Accept: false, Statement: st.Name}, nil
			}
		}
	}
	// gobgp treats a default of NONE as accept.
	return verdict{Accept: as.DefaultAction != api.RouteAction_REJECT, Statement: defaultLabel(dir)}, nil
}

func conditionsHold(c *api.Conditions, sets map[string]*api.DefinedSet, r policyRoute) (bool, error) {
	if c == nil {
		return true, nil
	}
	// Conditions the speaker never sets: refuse rather than guess.
	if c.AsPathSet != nil || c.CommunitySet != nil || c.ExtCommunitySet != nil || c.LargeCommunitySet != nil ||
		c.NextHopInList != nil || c.AsPathLength != nil || c.RpkiResult != 0 ||
		c.CommunityCount != nil || c.Origin != 0 {
		return false, fmt.Errorf("a condition the evaluator does not read")
	}
	if c.NeighborSet != nil {
		ok, err := neighborMatch(sets, c.NeighborSet, r.Neighbor)
		if err != nil || !ok {
			return false, err
		}
	}
	if c.PrefixSet != nil {
		ok, err := prefixMatch(sets, c.PrefixSet, r.Prefix)
		if err != nil || !ok {
			return false, err
		}
	}
	if len(c.AfiSafiIn) > 0 {
		fam := familyOf(r.Prefix.Addr())
		found := false
		for _, f := range c.AfiSafiIn {
			if f.Afi == fam.Afi && f.Safi == fam.Safi {
				found = true
			}
		}
		if !found {
			return false, nil
		}
	}
	switch c.RouteType {
	case api.Conditions_ROUTE_TYPE_NONE:
	case api.Conditions_ROUTE_TYPE_LOCAL, api.Conditions_ROUTE_TYPE_INTERNAL, api.Conditions_ROUTE_TYPE_EXTERNAL:
		if c.RouteType != r.Type {
			return false, nil
		}
	default:
		return false, fmt.Errorf("route type %v", c.RouteType)
	}
	return true, nil
}

func neighborMatch(sets map[string]*api.DefinedSet, m *api.MatchSet, nbr netip.Addr) (bool, error) {
	ds, ok := sets[m.Name]
	if !ok || ds.DefinedType != api.DefinedType_NEIGHBOR {
		return false, fmt.Errorf("neighbor set %s not defined", m.Name)
	}
	// gobgp: an empty set matches everything and a route without a
	// neighbor nothing, both before any inversion.
	if len(ds.List) == 0 {
		return true, nil
	}
	if !nbr.IsValid() {
		return false, nil
	}
	match := false
	for _, s := range ds.List {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return false, fmt.Errorf("neighbor set %s: %w", m.Name, err)
		}
		if p.Contains(nbr) {
			match = true
		}
	}
	return invert(m, match)
}

// prefixMatch is gobgp's PrefixCondition: false for a route of another
// family (before any inversion); otherwise the set's longest prefix
// containing the route decides, by its mask length range.
func prefixMatch(sets map[string]*api.DefinedSet, m *api.MatchSet, p netip.Prefix) (bool, error) {
	ds, ok := sets[m.Name]
	if !ok || ds.DefinedType != api.DefinedType_PREFIX {
		return false, fmt.Errorf("prefix set %s not defined", m.Name)
	}
	if len(ds.Prefixes) == 0 {
		return false, nil
	}
	type entry struct {
		net      netip.Prefix
		min, max int
	}
	var entries []entry
	for _, e := range ds.Prefixes {
		n, err := netip.ParsePrefix(e.IpPrefix)
		if err != nil {
			return false, fmt.Errorf("prefix set %s: %w", m.Name, err)
		}
		entries = append(entries, entry{n.Masked(), int(e.MaskLengthMin), int(e.MaskLengthMax)})
	}
	if entries[0].net.Addr().Is4() != p.Addr().Is4() {
		return false, nil
	}
	longest := -1
	for _, e := range entries {
		if e.net.Addr().Is4() == p.Addr().Is4() && e.net.Bits() <= p.Bits() && e.net.Contains(p.Addr()) {
			longest = max(longest, e.net.Bits())
		}
	}
	match := false
	for _, e := range entries {
		if longest >= 0 && e.net.Bits() == longest && e.net.Contains(p.Addr()) && e.min <= p.Bits() && p.Bits() <= e.max {
			match = true
		}
	}
	return invert(m, match)
}

func invert(m *api.MatchSet, match bool) (bool, error) {
	switch m.Type {
	case api.MatchSet_ANY:
		return match, nil
	case api.MatchSet_INVERT:
		return !match, nil
	}
	return false, fmt.Errorf("match type %v of set %s", m.Type, m.Name)
}
