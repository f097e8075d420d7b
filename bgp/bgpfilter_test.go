package bgp

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	gobgpapi "github.com/osrg/gobgp/v3/api"

	"github.com/projectcalico/calico-node/internal/model/api"
)

func bgpFilterObj(name string, spec api.BGPFilterSpec) *api.BGPFilter {
	return &api.BGPFilter{TypeMeta: api.TypeMeta{Kind: "BGPFilter"}, ObjectMeta: api.ObjectMeta{Name: name}, Spec: spec}
}

func i32(v int32) *int32 { return &v }

// TestBGPFilterStatements: each rule becomes what BIRD's generated
// `if (...) then { accept|reject; }` matches, for the sessions naming the
// filter only, in the peer's filter order; Equal/NotEqual/In/NotIn and a
// prefixLength range become prefix ranges (inverted for the negations);
// source RemotePeers on export matches learned routes only; an interface
// rule, which the speaker cannot evaluate, is reported and left out.
func TestBGPFilterStatements(t *testing.T) {
	tor, rr := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	specs := map[string]api.BGPFilterSpec{
		"a": {
			ExportV4: []api.BGPFilterRuleV4{
				{Action: api.BGPFilterReject, MatchOperator: api.MatchOperatorIn, CIDR: "10.244.2.0/24"},
				{Action: api.BGPFilterAccept, MatchOperator: api.MatchOperatorNotEqual, CIDR: "10.0.0.0/8", Source: api.BGPFilterSourceRemotePeers},
				{Action: api.BGPFilterReject, Interface: "eth*"},
			},
			ImportV6: []api.BGPFilterRuleV6{
				{Action: api.BGPFilterReject, MatchOperator: api.MatchOperatorNotIn, CIDR: "fd00::/8", PrefixLength: &api.BGPFilterPrefixLengthV6{Min: i32(48), Max: i32(64)}},
			},
		},
		"b": {ImportV4: []api.BGPFilterRuleV4{{Action: api.BGPFilterAccept}}},
	}
	sets := peerFilterSets(map[netip.Addr][]string{tor: {"a", "missing", "b"}, rr: {"b"}})
	fp := buildFilterPolicy(sets, specs)

	type stmt struct {
		nbr, family, prefix, match, routeType, action string
	}
	prefixes := map[string]string{}
	nbrs := map[string]string{}
	for _, ds := range fp.defined {
		switch ds.DefinedType {
		case gobgpapi.DefinedType_PREFIX:
			p := ds.Prefixes[0]
			prefixes[ds.Name] = p.IpPrefix + "{" + itoa(p.MaskLengthMin) + "," + itoa(p.MaskLengthMax) + "}"
		case gobgpapi.DefinedType_NEIGHBOR:
			nbrs[ds.Name] = strings.Join(ds.List, ",")
		}
	}
	flat := func(ss []*gobgpapi.Statement) []stmt {
		var out []stmt
		for _, s := range ss {
			c := s.Conditions
			st := stmt{nbr: nbrs[c.NeighborSet.Name], family: c.AfiSafiIn[0].Afi.String(), routeType: c.RouteType.String(), action: s.Actions.RouteAction.String()}
			if c.PrefixSet != nil {
				st.prefix, st.match = prefixes[c.PrefixSet.Name], c.PrefixSet.Type.String()
			}
			out = append(out, st)
		}
		return out
	}
	wantExport := []stmt{
		{"192.0.2.1/32", "AFI_IP", "10.244.2.0/24{24,32}", "ANY", "ROUTE_TYPE_NONE", "REJECT"},
		{"192.0.2.1/32", "AFI_IP", "10.0.0.0/8{8,8}", "INVERT", "ROUTE_TYPE_INTERNAL", "ACCEPT"},
		{"192.0.2.1/32", "AFI_IP", "10.0.0.0/8{8,8}", "INVERT", "ROUTE_TYPE_EXTERNAL", "ACCEPT"},
	}
	// Filter lists in order (["a" "missing" "b"] before ["b"]), each
	// list's filters in its order.
	wantImport := []stmt{
		{"192.0.2.1/32", "AFI_IP6", "fd00::/8{48,64}", "INVERT", "ROUTE_TYPE_NONE", "REJECT"},
		{"192.0.2.1/32", "AFI_IP", "", "", "ROUTE_TYPE_NONE", "ACCEPT"},
		{"2001:db8::1/128", "AFI_IP", "", "", "ROUTE_TYPE_NONE", "ACCEPT"},
	}
	if got := flat(fp.exports); !slices.Equal(got, wantExport) {
		t.Errorf("export statements:\n got %v\nwant %v", got, wantExport)
	}
	if got := flat(fp.imports); !slices.Equal(got, wantImport) {
		t.Errorf("import statements:\n got %v\nwant %v", got, wantImport)
	}
	if len(fp.problems) != 1 || !strings.Contains(fp.problems[0], "BGPFilter a exportV4[2]") || !strings.Contains(fp.problems[0], "eth*") {
		t.Errorf("problems %q, want the interface rule", fp.problems)
	}
}

