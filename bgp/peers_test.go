package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
)

func node(name, ip4 string, opts ...func(*api.Node)) *api.Node {
	n := &api.Node{ObjectMeta: api.ObjectMeta{Name: name}, Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: ip4}}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func labels(kv ...string) func(*api.Node) {
	return func(n *api.Node) {
		n.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
	}
}

func nodeAS(as uint32) func(*api.Node) {
	return func(n *api.Node) { a := api.ASNumber(as); n.Spec.BGP.ASNumber = &a }
}

func clusterID(id string) func(*api.Node) {
	return func(n *api.Node) { n.Spec.BGP.RouteReflectorClusterID = id }
}

func ip6(addr string) func(*api.Node) {
	return func(n *api.Node) { n.Spec.BGP.IPv6Address = addr }
}

func bgpPeer(name string, spec api.BGPPeerSpec) *api.BGPPeer {
	return &api.BGPPeer{ObjectMeta: api.ObjectMeta{Name: name}, Spec: spec}
}

func bgpConfig(name string, f func(*api.BGPConfigurationSpec)) *api.BGPConfiguration {
	c := &api.BGPConfiguration{ObjectMeta: api.ObjectMeta{Name: name}}
	f(&c.Spec)
	return c
}

type fakeSecrets map[string]string

func (f fakeSecrets) Secret(name, key string) (string, error) {
	if v, ok := f[name+"/"+key]; ok {
		return v, nil
	}
	return "", errors.New("not found")
}

func ptr[T any](v T) *T { return &v }

// summary renders the fields a test cares about, one session per line.
func summary(ss []Session) []string {
	var out []string
	for _, s := range ss {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s as=%d", s.Name, s.Addr, s.PeerAS)
		if s.Port != 0 {
			fmt.Fprintf(&b, " port=%d", s.Port)
		}
		if s.LocalAS != 0 && s.LocalAS != DefaultASNumber {
			fmt.Fprintf(&b, " local=%d", s.LocalAS)
		}
		if s.Source.IsValid() {
			fmt.Fprintf(&b, " src=%s", s.Source)
		}
		if s.Passive {
			b.WriteString(" passive")
		}
		if s.RRClient {
			fmt.Fprintf(&b, " rr-client=%s", s.ClusterID)
		}
		if s.Password != "" {
			fmt.Fprintf(&b, " pw=%s", s.Password)
		}
		if s.PasswordError != "" {
			b.WriteString(" pw-error")
		}
		if s.RestartTime != 0 {
			fmt.Fprintf(&b, " gr=%s", s.RestartTime)
		}
		if s.NextHopKeep {
			b.WriteString(" nh-keep")
		}
		if s.NextHopSelf {
			b.WriteString(" nh-self")
		}
		out = append(out, b.String())
	}
	return out
}

func nodesMap(ns ...*api.Node) map[string]*api.Node {
	m := map[string]*api.Node{}
	for _, n := range ns {
		m[n.Name] = n
	}
	return m
}

func peersMap(ps ...*api.BGPPeer) map[string]*api.BGPPeer {
	m := map[string]*api.BGPPeer{}
	for _, p := range ps {
		m[p.Name] = p
	}
	return m
}

func configsMap(cs ...*api.BGPConfiguration) map[string]*api.BGPConfiguration {
	m := map[string]*api.BGPConfiguration{}
	for _, c := range cs {
		m[c.Name] = c
	}
	return m
}

