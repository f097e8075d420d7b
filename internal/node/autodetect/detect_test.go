package autodetect

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/projectcalico/calico-node/internal/testkit/errtest"
)

// fakeSource is a host described in memory.
type fakeSource struct {
	ifaces    []Interface
	ifaceErr  error
	routeSrc  map[netip.Addr]netip.Addr
	routeErr  error
	routeAsks []netip.Addr
}

func (f *fakeSource) Interfaces() ([]Interface, error) {
	if f.ifaceErr != nil {
		return nil, f.ifaceErr
	}
	return f.ifaces, nil
}

func (f *fakeSource) RouteSrc(dst netip.Addr) (netip.Addr, error) {
	f.routeAsks = append(f.routeAsks, dst)
	if f.routeErr != nil {
		return netip.Addr{}, f.routeErr
	}
	a, ok := f.routeSrc[dst]
	if !ok {
		return netip.Addr{}, errors.New("network is unreachable")
	}
	return a, nil
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// testHost is a typical node, listed out of index order on purpose.
func testHost() *fakeSource {
	return &fakeSource{
		ifaces: []Interface{
			{Name: "eth1", Index: 3, Addrs: prefixes("192.168.1.7/24")},
			{Name: "lo", Index: 1, Addrs: prefixes("127.0.0.1/8", "::1/128")},
			{Name: "docker0", Index: 4, Addrs: prefixes("172.17.0.1/16")},
			{Name: "eth0", Index: 2, Addrs: prefixes("169.254.10.1/16", "10.0.0.5/24", "fe80::1/64", "2001:db8::5/64")},
			{Name: "cali1234567890a", Index: 5, Addrs: prefixes("fe80::ecee:eeff:feee:eeee/64")},
			{Name: "tunl0", Index: 6, Addrs: prefixes("10.244.0.0/32")},
			{Name: "vxlan.calico", Index: 8, Addrs: prefixes("10.244.0.1/32")},
			{Name: "ens5", Index: 7, Addrs: prefixes("fe80::2/64")},
		},
		routeSrc: map[netip.Addr]netip.Addr{
			netip.MustParseAddr("192.168.1.1"): netip.MustParseAddr("192.168.1.7"),
			netip.MustParseAddr("8.8.8.8"):     netip.MustParseAddr("10.0.0.5"),
			netip.MustParseAddr("2001:db8::1"): netip.MustParseAddr("2001:db8::5"),
			netip.MustParseAddr("203.0.113.1"): netip.MustParseAddr("203.0.113.99"),
		},
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		method    string
		family    int
		host      func() *fakeSource
		want      string // prefix
		wantIface string
		wantErr   string
	}{
		// first-found: highest index first, internal names and
		// link-local/loopback addresses skipped.
		{method: "first-found", family: 4, want: "192.168.1.7/24", wantIface: "eth1"},
		{method: "first-found", family: 6, want: "2001:db8::5/64", wantIface: "eth0"},
		{method: "first-found", family: 4, host: func() *fakeSource {
			return &fakeSource{ifaces: []Interface{
				{Name: "lo", Index: 1, Addrs: prefixes("127.0.0.1/8")},
				{Name: "docker0", Index: 2, Addrs: prefixes("172.17.0.1/16")},
				{Name: "eth0", Index: 3, Addrs: prefixes("169.254.3.3/16")},
			}}
		}, wantErr: "method first-found): no usable IPv4 address on interfaces eth0"},
		{method: "first-found", family: 4, host: func() *fakeSource {
			return &fakeSource{ifaces: []Interface{{Name: "lo", Index: 1, Addrs: prefixes("127.0.0.1/8")}}}
		}, wantErr: "method first-found): no interface matches"},

		// interface=: only matching names, no default exclusions.
		{method: "interface=eth0", family: 4, want: "10.0.0.5/24", wantIface: "eth0"},
		{method: "interface=^eth", family: 4, want: "192.168.1.7/24", wantIface: "eth1"},
		{method: "interface=wlan0, eth0", family: 6, want: "2001:db8::5/64", wantIface: "eth0"},
		{method: "interface=docker.*", family: 4, want: "172.17.0.1/16", wantIface: "docker0"},
		{method: "interface=wlan.*", family: 4, wantErr: "(method interface=wlan.*): no interface matches"},
		{method: "interface=ens5", family: 4, wantErr: "(method interface=ens5): no usable IPv4 address on interfaces ens5"},

		// skip-interface=: first-found minus more names.
		{method: "skip-interface=eth1", family: 4, want: "10.0.0.5/24", wantIface: "eth0"},
		{method: "skip-interface=eth.*,ens.*", family: 4, wantErr: "(method skip-interface=eth.*,ens.*): no interface matches"},

		// cidr=: any interface, address inside a CIDR.
		{method: "cidr=10.0.0.0/24", family: 4, want: "10.0.0.5/24", wantIface: "eth0"},
		{method: "cidr=10.99.0.0/16,192.168.0.0/16", family: 4, want: "192.168.1.7/24", wantIface: "eth1"},
		{method: "cidr=2001:db8::/32", family: 6, want: "2001:db8::5/64", wantIface: "eth0"},
		{method: "cidr=10.244.0.0/16", family: 4, want: "10.244.0.1/32", wantIface: "vxlan.calico"},
		{method: "cidr=10.99.0.0/16", family: 4, wantErr: "(method cidr=10.99.0.0/16): no address in the CIDRs"},
		{method: "cidr=10.0.0.0/8", family: 6, wantErr: "no address in the CIDRs"},

		// can-reach=: the kernel's source address, found on its interface.
		{method: "can-reach=192.168.1.1", family: 4, want: "192.168.1.7/24", wantIface: "eth1"},
		{method: "can-reach=8.8.8.8", family: 4, want: "10.0.0.5/24", wantIface: "eth0"},
		{method: "can-reach=2001:db8::1", family: 6, want: "2001:db8::5/64", wantIface: "eth0"},
		{method: "can-reach=8.8.8.8", family: 6, wantErr: "(method can-reach=8.8.8.8): destination 8.8.8.8 is not an IPv6 address"},
		{method: "can-reach=198.51.100.1", family: 4, wantErr: "look up route to 198.51.100.1: network is unreachable"},
		{method: "can-reach=203.0.113.1", family: 4, wantErr: "source address 203.0.113.99 for 203.0.113.1 is not on any interface"},

		{method: "kubernetes-internal-ip", family: 4, wantErr: "requires the Kubernetes datastore"},

		{method: "first-found", family: 4, host: func() *fakeSource {
			return &fakeSource{ifaceErr: errors.New("netlink: permission denied")}
		}, wantErr: "list interfaces: netlink: permission denied"},
		{method: "first-found", family: 5, wantErr: "IP family 5"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/v%d", tt.method, tt.family), func(t *testing.T) {
			m, err := ParseMethod(tt.method)
			if err != nil {
				t.Fatal(err)
			}
			host := testHost()
			if tt.host != nil {
				host = tt.host()
			}
			got, iface, err := Detect(m, tt.family, host)
			if !errtest.Want(t, err, tt.wantErr) {
				return
			}
			if got.String() != tt.want || iface != tt.wantIface {
				t.Errorf("Detect = %v on %q, want %s on %q", got, iface, tt.want, tt.wantIface)
			}
		})
	}
}

