package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Netlink is the kernel surface the overlay uses, in the node's network
// namespace; *netlink.Handle (netlink.NewHandleAt) implements it.
type Netlink interface {
	LinkByName(name string) (netlink.Link, error)
	LinkByIndex(index int) (netlink.Link, error)
	LinkAdd(link netlink.Link) error
	LinkDel(link netlink.Link) error
	LinkSetUp(link netlink.Link) error
	LinkSetMTU(link netlink.Link, mtu int) error
	LinkSetHardwareAddr(link netlink.Link, hwaddr net.HardwareAddr) error
	AddrList(link netlink.Link, family int) ([]netlink.Addr, error)
	AddrAdd(link netlink.Link, addr *netlink.Addr) error
	AddrDel(link netlink.Link, addr *netlink.Addr) error
	NeighList(linkIndex, family int) ([]netlink.Neigh, error)
	NeighSet(neigh *netlink.Neigh) error
	NeighDel(neigh *netlink.Neigh) error
}

// ErrNoIPIP is what setting up tunl0 fails with on a kernel built without
// IP-in-IP (the ipip module).
var ErrNoIPIP = errors.New("this kernel has no IP-in-IP support (module ipip)")

// IPIPUnsupportedError names the pools that want IP-in-IP on a kernel
// without it.
type IPIPUnsupportedError struct {
	Pools []PoolMode
}

func (e *IPIPUnsupportedError) Error() string {
	if len(e.Pools) == 0 {
		return ErrNoIPIP.Error()
	}
	p := e.Pools[0]
	msg := fmt.Sprintf("IPPool %q has ipipMode %s but %s; use vxlanMode", p.Name, p.Mode, ErrNoIPIP)
	if n := len(e.Pools) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more IP-in-IP pools select this node)", n)
	}
	return msg
}

func (e *IPIPUnsupportedError) Unwrap() error { return ErrNoIPIP }

// kernel programs the overlay devices and their neighbour and FDB entries.
// It owns vxlan.calico and vxlan-v6.calico outright (every address,
// permanent neighbour and FDB entry on them is ours) and, on tunl0, only
// the MTU, the up flag and the address. Not safe for concurrent use.
type kernel struct {
	nl  Netlink
	log *slog.Logger
	// noIPIP is set once creating tunl0 failed for want of the ipip
	// module; it is not retried (modules do not appear by themselves).
	noIPIP bool
}

// interfaceWith returns the interface holding a (nil if none).
func (k *kernel) interfaceWith(a netip.Addr) (netlink.Link, error) {
	if !a.IsValid() {
		return nil, nil
	}
	fam := netlink.FAMILY_V4
	if a.Is6() {
		fam = netlink.FAMILY_V6
	}
	addrs, err := k.nl.AddrList(nil, fam)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	for _, ad := range addrs {
		if got, ok := netip.AddrFromSlice(ad.IP); ok && got.Unmap() == a {
			l, err := k.nl.LinkByIndex(ad.LinkIndex)
			if err != nil {
				return nil, fmt.Errorf("link %d: %w", ad.LinkIndex, err)
			}
			return l, nil
		}
	}
	return nil, nil
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

// syncVXLAN makes the device called name match spec, or removes it when
// spec is nil.
func (k *kernel) syncVXLAN(name string, spec *VXLANSpec) error {
	link, err := k.nl.LinkByName(name)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("look up %s: %w", name, err)
	}
	if spec == nil {
		if link == nil {
			return nil
		}
		k.log.Info("removing VXLAN device: no tunnel address on this node", "device", name)
		if err := k.nl.LinkDel(link); err != nil && !isNotFound(err) {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		return nil
	}
	parent, err := k.interfaceWith(spec.Local)
	if err != nil {
		return err
	}
	want := &netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: name, MTU: spec.MTU, HardwareAddr: spec.MAC},
		VxlanId:   spec.VNI,
		SrcAddr:   spec.Local.AsSlice(),
		Port:      spec.Port,
		Learning:  false,
	}
	if parent != nil {
		want.VtepDevIndex = parent.Attrs().Index
	}
	if link != nil {
		if cur, ok := link.(*netlink.Vxlan); !ok || !vxlanMatches(cur, want) {
			// VNI, port, local address and parent cannot be changed in
			// place.
			k.log.Info("recreating VXLAN device with new parameters", "device", name, "vni", spec.VNI, "port", spec.Port, "local", spec.Local)
			if err := k.nl.LinkDel(link); err != nil && !isNotFound(err) {
				return fmt.Errorf("delete %s: %w", name, err)
			}
			link = nil
		}
	}
	if link == nil {
		if err := k.nl.LinkAdd(want); err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
		if link, err = k.nl.LinkByName(name); err != nil {
			return fmt.Errorf("look up %s: %w", name, err)
		}
		k.log.Info("created VXLAN device", "device", name, "vni", spec.VNI, "port", spec.Port, "local", spec.Local, "mac", spec.MAC.String(), "mtu", spec.MTU)
	}
	if err := k.linkBasics(link, spec.MTU, spec.MAC); err != nil {
		return err
	}
	fam := netlink.FAMILY_V4
	if spec.Local.Is6() {
		fam = netlink.FAMILY_V6
	}
	if err := k.syncAddrs(link, fam, spec.Addr); err != nil {
		return err
	}
	if err := k.syncNeighbours(link, fam, spec.Peers); err != nil {
		return err
	}
	return k.syncFDB(link, spec.Peers)
}

