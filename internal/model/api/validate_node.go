package api

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Validate implements Object.
func (n *Node) Validate() error {
	var f fieldErrors
	checkMeta(&f, &n.ObjectMeta, "Node", metaRules{})
	s := &n.Spec
	if b := s.BGP; b != nil {
		if *b == (NodeBGPSpec{}) {
			f.add("spec.bgp", nil, "must not be empty: set ipv4Address or ipv6Address, or omit bgp")
		}
		checkCIDRVersion(&f, "spec.bgp.ipv4Address", b.IPv4Address, 4)
		checkCIDRVersion(&f, "spec.bgp.ipv6Address", b.IPv6Address, 6)
		checkIP(&f, "spec.bgp.ipv4IPIPTunnelAddr", b.IPv4IPIPTunnelAddr, 4)
		checkIP(&f, "spec.bgp.routeReflectorClusterID", b.RouteReflectorClusterID, 4)
	}
	checkIP(&f, "spec.ipv4VXLANTunnelAddr", s.IPv4VXLANTunnelAddr, 4)
	checkIP(&f, "spec.ipv6VXLANTunnelAddr", s.IPv6VXLANTunnelAddr, 6)
	checkMAC(&f, "spec.vxlanTunnelMACAddr", s.VXLANTunnelMACAddr)
	checkMAC(&f, "spec.vxlanTunnelMACAddrV6", s.VXLANTunnelMACAddrV6)
	if w := s.Wireguard; w != nil {
		checkIP(&f, "spec.wireguard.interfaceIPv4Address", w.InterfaceIPv4Address, 4)
		checkIP(&f, "spec.wireguard.interfaceIPv6Address", w.InterfaceIPv6Address, 6)
	}
	for i, a := range s.Addresses {
		p := index("spec.addresses", i)
		// Host bits allowed: on the Kubernetes datastore Calico shows the
		// BGP address with its subnet ("192.0.2.1/24") here, and takes it
		// back on update (its "net" tag is never applied: no dive).
		checkCIDROrIP(&f, field(p, "address"), a.Address)
		checkEnum(&f, field(p, "type"), a.Type, NodeAddressCalicoNodeIP, NodeAddressInternalIP, NodeAddressExternalIP)
	}
	for i, in := range s.Interfaces {
		checkOptName(&f, field(index("spec.interfaces", i), "name"), in.Name)
	}
	checkWireguardKey(&f, "status.wireguardPublicKey", n.Status.WireguardPublicKey)
	checkWireguardKey(&f, "status.wireguardPublicKeyV6", n.Status.WireguardPublicKeyV6)
	return f.err()
}

// communityProblem returns "" for a valid community literal, "syntax" when
// it is not a literal at all, or a range message.
func communityProblem(v string) string {
	// "aa:nn" has 16-bit parts, "aa:nn:mm" 32-bit parts.
	parts := strings.Split(v, ":")
	var bits int
	switch len(parts) {
	case 2:
		bits = 16
	case 3:
		bits = 32
	default:
		return "syntax"
	}
	for _, p := range parts {
		if !isDigits(p) {
			return "syntax"
		}
	}
	for _, part := range parts {
		if _, err := strconv.ParseUint(part, 10, bits); err != nil {
			return fmt.Sprintf("is not a valid community: each part must fit in %d bits", bits)
		}
	}
	return ""
}

