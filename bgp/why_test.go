package bgp

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// whyCase builds facts around node "a" (192.0.2.11, AS 64512) with an
// iBGP mesh peer b (192.0.2.12), an iBGP mesh peer c (192.0.2.13) and an
// eBGP ToR (192.0.2.1, AS 65000); pools 10.244.0.0/16 and the VXLAN pool
// 10.250.0.0/16; block 10.244.1.0/26 affine to a.
func whyBase(prefix string) whyFacts {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	in := RoutingInput{
		Identity: Identity{Node: "a", IPv4: netip.MustParseAddr("192.0.2.11"), Net4: netip.MustParsePrefix("192.0.2.0/24"),
			AS: 64512, RouterID: netip.MustParseAddr("192.0.2.11")},
		Pools: []api.Pool{
			parsedPool("pods", "10.244.0.0/16", nil),
			parsedPool("vx", "10.250.0.0/16", func(s *api.IPPoolSpec) { s.VXLANMode = api.VXLANModeAlways }),
		},
		IPAM: IPAMState{Blocks: prefixes("10.244.1.0/26")},
	}
	mesh := func(addr string) Session {
		return Session{Name: "Mesh_" + strings.ReplaceAll(addr, ".", "_"), Type: PeerMesh, Addr: netip.MustParseAddr(addr), PeerAS: 64512, LocalAS: 64512}
	}
	sessions := []Session{
		{Name: "Global_192_0_2_1", Type: PeerGlobal, Addr: netip.MustParseAddr("192.0.2.1"), PeerAS: 65000, LocalAS: 64512},
		mesh("192.0.2.12"), mesh("192.0.2.13"),
	}
	adverts := Adverts(in)
	v := explainView{Enabled: true, In: in, Adverts: adverts, Filter: Filter(in, sessions, nil, nil), Sessions: sessions}
	v.Published = append(KernelRoutes(nil, in, adverts), Blackholes(in)...)
	var peers []peerFact
	for _, s := range sessions {
		peers = append(peers, peerFact{Session: s, State: StateEstablished, EoRReceived: true, EoRSent: true})
	}
	return whyFacts{Node: "a", Prefix: netip.MustParsePrefix(prefix), Now: now, View: v, Peers: peers,
		AdjIn: map[netip.Addr][]pathFact{}, AdjOut: map[netip.Addr][]pathFact{}, Reach: map[netip.Addr]reach{}}
}

var (
	torAddr = netip.MustParseAddr("192.0.2.1")
	bAddr   = netip.MustParseAddr("192.0.2.12")
	cAddr   = netip.MustParseAddr("192.0.2.13")
)

// learned puts a best path from peer into the facts as gobgp would list
// it: in the global RIB, in the peer's adj-in, and in the other peers'
// adj-out (filtered as the facts' policy decides, unless out says).
func learned(f *whyFacts, peer netip.Addr, nh string) pathFact {
	p := pathFact{Prefix: f.Prefix, NextHop: netip.MustParseAddr(nh), Peer: peer, Received: f.Now.Add(-90 * time.Second), Best: true}
	f.Global = append(f.Global, p)
	f.AdjIn[peer] = append(f.AdjIn[peer], p)
	return p
}

func kernelRouteOf(r routes.Route) kernelRoute {
	return kernelRoute{Dst: r.Dst, Type: r.Type, Gw: r.Via, Dev: r.Dev, Proto: 80, Table: 254, Unicast: r.Type == routes.Unicast}
}

