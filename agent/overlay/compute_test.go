package overlay

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/agent/felixenv"
	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// testNode builds a Node; opts edit it.
func testNode(name, ipv4 string, opts ...func(*api.Node)) *api.Node {
	n := &api.Node{TypeMeta: api.TypeMeta{Kind: "Node", APIVersion: api.GroupVersion}, ObjectMeta: api.ObjectMeta{Name: name}}
	if ipv4 != "" {
		n.Spec.BGP = &api.NodeBGPSpec{IPv4Address: ipv4}
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func vxlan(addr, mac string) func(*api.Node) {
	return func(n *api.Node) { n.Spec.IPv4VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddr = addr, mac }
}

func vxlan6(ipv6, addr, mac string) func(*api.Node) {
	return func(n *api.Node) {
		if n.Spec.BGP == nil {
			n.Spec.BGP = &api.NodeBGPSpec{}
		}
		n.Spec.BGP.IPv6Address = ipv6
		n.Spec.IPv6VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddrV6 = addr, mac
	}
}

func ipipAddr(addr string) func(*api.Node) {
	return func(n *api.Node) { n.Spec.BGP.IPv4IPIPTunnelAddr = addr }
}

func labels(kv ...string) func(*api.Node) {
	return func(n *api.Node) {
		n.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
	}
}

func testPool(name, cidr string, edit ...func(*api.IPPoolSpec)) *api.IPPool {
	p := &api.IPPool{TypeMeta: api.TypeMeta{Kind: "IPPool", APIVersion: api.GroupVersion},
		ObjectMeta: api.ObjectMeta{Name: name}, Spec: api.IPPoolSpec{CIDR: cidr}}
	for _, e := range edit {
		e(&p.Spec)
	}
	p.Default()
	return p
}

func vxlanMode(m api.VXLANMode) func(*api.IPPoolSpec) {
	return func(s *api.IPPoolSpec) { s.VXLANMode = m }
}

func ipipMode(m api.IPIPMode) func(*api.IPPoolSpec) {
	return func(s *api.IPPoolSpec) { s.IPIPMode = m }
}

func nodeSelector(sel string) func(*api.IPPoolSpec) {
	return func(s *api.IPPoolSpec) { s.NodeSelector = sel }
}

func nodes(ns ...*api.Node) map[string]*api.Node {
	out := map[string]*api.Node{}
	for _, n := range ns {
		out[n.Name] = n
	}
	return out
}

func blocks(kv ...string) ipam.BlockSnapshot {
	s := ipam.BlockSnapshot{Affinity: map[netip.Prefix]string{}, Borrowed: map[netip.Addr]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		if p, err := netip.ParsePrefix(kv[i]); err == nil {
			s.Affinity[p] = kv[i+1]
		} else {
			s.Borrowed[netip.MustParseAddr(kv[i])] = kv[i+1]
		}
	}
	return s
}

// routeStrings renders routes as routes.Route.String does.
func routeStrings(rs []routes.Route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	return out
}

func peerStrings(s *VXLANSpec) []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, p := range s.Peers {
		out = append(out, fmt.Sprintf("%s %s %s %s", p.Node, p.TunnelAddr, p.MAC, p.NodeIP))
	}
	return out
}

const (
	mac1 = "02:00:00:00:00:01"
	mac2 = "02:00:00:00:00:02"
	mac3 = "02:00:00:00:00:03"
)

func TestComputeRoutes(t *testing.T) {
	// node1 and node2 share 192.0.2.0/24; node3 is in 198.51.100.0/24.
	n1 := testNode("node1", "192.0.2.11/24", vxlan("10.244.1.0", mac1))
	n2 := testNode("node2", "192.0.2.12/24", vxlan("10.244.2.0", mac2))
	n3 := testNode("node3", "198.51.100.13/24", vxlan("10.244.3.0", mac3))
	three := blocks("10.244.1.0/26", "node1", "10.244.2.0/26", "node2", "10.244.3.0/26", "node3")

	tests := []struct {
		name       string
		nodes      map[string]*api.Node
		pools      []*api.IPPool
		blocks     ipam.BlockSnapshot
		settings   func(*Settings)
		want       []string
		wantIPIP   []string
		wantPeers  []string
		noVXLAN    bool
		wantIPIPOn bool
	}{
		{
			name:  "VXLAN Always: every remote block through the tunnel",
			nodes: nodes(n1, n2, n3), blocks: three,
			pools: []*api.IPPool{testPool("p", "10.244.0.0/16", vxlanMode(api.VXLANModeAlways))},
			want: []string{
				"10.244.2.0/26 via 10.244.2.0 dev vxlan.calico onlink",
				"10.244.3.0/26 via 10.244.3.0 dev vxlan.calico onlink",
			},
			wantPeers: []string{
				"node2 10.244.2.0 " + mac2 + " 192.0.2.12",
				"node3 10.244.3.0 " + mac3 + " 198.51.100.13",
			},
		},
		{
			name:  "VXLAN CrossSubnet: native inside the subnet, tunnel across",
			nodes: nodes(n1, n2, n3), blocks: three,
			pools: []*api.IPPool{testPool("p", "10.244.0.0/16", vxlanMode(api.VXLANModeCrossSubnet))},
			want: []string{
				"10.244.2.0/26 via 192.0.2.12 dev eth0",
				"10.244.3.0/26 via 10.244.3.0 dev vxlan.calico onlink",
			},
			wantPeers: []string{
				"node2 10.244.2.0 " + mac2 + " 192.0.2.12",
				"node3 10.244.3.0 " + mac3 + " 198.51.100.13",
			},
		},
		{
			name:   "a /32 node address makes every other node cross-subnet",
			nodes:  nodes(testNode("node1", "192.0.2.11", vxlan("10.244.1.0", mac1)), n2),
			blocks: blocks("10.244.2.0/26", "node2"),
			pools:  []*api.IPPool{testPool("p", "10.244.0.0/16", vxlanMode(api.VXLANModeCrossSubnet))},
			want:   []string{"10.244.2.0/26 via 10.244.2.0 dev vxlan.calico onlink"},
			wantPeers: []string{
				"node2 10.244.2.0 " + mac2 + " 192.0.2.12",
			},
		},
		{
			name:  "a deleted node's blocks, entries and routes go",
			nodes: nodes(n1, n2), blocks: three,
			pools:     []*api.IPPool{testPool("p", "10.244.0.0/16", vxlanMode(api.VXLANModeAlways))},
			want:      []string{"10.244.2.0/26 via 10.244.2.0 dev vxlan.calico onlink"},
			wantPeers: []string{"node2 10.244.2.0 " + mac2 + " 192.0.2.12"},
		},
		{
			name:  "a remote node without a tunnel address yet gets no route",
			nodes: nodes(n1, testNode("node2", "192.0.2.12/24"), n3), blocks: three,
			pools:     []*api.IPPool{testPool("p", "10.244.0.0/16", vxlanMode(api.VXLANModeAlways))},
			want:      []string{"10.244.3.0/26 via 10.244.3.0 dev vxlan.calico onlink"},
			wantPeers: []string{"node3 10.244.3.0 " + mac3 + " 198.51.100.13"},
		},
		{
			name:  "without its own tunnel address a node routes none of the pool",
			nodes: nodes(testNode("node1", "192.0.2.11/24"), n2, n3), blocks: three,
			pools:   []*api.IPPool{testPool("p", "10.244.0.0/16", vxlanMode(api.VXLANModeCrossSubnet))},
			noVXLAN: true,
		},
		{
			name:  "vxlanEnabled false switches VXLAN off",
			nodes: nodes(n1, n2, n3), blocks: three,
			pools:    []*api.IPPool{testPool("p", "10.244.0.0/16", vxlanMode(api.VXLANModeAlways))},
			settings: func(s *Settings) { s.VXLANEnabled = false },
			noVXLAN:  true,
		},
		{
			name:  "blocks outside overlay pools are not ours (BGP routes them)",
			nodes: nodes(n1, n2, n3), blocks: blocks("10.244.2.0/26", "node2", "10.99.0.0/26", "node3", "10.98.0.0/26", "node3"),
			pools: []*api.IPPool{
				testPool("p", "10.244.0.0/16", vxlanMode(api.VXLANModeAlways)),
				testPool("native", "10.99.0.0/16"),
			},
			want: []string{"10.244.2.0/26 via 10.244.2.0 dev vxlan.calico onlink"},
			wantPeers: []string{
				"node2 10.244.2.0 " + mac2 + " 192.0.2.12",
				"node3 10.244.3.0 " + mac3 + " 198.51.100.13",
			},
		},
		{
			name:  "own and unaffine blocks are not routed; borrowed addresses follow their node",
			nodes: nodes(n1, n2, n3),
			blocks: blocks("10.244.1.0/26", "node1", "10.244.2.0/26", "node2", "10.244.9.0/26", "",
				"10.244.1.7", "node3", "10.244.2.9", "node1"),
			pools: []*api.IPPool{testPool("p", "10.244.0.0/16", vxlanMode(api.VXLANModeAlways))},
			want: []string{
				"10.244.1.7/32 via 10.244.3.0 dev vxlan.calico onlink",
				"10.244.2.0/26 via 10.244.2.0 dev vxlan.calico onlink",
			},
			wantPeers: []string{
				"node2 10.244.2.0 " + mac2 + " 192.0.2.12",
				"node3 10.244.3.0 " + mac3 + " 198.51.100.13",
			},
		},
		{
			name: "IP-in-IP Always: via tunl0 to the node address",
			nodes: nodes(testNode("node1", "192.0.2.11/24", ipipAddr("10.244.1.1")), testNode("node2", "192.0.2.12/24"),
				testNode("node3", "198.51.100.13/24")),
			blocks:     three,
			pools:      []*api.IPPool{testPool("p", "10.244.0.0/16", ipipMode(api.IPIPModeAlways))},
			noVXLAN:    true,
			wantIPIPOn: true,
			wantIPIP: []string{
				"10.244.2.0/26 via 192.0.2.12 dev tunl0 onlink",
				"10.244.3.0/26 via 198.51.100.13 dev tunl0 onlink",
			},
		},
		{
			name: "IP-in-IP CrossSubnet: native inside the subnet",
			nodes: nodes(testNode("node1", "192.0.2.11/24"), testNode("node2", "192.0.2.12/24"),
				testNode("node3", "198.51.100.13/24")),
			blocks:     three,
			pools:      []*api.IPPool{testPool("p", "10.244.0.0/16", ipipMode(api.IPIPModeCrossSubnet))},
			noVXLAN:    true,
			wantIPIPOn: true,
			want:       []string{"10.244.2.0/26 via 192.0.2.12 dev eth0"},
			wantIPIP:   []string{"10.244.3.0/26 via 198.51.100.13 dev tunl0 onlink"},
		},
		{
			name:    "IP-in-IP pool not selecting this node: no tunl0, no routes",
			nodes:   nodes(testNode("node1", "192.0.2.11/24", labels("calico", "1")), testNode("node2", "192.0.2.12/24")),
			blocks:  three,
			pools:   []*api.IPPool{testPool("p", "10.244.0.0/16", ipipMode(api.IPIPModeAlways), nodeSelector(`calico == "2"`))},
			noVXLAN: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := SettingsFor(api.FelixConfigurationSpec{})
			if tc.settings != nil {
				tc.settings(&s)
			}
			d := Compute(Input{NodeName: "node1", Nodes: tc.nodes, Pools: parsed(t, tc.pools...), Blocks: tc.blocks, Settings: s, ParentDev: "eth0"})
			if got := routeStrings(d.Routes); !slices.Equal(got, tc.want) {
				t.Errorf("routes:\n got %q\nwant %q", got, tc.want)
			}
			if got := routeStrings(d.IPIPRoutes); !slices.Equal(got, tc.wantIPIP) {
				t.Errorf("IP-in-IP routes:\n got %q\nwant %q", got, tc.wantIPIP)
			}
			if tc.noVXLAN != (d.VXLAN == nil) {
				t.Errorf("VXLAN device = %+v, want present=%v", d.VXLAN, !tc.noVXLAN)
			}
			if got := peerStrings(d.VXLAN); !slices.Equal(got, tc.wantPeers) {
				t.Errorf("peers:\n got %q\nwant %q", got, tc.wantPeers)
			}
			if tc.wantIPIPOn != (d.IPIP != nil) {
				t.Errorf("IP-in-IP device = %+v, want present=%v", d.IPIP, tc.wantIPIPOn)
			}
		})
	}
}

