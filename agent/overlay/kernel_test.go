package overlay

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// kernelNS is a throwaway namespace with eth0 (a veth) holding
// 192.0.2.11/24 and 2001:db8::11/64, and a netlink handle in it.
func kernelNS(t *testing.T) (string, *netlink.Handle) {
	t.Helper()
	requireRoot(t)
	ns := netnstest.New(t, "ovlk")
	for _, args := range [][]string{
		{"link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"},
		{"link", "set", "eth0", "up"},
		{"link", "set", "eth0p", "up"},
		{"addr", "add", "192.0.2.11/24", "dev", "eth0"},
		{"-6", "addr", "add", "2001:db8::11/64", "dev", "eth0", "nodad"},
	} {
		ns.MustRun(t, "ip", args...)
	}
	return ns.Name, ns.Netlink(t)
}

// countingNetlink counts the calls that change the kernel.
type countingNetlink struct {
	Netlink
	writes []string
}

func (c *countingNetlink) note(s string) { c.writes = append(c.writes, s) }
func (c *countingNetlink) LinkAdd(l netlink.Link) error {
	c.note("LinkAdd")
	return c.Netlink.LinkAdd(l)
}
func (c *countingNetlink) LinkDel(l netlink.Link) error {
	c.note("LinkDel")
	return c.Netlink.LinkDel(l)
}
func (c *countingNetlink) LinkSetUp(l netlink.Link) error {
	c.note("LinkSetUp")
	return c.Netlink.LinkSetUp(l)
}
func (c *countingNetlink) LinkSetMTU(l netlink.Link, m int) error {
	c.note("LinkSetMTU")
	return c.Netlink.LinkSetMTU(l, m)
}
func (c *countingNetlink) LinkSetHardwareAddr(l netlink.Link, hw net.HardwareAddr) error {
	c.note("LinkSetHardwareAddr")
	return c.Netlink.LinkSetHardwareAddr(l, hw)
}
func (c *countingNetlink) AddrAdd(l netlink.Link, a *netlink.Addr) error {
	c.note("AddrAdd")
	return c.Netlink.AddrAdd(l, a)
}
func (c *countingNetlink) AddrDel(l netlink.Link, a *netlink.Addr) error {
	c.note("AddrDel")
	return c.Netlink.AddrDel(l, a)
}
func (c *countingNetlink) NeighSet(n *netlink.Neigh) error {
	c.note("NeighSet")
	return c.Netlink.NeighSet(n)
}
func (c *countingNetlink) NeighDel(n *netlink.Neigh) error {
	c.note("NeighDel")
	return c.Netlink.NeighDel(n)
}

func hw(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// v6State renders the IPv6 device's neighbour and FDB entries.
func v6State(t *testing.T, nl *netlink.Handle) (device string, neigh, fdb []string) {
	t.Helper()
	link, err := nl.LinkByName(VXLANDeviceV6)
	if err != nil {
		return "", nil, nil
	}
	v := link.(*netlink.Vxlan)
	addrs, _ := nl.AddrList(link, netlink.FAMILY_V6)
	var as []string
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			as = append(as, a.IPNet.String())
		}
	}
	device = fmt.Sprintf("vni %d port %d local %s learning %v mtu %d mac %s addrs %v", v.VxlanId, v.Port, v.SrcAddr,
		v.Learning, link.Attrs().MTU, link.Attrs().HardwareAddr, as)
	ns, _ := nl.NeighList(link.Attrs().Index, netlink.FAMILY_V6)
	for _, n := range ns {
		if n.State == netlink.NUD_PERMANENT {
			neigh = append(neigh, n.IP.String()+" lladdr "+n.HardwareAddr.String())
		}
	}
	fs, _ := nl.NeighList(link.Attrs().Index, unix.AF_BRIDGE)
	for _, n := range fs {
		fdb = append(fdb, n.HardwareAddr.String()+" dst "+n.IP.String())
	}
	slices.Sort(neigh)
	slices.Sort(fdb)
	return device, neigh, fdb
}

