package bgp

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// birdProto is the kernel route protocol BIRD installs with (RTPROT_BIRD).
const birdProto = netlink.RouteProtocol(12)

func birdNeighbors(hosts ...*host) string {
	var b strings.Builder
	for i, h := range hosts {
		fmt.Fprintf(&b, "protocol bgp n%d from node { neighbor %s as 64512; }\n", i+1, h.addr)
	}
	return b.String()
}

// torFabric is the fabric several tests share: a BIRD ToR ("tor",
// 192.0.2.1, AS 65000) whose configuration is Calico's preamble, body and
// one eBGP session per node, and agents n1 and n2 (192.0.2.11 and .12)
// with their sessions up and each node affine to its block (10.244.1.0/26,
// 10.244.2.0/26). body holds BIRD's routes and its "node" template.
func torFabric(t *testing.T, f *fabric, body string) (tor *host, b *bird, h1, h2 *host, a1, a2 *agent) {
	t.Helper()
	tor = f.host("tor", "192.0.2.1")
	h1, h2 = f.host("n1", "192.0.2.11"), f.host("n2", "192.0.2.12")
	b = f.bird(tor, "\nlog stderr all;\nrouter id 192.0.2.1;\nprotocol device { }\n"+body+birdNeighbors(h1, h2))
	a1, a2 = f.agent(h1, "n1"), f.agent(h2, "n2")
	a1.waitSessions(t, 60*time.Second, "192.0.2.1", "192.0.2.12")
	a2.waitSessions(t, 30*time.Second, "192.0.2.1", "192.0.2.11")
	b.waitEstablished(t, 10*time.Second, "n1", "n2")
	f.affine("n1", "10.244.1.0/26")
	f.affine("n2", "10.244.2.0/26")
	return tor, b, h1, h2, a1, a2
}

// TestBIRDRouteReflector: with the mesh off, the nodes peer only with a
// BIRD route reflector, and get each other's blocks through it.
func TestBIRDRouteReflector(t *testing.T) {
	f := newFabric(t)
	needBIRD(t)
	f.apply(
		poolObj("pool", "10.244.0.0/16"),
		bgpConfigObj("default", func(s *api.BGPConfigurationSpec) { s.NodeToNodeMeshEnabled = ptr(false) }),
		bgpPeerObj("rr", api.BGPPeerSpec{PeerIP: "192.0.2.1", ASNumber: 64512}),
	)
	rr := f.host("rr", "192.0.2.1")
	h1, h2, h3 := f.host("n1", "192.0.2.11"), f.host("n2", "192.0.2.12"), f.host("n3", "192.0.2.13")
	b := f.bird(rr, `
log stderr all;
router id 192.0.2.1;
protocol device { }
protocol direct { ipv4; }
template bgp node {
  local 192.0.2.1 as 64512;
  rr client;
  graceful restart on;
  ipv4 { import all; export all; };
}
`+birdNeighbors(h1, h2, h3))
	agents := []*agent{f.agent(h1, "n1"), f.agent(h2, "n2"), f.agent(h3, "n3")}
	for _, a := range agents {
		a.waitSessions(t, 60*time.Second, "192.0.2.1")
		if s := a.sessions()["192.0.2.1"]; s.Type != PeerGlobal {
			t.Errorf("%s: session to the reflector is %q, want global", a.node, s.Type)
		}
	}
	b.waitEstablished(t, 10*time.Second, "n1", "n2", "n3")

	f.affine("n1", "10.244.1.0/26")
	f.affine("n2", "10.244.2.0/26")
	f.affine("n3", "10.244.3.0/26")
	// Reflected routes keep the originating node as next hop.
	waitRoutes(t, h1, 20*time.Second, map[string]string{"10.244.2.0/26": "via 192.0.2.12", "10.244.3.0/26": "via 192.0.2.13"})
	waitRoutes(t, h2, 10*time.Second, map[string]string{"10.244.1.0/26": "via 192.0.2.11", "10.244.3.0/26": "via 192.0.2.13"})
	waitRoutes(t, h3, 10*time.Second, map[string]string{"10.244.1.0/26": "via 192.0.2.11", "10.244.2.0/26": "via 192.0.2.12"})
}

// TestBIRDExternalPeer: BIRD as an eBGP top-of-rack router learns the pod
// blocks from the meshed nodes and advertises a route in a pool (and one
// outside every pool) that the nodes install. It runs on both
// datastores: on the Kubernetes API the BGPPeer is a custom resource and
// the mesh is made of the Kubernetes Nodes the agents registered on.
func TestBIRDExternalPeer(t *testing.T) {
	needBIRD(t)
	onBothDatastores(t, testBIRDExternalPeer)
}