func TestComputeDevice(t *testing.T) {
	me := testNode("node1", "192.0.2.11/24", vxlan("10.244.1.0", mac1), vxlan6("2001:db8::11/64", "fd00:10::1", ""))
	in := Input{
		NodeName: "node1",
		Nodes:    nodes(me),
		Pools:    parsed(t, testPool("p", "10.244.0.0/16", vxlanMode(api.VXLANModeAlways))),
		Settings: SettingsFor(forNode("node1", nil,
			felixConfig("default", func(s *api.FelixConfigurationSpec) { s.VXLANMTU, s.VXLANVNI = ptr(1400), ptr(7) }),
			felixConfig("node.node1", func(s *api.FelixConfigurationSpec) { s.VXLANMTU = ptr(1350) }),
			felixConfig("node.other", func(s *api.FelixConfigurationSpec) { s.VXLANPort = ptr(1) }),
		)),
		ParentDev: "eth0", ParentDevV6: "eth1",
	}
	d := Compute(in)
	v4 := d.VXLAN
	if v4 == nil {
		t.Fatal("no IPv4 VXLAN device")
	}
	want := VXLANSpec{Name: "vxlan.calico", VNI: 7, Port: 4789, MTU: 1350, Parent: "eth0",
		Local: netip.MustParseAddr("192.0.2.11"), Addr: netip.MustParsePrefix("10.244.1.0/32")}
	if v4.Name != want.Name || v4.VNI != want.VNI || v4.Port != want.Port || v4.MTU != want.MTU ||
		v4.Local != want.Local || v4.Addr != want.Addr || v4.Parent != want.Parent || v4.MAC.String() != mac1 {
		t.Errorf("IPv4 device %+v, want %+v with MAC %s", *v4, want, mac1)
	}
	v6 := d.VXLANV6
	if v6 == nil {
		t.Fatal("no IPv6 VXLAN device")
	}
	if v6.Name != "vxlan-v6.calico" || v6.MTU != DefaultVXLANMTUV6 || v6.Addr != netip.MustParsePrefix("fd00:10::1/128") ||
		v6.Local != netip.MustParseAddr("2001:db8::11") || v6.Parent != "eth1" {
		t.Errorf("IPv6 device %+v", *v6)
	}
	// No MAC recorded: felix's name-derived one, so a peer running felix
	// agrees on it.
	if got := v6.MAC.String(); got != derivedMAC("node1-v6").String() || got[:3] != "66:" {
		t.Errorf("IPv6 device MAC %s, want felix's derived MAC", got)
	}
}