func TestKernelVXLANv6(t *testing.T) {
	_, nl := kernelNS(t)
	cn := &countingNetlink{Netlink: nl}
	k := &kernel{nl: cn, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	spec := &VXLANSpec{
		Name: VXLANDeviceV6, VNI: 4096, Port: 4789, MTU: 1430, MAC: hw("02:00:00:00:00:01"),
		Local: netip.MustParseAddr("2001:db8::11"), Addr: netip.MustParsePrefix("fd00:10::1/128"),
		Peers: []VTEP{
			{Node: "n2", TunnelAddr: netip.MustParseAddr("fd00:10::41"), MAC: hw("02:00:00:00:00:02"), NodeIP: netip.MustParseAddr("2001:db8::12")},
			{Node: "n3", TunnelAddr: netip.MustParseAddr("fd00:10::81"), MAC: hw("02:00:00:00:00:03"), NodeIP: netip.MustParseAddr("2001:db8:2::13")},
		},
	}
	if err := k.syncVXLAN(VXLANDeviceV6, spec); err != nil {
		t.Fatal(err)
	}
	dev, neigh, fdb := v6State(t, nl)
	wantDev := "vni 4096 port 4789 local 2001:db8::11 learning false mtu 1430 mac 02:00:00:00:00:01 addrs [fd00:10::1/128]"
	if dev != wantDev {
		t.Errorf("device\n got %q\nwant %q", dev, wantDev)
	}
	wantNeigh := []string{"fd00:10::41 lladdr 02:00:00:00:00:02", "fd00:10::81 lladdr 02:00:00:00:00:03"}
	wantFDB := []string{"02:00:00:00:00:02 dst 2001:db8::12", "02:00:00:00:00:03 dst 2001:db8:2::13"}
	if !slices.Equal(neigh, wantNeigh) || !slices.Equal(fdb, wantFDB) {
		t.Errorf("entries\n got %q %q\nwant %q %q", neigh, fdb, wantNeigh, wantFDB)
	}
	link, _ := nl.LinkByName(VXLANDeviceV6)
	if eth0, _ := nl.LinkByName("eth0"); link.(*netlink.Vxlan).VtepDevIndex != eth0.Attrs().Index {
		t.Errorf("parent index %d, want eth0 (%d)", link.(*netlink.Vxlan).VtepDevIndex, eth0.Attrs().Index)
	}

	// Nothing changed: nothing is written.
	cn.writes = nil
	if err := k.syncVXLAN(VXLANDeviceV6, spec); err != nil {
		t.Fatal(err)
	}
	if len(cn.writes) != 0 {
		t.Errorf("unchanged state wrote %v", cn.writes)
	}

	// A peer leaves, another changes MAC, the MTU changes: only the
	// differences are written, the device stays.
	idx := link.Attrs().Index
	spec.Peers = []VTEP{{Node: "n2", TunnelAddr: netip.MustParseAddr("fd00:10::41"), MAC: hw("02:00:00:00:00:22"), NodeIP: netip.MustParseAddr("2001:db8::12")}}
	spec.MTU = 1400
	if err := k.syncVXLAN(VXLANDeviceV6, spec); err != nil {
		t.Fatal(err)
	}
	_, neigh, fdb = v6State(t, nl)
	if !slices.Equal(neigh, []string{"fd00:10::41 lladdr 02:00:00:00:00:22"}) || !slices.Equal(fdb, []string{"02:00:00:00:00:22 dst 2001:db8::12"}) {
		t.Errorf("after peer changes: %q %q", neigh, fdb)
	}
	if l, _ := nl.LinkByName(VXLANDeviceV6); l.Attrs().Index != idx || l.Attrs().MTU != 1400 {
		t.Errorf("device recreated or MTU not set: index %d->%d mtu %d", idx, l.Attrs().Index, l.Attrs().MTU)
	}
	if slices.Contains(cn.writes, "LinkDel") {
		t.Errorf("device deleted for an MTU change: %v", cn.writes)
	}

	// A new VNI cannot be changed in place: the device is recreated.
	spec.VNI = 4097
	if err := k.syncVXLAN(VXLANDeviceV6, spec); err != nil {
		t.Fatal(err)
	}
	if dev, _, fdb = v6State(t, nl); dev == "" || dev[:8] != "vni 4097" || len(fdb) != 1 {
		t.Errorf("after VNI change: %q %q", dev, fdb)
	}

	// Not wanted any more: removed.
	if err := k.syncVXLAN(VXLANDeviceV6, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := nl.LinkByName(VXLANDeviceV6); err == nil {
		t.Error("device still there")
	}
	if err := k.syncVXLAN(VXLANDeviceV6, nil); err != nil {
		t.Errorf("removing an absent device: %v", err)
	}
}

func TestKernelIPIPMissing(t *testing.T) {
	requireRoot(t)
	if ipipAvailable(t) {
		t.Skip("this kernel has IP-in-IP")
	}
	_, nl := kernelNS(t)
	cn := &countingNetlink{Netlink: nl}
	k := &kernel{nl: cn, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	spec := &IPIPSpec{MTU: 1440, Addr: netip.MustParsePrefix("10.102.0.1/32"), Pools: []PoolMode{{"ippool2", "Always"}}}
	err := k.syncIPIP(spec)
	var ue *IPIPUnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, ErrNoIPIP) {
		t.Fatalf("err = %v, want the IP-in-IP unsupported error", err)
	}
	// Probed once: later calls do not try again.
	cn.writes = nil
	if err := k.syncIPIP(spec); !errors.As(err, &ue) {
		t.Fatalf("second call: %v", err)
	}
	if len(cn.writes) != 0 {
		t.Errorf("second call touched the kernel: %v", cn.writes)
	}
	if err := k.syncIPIP(nil); err != nil {
		t.Errorf("no IP-in-IP wanted: %v", err)
	}
}