func vxlanMatches(cur, want *netlink.Vxlan) bool {
	return cur.VxlanId == want.VxlanId && cur.Port == want.Port && cur.SrcAddr.Equal(want.SrcAddr) &&
		!cur.Learning && (want.VtepDevIndex == 0 || cur.VtepDevIndex == want.VtepDevIndex)
}

// linkBasics sets MTU and MAC (if given) and brings the link up.
func (k *kernel) linkBasics(link netlink.Link, mtu int, mac net.HardwareAddr) error {
	a := link.Attrs()
	if a.MTU != mtu {
		if err := k.nl.LinkSetMTU(link, mtu); err != nil {
			return fmt.Errorf("set MTU of %s: %w", a.Name, err)
		}
	}
	if mac != nil && !bytes.Equal(a.HardwareAddr, mac) {
		if err := k.nl.LinkSetHardwareAddr(link, mac); err != nil {
			return fmt.Errorf("set MAC of %s: %w", a.Name, err)
		}
	}
	if a.Flags&net.FlagUp == 0 {
		if err := k.nl.LinkSetUp(link); err != nil {
			return fmt.Errorf("bring %s up: %w", a.Name, err)
		}
	}
	return nil
}

// syncAddrs leaves want (if valid) as the only address of family on link
// (IPv6 link-local addresses are the kernel's and stay).
func (k *kernel) syncAddrs(link netlink.Link, family int, want netip.Prefix) error {
	addrs, err := k.nl.AddrList(link, family)
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", link.Attrs().Name, err)
	}
	have := false
	for _, a := range addrs {
		p, ok := prefixOf(a.IPNet)
		if !ok || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		if p == want {
			have = true
			continue
		}
		if err := k.nl.AddrDel(link, &a); err != nil {
			return fmt.Errorf("remove %s from %s: %w", p, link.Attrs().Name, err)
		}
	}
	if have || !want.IsValid() {
		return nil
	}
	na := &netlink.Addr{IPNet: ipNet(want)}
	if want.Addr().Is6() {
		na.Flags = unix.IFA_F_NODAD
	}
	if err := k.nl.AddrAdd(link, na); err != nil {
		return fmt.Errorf("add %s to %s: %w", want, link.Attrs().Name, err)
	}
	return nil
}

