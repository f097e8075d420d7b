package policy

import (
	"fmt"
	"slices"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// The overlay's host rules: felix's filter INPUT and OUTPUT accept VXLAN
// and IP-in-IP packets between this host and the other nodes before host
// endpoint policy sees them, so that a host endpoint policy on the uplink
// cannot cut the pod network in two, and drop the encapsulated packets
// anyone else sends to the host, so that no outsider can inject packets
// into the pod network by encapsulating them.
//
// The peers are IP sets, named as felix names them:
//
//   - cali40all-vxlan-net (cali60all-vxlan-net for IPv6): the node address
//     (spec.bgp.ipv4Address, ipv6Address) of every other node with a VXLAN
//     tunnel address of that family (spec.ipv4VXLANTunnelAddr,
//     ipv6VXLANTunnelAddr), that is every node the overlay sends VXLAN to,
//     plus externalNodesList. felix's VXLAN manager fills it from the same
//     VTEPs it programs; this node is not in it.
//   - cali40all-hosts-net: the IPv4 node address of every node, this one
//     included, plus externalNodesList (felix's hosts manager). IP-in-IP
//     is IPv4 only.
//
// A node address may be written with or without its subnet
// ("10.0.0.5/24", "10.0.0.5"): the overlay accepts both, so both count
// here (felix's hosts manager skips a bare address; Calico never writes
// one).

// Names of the overlay's IP sets (felix's IDs).
const (
	setIDAllHosts = "all-hosts-net"
	setIDAllVXLAN = "all-vxlan-net"
)

// Protocol numbers of the overlay's packets; felix matches IP-in-IP by
// number because not every host knows the name.
const (
	protoIPIP = 4
	protoUDP  = 17
)

// encap is what the overlay needs of one family's rules and sets.
type encap struct {
	// vxlan and ipip say the family's rules are wanted.
	vxlan, ipip bool
	// hostsSet says all-hosts-net is wanted: for IP-in-IP, or for
	// natOutgoingExclusions IPPoolsAndHostIPs (either family), as felix
	// keeps the set for either.
	hostsSet bool
	// vxlanPeers and hosts are the members of all-vxlan-net and
	// all-hosts-net.
	vxlanPeers, hosts []string
}

// encapFor decides, as felix's encapsulation calculator does, whether the
// family's VXLAN and IP-in-IP rules exist: IPv4 VXLAN when an IPv4 pool
// has a vxlanMode other than Never, IPv6 VXLAN the same for IPv6 pools,
// IP-in-IP (IPv4 only) when any pool has an ipipMode other than Never;
// FelixConfiguration's vxlanEnabled and ipipEnabled override the pools for
// IPv4. A pool's disabled flag and nodeSelector do not matter, as in
// felix: blocks of a disabled pool still carry traffic, and another node
// may be selected even when this one is not.
func (m *model) encapFor(version int, cfg Config) encap {
	var e encap
	is6 := version == 6
	for _, p := range m.pools {
		if p.IPIPOn() && !is6 {
			e.ipip = true
		}
		if p.VXLANOn() && p.Version() == version {
			e.vxlan = true
		}
	}
	if !is6 {
		if cfg.VXLANEnabled != nil {
			e.vxlan = *cfg.VXLANEnabled
		}
		if cfg.IPIPEnabled != nil {
			e.ipip = *cfg.IPIPEnabled
		}
	}
	e.hostsSet = e.ipip || cfg.NATExcludeHosts
	if !e.vxlan && !e.hostsSet {
		return e
	}
	external := m.externalNodes(version, cfg.ExternalNodes)
	vxlan, hosts := map[string]bool{}, map[string]bool{}
	for _, n := range external {
		vxlan[n], hosts[n] = true, true
	}
	for i := range m.nodes {
		n := &m.nodes[i]
		addr, ok := m.nodeAddr(n, version)
		if !ok {
			continue
		}
		hosts[addr] = true
		if n.Name != m.node && hasTunnelAddr(n, version) {
			vxlan[addr] = true
		}
	}
	if e.vxlan {
		e.vxlanPeers = sortedKeys(vxlan)
	}
	if e.hostsSet {
		e.hosts = sortedKeys(hosts)
	}
	return e
}

// externalNodes parses externalNodesList, keeping the family's entries.
// Bad entries are reported once, with IPv4.
func (m *model) externalNodes(version int, list []string) []string {
	var out []string
	for _, s := range list {
		p, err := parsePrefix(s)
		if err != nil {
			if version == 4 {
				m.problem("FelixConfiguration externalNodesList: %q is not a CIDR or address; ignored", s)
			}
			continue
		}
		if p.Addr().Is6() == (version == 6) {
			out = append(out, netMember(p))
		}
	}
	return out
}

// nodeAddr is the node's address of the family, as the overlay uses it:
// spec.bgp.ipv4Address or ipv6Address without the subnet.
func (m *model) nodeAddr(n *api.Node, version int) (string, bool) {
	if n.Spec.BGP == nil {
		return "", false
	}
	s, field := n.Spec.BGP.IPv4Address, "ipv4Address"
	if version == 6 {
		s, field = n.Spec.BGP.IPv6Address, "ipv6Address"
	}
	if s == "" {
		return "", false
	}
	p, err := hostPrefix(s)
	if err != nil || p.Addr().Is6() != (version == 6) {
		m.problem("Node %s: spec.bgp.%s %q is not an IPv%d address; left out of the overlay's peers", n.Name, field, s, version)
		return "", false
	}
	return p.Addr().String(), true
}

// hasTunnelAddr reports whether the node has a VXLAN tunnel address of the
// family: only then is it a VXLAN peer (felix's VTEP needs one).
func hasTunnelAddr(n *api.Node, version int) bool {
	s := n.Spec.IPv4VXLANTunnelAddr
	if version == 6 {
		s = n.Spec.IPv6VXLANTunnelAddr
	}
	p, err := hostPrefix(s)
	return err == nil && p.Addr().Is6() == (version == 6)
}

// encapSets are the overlay's IP sets of the family, those its rules use.
func (e encap) sets(version int) []IPSet {
	family := "inet"
	if version == 6 {
		family = "inet6"
	}
	var out []IPSet
	if e.vxlan {
		out = append(out, IPSet{Name: setName(version, setIDAllVXLAN), ID: setIDAllVXLAN, Type: SetTypeNet,
			Family: family, Members: slices.Clone(e.vxlanPeers)})
	}
	if e.hostsSet {
		out = append(out, IPSet{Name: setName(version, setIDAllHosts), ID: setIDAllHosts, Type: SetTypeNet,
			Family: family, Members: slices.Clone(e.hosts)})
	}
	return out
}

// encapInputRules start cali-INPUT, before workload traffic is diverted
// and before host endpoint policy: encapsulated packets for the host from
// a peer are accepted, from anyone else dropped. As in felix, the IPv4
// VXLAN drop is always DROP, while the IP-in-IP and IPv6 VXLAN drops
// follow iptablesFilterDenyAction.
func (c *famCompiler) encapInputRules() []Rule {
	var rules []Rule
	local := MatchAddrType{Dir: Dst, Type: AddrTypeLocal}
	if c.encap.ipip {
		rules = append(rules,
			c.overlayRule(Match{MatchProtocol{Num: protoIPIP}, MatchSet{Dir: Src, Set: setName(c.version, setIDAllHosts)}, local}, c.filterAllow(),
				"Allow IPIP packets from Calico hosts"),
			c.overlayRule(Match{MatchProtocol{Num: protoIPIP}}, c.deny(),
				c.denyName()+" IPIP packets from non-Calico hosts"),
		)
	}
	if c.encap.vxlan {
		ip := fmt.Sprintf("IPv%d", c.version)
		var drop Action = Drop{}
		dropName := "Drop"
		if c.version == 6 {
			drop, dropName = c.deny(), c.denyName()
		}
		rules = append(rules,
			c.overlayRule(Match{MatchProtocol{Num: protoUDP}, c.vxlanPort(), MatchSet{Dir: Src, Set: setName(c.version, setIDAllVXLAN)}, local}, c.filterAllow(),
				"Allow "+ip+" VXLAN packets from allowed hosts"),
			c.overlayRule(Match{MatchProtocol{Num: protoUDP}, c.vxlanPort(), local}, drop,
				dropName+" "+ip+" VXLAN packets from non-allowed hosts"),
		)
	}
	return rules
}

// encapOutputRules accept the host's own encapsulated packets to its
// peers, after traffic to workloads has returned and before host endpoint
// policy. The source must be one of the host's addresses: a packet
// routed through the host is not the host's to send.
func (c *famCompiler) encapOutputRules() []Rule {
	var rules []Rule
	local := MatchAddrType{Dir: Src, Type: AddrTypeLocal}
	if c.encap.ipip {
		rules = append(rules, c.overlayRule(Match{MatchProtocol{Num: protoIPIP}, MatchSet{Dir: Dst, Set: setName(c.version, setIDAllHosts)}, local}, c.filterAllow(),
			"Allow IPIP packets to other Calico hosts"))
	}
	if c.encap.vxlan {
		rules = append(rules, c.overlayRule(Match{MatchProtocol{Num: protoUDP}, c.vxlanPort(), local, MatchSet{Dir: Dst, Set: setName(c.version, setIDAllVXLAN)}}, c.filterAllow(),
			fmt.Sprintf("Allow IPv%d VXLAN packets to other allowed hosts", c.version)))
	}
	return rules
}

// overlayRule is one of the overlay's host rules, its comment also the
// origin's detail.
func (c *famCompiler) overlayRule(m Match, a Action, comment string) Rule {
	return Rule{Match: m, Action: a, Comment: []string{comment}, Origin: c.orig.get(Origin{Kind: OriginOverlay, Detail: comment})}
}

func (c *famCompiler) vxlanPort() MatchPorts {
	p := uint16(c.cfg.VXLANPort)
	return MatchPorts{Dir: Dst, Ports: []PortRange{{p, p}}}
}
