package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/internal/model/api"
)

func ippool(name, cidr string, f func(*api.IPPoolSpec)) *api.IPPool {
	p := &api.IPPool{ObjectMeta: api.ObjectMeta{Name: name}, Spec: api.IPPoolSpec{CIDR: cidr}}
	if f != nil {
		f(&p.Spec)
	}
	return p
}

// parsedPool is ippool parsed, as the actor passes pools on; it panics on
// an invalid one (test data, like netip.MustParsePrefix).
func parsedPool(name, cidr string, f func(*api.IPPoolSpec)) api.Pool {
	pl, err := api.ParsePool(ippool(name, cidr, f))
	if err != nil {
		panic(err)
	}
	return pl
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func advertStrings(as []Advert) []string {
	var out []string
	for _, a := range as {
		s := a.Prefix.String() + " via " + a.NextHop.String()
		for _, c := range a.Communities {
			s += fmt.Sprintf(" %d:%d", c>>16, c&0xffff)
		}
		for _, l := range a.Large {
			s += fmt.Sprintf(" %d:%d:%d", l[0], l[1], l[2])
		}
		out = append(out, s)
	}
	return out
}

var testID = Identity{
	Node: "me", IPv4: netip.MustParseAddr("192.0.2.1"), Net4: netip.MustParsePrefix("192.0.2.0/24"),
	IPv6: netip.MustParseAddr("2001:db8::1"), Net6: netip.MustParsePrefix("2001:db8::/64"),
}

func TestAdverts(t *testing.T) {
	pools := []api.Pool{
		parsedPool("p", "10.244.0.0/16", nil),
		parsedPool("noexport", "10.250.0.0/16", func(s *api.IPPoolSpec) { s.DisableBGPExport = true }),
		parsedPool("v6", "fd00:10::/48", nil),
	}
	tests := []struct {
		name string
		in   RoutingInput
		want []string
	}{
		{
			name: "affine blocks, next hop the node address of the family",
			in:   RoutingInput{Identity: testID, Pools: pools, IPAM: IPAMState{Blocks: prefixes("10.244.1.0/26", "fd00:10::/122")}},
			want: []string{"10.244.1.0/26 via 192.0.2.1", "fd00:10::/122 via 2001:db8::1"},
		},
		{
			name: "no export from pools with disableBGPExport; /32 affinities are not blocks",
			in:   RoutingInput{Identity: testID, Pools: pools, IPAM: IPAMState{Blocks: prefixes("10.250.0.0/26", "10.244.9.9/32")}},
		},
		{
			name: "borrowed addresses as /32 when in a pool and outside our blocks",
			in: RoutingInput{Identity: testID, Pools: pools, IPAM: IPAMState{
				Blocks:   prefixes("10.244.1.0/26"),
				Borrowed: addrs("10.244.2.5", "10.244.1.7", "172.16.0.1", "10.250.0.9"),
			}},
			want: []string{"10.244.1.0/26 via 192.0.2.1", "10.244.2.5/32 via 192.0.2.1"},
		},
		{
			name: "a family without a node address is not advertised",
			in: RoutingInput{Identity: Identity{IPv4: testID.IPv4}, Pools: pools,
				IPAM: IPAMState{Blocks: prefixes("10.244.1.0/26", "fd00:10::/122")}},
			want: []string{"10.244.1.0/26 via 192.0.2.1"},
		},
		{
			name: "service ranges; single LoadBalancer addresses are per service",
			in: RoutingInput{Identity: testID, Pools: pools, Global: bgpConfig("default", func(s *api.BGPConfigurationSpec) {
				s.ServiceClusterIPs = []api.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}}
				s.ServiceExternalIPs = []api.ServiceExternalIPBlock{{CIDR: "203.0.113.0/24"}}
				s.ServiceLoadBalancerIPs = []api.ServiceLoadBalancerIPBlock{{CIDR: "198.51.100.0/28"}, {CIDR: "198.51.100.100/32"}}
			})},
			want: []string{"10.96.0.0/12 via 192.0.2.1", "198.51.100.0/28 via 192.0.2.1", "203.0.113.0/24 via 192.0.2.1"},
		},
		{
			name: "a node excluded from load balancers advertises no service range",
			in: RoutingInput{
				Identity: Identity{IPv4: testID.IPv4, Labels: map[string]string{excludeLBLabel: "true"}},
				Global: bgpConfig("default", func(s *api.BGPConfigurationSpec) {
					s.ServiceClusterIPs = []api.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}}
				}),
			},
		},
		{
			name: "communities from prefixAdvertisements: literal, named and large",
			in: RoutingInput{Identity: testID, Pools: pools, IPAM: IPAMState{Blocks: prefixes("10.244.1.0/26", "10.244.200.0/26")},
				Global: bgpConfig("default", func(s *api.BGPConfigurationSpec) {
					s.Communities = []api.Community{{Name: "pods", Value: "65001:300"}}
					s.PrefixAdvertisements = []api.PrefixAdvertisement{
						{CIDR: "10.244.0.0/16", Communities: []string{"pods", "65001:100:7"}},
						{CIDR: "10.244.1.0/24", Communities: []string{"65001:200"}},
					}
				})},
			want: []string{
				"10.244.1.0/26 via 192.0.2.1 65001:200 65001:300 65001:100:7",
				"10.244.200.0/26 via 192.0.2.1 65001:300 65001:100:7",
			},
		},
		{
			name: "the node's own BGPConfiguration replaces the default prefixAdvertisements",
			in: RoutingInput{Identity: testID, Pools: pools, IPAM: IPAMState{Blocks: prefixes("10.244.1.0/26")},
				Global: bgpConfig("default", func(s *api.BGPConfigurationSpec) {
					s.PrefixAdvertisements = []api.PrefixAdvertisement{{CIDR: "10.244.0.0/16", Communities: []string{"65001:1"}}}
				}),
				NodeConfig: bgpConfig("node.me", func(s *api.BGPConfigurationSpec) {
					s.PrefixAdvertisements = []api.PrefixAdvertisement{{CIDR: "10.244.0.0/16", Communities: []string{"65001:2"}}}
				})},
			want: []string{"10.244.1.0/26 via 192.0.2.1 65001:2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := advertStrings(Adverts(tt.in)); !slices.Equal(got, tt.want) {
				t.Errorf("adverts:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// routeStrings renders routes as routes.Route.String does.
func routeStrings(rs []routes.Route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	return out
}

func TestKernelRoutes(t *testing.T) {
	pools := []api.Pool{
		parsedPool("native", "10.244.0.0/16", nil),
		parsedPool("vxlan", "10.245.0.0/16", func(s *api.IPPoolSpec) { s.VXLANMode = api.VXLANModeAlways }),
		parsedPool("ipip", "10.246.0.0/16", func(s *api.IPPoolSpec) { s.IPIPMode = api.IPIPModeAlways }),
		parsedPool("ipip-cross", "10.247.0.0/16", func(s *api.IPPoolSpec) { s.IPIPMode = api.IPIPModeCrossSubnet }),
	}
	l := func(p, nh string) Learned {
		return Learned{Prefix: netip.MustParsePrefix(p), NextHop: netip.MustParseAddr(nh), Peer: netip.MustParseAddr(nh)}
	}
	in := RoutingInput{Identity: testID, Pools: pools, Global: bgpConfig("default", func(s *api.BGPConfigurationSpec) {
		s.ServiceClusterIPs = []api.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}}
	})}
	learned := []Learned{
		l("10.244.2.0/26", "192.0.2.2"),     // native pool
		l("10.244.1.0/26", "192.0.2.3"),     // ours (originated): never imported
		l("10.245.0.0/26", "192.0.2.2"),     // VXLAN: the overlay's job
		l("10.246.0.0/26", "192.0.2.2"),     // IPIP Always
		l("10.247.0.0/26", "192.0.2.2"),     // IPIP CrossSubnet, same subnet
		l("10.247.1.0/26", "198.51.100.2"),  // IPIP CrossSubnet, other subnet
		l("10.96.0.0/12", "192.0.2.2"),      // service range
		l("192.0.2.0/24", "192.0.2.254"),    // our own subnet
		l("203.0.113.0/24", "192.0.2.254"),  // outside pools: installed, as Calico does
		l("10.244.3.0/26", "192.0.2.1"),     // next hop is us
		l("2001:db8:1::/64", "2001:db8::2"), // IPv6
	}
	got := routeStrings(KernelRoutes(learned, in, []Advert{{Prefix: netip.MustParsePrefix("10.244.1.0/26")}}))
	want := []string{
		"10.244.2.0/26 via 192.0.2.2",
		"10.246.0.0/26 via 192.0.2.2 dev tunl0 onlink",
		"10.247.0.0/26 via 192.0.2.2",
		"10.247.1.0/26 via 198.51.100.2 dev tunl0 onlink",
		"203.0.113.0/24 via 192.0.2.254",
		"2001:db8:1::/64 via 2001:db8::2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("kernel routes:\n got %q\nwant %q", got, want)
	}
}

func TestBlackholes(t *testing.T) {
	in := RoutingInput{
		Pools: []api.Pool{parsedPool("vx", "10.245.0.0/16", func(s *api.IPPoolSpec) { s.VXLANMode = api.VXLANModeCrossSubnet })},
		IPAM:  IPAMState{Blocks: prefixes("10.244.1.0/26", "10.245.1.0/26", "10.244.9.9/32")},
	}
	got := routeStrings(Blackholes(in))
	if want := []string{"10.244.1.0/26 blackhole"}; !slices.Equal(got, want) {
		t.Errorf("blackholes = %q, want %q", got, want)
	}
}

func TestFilter(t *testing.T) {
	in := RoutingInput{
		Pools: []api.Pool{
			parsedPool("a", "10.244.0.0/16", nil),
			parsedPool("b", "10.250.0.0/16", func(s *api.IPPoolSpec) { s.DisableBGPExport = true }),
		},
		Global: bgpConfig("default", func(s *api.BGPConfigurationSpec) {
			s.ServiceExternalIPs = []api.ServiceExternalIPBlock{{CIDR: "203.0.113.0/24"}}
		}),
	}
	f := Filter(in, []Session{
		{Addr: netip.MustParseAddr("192.0.2.9"), NextHopKeep: true},
		{Addr: netip.MustParseAddr("192.0.2.8"), NextHopSelf: true},
		{Addr: netip.MustParseAddr("192.0.2.7")},
	}, nil, nil)
	want := ExportFilter{
		Reject: prefixes("10.250.0.0/16"), Accept: prefixes("10.244.0.0/16"), Services: prefixes("203.0.113.0/24"),
		KeepNextHop: addrs("192.0.2.9"), SelfNextHop: addrs("192.0.2.8"),
	}
	if !f.equal(want) {
		t.Errorf("filter = %+v, want %+v", f, want)
	}
	// The gobgp policy: next-hop statements first, then local routes,
	// rejected pools before accepted ones; default reject.
	req := policyRequest(f)
	var names []string
	for _, s := range req.Policies[0].Statements {
		names = append(names, s.Name)
	}
	wantNames := []string{"calico-nexthop-keep", "calico-nexthop-self", "calico-local", "calico-no-export-pools-v4", "calico-pools-v4", "calico-services-v4"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("statements = %q, want %q", names, wantNames)
	}
	if got := req.Assignments[0].DefaultAction.String(); got != "REJECT" {
		t.Errorf("default action %s, want REJECT", got)
	}
}

func TestParseCommunity(t *testing.T) {
	tests := []struct {
		in      string
		std     uint32
		large   *LargeCommunity
		wantErr bool
	}{
		{in: "65001:100", std: 65001<<16 | 100},
		{in: "4200000000:1:2", large: &LargeCommunity{4200000000, 1, 2}},
		{in: "70000:1", wantErr: true},
		{in: "a:b", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			std, large, err := ParseCommunity(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if std != tt.std || (large == nil) != (tt.large == nil) || (large != nil && *large != *tt.large) {
				t.Errorf("got %d %v, want %d %v", std, large, tt.std, tt.large)
			}
		})
	}
}

func TestBorrowedIn(t *testing.T) {
	// A block as Calico v3.31 writes it: ordinal 0 held for node1, 2 and 3
	// for node2.
	block := `{"cidr":"10.244.166.128/26","affinity":"host:node1","allocations":[0,null,1,1],` +
		`"unallocated":[1],"attributes":[{"handle_id":"h0","secondary":{"node":"node1"}},` +
		`{"handle_id":"h1","secondary":{"node":"node2","pod":"p"}}],"sequenceNumber":1,"deleted":false}`
	tests := []struct {
		node string
		want []string
	}{
		{node: "node1"}, // its own block: nothing borrowed
		{node: "node2", want: []string{"10.244.166.130", "10.244.166.131"}},
		{node: "node3"},
	}
	for _, tt := range tests {
		got, err := borrowedIn([]byte(block), tt.node)
		if err != nil {
			t.Fatal(err)
		}
		var gs []string
		for _, a := range got {
			gs = append(gs, a.String())
		}
		if !slices.Equal(gs, tt.want) {
			t.Errorf("%s: borrowed %q, want %q", tt.node, gs, tt.want)
		}
	}
	if _, err := borrowedIn([]byte("{"), "x"); err == nil {
		t.Error("a broken block decoded without error")
	}
}

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:00B3":                         "127.0.0.1:179",
		"0202000A:1F90":                         "10.0.2.2:8080",
		"B80D0120000000000000000001000000:00B3": "[2001:db8::1]:179",
	} {
		got, err := parseProcAddr(in)
		if err != nil || got.String() != want {
			t.Errorf("parseProcAddr(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
}

func TestReadiness(t *testing.T) {
	est := PeerStatus{Address: "192.0.2.2", BGPState: StateEstablished}
	down := PeerStatus{Address: "192.0.2.3", BGPState: StateActive}
	tests := []struct {
		name  string
		peers []PeerStatus
		young bool
		want  bool
	}{
		{name: "no peers", want: true},
		{name: "all up while young", peers: []PeerStatus{est}, young: true, want: true},
		{name: "one down while young", peers: []PeerStatus{est, down}, young: true},
		{name: "one up after the threshold", peers: []PeerStatus{est, down}, want: true},
		{name: "none up", peers: []PeerStatus{down}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			age := DefaultReadyThreshold + 1
			if tt.young {
				age = 0
			}
			got, detail := Readiness(tt.peers, age, DefaultReadyThreshold)
			if got != tt.want {
				t.Errorf("ready = %v (%s), want %v", got, detail, tt.want)
			}
		})
	}
}

func TestWriteStatus(t *testing.T) {
	now := mustTime(t, "2026-11-21T23:30:04Z")
	st := &Status{Running: true, Peers: []PeerStatus{
		{Address: "172.17.8.102", Type: PeerMesh, BGPState: StateEstablished, Since: now},
		{Address: "172.17.8.254", Type: PeerGlobal, BGPState: StateActive, Since: now.AddDate(0, 0, -2), LastError: "Socket: connection refused"},
		{Address: "172.17.8.103", Type: PeerNode, RRClient: true, BGPState: StateEstablished, Since: now},
	}}
	var b strings.Builder
	if err := WriteStatus(&b, st, now); err != nil {
		t.Fatal(err)
	}
	since := now.Local().Format("15:04:05")
	date := now.AddDate(0, 0, -2).Local().Format("2006-01-02")
	want := "Calico process is running.\n\nIPv4 BGP status\n" +
		"+--------------+---------------------------+-------+------------+-----------------------------------+\n" +
		"| PEER ADDRESS |         PEER TYPE         | STATE |   SINCE    |               INFO                |\n" +
		"+--------------+---------------------------+-------+------------+-----------------------------------+\n" +
		"| 172.17.8.102 | node-to-node mesh         | up    | " + since + "   | Established                       |\n" +
		"| 172.17.8.254 | global                    | start | " + date + " | Active Socket: connection refused |\n" +
		"| 172.17.8.103 | node specific (RR client) | up    | " + since + "   | Established                       |\n" +
		"+--------------+---------------------------+-------+------------+-----------------------------------+\n" +
		"\nIPv6 BGP status\nNo IPv6 peers found.\n\n"
	if b.String() != want {
		t.Errorf("status output:\n%s\nwant:\n%s", b.String(), want)
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}