func itoa(v uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// TestBIRDBGPFilter: a BGPFilter named by the ToR's BGPPeer keeps one
// node's block from the ToR (BIRD, eBGP) and one of the ToR's routes out
// of the nodes; the rest passes as without it. Taking the filter off the
// BGPPeer sends and accepts everything again over the live sessions.
func TestBIRDBGPFilter(t *testing.T) {
	f := newFabric(t)
	needBIRD(t)
	peer := bgpPeerObj("tor", api.BGPPeerSpec{PeerIP: "192.0.2.1", ASNumber: 65000, Filters: []string{"tor-filter"}})
	f.apply(
		poolObj("pool", "10.244.0.0/16"),
		bgpFilterObj("tor-filter", api.BGPFilterSpec{
			ExportV4: []api.BGPFilterRuleV4{{Action: api.BGPFilterReject, MatchOperator: api.MatchOperatorIn, CIDR: "10.244.2.0/24"}},
			ImportV4: []api.BGPFilterRuleV4{{Action: api.BGPFilterReject, MatchOperator: api.MatchOperatorEqual, CIDR: "10.244.200.0/24"}},
		}),
		peer,
	)
	_, b, h1, h2, _, _ := torFabric(t, f, `
protocol static tor_routes {
  ipv4;
  route 10.244.200.0/24 blackhole;
  route 203.0.113.0/24 blackhole;
}
template bgp node {
  local 192.0.2.1 as 65000;
  ipv4 { import all; export where source = RTS_STATIC; };
}
`)

	torRoutes := func() string { return b.ctl(t, "show", "route") }
	waitBIRD := func(what string, ok func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			out := torRoutes()
			if ok(out) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("BIRD: %s:\n%s", what, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The nodes still mesh: n1 has n2's block. The ToR gets n1's only.
	waitRoutes(t, h1, 20*time.Second, map[string]string{"10.244.2.0/26": "via 192.0.2.12", "203.0.113.0/24": "via 192.0.2.1"})
	waitRoutes(t, h2, 20*time.Second, map[string]string{"10.244.1.0/26": "via 192.0.2.11", "203.0.113.0/24": "via 192.0.2.1"})
	waitBIRD("learns 10.244.1.0/26", func(s string) bool { return strings.Contains(s, "10.244.1.0/26") })
	time.Sleep(2 * time.Second) // what else would come has come
	if out := torRoutes(); strings.Contains(out, "10.244.2.0/26") {
		t.Errorf("the export rule did not keep 10.244.2.0/26 from the ToR:\n%s", out)
	}
	for _, h := range []*host{h1, h2} {
		if r := h.calicoRoutes(t)["10.244.200.0/24"]; r != "" {
			t.Errorf("%s installed 10.244.200.0/24 (%s) that the import rule rejects", h.ns, r)
		}
	}

	// The filter off the peer: everything passes, without a session reset.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obj, err := f.store.Get(ctx, "BGPPeer", "", "tor")
	if err != nil {
		t.Fatal(err)
	}
	obj.(*api.BGPPeer).Spec.Filters = nil
	if _, err := f.store.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	waitBIRD("learns 10.244.2.0/26 once unfiltered", func(s string) bool { return strings.Contains(s, "10.244.2.0/26") })
	for _, h := range []*host{h1, h2} {
		waitRoutes(t, h, 20*time.Second, map[string]string{"10.244.200.0/24": "via 192.0.2.1"})
	}
}
