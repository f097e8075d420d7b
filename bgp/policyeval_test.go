package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	gobgpapi "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
)

func quietGobgp() server.ServerOption {
	return server.LoggerOption(&gobgpLogger{log: slog.New(slog.DiscardHandler), book: newStatusBook("", time.Now)})
}

// plainPeer is a bare gobgp speaker on a loopback address that accepts
// one session from the speaker under test and originates prefixes.
type plainPeer struct {
	s    *server.BgpServer
	addr netip.Addr
	as   uint32
	port int
}

func startPlainPeer(t *testing.T, addr string, as uint32, toAS uint32, prefixes ...string) *plainPeer {
	t.Helper()
	p := &plainPeer{s: server.NewBgpServer(quietGobgp()), addr: netip.MustParseAddr(addr), as: as, port: proctest.FreePort(t)}
	go p.s.Serve()
	ctx := context.Background()
	if err := p.s.StartBgp(ctx, &gobgpapi.StartBgpRequest{Global: &gobgpapi.Global{
		Asn: as, RouterId: addr, ListenPort: int32(p.port), ListenAddresses: []string{addr}}}); err != nil {
		t.Fatalf("start peer %s: %v", addr, err)
	}
	t.Cleanup(func() { p.s.StopBgp(context.Background(), &gobgpapi.StopBgpRequest{}) })
	peer := &gobgpapi.Peer{
		Conf:      &gobgpapi.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: toAS},
		Transport: &gobgpapi.Transport{LocalAddress: addr, PassiveMode: true},
	}
	if as != toAS {
		peer.EbgpMultihop = &gobgpapi.EbgpMultihop{Enabled: true, MultihopTtl: 255}
	}
	if err := p.s.AddPeer(ctx, &gobgpapi.AddPeerRequest{Peer: peer}); err != nil {
		t.Fatalf("peer %s: add 127.0.0.1: %v", addr, err)
	}
	for _, s := range prefixes {
		path, err := apiPath(Advert{Prefix: netip.MustParsePrefix(s), NextHop: p.addr})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.s.AddPath(ctx, &gobgpapi.AddPathRequest{TableType: gobgpapi.TableType_GLOBAL, Path: path}); err != nil {
			t.Fatalf("peer %s: originate %s: %v", addr, s, err)
		}
	}
	return p
}