// syncNeighbours makes the permanent neighbour entries on link exactly one
// per peer: its tunnel address resolves to its MAC without ARP/ND.
func (k *kernel) syncNeighbours(link netlink.Link, family int, peers []VTEP) error {
	idx := link.Attrs().Index
	want := map[netip.Addr]net.HardwareAddr{}
	for _, p := range peers {
		want[p.TunnelAddr] = p.MAC
	}
	cur, err := k.nl.NeighList(idx, family)
	if err != nil {
		return fmt.Errorf("list neighbours on %s: %w", link.Attrs().Name, err)
	}
	ok := map[netip.Addr]bool{}
	for _, n := range cur {
		a, valid := netip.AddrFromSlice(n.IP)
		if !valid {
			continue
		}
		a = a.Unmap()
		mac, wanted := want[a]
		if wanted && n.State == netlink.NUD_PERMANENT && bytes.Equal(n.HardwareAddr, mac) {
			ok[a] = true
			continue
		}
		if wanted || n.State&netlink.NUD_PERMANENT == 0 {
			continue // replaced below, or the kernel's own entry
		}
		if err := k.nl.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete neighbour %s on %s: %w", a, link.Attrs().Name, err)
		}
	}
	for a, mac := range want {
		if ok[a] {
			continue
		}
		n := &netlink.Neigh{LinkIndex: idx, Family: family, State: netlink.NUD_PERMANENT, Type: unix.RTN_UNICAST,
			IP: a.AsSlice(), HardwareAddr: mac}
		if err := k.nl.NeighSet(n); err != nil {
			return fmt.Errorf("set neighbour %s lladdr %s on %s: %w", a, mac, link.Attrs().Name, err)
		}
	}
	return nil
}

// syncFDB makes the VXLAN forwarding entries on link exactly one per
// peer: frames for its MAC go to its node IP.
func (k *kernel) syncFDB(link netlink.Link, peers []VTEP) error {
	idx := link.Attrs().Index
	want := map[string]netip.Addr{}
	for _, p := range peers {
		want[p.MAC.String()] = p.NodeIP
	}
	cur, err := k.nl.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("list FDB of %s: %w", link.Attrs().Name, err)
	}
	ok := map[string]bool{}
	for _, n := range cur {
		mac := n.HardwareAddr.String()
		dst, _ := netip.AddrFromSlice(n.IP)
		if ip, wanted := want[mac]; wanted && dst.Unmap() == ip && n.State&netlink.NUD_PERMANENT != 0 {
			ok[mac] = true
			continue
		}
		if n.State&netlink.NUD_PERMANENT == 0 {
			continue
		}
		if err := k.nl.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete FDB entry %s on %s: %w", mac, link.Attrs().Name, err)
		}
	}
	for mac, ip := range want {
		if ok[mac] {
			continue
		}
		hw, _ := net.ParseMAC(mac)
		n := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
			State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: hw}
		if err := k.nl.NeighSet(n); err != nil {
			return fmt.Errorf("set FDB entry %s dst %s on %s: %w", mac, ip, link.Attrs().Name, err)
		}
	}
	return nil
}

// syncIPIP sets up tunl0 for spec; nil leaves tunl0 alone (it is the ipip
// module's fallback device, shared with anything else using IP-in-IP).
// On a kernel without IP-in-IP it returns an *IPIPUnsupportedError.
func (k *kernel) syncIPIP(spec *IPIPSpec) error {
	if spec == nil {
		return nil
	}
	if k.noIPIP {
		return &IPIPUnsupportedError{Pools: spec.Pools}
	}
	link, err := k.nl.LinkByName(IPIPDevice)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("look up %s: %w", IPIPDevice, err)
	}
	if link == nil {
		err := k.nl.LinkAdd(&netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: IPIPDevice, MTU: spec.MTU}})
		if unsupported(err) {
			k.noIPIP = true
			return &IPIPUnsupportedError{Pools: spec.Pools}
		}
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create %s: %w", IPIPDevice, err)
		}
		if link, err = k.nl.LinkByName(IPIPDevice); err != nil {
			return fmt.Errorf("look up %s: %w", IPIPDevice, err)
		}
	}
	if err := k.linkBasics(link, spec.MTU, nil); err != nil {
		return err
	}
	if !spec.Addr.IsValid() {
		return nil
	}
	return k.syncAddrs(link, netlink.FAMILY_V4, spec.Addr)
}

// unsupported reports whether creating a link failed because the kernel
// does not know the link type: rtnetlink answers EOPNOTSUPP ("Unknown
// device type") when no module provides it.
func unsupported(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EAFNOSUPPORT) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "not supported") || strings.Contains(msg, "unknown device type")
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