func TestComputeIPv6Routes(t *testing.T) {
	n1 := testNode("node1", "", vxlan6("2001:db8:1::11/64", "fd00:10::1", mac1))
	n2 := testNode("node2", "", vxlan6("2001:db8:1::12/64", "fd00:10::41", mac2))
	n3 := testNode("node3", "", vxlan6("2001:db8:2::13/64", "fd00:10::81", mac3))
	d := Compute(Input{
		NodeName: "node1", Nodes: nodes(n1, n2, n3), ParentDevV6: "eth0", Settings: SettingsFor(api.FelixConfigurationSpec{}),
		Pools:  parsed(t, testPool("p6", "fd00:10::/48", vxlanMode(api.VXLANModeCrossSubnet))),
		Blocks: blocks("fd00:10::/122", "node1", "fd00:10::40/122", "node2", "fd00:10::80/122", "node3"),
	})
	want := []string{
		"fd00:10::40/122 via 2001:db8:1::12 dev eth0",
		"fd00:10::80/122 via fd00:10::81 dev vxlan-v6.calico onlink",
	}
	if got := routeStrings(d.Routes); !slices.Equal(got, want) {
		t.Errorf("routes:\n got %q\nwant %q", got, want)
	}
	if d.VXLAN != nil || d.VXLANV6 == nil || len(d.VXLANV6.Peers) != 2 {
		t.Errorf("devices v4=%+v v6=%+v", d.VXLAN, d.VXLANV6)
	}
}