// TestBuildWhy: the verdicts `bgp why` gives for situations the netns
// tests cannot stage on demand.
func TestBuildWhy(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		setup  func(f *whyFacts)
		check  func(t *testing.T, rep WhyReport)
	}{{
		name:   "this node restarted: updates held until End-of-RIB",
		prefix: "10.244.1.0/26",
		setup: func(f *whyFacts) {
			f.Global = []pathFact{{Prefix: f.Prefix, NextHop: f.View.In.Identity.IPv4, Best: true}}
			for i := range f.Peers {
				f.Peers[i].LocalRestarting = true
				f.AdjOut[f.Peers[i].Session.Addr] = []pathFact{f.Global[0]}
			}
		},
		check: func(t *testing.T, rep WhyReport) {
			for _, p := range rep.Peers {
				if p.Sent != SentWaitingEoR || !strings.Contains(p.Detail, "End-of-RIB") {
					t.Errorf("%s: %s: %s", p.Peer, p.Sent, p.Detail)
				}
			}
		},
	}, {
		name:   "the peer restarted and has not sent End-of-RIB: its old path is stale",
		prefix: "10.244.2.0/26",
		setup: func(f *whyFacts) {
			p := learned(f, bAddr, "192.0.2.12")
			f.Global[0].Stale, f.AdjIn[bAddr][0].Stale = true, true
			f.Peers[1].PeerRestarting, f.Peers[1].EoRReceived = true, false
			_ = p
		},
		check: func(t *testing.T, rep WhyReport) {
			got := rep.Peers[1].Received
			if !strings.Contains(got, "held stale by graceful restart: the peer is back after a restart; its old routes stay until its End-of-RIB") {
				t.Errorf("received from b: %q", got)
			}
		},
	}, {
		name:   "withdrawn: the session to the last path's peer is down",
		prefix: "10.244.2.0/26",
		setup: func(f *whyFacts) {
			// As the actor records it: the reason worded when asked.
			f.Withdrawn = &withdrawal{At: f.Now.Add(-30 * time.Second), Peer: bAddr, NextHop: bAddr}
			f.Peers[1].State = StateActive
		},
		check: func(t *testing.T, rep WhyReport) {
			texttest.Contains(t, "withdrawn", rep.Withdrawn, "no path for 00:00:30: the last path, from 192.0.2.12 via 192.0.2.12, was withdrawn",
				"the session to 192.0.2.12 is Active")
			if rep.Peers[0].Sent != SentWithdrawn {
				t.Errorf("to the ToR: %s (%s)", rep.Peers[0].Sent, rep.Peers[0].Detail)
			}
			texttest.Contains(t, "kernel", rep.Kernel.Verdict, "no route: no best path: the last path went away 00:00:30 ago")
		},
	}, {
		name:   "iBGP split horizon",
		prefix: "10.244.2.0/26",
		setup: func(f *whyFacts) {
			p := learned(f, bAddr, "192.0.2.12")
			f.AdjOut[torAddr] = []pathFact{p}
			r := routes.Route{Dst: f.Prefix, Via: p.NextHop}
			f.View.Published = append(f.View.Published, r)
			f.Kernel = []kernelRoute{kernelRouteOf(r)}
		},
		check: func(t *testing.T, rep WhyReport) {
			if p := rep.Peers[2]; p.Sent != SentNotSent || !strings.Contains(p.Detail, "an iBGP route is not passed to another iBGP peer") {
				t.Errorf("to c: %s (%s)", p.Sent, p.Detail)
			}
			if p := rep.Peers[1]; !strings.Contains(p.Detail, "the best path was learned from this peer") {
				t.Errorf("to b: %s (%s)", p.Sent, p.Detail)
			}
			if p := rep.Peers[0]; p.Sent != SentExported || !strings.Contains(p.Detail, "Calico export: inside an IP pool") {
				t.Errorf("to the ToR: %s (%s)", p.Sent, p.Detail)
			}
			if !rep.Kernel.Installed {
				t.Errorf("kernel: %+v", rep.Kernel)
			}
		},
	}, {
		name:   "gobgp and the policy disagree",
		prefix: "10.244.2.0/26",
		setup: func(f *whyFacts) {
			p := learned(f, bAddr, "192.0.2.12")
			p.Filtered = true
			f.AdjOut[torAddr] = []pathFact{p}
		},
		check: func(t *testing.T, rep WhyReport) {
			if p := rep.Peers[0]; p.Sent != SentFiltered || !strings.Contains(p.Detail, "the two disagree") {
				t.Errorf("to the ToR: %s (%s)", p.Sent, p.Detail)
			}
		},
	}, {
		name:   "best path in a VXLAN pool: the overlay's route is installed",
		prefix: "10.250.3.0/26",
		setup: func(f *whyFacts) {
			learned(f, bAddr, "192.0.2.12")
			tun := routes.Route{Dst: f.Prefix, Via: netip.MustParseAddr("10.250.3.1"), Dev: "vxlan.calico", OnLink: true}
			f.Table = &routes.Inspection{Passes: 3, Wanted: []routes.Want{{Source: routes.SourceTunnels, Route: tun, Text: tun.String()}},
				Applied: &routes.Want{Source: routes.SourceTunnels, Route: tun, Text: tun.String()}}
			f.Kernel = []kernelRoute{kernelRouteOf(tun)}
		},
		check: func(t *testing.T, rep WhyReport) {
			texttest.Contains(t, "reason", rep.Kernel.Reason, "it is in VXLAN IP pool vx: the overlay routes it, not BGP")
			texttest.Contains(t, "verdict", rep.Kernel.Verdict, "not BGP's", "installed for 20-tunnels")
		},
	}, {
		name:   "a tunnel route takes precedence over BGP's",
		prefix: "10.244.2.0/26",
		setup: func(f *whyFacts) {
			p := learned(f, bAddr, "192.0.2.12")
			bgpR := routes.Route{Dst: f.Prefix, Via: p.NextHop}
			tun := routes.Route{Dst: f.Prefix, Via: netip.MustParseAddr("10.244.2.1"), Dev: "vxlan.calico", OnLink: true}
			f.View.Published = append(f.View.Published, bgpR)
			f.Table = &routes.Inspection{Passes: 3, Wanted: []routes.Want{
				{Source: routes.SourceTunnels, Route: tun, Text: tun.String()}, {Source: routes.SourceBGP, Route: bgpR, Text: bgpR.String()}}}
			f.Kernel = []kernelRoute{kernelRouteOf(tun)}
		},
		check: func(t *testing.T, rep WhyReport) {
			texttest.Contains(t, "verdict", rep.Kernel.Verdict, "20-tunnels's route takes precedence and is installed")
			if rep.Kernel.Installed {
				t.Error("BGP's route reported installed")
			}
		},
	}, {
		name:   "written, then deleted behind the route table's back",
		prefix: "10.244.2.0/26",
		setup: func(f *whyFacts) {
			p := learned(f, bAddr, "192.0.2.12")
			r := routes.Route{Dst: f.Prefix, Via: p.NextHop}
			f.View.Published = append(f.View.Published, r)
			f.Table = &routes.Inspection{Passes: 3, Wanted: []routes.Want{{Source: routes.SourceBGP, Route: r, Text: r.String()}},
				Applied: &routes.Want{Source: routes.SourceBGP, Route: r, Text: r.String()}}
			f.Reach[p.NextHop] = reach{Via: "192.0.2.12 dev eth0"}
		},
		check: func(t *testing.T, rep WhyReport) {
			texttest.Contains(t, "verdict", rep.Kernel.Verdict, "not installed", "the kernel has no such route", "removed behind its back")
		},
	}, {
		name:   "not handed to the route table yet",
		prefix: "10.244.2.0/26",
		setup: func(f *whyFacts) {
			learned(f, bAddr, "192.0.2.12")
		},
		check: func(t *testing.T, rep WhyReport) {
			texttest.Contains(t, "verdict", rep.Kernel.Verdict, "not installed yet: the speaker has not handed 10.244.2.0/26 via 192.0.2.12 to the route table")
		},
	}, {
		name:   "a block in a disableBGPExport pool is not originated",
		prefix: "10.245.1.0/26",
		setup: func(f *whyFacts) {
			f.View.In.Pools = append(f.View.In.Pools, parsedPool("private", "10.245.0.0/16", func(s *api.IPPoolSpec) { s.DisableBGPExport = true }))
			f.View.In.IPAM.Blocks = append(f.View.In.IPAM.Blocks, netip.MustParsePrefix("10.245.1.0/26"))
		},
		check: func(t *testing.T, rep WhyReport) {
			texttest.Contains(t, "origin", rep.Origin, "not originated by this node: IPAM block affine to this node, but IP pool private has disableBGPExport")
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := whyBase(tc.prefix)
			tc.setup(&f)
			rep := buildWhy(f)
			tc.check(t, rep)
			var b bytes.Buffer
			if err := WriteWhy(&b, &rep); err != nil {
				t.Fatal(err)
			}
			if t.Failed() {
				t.Logf("report:\n%s", b.String())
			}
		})
	}
}

