package overlay

import (
	"cmp"
	"crypto/sha1"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Device names, as Calico's felix names them.
const (
	VXLANDevice   = "vxlan.calico"
	VXLANDeviceV6 = "vxlan-v6.calico"
	IPIPDevice    = "tunl0"
)

// Felix's defaults for the tunnel devices. The MTUs leave room for the
// encapsulation on a 1500-byte network: VXLAN over IPv4 costs 50 bytes,
// over IPv6 70, IP-in-IP 20 (felix rounds that to 60 for safety).
const (
	DefaultVXLANVNI   = 4096
	DefaultVXLANPort  = 4789
	DefaultVXLANMTU   = 1450
	DefaultVXLANMTUV6 = 1430
	DefaultIPIPMTU    = 1440
)

// Settings are the FelixConfiguration values the overlay uses.
type Settings struct {
	// VXLANEnabled and IPIPEnabled false switch the overlay off even where
	// pools ask for it (felix's explicit override); true or unset follow
	// the pools.
	VXLANEnabled, IPIPEnabled bool
	VXLANVNI, VXLANPort       int
	VXLANMTU, VXLANMTUV6      int
	IPIPMTU                   int
}

// SettingsFor reads the overlay's settings from spec, the
// FelixConfiguration in effect on the node (felixenv.ForNode: default,
// node.<name>, then the FELIX_* environment). A number that is unset or
// not positive is felix's default, as 0 means "the default" in Calico.
func SettingsFor(spec api.FelixConfigurationSpec) Settings {
	s := Settings{
		VXLANEnabled: true, IPIPEnabled: true,
		VXLANVNI: DefaultVXLANVNI, VXLANPort: DefaultVXLANPort,
		VXLANMTU: DefaultVXLANMTU, VXLANMTUV6: DefaultVXLANMTUV6, IPIPMTU: DefaultIPIPMTU,
	}
	setBool(&s.VXLANEnabled, spec.VXLANEnabled)
	setBool(&s.IPIPEnabled, spec.IPIPEnabled)
	setInt(&s.VXLANVNI, spec.VXLANVNI)
	setInt(&s.VXLANPort, spec.VXLANPort)
	setInt(&s.VXLANMTU, spec.VXLANMTU)
	setInt(&s.VXLANMTUV6, spec.VXLANMTUV6)
	setInt(&s.IPIPMTU, spec.IPIPMTU)
	return s
}

func setBool(dst *bool, v *bool) {
	if v != nil {
		*dst = *v
	}
}

// setInt takes a configured value; 0 means "felix's default" in Calico.
func setInt(dst *int, v *int) {
	if v != nil && *v > 0 {
		*dst = *v
	}
}

// Input is everything the desired overlay state depends on.
type Input struct {
	NodeName string
	Nodes    map[string]*api.Node
	// Pools are the IP pools, parsed (api.ParsePool); their order does not
	// matter.
	Pools    []api.Pool
	Blocks   ipam.BlockSnapshot
	Settings Settings
	// ParentDev and ParentDevV6 are the interfaces holding this node's
	// IPv4 and IPv6 addresses ("" if none does): the VXLAN devices' parent
	// and the device of native (CrossSubnet) routes. The caller reads
	// them from the kernel.
	ParentDev, ParentDevV6 string
}

// VTEP is one node's VXLAN tunnel endpoint.
type VTEP struct {
	Node       string
	TunnelAddr netip.Addr       // the address on its VXLAN device
	MAC        net.HardwareAddr // its VXLAN device's MAC
	NodeIP     netip.Addr       // where its VXLAN packets go
}

// VXLANSpec is a wanted VXLAN device.
type VXLANSpec struct {
	Name   string
	VNI    int
	Port   int
	MTU    int
	MAC    net.HardwareAddr
	Local  netip.Addr   // the node IP, the tunnel's source address
	Parent string       // the interface holding Local; "" if unknown
	Addr   netip.Prefix // the tunnel address, /32 or /128
	// Peers are the remote VTEPs: one static neighbour entry (tunnel
	// address -> MAC) and one FDB entry (MAC -> node IP) each.
	Peers []VTEP
}

// IPIPSpec is a wanted IP-in-IP device (always tunl0).
type IPIPSpec struct {
	MTU int
	// Addr is the node's IP-in-IP tunnel address /32; invalid until one is
	// allocated.
	Addr netip.Prefix
	// Pools names the pools that want IP-in-IP on this node, with their
	// modes, for error messages.
	Pools []PoolMode
}

// PoolMode is a pool and its encapsulation mode.
type PoolMode struct {
	Name string
	Mode string
}

// Desired is the overlay state this node wants.
type Desired struct {
	// VXLAN and VXLANV6 are nil when the node has no VXLAN tunnel address
	// of that family (or VXLAN is switched off): the device must go.
	VXLAN, VXLANV6 *VXLANSpec
	// IPIP is nil when no IP-in-IP pool selects this node.
	IPIP *IPIPSpec
	// Routes are the routes through the VXLAN devices and the native
	// routes CrossSubnet pools take inside the node's subnet.
	Routes []routes.Route
	// IPIPRoutes go through tunl0; they are only usable when the device
	// could be set up.
	IPIPRoutes []routes.Route
}

// active reports whether the pool takes part in tunnelling this node's
// traffic: not disabled and not being deleted.
func active(p api.Pool) bool { return !p.Disabled && !p.Deleting }

// selects reports whether the pool's nodeSelector selects n.
func selects(p api.Pool, n *api.Node) bool { return p.NodeSelector.Evaluate(n.Labels) }

// poolOf is the pool containing a (the most specific one, should pools
// overlap).
func poolOf(pools []api.Pool, a netip.Addr) (api.Pool, bool) {
	var best api.Pool
	found := false
	for _, p := range pools {
		if p.CIDR.Contains(a) && (!found || p.CIDR.Bits() > best.CIDR.Bits()) {
			best, found = p, true
		}
	}
	return best, found
}

// NodeAddr parses a Node's address for family 4 or 6: the address and the
// subnet it was registered with ("10.0.0.5/24"; a bare address is its own
// /32 or /128).
func NodeAddr(n *api.Node, family int) (netip.Addr, netip.Prefix, bool) {
	if n == nil || n.Spec.BGP == nil {
		return netip.Addr{}, netip.Prefix{}, false
	}
	s := n.Spec.BGP.IPv4Address
	if family == 6 {
		s = n.Spec.BGP.IPv6Address
	}
	if s == "" {
		return netip.Addr{}, netip.Prefix{}, false
	}
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Addr{}, netip.Prefix{}, false
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, netip.Prefix{}, false
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	a := p.Addr().Unmap()
	if (family == 4) != a.Is4() {
		return netip.Addr{}, netip.Prefix{}, false
	}
	return a, netip.PrefixFrom(a, p.Bits()).Masked(), true
}

// tunnelAddr parses one of the Node's tunnel address fields.
func tunnelAddr(s string, family int) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		s = p.Addr().String()
	}
	a, err := netip.ParseAddr(s)
	if err != nil || (family == 4) != a.Unmap().Is4() {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// VTEPOf returns n's VXLAN endpoint for family 4 or 6, if it has a tunnel
// address and a node address of that family. Its MAC is the one the Node
// records, else the one felix derives from the node name, so that nodes
// whose felix never stored one are still reachable.
func VTEPOf(n *api.Node, family int) (VTEP, bool) {
	if n == nil {
		return VTEP{}, false
	}
	addrField, macField, macName := n.Spec.IPv4VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddr, n.Name
	if family == 6 {
		addrField, macField, macName = n.Spec.IPv6VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddrV6, n.Name+"-v6"
	}
	ta, ok := tunnelAddr(addrField, family)
	if !ok {
		return VTEP{}, false
	}
	ip, _, ok := NodeAddr(n, family)
	if !ok {
		return VTEP{}, false
	}
	mac, err := net.ParseMAC(macField)
	if err != nil || len(mac) != 6 {
		mac = derivedMAC(macName)
	}
	return VTEP{Node: n.Name, TunnelAddr: ta, MAC: mac, NodeIP: ip}, true
}

// derivedMAC is felix's MAC for a node that has none recorded: "f" (0x66,
// a locally administered unicast first byte) and the first five bytes of
// the SHA-1 of the name.
func derivedMAC(name string) net.HardwareAddr {
	sum := sha1.Sum([]byte(name))
	return net.HardwareAddr(append([]byte("f"), sum[:5]...))
}

// Compute is the pure core: the devices, neighbour/FDB entries and routes
// this node wants.
//
// Routes go to every block (and every borrowed address) of a VXLAN or
// IP-in-IP pool that another node holds: through the VXLAN device to that
// node's tunnel address, through tunl0 to its node address, or, for a
// CrossSubnet pool when both nodes are in this node's subnet, natively to
// its node address. A family's routes need this node's own tunnel of that
// family (felix waits for the local VTEP the same way), so a node the
// pool does not select routes none of the pool's traffic. Own blocks are
// not routed here (local workload routes and blackholes are other
// sources').
func Compute(in Input) Desired {
	var d Desired
	me := in.Nodes[in.NodeName]
	if me == nil {
		return d
	}
	// By name, so that equally specific overlapping pools resolve the
	// same way whatever the caller's order.
	pools := slices.SortedFunc(slices.Values(in.Pools), func(a, b api.Pool) int { return cmp.Compare(a.Name, b.Name) })

	// Local devices.
	if in.Settings.VXLANEnabled {
		for _, fam := range []int{4, 6} {
			local, ok := VTEPOf(me, fam)
			if !ok {
				continue
			}
			spec := &VXLANSpec{
				Name: VXLANDevice, VNI: in.Settings.VXLANVNI, Port: in.Settings.VXLANPort,
				MTU: in.Settings.VXLANMTU, MAC: local.MAC, Local: local.NodeIP, Parent: in.ParentDev,
				Addr: netip.PrefixFrom(local.TunnelAddr, local.TunnelAddr.BitLen()),
			}
			if fam == 6 {
				spec.Name, spec.MTU, spec.Parent = VXLANDeviceV6, in.Settings.VXLANMTUV6, in.ParentDevV6
			}
			for _, name := range sortedNames(in.Nodes) {
				if name == in.NodeName {
					continue
				}
				if v, ok := VTEPOf(in.Nodes[name], fam); ok {
					spec.Peers = append(spec.Peers, v)
				}
			}
			if fam == 4 {
				d.VXLAN = spec
			} else {
				d.VXLANV6 = spec
			}
		}
	}
	if in.Settings.IPIPEnabled {
		var want []PoolMode
		for _, p := range pools {
			if p.IPIPOn() && active(p) && p.Version() == 4 && selects(p, me) {
				want = append(want, PoolMode{Name: p.Name, Mode: string(p.IPIPMode)})
			}
		}
		if len(want) > 0 {
			d.IPIP = &IPIPSpec{MTU: in.Settings.IPIPMTU, Pools: want}
			if ta, ok := tunnelAddr(ipipAddrOf(me), 4); ok {
				d.IPIP.Addr = netip.PrefixFrom(ta, 32)
			}
		}
	}

	// Routes: blocks first, then borrowed addresses.
	type dest struct {
		dst  netip.Prefix
		node string
	}
	var dests []dest
	for cidr, node := range in.Blocks.Affinity {
		dests = append(dests, dest{cidr, node})
	}
	for a, node := range in.Blocks.Borrowed {
		dests = append(dests, dest{netip.PrefixFrom(a, a.BitLen()), node})
	}
	for _, ds := range dests {
		if ds.node == "" || ds.node == in.NodeName {
			continue
		}
		remote := in.Nodes[ds.node]
		if remote == nil {
			continue // a deleted node's blocks lead nowhere
		}
		p, ok := poolOf(pools, ds.dst.Addr())
		if !ok {
			continue
		}
		fam := 4
		parent := in.ParentDev
		if ds.dst.Addr().Is6() {
			fam, parent = 6, in.ParentDevV6
		}
		switch {
		case p.VXLANOn():
			spec := d.VXLAN
			if fam == 6 {
				spec = d.VXLANV6
			}
			if spec == nil {
				continue
			}
			if p.VXLANMode == api.VXLANModeCrossSubnet {
				if ip, ok := sameSubnet(me, remote, fam); ok {
					d.Routes = append(d.Routes, routes.Route{Dst: ds.dst, Via: ip, Dev: parent})
					continue
				}
			}
			v, ok := VTEPOf(remote, fam)
			if !ok {
				continue // its tunnel address is not allocated yet
			}
			d.Routes = append(d.Routes, routes.Route{Dst: ds.dst, Dev: spec.Name, Via: v.TunnelAddr, OnLink: true})
		case p.IPIPOn() && fam == 4:
			if d.IPIP == nil {
				continue
			}
			if p.IPIPMode == api.IPIPModeCrossSubnet {
				if ip, ok := sameSubnet(me, remote, fam); ok {
					d.Routes = append(d.Routes, routes.Route{Dst: ds.dst, Via: ip, Dev: parent})
					continue
				}
			}
			ip, _, ok := NodeAddr(remote, 4)
			if !ok {
				continue
			}
			d.IPIPRoutes = append(d.IPIPRoutes, routes.Route{Dst: ds.dst, Dev: IPIPDevice, Via: ip, OnLink: true})
		}
	}
	sortRoutes(d.Routes)
	sortRoutes(d.IPIPRoutes)
	return d
}

// ipipAddrOf is the Node's IP-in-IP tunnel address field.
func ipipAddrOf(n *api.Node) string {
	if n.Spec.BGP == nil {
		return ""
	}
	return n.Spec.BGP.IPv4IPIPTunnelAddr
}

// sameSubnet reports whether remote's node address of family is in this
// node's subnet (the prefix of its registered address), and returns it.
func sameSubnet(me, remote *api.Node, family int) (netip.Addr, bool) {
	_, subnet, ok := NodeAddr(me, family)
	if !ok {
		return netip.Addr{}, false
	}
	ip, _, ok := NodeAddr(remote, family)
	if !ok || !subnet.Contains(ip) {
		return netip.Addr{}, false
	}
	return ip, true
}

func sortedNames(nodes map[string]*api.Node) []string {
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func sortRoutes(rs []routes.Route) {
	slices.SortFunc(rs, func(a, b routes.Route) int {
		if c := a.Dst.Addr().Compare(b.Dst.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Dst.Bits(), b.Dst.Bits())
	})
}