// Test003Scenario: the seed document's overlay pool (as VXLAN) gives
// devices and routes only to the nodes it selects.
func Test003Scenario(t *testing.T) {
	pools := []*api.IPPool{
		testPool("ippool1", "10.101.0.0/16", nodeSelector(`calico == "1"`)),
		testPool("ippool2", "10.102.0.0/16", vxlanMode(api.VXLANModeAlways), nodeSelector(`calico == "2"`)),
	}
	all := nodes(
		testNode("a1", "192.0.2.11/24", labels("calico", "1")),
		testNode("a2", "192.0.2.12/24", labels("calico", "1")),
		testNode("b1", "192.0.2.21/24", labels("calico", "2"), vxlan("10.102.0.0", mac1)),
		testNode("b2", "192.0.2.22/24", labels("calico", "2"), vxlan("10.102.1.0", mac2)),
	)
	bl := blocks("10.101.0.0/26", "a1", "10.101.1.0/26", "a2", "10.102.0.0/26", "b1", "10.102.1.0/26", "b2")
	for name, want := range map[string][]string{
		"a1": nil,
		"a2": nil,
		"b1": {"10.102.1.0/26 via 10.102.1.0 dev vxlan.calico onlink"},
		"b2": {"10.102.0.0/26 via 10.102.0.0 dev vxlan.calico onlink"},
	} {
		d := Compute(Input{NodeName: name, Nodes: all, Pools: parsed(t, pools...), Blocks: bl, Settings: SettingsFor(api.FelixConfigurationSpec{})})
		if got := routeStrings(d.Routes); !slices.Equal(got, want) {
			t.Errorf("%s routes %q, want %q", name, got, want)
		}
		if (d.VXLAN != nil) != (want != nil) {
			t.Errorf("%s VXLAN device %+v", name, d.VXLAN)
		}
	}
}