// TestQueryProtocol: the status socket answers the first protocol's
// clients (which send nothing) with the status, and the queries with
// their answers or errors.
func TestQueryProtocol(t *testing.T) {
	a := New(Config{NodeName: "a"}, nil, nil, nil, nil)
	sock := filepath.Join(t.TempDir(), "bgp.sock")
	l, err := listenStatus(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.serveQueries(ctx, l); close(done) }()
	t.Cleanup(func() { cancel(); l.Close(); <-done })

	// A client of the first protocol.
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var st Status
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := json.NewDecoder(c).Decode(&st); err != nil || st.Node != "a" {
		t.Errorf("status without a request: %+v, %v", st, err)
	}
	c.Close()

	qctx, qcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer qcancel()
	if st, err := QueryStatus(qctx, sock); err != nil || st.Node != "a" {
		t.Errorf("QueryStatus: %+v, %v", st, err)
	}
	if _, err := QueryRoutes(qctx, sock); err == nil || !strings.Contains(err.Error(), "BGP is not running on this node") {
		t.Errorf("routes with BGP off: %v", err)
	}
	if _, err := QueryWhy(qctx, sock, "10.0.0.0/33"); err == nil || !strings.Contains(err.Error(), "is not a prefix") {
		t.Errorf("why of a bad prefix: %v", err)
	}
	if _, err := QueryWhy(qctx, filepath.Join(t.TempDir(), "none.sock"), "10.0.0.0/8"); err == nil || !strings.Contains(err.Error(), ErrNotRunning.Error()) {
		t.Errorf("why without an agent: %v", err)
	}
}
