package autodetect

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// newTestNamespace creates a throwaway network namespace (netnstest) and
// returns a netlink handle on it; both go when the test ends.
func newTestNamespace(t *testing.T) *netlink.Handle {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	return netnstest.New(t, "autodetect-test").Netlink(t)
}

func addAddr(t *testing.T, h *netlink.Handle, link netlink.Link, cidr string) {
	t.Helper()
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		t.Fatal(err)
	}
	// No duplicate address detection: the IPv6 address is usable at once.
	a.Flags = unix.IFA_F_NODAD
	if err := h.AddrAdd(link, a); err != nil {
		t.Fatalf("add %s to %s: %v", cidr, link.Attrs().Name, err)
	}
}

func TestNetlinkSourceInNamespace(t *testing.T) {
	h := newTestNamespace(t)

	// An uplink "eth0" and, as its veth peer, a Calico-style workload
	// device with a usable address.
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "cali0123456789a"}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	cali, err := h.LinkByName("cali0123456789a")
	if err != nil {
		t.Fatal(err)
	}
	// A container bridge made after eth0, so it has a higher index and
	// first-found would reach it first if it did not skip docker*.
	bridge := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "docker0"}, PeerName: "vethc0ffee"}
	if err := h.LinkAdd(bridge); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	docker0, err := h.LinkByName("docker0")
	if err != nil {
		t.Fatal(err)
	}
	if docker0.Attrs().Index <= eth0.Attrs().Index {
		t.Fatalf("docker0 index %d not above eth0's %d; the test would not show the exclusion", docker0.Attrs().Index, eth0.Attrs().Index)
	}
	addAddr(t, h, eth0, "192.0.2.10/24")
	addAddr(t, h, eth0, "2001:db8:1::10/64")
	addAddr(t, h, cali, "198.51.100.1/24")
	addAddr(t, h, docker0, "172.17.0.1/16")
	addAddr(t, h, docker0, "2001:db8:2::1/64")
	for _, l := range []netlink.Link{eth0, cali, docker0} {
		if err := h.LinkSetUp(l); err != nil {
			t.Fatalf("set %s up: %v", l.Attrs().Name, err)
		}
	}

	src := NetlinkSource{Handle: h}
	tests := []struct {
		method string
		family int
		want   string
	}{
		{"first-found", 4, "192.0.2.10/24"},
		{"first-found", 6, "2001:db8:1::10/64"},
		{"interface=eth0", 4, "192.0.2.10/24"},
		{"cidr=192.0.2.0/24", 4, "192.0.2.10/24"},
		// A route lookup only: nothing is listening at .99 and no packet
		// leaves the namespace.
		{"can-reach=192.0.2.99", 4, "192.0.2.10/24"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/v%d", tt.method, tt.family), func(t *testing.T) {
			m, err := ParseMethod(tt.method)
			if err != nil {
				t.Fatal(err)
			}
			got, iface, err := Detect(m, tt.family, src)
			if err != nil {
				t.Fatalf("Detect: %v", err)
			}
			if got != netip.MustParsePrefix(tt.want) || iface != "eth0" {
				t.Errorf("Detect = %v on %q, want %s on eth0", got, iface, tt.want)
			}
		})
	}

	// The workload device is still found when asked for by name.
	m, err := ParseMethod("interface=^cali")
	if err != nil {
		t.Fatal(err)
	}
	if got, iface, err := Detect(m, 4, src); err != nil || got != netip.MustParsePrefix("198.51.100.1/24") || iface != "cali0123456789a" {
		t.Errorf("interface=^cali: Detect = %v on %q, %v; want 198.51.100.1/24 on cali0123456789a", got, iface, err)
	}

	// Nothing routes outside 192.0.2.0/24 and 198.51.100.0/24 here.
	m, err = ParseMethod("can-reach=203.0.113.1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Detect(m, 4, src); err == nil {
		t.Error("can-reach to an unroutable address succeeded")
	}

	// Resolve takes the prefix length from the interface.
	if got, iface, err := Resolve("192.0.2.10", 4, src); err != nil || got != netip.MustParsePrefix("192.0.2.10/24") || iface != "eth0" {
		t.Errorf("Resolve(192.0.2.10) = %v on %q, %v; want 192.0.2.10/24 on eth0", got, iface, err)
	}
}