func TestNodeAddr(t *testing.T) {
	tests := []struct {
		in         string
		family     int
		addr, pfx  string
		wantParsed bool
	}{
		{"192.0.2.11/24", 4, "192.0.2.11", "192.0.2.0/24", true},
		{"192.0.2.11", 4, "192.0.2.11", "192.0.2.11/32", true},
		{"2001:db8::1/64", 6, "2001:db8::1", "2001:db8::/64", true},
		{"2001:db8::1/64", 4, "", "", false},
		{"garbage", 4, "", "", false},
	}
	for _, tc := range tests {
		n := testNode("n", "")
		n.Spec.BGP = &api.NodeBGPSpec{IPv4Address: tc.in, IPv6Address: tc.in}
		a, p, ok := NodeAddr(n, tc.family)
		if ok != tc.wantParsed || (ok && (a.String() != tc.addr || p.String() != tc.pfx)) {
			t.Errorf("NodeAddr(%q, %d) = %s %s %v", tc.in, tc.family, a, p, ok)
		}
	}
}

func TestIPIPUnsupportedMessage(t *testing.T) {
	err := error(&IPIPUnsupportedError{Pools: []PoolMode{{"ippool2", "Always"}}})
	want := `IPPool "ippool2" has ipipMode Always but this kernel has no IP-in-IP support (module ipip); use vxlanMode`
	if err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if !errors.Is(err, ErrNoIPIP) {
		t.Error("does not match ErrNoIPIP")
	}
	two := &IPIPUnsupportedError{Pools: []PoolMode{{"a", "CrossSubnet"}, {"b", "Always"}}}
	if !strings.Contains(two.Error(), `"a" has ipipMode CrossSubnet`) || !strings.Contains(two.Error(), "1 more") {
		t.Errorf("message %q", two)
	}
}