func TestComputeSessions(t *testing.T) {
	meshOff := bgpConfig("default", func(s *api.BGPConfigurationSpec) { s.NodeToNodeMeshEnabled = ptr(false) })
	three := nodesMap(node("node1", "10.0.0.1/24"), node("node2", "10.0.0.2/24"), node("node3", "10.0.0.3/24"))
	tests := []struct {
		name    string
		me      string
		nodes   map[string]*api.Node
		peers   map[string]*api.BGPPeer
		configs map[string]*api.BGPConfiguration
		secrets Secrets
		want    []string
	}{
		{
			name: "full mesh by default; the lower address waits for the higher", me: "node2", nodes: three,
			want: []string{
				"Mesh_10_0_0_1 10.0.0.1 as=64512 src=10.0.0.2",
				"Mesh_10_0_0_3 10.0.0.3 as=64512 src=10.0.0.2 passive",
			},
		},
		{
			// The template compares address strings: "10.0.0.10" < "10.0.0.9".
			name: "passive side follows string order", me: "node9",
			nodes: nodesMap(node("node9", "10.0.0.9"), node("node10", "10.0.0.10")),
			want:  []string{"Mesh_10_0_0_10 10.0.0.10 as=64512 src=10.0.0.9"},
		},
		{
			name: "mesh off and no peers: no sessions", me: "node1", nodes: three,
			configs: configsMap(meshOff),
		},
		{
			name: "AS numbers: node's own, else BGPConfiguration's", me: "node1",
			nodes:   nodesMap(node("node1", "10.0.0.1"), node("node2", "10.0.0.2", nodeAS(65002)), node("node3", "10.0.0.3")),
			configs: configsMap(bgpConfig("default", func(s *api.BGPConfigurationSpec) { s.ASNumber = ptr(api.ASNumber(63400)) })),
			want: []string{
				"Mesh_10_0_0_2 10.0.0.2 as=65002 local=63400 src=10.0.0.1 passive",
				"Mesh_10_0_0_3 10.0.0.3 as=63400 local=63400 src=10.0.0.1 passive",
			},
		},
		{
			name: "mesh peers are dialled on their listen port", me: "node1", nodes: three,
			configs: configsMap(
				bgpConfig("default", func(s *api.BGPConfigurationSpec) { s.ListenPort = 1790 }),
				bgpConfig("node.node3", func(s *api.BGPConfigurationSpec) { s.ListenPort = 1791 }),
			),
			want: []string{
				"Mesh_10_0_0_2 10.0.0.2 as=64512 port=1790 src=10.0.0.1 passive",
				"Mesh_10_0_0_3 10.0.0.3 as=64512 port=1791 src=10.0.0.1 passive",
			},
		},
		{
			name: "mesh password and restart time from BGPConfiguration", me: "node1",
			nodes: nodesMap(node("node1", "10.0.0.1"), node("node2", "10.0.0.2")),
			configs: configsMap(bgpConfig("default", func(s *api.BGPConfigurationSpec) {
				s.NodeMeshPassword = &api.BGPPassword{SecretKeyRef: &api.SecretKeySelector{Name: "bgp", Key: "mesh"}}
				s.NodeMeshMaxRestartTime = &api.Duration{Duration: 9600 * time.Millisecond}
			})),
			secrets: fakeSecrets{"bgp/mesh": "s3cret"},
			want:    []string{"Mesh_10_0_0_2 10.0.0.2 as=64512 src=10.0.0.1 passive pw=s3cret gr=10s"},
		},
		{
			name: "client of a route reflector: no mesh with it, peers via BGPPeer", me: "node1",
			nodes: nodesMap(node("node1", "10.0.0.1"), node("node2", "10.0.0.2"),
				node("rr1", "10.0.0.10", clusterID("224.0.0.1"), labels("route-reflector", "true"))),
			peers: peersMap(bgpPeer("to-rr", api.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "route-reflector == 'true'"})),
			want: []string{
				"Mesh_10_0_0_2 10.0.0.2 as=64512 src=10.0.0.1 passive",
				"Node_10_0_0_10 10.0.0.10 as=64512 src=10.0.0.1",
			},
		},
		{
			name: "route reflector: no mesh, every selecting node is its client", me: "rr1",
			nodes: nodesMap(node("node1", "10.0.0.1"), node("node2", "10.0.0.2"),
				node("rr1", "10.0.0.10", clusterID("224.0.0.1"), labels("route-reflector", "true")),
				node("rr2", "10.0.0.11", clusterID("224.0.0.1"), labels("route-reflector", "true"))),
			peers: peersMap(bgpPeer("to-rr", api.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "route-reflector == 'true'"})),
			want: []string{
				"Node_10_0_0_1 10.0.0.1 as=64512 src=10.0.0.10 rr-client=224.0.0.1",
				// Same cluster: a plain iBGP session between the reflectors.
				"Node_10_0_0_11 10.0.0.11 as=64512 src=10.0.0.10",
				"Node_10_0_0_2 10.0.0.2 as=64512 src=10.0.0.10 rr-client=224.0.0.1",
			},
		},
		{
			name: "global external peer with password, keep next hop, no source, restart time", me: "node1",
			nodes:   nodesMap(node("node1", "10.0.0.1")),
			configs: configsMap(meshOff),
			peers: peersMap(bgpPeer("tor", api.BGPPeerSpec{
				PeerIP: "10.0.0.254", ASNumber: 65000, KeepOriginalNextHop: true,
				SourceAddress: api.SourceAddressNone, MaxRestartTime: &api.Duration{Duration: 30 * time.Second},
				Password: &api.BGPPassword{SecretKeyRef: &api.SecretKeySelector{Name: "bgp", Key: "tor"}},
			})),
			secrets: fakeSecrets{"bgp/tor": "pw"},
			want:    []string{"Global_10_0_0_254 10.0.0.254 as=65000 pw=pw gr=30s nh-keep"},
		},
		{
			name: "keepOriginalNextHop only applies to eBGP; port in peerIP", me: "node1",
			nodes:   nodesMap(node("node1", "10.0.0.1")),
			configs: configsMap(meshOff),
			peers:   peersMap(bgpPeer("rr", api.BGPPeerSpec{PeerIP: "10.0.0.254:1179", ASNumber: 64512, KeepOriginalNextHop: true})),
			want:    []string{"Global_10_0_0_254_port_1179 10.0.0.254 as=64512 port=1179 src=10.0.0.1"},
		},
		{
			name: "unreadable password is reported on the session", me: "node1",
			nodes:   nodesMap(node("node1", "10.0.0.1")),
			configs: configsMap(meshOff),
			peers: peersMap(bgpPeer("tor", api.BGPPeerSpec{PeerIP: "10.0.0.254", ASNumber: 65000,
				Password: &api.BGPPassword{SecretKeyRef: &api.SecretKeySelector{Name: "missing", Key: "k"}}})),
			secrets: fakeSecrets{},
			want:    []string{"Global_10_0_0_254 10.0.0.254 as=65000 src=10.0.0.1 pw-error"},
		},
		{
			name: "node-specific peer applies to its node only", me: "node2", nodes: three, configs: configsMap(meshOff),
			peers: peersMap(bgpPeer("n1", api.BGPPeerSpec{Node: "node1", PeerIP: "10.0.0.254", ASNumber: 65000})),
		},
		{
			name: "node-specific peer on its node", me: "node1", nodes: three, configs: configsMap(meshOff),
			peers: peersMap(bgpPeer("n1", api.BGPPeerSpec{Node: "node1", PeerIP: "10.0.0.254", ASNumber: 65000})),
			want:  []string{"Node_10_0_0_254 10.0.0.254 as=65000 src=10.0.0.1"},
		},
		{
			name: "a peering to a Calico node is mirrored on that node", me: "node3", nodes: three, configs: configsMap(meshOff),
			peers: peersMap(bgpPeer("n1", api.BGPPeerSpec{Node: "node1", PeerIP: "10.0.0.3", ASNumber: 64512})),
			want:  []string{"Node_10_0_0_1 10.0.0.1 as=64512 src=10.0.0.3"},
		},
		{
			name: "reversePeering Manual: no mirror", me: "node3", nodes: three, configs: configsMap(meshOff),
			peers: peersMap(bgpPeer("n1", api.BGPPeerSpec{Node: "node1", PeerIP: "10.0.0.3", ASNumber: 64512,
				ReversePeering: ptr(api.ReversePeeringManual)})),
		},
		{
			name: "mirror needs the AS to match the node's", me: "node3", nodes: three, configs: configsMap(meshOff),
			peers: peersMap(bgpPeer("n1", api.BGPPeerSpec{Node: "node1", PeerIP: "10.0.0.3", ASNumber: 65000})),
		},
		{
			name: "global peering to a Calico node: the lower address waits", me: "node1", nodes: three, configs: configsMap(meshOff),
			peers: peersMap(bgpPeer("g", api.BGPPeerSpec{PeerIP: "10.0.0.3", ASNumber: 64512})),
			want:  []string{"Global_10_0_0_3 10.0.0.3 as=64512 src=10.0.0.1 passive"},
		},
		{
			name: "a node never peers with itself", me: "node3", nodes: three, configs: configsMap(meshOff),
			peers: peersMap(bgpPeer("g", api.BGPPeerSpec{PeerIP: "10.0.0.3", ASNumber: 64512})),
			// node3 gets the global peering to itself (skipped) and mirrors
			// of it from every node.
			want: []string{
				"Node_10_0_0_1 10.0.0.1 as=64512 src=10.0.0.3",
				"Node_10_0_0_2 10.0.0.2 as=64512 src=10.0.0.3",
			},
		},
		{
			name: "a node-specific peering duplicating a global one is dropped", me: "node1", nodes: three, configs: configsMap(meshOff),
			peers: peersMap(
				bgpPeer("a-node", api.BGPPeerSpec{Node: "node1", PeerIP: "10.0.0.254", ASNumber: 65001}),
				bgpPeer("b-global", api.BGPPeerSpec{PeerIP: "10.0.0.254", ASNumber: 65000}),
			),
			want: []string{"Global_10_0_0_254 10.0.0.254 as=65000 src=10.0.0.1"},
		},
		{
			name: "localASNumber and nextHopMode", me: "node1", nodes: three, configs: configsMap(meshOff),
			peers: peersMap(bgpPeer("g", api.BGPPeerSpec{PeerIP: "10.0.0.254", ASNumber: 65000,
				LocalASNumber: ptr(api.ASNumber(65010)), NextHopMode: ptr(api.NextHopModeSelf)})),
			want: []string{"Global_10_0_0_254 10.0.0.254 as=65000 local=65010 src=10.0.0.1 nh-self"},
		},
		{
			name: "IPv6: a second mesh over the IPv6 addresses", me: "node1",
			nodes: nodesMap(node("node1", "10.0.0.1/24", ip6("fd00::1/64")), node("node2", "10.0.0.2/24", ip6("fd00::2/64"))),
			want: []string{
				"Mesh_10_0_0_2 10.0.0.2 as=64512 src=10.0.0.1 passive",
				"Mesh_fd00__2 fd00::2 as=64512 src=fd00::1 passive",
			},
		},
		{
			name: "nodes without BGP addresses are not meshed with", me: "node1",
			nodes: nodesMap(node("node1", "10.0.0.1"), &api.Node{ObjectMeta: api.ObjectMeta{Name: "nobgp"}}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Compute(Snapshot{NodeName: tt.me, Nodes: tt.nodes, Peers: tt.peers, BGPConfigs: tt.configs, Secrets: tt.secrets})
			if !d.OK {
				t.Fatalf("node %s: BGP unexpectedly off", tt.me)
			}
			if got := summary(d.Sessions); !slices.Equal(got, tt.want) {
				t.Errorf("sessions:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// The 003 scenario of the examples: mesh off, AS 63400, two groups of nodes
// that peer only within their group.
func TestComputeGroupsScenario(t *testing.T) {
	nodes := nodesMap(
		node("a1", "10.0.1.1/24", labels("calico", "1")), node("a2", "10.0.1.2/24", labels("calico", "1")),
		node("b1", "10.0.2.1/24", labels("calico", "2")), node("b2", "10.0.2.2/24", labels("calico", "2")),
	)
	peers := peersMap(
		bgpPeer("peer1", api.BGPPeerSpec{NodeSelector: "calico == '1'", PeerSelector: "calico == '1'"}),
		bgpPeer("peer2", api.BGPPeerSpec{NodeSelector: "calico == '2'", PeerSelector: "calico == '2'"}),
	)
	configs := configsMap(bgpConfig("default", func(s *api.BGPConfigurationSpec) {
		s.NodeToNodeMeshEnabled = ptr(false)
		s.ASNumber = ptr(api.ASNumber(63400))
	}))
	want := map[string][]string{
		"a1": {"Node_10_0_1_2 10.0.1.2 as=63400 local=63400 src=10.0.1.1"},
		"a2": {"Node_10_0_1_1 10.0.1.1 as=63400 local=63400 src=10.0.1.2"},
		"b1": {"Node_10_0_2_2 10.0.2.2 as=63400 local=63400 src=10.0.2.1"},
		"b2": {"Node_10_0_2_1 10.0.2.1 as=63400 local=63400 src=10.0.2.2"},
	}
	for me, w := range want {
		d := Compute(Snapshot{NodeName: me, Nodes: nodes, Peers: peers, BGPConfigs: configs})
		if got := summary(d.Sessions); !slices.Equal(got, w) {
			t.Errorf("%s:\n got %q\nwant %q", me, got, w)
		}
		if d.Identity.AS != 63400 {
			t.Errorf("%s: AS %d, want 63400", me, d.Identity.AS)
		}
	}
}

func TestComputeIdentity(t *testing.T) {
	tests := []struct {
		name    string
		nodes   map[string]*api.Node
		configs map[string]*api.BGPConfiguration
		wantOK  bool
		want    Identity
	}{
		{name: "no Node resource", nodes: nodesMap()},
		{name: "Node without spec.bgp", nodes: nodesMap(&api.Node{ObjectMeta: api.ObjectMeta{Name: "me"}})},
		{
			name: "defaults", nodes: nodesMap(node("me", "192.0.2.5/24")), wantOK: true,
			want: Identity{Node: "me", IPv4: netip.MustParseAddr("192.0.2.5"), Net4: netip.MustParsePrefix("192.0.2.0/24"),
				AS: 64512, RouterID: netip.MustParseAddr("192.0.2.5")},
		},
		{
			name: "node AS, node listen port, cluster ID", wantOK: true,
			nodes: nodesMap(node("me", "192.0.2.5/24", nodeAS(65001), clusterID("224.0.0.1"))),
			configs: configsMap(
				bgpConfig("default", func(s *api.BGPConfigurationSpec) { s.ASNumber = ptr(api.ASNumber(63400)); s.ListenPort = 1790 }),
				bgpConfig("node.me", func(s *api.BGPConfigurationSpec) { s.ListenPort = 1791 }),
			),
			want: Identity{Node: "me", IPv4: netip.MustParseAddr("192.0.2.5"), Net4: netip.MustParsePrefix("192.0.2.0/24"),
				AS: 65001, RouterID: netip.MustParseAddr("192.0.2.5"), ListenPort: 1791, ClusterID: "224.0.0.1"},
		},
		{
			name: "IPv6 only: router ID hashed from the name", wantOK: true,
			nodes: nodesMap(&api.Node{ObjectMeta: api.ObjectMeta{Name: "me"}, Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv6Address: "fd00::5/64"}}}),
			want: Identity{Node: "me", IPv6: netip.MustParseAddr("fd00::5"), Net6: netip.MustParsePrefix("fd00::/64"),
				AS: 64512, RouterID: hashRouterID("me")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Compute(Snapshot{NodeName: "me", Nodes: tt.nodes, BGPConfigs: tt.configs})
			if d.OK != tt.wantOK {
				t.Fatalf("OK = %v, want %v", d.OK, tt.wantOK)
			}
			d.Identity.Labels = nil
			if !reflect.DeepEqual(d.Identity, tt.want) {
				t.Errorf("identity:\n got %+v\nwant %+v", d.Identity, tt.want)
			}
		})
	}
}

func TestHashRouterIDMatchesCalico(t *testing.T) {
	// Calico's hashToIPv4: the first four bytes of SHA-256 of the name, the
	// first octet lowered by 32 when above 223.
	for name, want := range map[string]string{
		"node1":  "202.18.243.27",   // sha256 starts ca12f31b
		"node16": "200.251.245.244", // e8fbf5f4: 232 > 223
	} {
		if got := hashRouterID(name).String(); got != want {
			t.Errorf("hashRouterID(%q) = %s, want %s", name, got, want)
		}
	}
}

func TestComputeReportsBadInput(t *testing.T) {
	d := Compute(Snapshot{
		NodeName: "node1", Nodes: nodesMap(node("node1", "10.0.0.1")),
		Peers: peersMap(
			bgpPeer("badip", api.BGPPeerSpec{PeerIP: "not-an-ip", ASNumber: 1}),
			bgpPeer("badsel", api.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "a ==="}),
		),
	})
	if len(d.Problems) != 2 {
		t.Errorf("problems = %q, want one for the IP and one for the selector", d.Problems)
	}
}