// Validate implements Object.
func (c *BGPConfiguration) Validate() error {
	var f fieldErrors
	checkMeta(&f, &c.ObjectMeta, "BGPConfiguration", metaRules{})
	s := &c.Spec
	checkLogLevel(&f, "spec.logSeverityScreen", s.LogSeverityScreen)
	for i, b := range s.ServiceLoadBalancerIPs {
		if b.CIDR != "" {
			checkNetwork(&f, field(index("spec.serviceLoadBalancerIPs", i), "cidr"), b.CIDR)
		}
	}
	for i, b := range s.ServiceExternalIPs {
		if b.CIDR != "" {
			checkNetwork(&f, field(index("spec.serviceExternalIPs", i), "cidr"), b.CIDR)
		}
	}
	for i, b := range s.ServiceClusterIPs {
		if b.CIDR != "" {
			checkNetwork(&f, field(index("spec.serviceClusterIPs", i), "cidr"), b.CIDR)
		}
	}
	checkOptEnum(&f, "spec.serviceLoadBalancerAggregation", s.ServiceLoadBalancerAggregation,
		ServiceLoadBalancerAggregationEnabled, ServiceLoadBalancerAggregationDisabled)
	checkOptEnum(&f, "spec.bindMode", s.BindMode, BindModeNone, BindModeNodeIP)

	defined := map[string]bool{}
	for i, cm := range s.Communities {
		p := index("spec.communities", i)
		checkSubdomain(&f, field(p, "name"), cm.Name)
		defined[cm.Name] = true
		switch msg := communityProblem(cm.Value); {
		case cm.Value == "":
			f.add(field(p, "value"), nil, msgRequired)
		case msg == "syntax":
			f.add(field(p, "value"), cm.Value, `is not a valid community: use "aa:nn" or "aa:nn:mm"`)
		case msg != "":
			f.add(field(p, "value"), cm.Value, msg)
		}
	}
	if len(s.Communities) > 0 && len(s.PrefixAdvertisements) == 0 {
		f.add("spec.communities", nil, "are defined but no prefixAdvertisements use them")
	}
	for i, pa := range s.PrefixAdvertisements {
		p := index("spec.prefixAdvertisements", i)
		if pa.CIDR == "" {
			f.add(field(p, "cidr"), nil, msgRequired)
		} else {
			checkNetwork(&f, field(p, "cidr"), pa.CIDR)
		}
		if len(pa.Communities) == 0 {
			f.add(field(p, "communities"), nil, msgRequired)
		}
		for j, v := range pa.Communities {
			switch msg := communityProblem(v); {
			case msg == "syntax":
				if !defined[v] {
					f.add(index(field(p, "communities"), j), v, "is neither a community value nor the name of one in spec.communities")
				}
			case msg != "":
				f.add(index(field(p, "communities"), j), v, msg)
			}
		}
	}
	meshOff := s.NodeToNodeMeshEnabled != nil && !*s.NodeToNodeMeshEnabled
	if meshOff && s.NodeMeshPassword != nil {
		f.add("spec.nodeMeshPassword", nil, "cannot be set when nodeToNodeMeshEnabled is false")
	}
	if meshOff && s.NodeMeshMaxRestartTime != nil {
		f.add("spec.nodeMeshMaxRestartTime", nil, "cannot be set when nodeToNodeMeshEnabled is false")
	}
	for i, name := range s.IgnoredInterfaces {
		if name == "*" || !isInterfacePattern(name) {
			f.add(index("spec.ignoredInterfaces", i), name, "is not a valid interface name or pattern: 1-15 letters, digits, '_', '.', '-' or '*' (not \"*\" alone)")
		}
	}
	checkIP(&f, "spec.localWorkloadPeeringIPV4", s.LocalWorkloadPeeringIPV4, 4)
	checkIP(&f, "spec.localWorkloadPeeringIPV6", s.LocalWorkloadPeeringIPV6, 6)

	// Cluster-wide settings are only honoured on the "default" object.
	if c.Name != "default" && c.Name != "" {
		only := func(path string, set bool) {
			if set {
				f.add(path, nil, `can only be set on the BGPConfiguration named "default"`)
			}
		}
		only("spec.nodeToNodeMeshEnabled", s.NodeToNodeMeshEnabled != nil)
		only("spec.asNumber", s.ASNumber != nil)
		only("spec.serviceLoadBalancerIPs", len(s.ServiceLoadBalancerIPs) > 0)
		only("spec.serviceExternalIPs", len(s.ServiceExternalIPs) > 0)
		only("spec.serviceClusterIPs", len(s.ServiceClusterIPs) > 0)
		only("spec.nodeMeshPassword", s.NodeMeshPassword != nil)
		only("spec.nodeMeshMaxRestartTime", s.NodeMeshMaxRestartTime != nil)
	}
	return f.err()
}

