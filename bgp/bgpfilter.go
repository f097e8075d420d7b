package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	api "github.com/osrg/gobgp/v3/api"

	calicoapi "github.com/projectcalico/calico-node/internal/model/api"
)

// PeerFilterSet is the BGPFilters some sessions name, in the order their
// BGPPeer lists them.
type PeerFilterSet struct {
	Filters []string
	Peers   []netip.Addr // sorted
}

// filterPolicy is the gobgp form of the BGPFilters: statements that go
// first in the export policy, and the import policy's statements.
//
// Calico's confd turns each BGPFilter into a BIRD function per direction
// and family whose rules run in order, the first that matches accepting or
// rejecting the route; a peer's import filter calls its filters' import
// functions in spec.filters order and then accepts, its export filter
// calls the export functions and then Calico's own export filter. gobgp
// applies per-peer policies only to route-server clients, so here the one
// global policy holds, per distinct filter list, one statement per rule
// conditioned on the neighbor set of the sessions naming that list: gobgp
// evaluates export statements against the peer a route goes to, import
// statements against the peer it came from.
type filterPolicy struct {
	defined          []*api.DefinedSet
	exports, imports []*api.Statement
	problems         []string
	// labels name the rule behind each statement ("BGPFilter f
	// exportV4[0] (...)"), for `bgp why`.
	labels map[string]string
}

// peerFilterSets groups sessions by their filter list.
func peerFilterSets(peerFilters map[netip.Addr][]string) []PeerFilterSet {
	byList := map[string]*PeerFilterSet{}
	for addr, names := range peerFilters {
		if len(names) == 0 {
			continue
		}
		key := strings.Join(names, "\x00")
		s := byList[key]
		if s == nil {
			s = &PeerFilterSet{Filters: names}
			byList[key] = s
		}
		s.Peers = append(s.Peers, addr)
	}
	var out []PeerFilterSet
	for _, s := range byList {
		slices.SortFunc(s.Peers, func(a, b netip.Addr) int { return a.Compare(b) })
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b PeerFilterSet) int {
		return slices.Compare(a.Filters, b.Filters)
	})
	return out
}

// buildFilterPolicy compiles the filters the sessions name. A filter that
// does not exist is skipped, as confd skips it.
func buildFilterPolicy(sets []PeerFilterSet, specs map[string]calicoapi.BGPFilterSpec) filterPolicy {
	fp := filterPolicy{labels: map[string]string{}}
	for i, set := range sets {
		nbr := "calico-bgpfilter-peers-" + strconv.Itoa(i)
		ds := &api.DefinedSet{DefinedType: api.DefinedType_NEIGHBOR, Name: nbr}
		for _, a := range set.Peers {
			ds.List = append(ds.List, netip.PrefixFrom(a, a.BitLen()).String())
		}
		fp.defined = append(fp.defined, ds)
		for _, name := range set.Filters {
			spec, ok := specs[name]
			if !ok {
				continue
			}
			for _, d := range []struct {
				export, v4 bool
				field      string
			}{{true, true, "exportV4"}, {true, false, "exportV6"}, {false, true, "importV4"}, {false, false, "importV6"}} {
				for j, r := range spec.Rules(d.export, d.v4) {
					where := fmt.Sprintf("BGPFilter %s %s[%d]", name, d.field, j)
					id := fmt.Sprintf("%s-%s-%s-%d", nbr, name, d.field, j)
					stmts, problem := ruleStatements(id, nbr, r, d.export, d.v4, &fp.defined)
					if problem != "" {
						fp.problems = append(fp.problems, where+": "+problem)
					}
					for _, st := range stmts {
						fp.labels[st.Name] = where + " (" + ruleText(r) + ")"
					}
					if d.export {
						fp.exports = append(fp.exports, stmts...)
					} else {
						fp.imports = append(fp.imports, stmts...)
					}
				}
			}
		}
	}
	return fp
}