func testBIRDExternalPeer(t *testing.T, f *fabric) {
	f.apply(
		poolObj("pool", "10.244.0.0/16"),
		bgpPeerObj("tor", api.BGPPeerSpec{PeerIP: "192.0.2.1", ASNumber: 65000}),
	)
	tor, b, h1, h2, _, _ := torFabric(t, f, `
protocol direct { ipv4; }
protocol kernel { ipv4 { export where source = RTS_BGP; }; }
protocol static tor_routes {
  ipv4;
  route 10.244.200.0/24 blackhole;
  route 203.0.113.0/24 blackhole;
}
template bgp node {
  local 192.0.2.1 as 65000;
  graceful restart on;
  ipv4 { import all; export where source = RTS_STATIC; };
}
`)
	// The ToR learns each node's block from that node...
	deadline := time.Now().Add(20 * time.Second)
	for {
		out1 := b.ctl(t, "show", "route", "protocol", "n1")
		out2 := b.ctl(t, "show", "route", "protocol", "n2")
		if strings.Contains(out1, "10.244.1.0/26") && strings.Contains(out2, "10.244.2.0/26") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("BIRD did not learn the blocks:\n%s\n%s", out1, out2)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// ...and puts them in its kernel.
	deadline = time.Now().Add(10 * time.Second)
	for {
		rs, err := tor.routes(birdProto)
		if err != nil {
			t.Fatal(err)
		}
		if rs["10.244.1.0/26"] != "" && rs["10.244.2.0/26"] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("BIRD's kernel routes: %v", rs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The nodes install the ToR's routes: the pool route, and, as Calico's
	// BIRD does, the one outside every pool.
	for _, h := range []*host{h1, h2} {
		waitRoutes(t, h, 10*time.Second, map[string]string{
			"10.244.200.0/24": "via 192.0.2.1", "203.0.113.0/24": "via 192.0.2.1"})
	}
	// Withdrawn at the ToR, gone from the nodes.
	b.ctl(t, "disable", "tor_routes")
	for _, h := range []*host{h1, h2} {
		waitRoutes(t, h, 10*time.Second, nil, "10.244.200.0/24", "203.0.113.0/24")
	}
}

// TestGroupsScenario is the 003 example: mesh off, AS 63400, BGPPeers that
// pair nodes labelled calico == '1' and calico == '2' among themselves.
// Sessions and routes stay within a group.
func TestGroupsScenario(t *testing.T) {
	f := newFabric(t)
	f.applyYAML("testdata/003-bgpconfiguration.yaml")
	f.applyYAML("testdata/003-bgppeers.yaml")
	f.apply(poolObj("pool", "10.244.0.0/16"))
	hosts := map[string]*host{
		"g1a": f.host("g1a", "192.0.2.21"), "g1b": f.host("g1b", "192.0.2.22"),
		"g2a": f.host("g2a", "192.0.2.23"), "g2b": f.host("g2b", "192.0.2.24"),
	}
	agents := map[string]*agent{}
	for name, h := range hosts {
		agents[name] = f.agent(h, name)
	}
	group := map[string]string{"g1a": "1", "g1b": "1", "g2a": "2", "g2b": "2"}
	for name, g := range group {
		f.label(name, "calico", g)
	}
	partner := map[string]string{"g1a": "g1b", "g1b": "g1a", "g2a": "g2b", "g2b": "g2a"}
	blocks := map[string]string{"g1a": "10.244.21.0/26", "g1b": "10.244.22.0/26", "g2a": "10.244.23.0/26", "g2b": "10.244.24.0/26"}
	for name, a := range agents {
		a.waitSessions(t, 60*time.Second, hosts[partner[name]].addr.String())
		if s := a.sessions()[hosts[partner[name]].addr.String()]; s.Type != PeerNode || s.PeerAS != 63400 {
			t.Errorf("%s: session %+v, want node specific, AS 63400", name, s)
		}
		f.affine(name, blocks[name])
	}
	for name, h := range hosts {
		var absent []string
		for other, g := range group {
			if g != group[name] {
				absent = append(absent, blocks[other])
			}
		}
		p := partner[name]
		waitRoutes(t, h, 20*time.Second, map[string]string{blocks[p]: "via " + hosts[p].addr.String()}, absent...)
	}
	st, err := agents["g1a"].status()
	if err != nil || st.AS != 63400 {
		t.Errorf("g1a status: %+v, %v; want AS 63400", st, err)
	}
}