// splitPeerIP splits a BGPPeer peerIP ("IP", "IPv4:port" or "[IPv6]:port")
// into its address and port (0 when none is given).
func splitPeerIP(s string) (net.IP, int, bool) {
	if ip := net.ParseIP(s); ip != nil {
		return ip, 0, true
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return nil, 0, false
	}
	ip := net.ParseIP(host)
	if ip == nil || (ip.To4() == nil) != strings.HasPrefix(s, "[") {
		return nil, 0, false
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return nil, 0, false
	}
	return ip, int(n), true
}

// PeerAddress returns the peer's address and port (0 when none is given);
// ok is false when PeerIP is unset or malformed.
func (s *BGPPeerSpec) PeerAddress() (ip net.IP, port int, ok bool) {
	return splitPeerIP(s.PeerIP)
}

// Validate implements Object.
func (p *BGPPeer) Validate() error {
	var f fieldErrors
	checkMeta(&f, &p.ObjectMeta, "BGPPeer", metaRules{})
	s := &p.Spec
	checkOptName(&f, "spec.node", s.Node)
	checkSelector(&f, "spec.nodeSelector", s.NodeSelector)
	checkSelector(&f, "spec.peerSelector", s.PeerSelector)
	checkSelector(&f, "spec.localWorkloadSelector", s.LocalWorkloadSelector)
	peerIP, _, peerOK := splitPeerIP(s.PeerIP)
	if s.PeerIP != "" && !peerOK {
		f.add("spec.peerIP", s.PeerIP, `is not a valid peer address: use "IP", "IPv4:port" or "[IPv6]:port"`)
	}
	checkEnum(&f, "spec.sourceAddress", s.SourceAddress, SourceAddressUseNodeIP, SourceAddressNone)
	checkOptEnum(&f, "spec.nextHopMode", s.NextHopMode, NextHopModeAuto, NextHopModeSelf, NextHopModeKeep)
	checkOptEnum(&f, "spec.reversePeering", s.ReversePeering, ReversePeeringAuto, ReversePeeringManual)
	for i, name := range s.Filters {
		checkSubdomain(&f, index("spec.filters", i), name)
	}

	if s.Node != "" && s.NodeSelector != "" {
		f.add("spec.node", s.Node, "cannot be set together with nodeSelector")
	}
	if s.PeerIP != "" && s.PeerSelector != "" {
		f.add("spec.peerIP", s.PeerIP, "cannot be set together with peerSelector")
	}
	if s.ASNumber != 0 && s.PeerSelector != "" {
		f.add("spec.asNumber", uint32(s.ASNumber), "cannot be set together with peerSelector: the peers' own AS numbers are used")
	}
	if s.LocalWorkloadSelector != "" {
		if s.ASNumber == 0 {
			f.add("spec.asNumber", nil, "is required with localWorkloadSelector")
		}
		if s.PeerIP != "" {
			f.add("spec.peerIP", s.PeerIP, "cannot be set together with localWorkloadSelector")
		}
		if s.PeerSelector != "" {
			f.add("spec.peerSelector", s.PeerSelector, "cannot be set together with localWorkloadSelector")
		}
	}
	if s.ReachableBy != "" {
		via := net.ParseIP(s.ReachableBy)
		switch {
		case via == nil:
			f.add("spec.reachableBy", s.ReachableBy, "is not a valid IP address")
		case s.PeerIP == "":
			f.add("spec.reachableBy", s.ReachableBy, "requires peerIP")
		case peerOK && (via.To4() == nil) != (peerIP.To4() == nil):
			f.add("spec.reachableBy", s.ReachableBy, "is not the same IP version as peerIP")
		}
	}
	if s.KeepOriginalNextHop && s.NextHopMode != nil {
		f.add("spec.keepOriginalNextHop", nil, "is deprecated and cannot be true when nextHopMode is set")
	}
	return f.err()
}