func TestDetectKubernetesSentinel(t *testing.T) {
	m, err := ParseMethod("kubernetes-internal-ip")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Detect(m, 4, testHost())
	if !errors.Is(err, ErrNeedsKubernetes) {
		t.Fatalf("Detect = %v, want ErrNeedsKubernetes", err)
	}
}

func TestDetectCanReachSendsNothingElse(t *testing.T) {
	host := testHost()
	m, err := ParseMethod("can-reach=192.168.1.1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Detect(m, 4, host); err != nil {
		t.Fatal(err)
	}
	if len(host.routeAsks) != 1 || host.routeAsks[0] != netip.MustParseAddr("192.168.1.1") {
		t.Errorf("route lookups = %v, want exactly 192.168.1.1", host.routeAsks)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "10.0.0.5", want: "10.0.0.5/32"},
		{in: " 10.0.0.5/24 ", want: "10.0.0.5/24"},
		{in: "2001:db8::5", want: "2001:db8::5/128"},
		{in: "2001:db8::5/64", want: "2001:db8::5/64"},
		{in: "::ffff:10.0.0.5", want: "10.0.0.5/32"},
		{in: "::ffff:10.0.0.5/120", want: "10.0.0.5/24"},
		{in: "::ffff:10.0.0.5/64", wantErr: "IPv4-mapped"},
		{in: "", wantErr: "empty"},
		{in: "autodetect", wantErr: "must be handled before validation"},
		{in: "none", wantErr: "must be handled before validation"},
		{in: "10.0.0.256", wantErr: `"10.0.0.256"`},
		{in: "10.0.0.5/33", wantErr: `"10.0.0.5/33"`},
		{in: "0.0.0.0", wantErr: "unspecified"},
		{in: "127.0.0.1", wantErr: "loopback"},
		{in: "224.0.0.1/4", wantErr: "multicast"},
		{in: "fe80::1%eth0", wantErr: "zones"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Validate(tt.in)
			if !errtest.Want(t, err, tt.wantErr) {
				return
			}
			if got.String() != tt.want {
				t.Errorf("Validate(%q) = %v, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	tests := []struct {
		in        string
		family    int
		want      string
		wantIface string
		wantErr   string
	}{
		{in: "10.0.0.5", family: 4, want: "10.0.0.5/24", wantIface: "eth0"},
		{in: "10.0.0.5/16", family: 4, want: "10.0.0.5/16", wantIface: "eth0"},
		{in: "10.9.9.9", family: 4, want: "10.9.9.9/32"},
		{in: "2001:db8::5", family: 6, want: "2001:db8::5/64", wantIface: "eth0"},
		{in: "2001:db8::5", family: 4, wantErr: "not an IPv4 address"},
		{in: "10.0.0.5", family: 6, wantErr: "not an IPv6 address"},
		{in: "10.0.0.5", family: 0, wantErr: "IP family 0"},
		{in: "bogus", family: 4, wantErr: `"bogus"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, iface, err := Resolve(tt.in, tt.family, testHost())
			if !errtest.Want(t, err, tt.wantErr) {
				return
			}
			if got.String() != tt.want || iface != tt.wantIface {
				t.Errorf("Resolve(%q) = %v on %q, want %s on %q", tt.in, got, iface, tt.want, tt.wantIface)
			}
		})
	}
}

func FuzzValidate(f *testing.F) {
	for _, s := range []string{"10.0.0.5", "10.0.0.5/24", "2001:db8::5/64", "none", "::ffff:1.2.3.4/120"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Validate(s)
		if err != nil {
			return
		}
		if !p.IsValid() || p.Addr().IsLoopback() || p.Addr().IsUnspecified() || p.Addr().Zone() != "" {
			t.Fatalf("Validate(%q) accepted %v", s, p)
		}
	})
}