// ruleStatements compiles one rule into the statements (one, or one per
// learned route type for source RemotePeers) that match what BIRD's
// `if (<conditions>) then { accept|reject; }` matches. Its prefix set,
// when it has a CIDR, is added to defined.
func ruleStatements(id, nbr string, r calicoapi.BGPFilterRule, export, v4 bool, defined *[]*api.DefinedSet) ([]*api.Statement, string) {
	if r.Interface != "" {
		// BIRD matches the interface of a route's next hop; gobgp's policy
		// has no such condition. The rule is left out, as one that never
		// matches.
		return nil, fmt.Sprintf("interface %q: interface matches are not supported by this BGP speaker; the rule is ignored", r.Interface)
	}
	fam := &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
	bits := 128
	if v4 {
		fam.Afi, bits = api.Family_AFI_IP, 32
	}
	var prefixSet *api.MatchSet
	if r.CIDR != "" {
		p, err := netip.ParsePrefix(r.CIDR)
		if err != nil || p.Addr().Is4() != v4 {
			return nil, fmt.Sprintf("cidr %q is not a valid CIDR of the rule's family; the rule is ignored", r.CIDR)
		}
		p = p.Masked()
		// BIRD: "net = X" is the prefix itself, "net ~ X" any prefix
		// inside it; a prefixLength turns either into the set
		// [ X{min,max} ], min and max clamped to X's length and the
		// family's.
		lo, hi := p.Bits(), bits
		if r.MatchOperator == calicoapi.MatchOperatorEqual || r.MatchOperator == calicoapi.MatchOperatorNotEqual {
			hi = p.Bits()
		}
		if r.PrefixMin != nil || r.PrefixMax != nil {
			lo, hi = p.Bits(), bits
			if r.PrefixMin != nil {
				lo = max(lo, int(*r.PrefixMin))
			}
			if r.PrefixMax != nil {
				hi = min(hi, int(*r.PrefixMax))
			}
		}
		set := id + "-prefix"
		*defined = append(*defined, &api.DefinedSet{DefinedType: api.DefinedType_PREFIX, Name: set,
			Prefixes: []*api.Prefix{{IpPrefix: p.String(), MaskLengthMin: uint32(lo), MaskLengthMax: uint32(hi)}}})
		match := api.MatchSet_ANY
		if r.MatchOperator == calicoapi.MatchOperatorNotEqual || r.MatchOperator == calicoapi.MatchOperatorNotIn {
			match = api.MatchSet_INVERT
		}
		prefixSet = &api.MatchSet{Type: match, Name: set}
	}
	action := api.RouteAction_REJECT
	if r.Action == calicoapi.BGPFilterAccept {
		action = api.RouteAction_ACCEPT
	}
	routeTypes := []api.Conditions_RouteType{api.Conditions_ROUTE_TYPE_NONE}
	if r.Source == calicoapi.BGPFilterSourceRemotePeers && export {
		// Learned from a peer, over iBGP or eBGP: not originated here.
		// (Imported routes all are.)
		routeTypes = []api.Conditions_RouteType{api.Conditions_ROUTE_TYPE_INTERNAL, api.Conditions_ROUTE_TYPE_EXTERNAL}
	}
	var out []*api.Statement
	for i, rt := range routeTypes {
		out = append(out, &api.Statement{
			Name: id + "-" + strconv.Itoa(i),
			Conditions: &api.Conditions{
				NeighborSet: &api.MatchSet{Type: api.MatchSet_ANY, Name: nbr},
				AfiSafiIn:   []*api.Family{fam},
				PrefixSet:   prefixSet,
				RouteType:   rt,
			},
			Actions: &api.Actions{RouteAction: action},
		})
	}
	return out, ""
}

// ruleText shows a rule as its BGPFilter spells it.
func ruleText(r calicoapi.BGPFilterRule) string {
	parts := []string{"action " + string(r.Action)}
	if r.MatchOperator != "" {
		parts = append(parts, "matchOperator "+string(r.MatchOperator))
	}
	if r.CIDR != "" {
		parts = append(parts, "cidr "+r.CIDR)
	}
	if r.PrefixMin != nil || r.PrefixMax != nil {
		lo, hi := "", ""
		if r.PrefixMin != nil {
			lo = strconv.Itoa(int(*r.PrefixMin))
		}
		if r.PrefixMax != nil {
			hi = strconv.Itoa(int(*r.PrefixMax))
		}
		parts = append(parts, "prefixLength "+lo+"-"+hi)
	}
	if r.Source != "" {
		parts = append(parts, "source "+string(r.Source))
	}
	if r.Interface != "" {
		parts = append(parts, "interface "+r.Interface)
	}
	return strings.Join(parts, ", ")
}