// TestPolicyEvalAgreesWithGobgp: the speaker under test gets the policy
// the actor builds (pools, one with disableBGPExport, a service range, a
// BGPFilter with Equal/NotEqual/In/NotIn rules, a prefixLength range and
// source RemotePeers, on import and export) over live sessions with an
// iBGP and two eBGP peers. For every path gobgp lists in every peer's
// adj-in and adj-out, its own filtered flag and the evaluator's verdict
// must agree, and the evaluator names the rules a user would expect.
func TestPolicyEvalAgreesWithGobgp(t *testing.T) {
	if testing.Short() {
		t.Skip("BGP sessions on loopback")
	}
	const myAS = 64512
	// ibgp: another node; tor: eBGP, no filters; edge: eBGP with the filter.
	ibgp := startPlainPeer(t, "127.0.0.2", myAS, myAS, "10.244.2.0/26", "10.245.2.0/26", "198.51.100.0/24")
	tor := startPlainPeer(t, "127.0.0.3", 65000, myAS, "10.244.200.0/24", "203.0.113.0/24")
	edge := startPlainPeer(t, "127.0.0.4", 65001, myAS, "192.168.1.0/24", "192.168.2.0/30", "172.16.0.0/16", "10.244.3.0/26", "fd00::/64")

	in := RoutingInput{
		Identity: Identity{Node: "a", IPv4: netip.MustParseAddr("127.0.0.1"), AS: myAS, RouterID: netip.MustParseAddr("127.0.0.1")},
		Pools: []api.Pool{
			parsedPool("pods", "10.244.0.0/16", nil),
			parsedPool("private", "10.245.0.0/16", func(s *api.IPPoolSpec) { s.DisableBGPExport = true }),
		},
		Global: bgpConfig("default", func(s *api.BGPConfigurationSpec) {
			s.ServiceClusterIPs = []api.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}}
		}),
		IPAM: IPAMState{Blocks: prefixes("10.244.1.0/26", "10.244.4.0/26", "10.245.1.0/26")},
	}
	session := func(name string, p *plainPeer) Session {
		return Session{Name: name, Type: PeerGlobal, Addr: p.addr, Port: uint16(p.port), PeerAS: p.as, LocalAS: myAS,
			Source: netip.MustParseAddr("127.0.0.1")}
	}
	sessions := []Session{session("Global_ibgp", ibgp), session("Global_tor", tor), session("Global_edge", edge)}
	filters := map[string]*api.BGPFilter{"edge-filter": bgpFilterObj("edge-filter", api.BGPFilterSpec{
		ExportV4: []api.BGPFilterRuleV4{
			{Action: api.BGPFilterReject, MatchOperator: api.MatchOperatorIn, CIDR: "10.244.2.0/24"},
			{Action: api.BGPFilterReject, MatchOperator: api.MatchOperatorEqual, CIDR: "10.244.4.0/26"},
			{Action: api.BGPFilterAccept, MatchOperator: api.MatchOperatorNotEqual, CIDR: "10.0.0.0/8", Source: api.BGPFilterSourceRemotePeers},
		},
		ImportV4: []api.BGPFilterRuleV4{
			{Action: api.BGPFilterReject, MatchOperator: api.MatchOperatorIn, CIDR: "192.168.0.0/16",
				PrefixLength: &api.BGPFilterPrefixLengthV4{Min: i32(24), Max: i32(28)}},
			{Action: api.BGPFilterReject, MatchOperator: api.MatchOperatorNotIn, CIDR: "172.16.0.0/12"},
		},
	})}
	f := Filter(in, sessions, map[netip.Addr][]string{edge.addr: {"edge-filter"}}, filters)

	// The speaker under test, driven as the actor drives it.
	s := server.NewBgpServer(quietGobgp())
	go s.Serve()
	logger := slog.New(slog.DiscardHandler)
	sp := newSpeaker(s, newStatusBook("a", time.Now), logger)
	sp.restarting = false // no End-of-RIB wait: nothing restarted
	ctx := context.Background()
	if _, err := sp.ensureGlobal(ctx, globalConf{routerID: in.Identity.RouterID, as: myAS, port: uint16(proctest.FreePort(t)), listen: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.StopBgp(context.Background(), &gobgpapi.StopBgpRequest{}) })
	if err := sp.syncFilter(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := sp.syncPaths(ctx, Adverts(in)); err != nil {
		t.Fatal(err)
	}
	if err := sp.syncPeers(ctx, sessions); err != nil {
		t.Fatal(err)
	}

	list := func(tt gobgpapi.TableType, peer netip.Addr) []pathFact {
		t.Helper()
		var out []pathFact
		err := s.ListPath(ctx, &gobgpapi.ListPathRequest{TableType: tt, Name: peer.String(), Family: familyV4, EnableFiltered: true},
			func(d *gobgpapi.Destination) {
				for _, p := range d.Paths {
					pf, err := decodePath(p)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, pf)
				}
			})
		if err != nil {
			t.Fatalf("list %v of %s: %v", tt, peer, err)
		}
		return out
	}
	// Everything the peers send has arrived, and every route is offered.
	eventually(t, 30*time.Second, "the peers' routes", func() (bool, string) {
		n := len(list(gobgpapi.TableType_ADJ_IN, ibgp.addr)) + len(list(gobgpapi.TableType_ADJ_IN, tor.addr)) + len(list(gobgpapi.TableType_ADJ_IN, edge.addr))
		return n == 9, fmt.Sprintf("%d paths received", n)
	})
	time.Sleep(500 * time.Millisecond) // best-path selection and adj-out follow

	pn := newPolicyNames(f)
	byAddr := sessionsByAddr(sessions)
	decided := map[string]string{} // "export 10.244.2.0/26 to 127.0.0.4" -> statement label
	counts := map[string]int{}
	for _, peer := range []netip.Addr{ibgp.addr, tor.addr, edge.addr} {
		for _, dir := range []gobgpapi.PolicyDirection{gobgpapi.PolicyDirection_EXPORT, gobgpapi.PolicyDirection_IMPORT} {
			tt, what := gobgpapi.TableType_ADJ_OUT, "export"
			if dir == gobgpapi.PolicyDirection_IMPORT {
				tt, what = gobgpapi.TableType_ADJ_IN, "import"
			}
			for _, p := range list(tt, peer) {
				v, label := pn.decide(dir, policyRoute{Prefix: p.Prefix, Neighbor: peer, Type: routeType(p, byAddr)})
				key := fmt.Sprintf("%s %s %s", what, p.Prefix, peer)
				decided[key] = label
				counts[fmt.Sprintf("%s accept=%v", what, v.Accept)]++
				if v.Accept == p.Filtered {
					t.Errorf("%s: gobgp filtered=%v, evaluator accepts=%v (%s)", key, p.Filtered, v.Accept, label)
				}
			}
		}
	}
	for _, c := range []string{"export accept=true", "export accept=false", "import accept=true", "import accept=false"} {
		if counts[c] == 0 {
			t.Errorf("no %s case: %v", c, counts)
		}
	}
	for key, want := range map[string]string{
		"export 10.244.2.0/26 127.0.0.4":   "BGPFilter edge-filter exportV4[0]",
		"export 10.244.4.0/26 127.0.0.4":   "BGPFilter edge-filter exportV4[1]",
		"export 203.0.113.0/24 127.0.0.4":  "BGPFilter edge-filter exportV4[2]",
		"export 10.244.1.0/26 127.0.0.4":   "Calico export: a route this node originates",
		"export 10.244.1.0/26 127.0.0.3":   "Calico export: a route this node originates",
		"export 198.51.100.0/24 127.0.0.3": "Calico export: nothing else is passed on",
		"export 10.244.200.0/24 127.0.0.2": "Calico export: inside an IP pool",
		"export 10.245.2.0/26 127.0.0.3":   "Calico export: inside an IP pool with disableBGPExport",
		"import 192.168.1.0/24 127.0.0.4":  "BGPFilter edge-filter importV4[0]",
		"import 192.168.2.0/30 127.0.0.4":  "BGPFilter edge-filter importV4[1]",
		"import 172.16.0.0/16 127.0.0.4":   "Calico import: everything no BGPFilter rule rejects",
		"import 203.0.113.0/24 127.0.0.3":  "Calico import",
	} {
		if got, ok := decided[key]; !ok || !strings.HasPrefix(got, want) {
			t.Errorf("%s decided by %q (listed: %v); want %q", key, got, ok, want)
		}
	}
}