func TestDerivedMAC(t *testing.T) {
	m := derivedMAC("node1")
	if len(m) != 6 || m[0] != 'f' || m[0]&1 != 0 || m[0]&2 == 0 {
		t.Errorf("derived MAC %s is not a locally administered unicast MAC starting with 0x66", m)
	}
	if derivedMAC("node1").String() != m.String() || derivedMAC("node2").String() == m.String() {
		t.Error("derived MAC is not a function of the name")
	}
	if _, err := net.ParseMAC(m.String()); err != nil {
		t.Error(err)
	}
}

// TestSettingsFor: the overlay's settings follow the one FelixConfiguration
// merge (default, node.<name>, FELIX_* environment) over felix's defaults.
func TestSettingsFor(t *testing.T) {
	defaults := Settings{VXLANEnabled: true, IPIPEnabled: true, VXLANVNI: 4096, VXLANPort: 4789,
		VXLANMTU: 1450, VXLANMTUV6: 1430, IPIPMTU: 1440}
	with := func(edit func(*Settings)) Settings {
		s := defaults
		edit(&s)
		return s
	}
	tests := []struct {
		name    string
		configs []*api.FelixConfiguration
		env     *api.FelixConfigurationSpec
		want    Settings
	}{
		{name: "nothing configured: felix's defaults", want: defaults},
		{
			name: "the node's config wins over default field by field; other nodes' do not count",
			configs: []*api.FelixConfiguration{
				felixConfig("default", func(s *api.FelixConfigurationSpec) { s.VXLANMTU, s.IPIPMTU = ptr(1400), ptr(1300) }),
				felixConfig("node.node1", func(s *api.FelixConfigurationSpec) { s.VXLANMTU, s.VXLANEnabled = ptr(1350), ptr(false) }),
				felixConfig("node.node2", func(s *api.FelixConfigurationSpec) { s.VXLANPort = ptr(1) }),
			},
			want: with(func(s *Settings) { s.VXLANMTU, s.IPIPMTU, s.VXLANEnabled = 1350, 1300, false }),
		},
		{
			name: "the FELIX_* environment wins over both",
			configs: []*api.FelixConfiguration{
				felixConfig("default", func(s *api.FelixConfigurationSpec) { s.VXLANMTU = ptr(1400) }),
				felixConfig("node.node1", func(s *api.FelixConfigurationSpec) { s.VXLANMTU, s.IPIPEnabled = ptr(1350), ptr(false) }),
			},
			env:  &api.FelixConfigurationSpec{VXLANMTU: ptr(1300), IPIPEnabled: ptr(true)},
			want: with(func(s *Settings) { s.VXLANMTU = 1300 }),
		},
		{
			name: "an explicit 0 is felix's default",
			configs: []*api.FelixConfiguration{
				felixConfig("default", func(s *api.FelixConfigurationSpec) { s.VXLANMTU, s.VXLANVNI = ptr(1400), ptr(7) }),
				felixConfig("node.node1", func(s *api.FelixConfigurationSpec) { s.VXLANMTU = ptr(0) }),
			},
			want: with(func(s *Settings) { s.VXLANVNI = 7 }),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := SettingsFor(forNode("node1", tc.env, tc.configs...)); got != tc.want {
				t.Errorf("settings\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// forNode is the FelixConfiguration in effect on node, merged as the
// actor merges it.
func forNode(node string, env *api.FelixConfigurationSpec, configs ...*api.FelixConfiguration) api.FelixConfigurationSpec {
	return felixenv.ForNode(node, func(name string) *api.FelixConfiguration {
		for _, c := range configs {
			if c.Name == name {
				return c
			}
		}
		return nil
	}, env)
}

// parsed parses test pools as the actor does; they must be valid.
func parsed(t *testing.T, pools ...*api.IPPool) []api.Pool {
	t.Helper()
	var out []api.Pool
	for _, p := range pools {
		q, err := api.ParsePool(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, q)
	}
	return out
}

func felixConfig(name string, edit func(*api.FelixConfigurationSpec)) *api.FelixConfiguration {
	c := &api.FelixConfiguration{ObjectMeta: api.ObjectMeta{Name: name}}
	edit(&c.Spec)
	return c
}

func ptr[T any](v T) *T { return &v }
