package policy

import (
	"net/netip"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// Snapshot is everything the compiler reads: the resources of the whole
// cluster that policy depends on, which node we are, and the dataplane
// configuration. The compiler never modifies it.
type Snapshot struct {
	// Node is this node's name; the workload and host endpoints whose
	// spec.node equals it are local and get chains.
	Node string
	// WorkloadEndpoints and HostEndpoints of every node: all of them can be
	// peers that rule selectors match (and so fill IP sets).
	WorkloadEndpoints []api.WorkloadEndpoint
	HostEndpoints     []api.HostEndpoint
	// HostInterfaces maps this host's interface names to their addresses.
	// It is only needed to place host endpoints that give expectedIPs but
	// no interfaceName; endpoints naming an interface are placed on it
	// whether or not it exists.
	HostInterfaces map[string][]netip.Addr

	NetworkPolicies       []api.NetworkPolicy
	GlobalNetworkPolicies []api.GlobalNetworkPolicy
	Profiles              []api.Profile
	NetworkSets           []api.NetworkSet
	GlobalNetworkSets     []api.GlobalNetworkSet
	// Tiers may omit "default": it is always present with order 1000000
	// and action Deny, as Calico creates it.
	Tiers   []api.Tier
	IPPools []api.IPPool
	// Nodes of the whole cluster, this one included: their addresses
	// (spec.bgp.ipv4Address/ipv6Address) are the peers whose VXLAN and
	// IP-in-IP packets host endpoint policy must not block.
	Nodes []api.Node

	Config Config
}

// Config is the part of FelixConfiguration that shapes the rules (see
// ConfigFromFelix); the zero value means Calico's defaults.
type Config struct {
	// IPv6 also compiles the ip6tables rules and IPv6 sets.
	IPv6 bool
	// EndpointToHostAction is what happens to traffic from a workload to
	// the host once the workload's egress policy allowed it: "DROP" (the
	// default), "ACCEPT" or "RETURN" (continue in the INPUT chain).
	EndpointToHostAction string
	// DenyAction is "DROP" (default) or "REJECT". It only applies in the
	// filter table: the kernel allows REJECT nowhere else, so raw and
	// mangle rules always drop.
	DenyAction string
	// MangleAllowAction is what the mangle table does with traffic that
	// preDNAT policy (or conntrack) allows: "ACCEPT" (the default) ends
	// mangle PREROUTING for it, "RETURN" lets later mangle rules of other
	// software see it too.
	MangleAllowAction string
	// FailsafeInbound and FailsafeOutbound are the host ports that no
	// host endpoint policy can close. nil means Calico's defaults; an empty
	// non-nil slice means none.
	FailsafeInbound  []api.ProtoPort
	FailsafeOutbound []api.ProtoPort
	// MarkMask is the packet mark bits we may use (default 0xffff0000).
	MarkMask uint32
	// InterfacePrefixes name workload interfaces (default ["cali"]).
	InterfacePrefixes []string
	// LogPrefix is the prefix of Log rules' kernel log lines (default
	// "calico-packet").
	LogPrefix string
	// DisableConntrackInvalid stops dropping packets conntrack calls
	// INVALID.
	DisableConntrackInvalid bool
	// AllowVXLANFromWorkloads and AllowIPIPFromWorkloads let workloads send
	// encapsulated packets (dropped by default so that policy cannot be
	// bypassed); VXLANPort defaults to 4789.
	AllowVXLANFromWorkloads bool
	AllowIPIPFromWorkloads  bool
	VXLANPort               int
	// VXLANEnabled and IPIPEnabled (vxlanEnabled, ipipEnabled) override
	// what the pools say about IPv4 VXLAN and IP-in-IP: nil follows the
	// pools (any pool with vxlanMode, or ipipMode, other than Never turns
	// the overlay's host rules on), as felix's encapsulation calculator
	// does. IPv6 VXLAN always follows the IPv6 pools, as in felix.
	VXLANEnabled *bool
	IPIPEnabled  *bool
	// ExternalNodes (externalNodesList) are CIDRs of hosts outside the
	// cluster that may send and receive VXLAN and IP-in-IP like nodes.
	ExternalNodes []string
	// AppendHooks puts the hook rules at the end of the built-in chains
	// instead of the start (chainInsertMode: Append).
	AppendHooks bool
	// NATOutgoingAddress, when set, SNATs natOutgoing traffic to this
	// address instead of masquerading.
	NATOutgoingAddress string
	// NATPortRange (natPortRange), when Last > 0, is the source port
	// range natOutgoing TCP and UDP get.
	NATPortRange PortRange
	// NATOutgoingInterface (iptablesNATOutgoingInterfaceFilter) limits
	// natOutgoing to traffic leaving through this interface ("eth+").
	NATOutgoingInterface string
	// NATRandomFully adds --random-fully to natOutgoing's MASQUERADE and
	// SNAT: felix does whenever iptables and the kernel support it; the
	// agent sets it after asking them (it is no FelixConfiguration field).
	NATRandomFully bool
	// AllowSourceSpoofing (workloadSourceSpoofing: Any) lets workload
	// endpoints' allowSpoofedSourcePrefixes exempt those sources from the
	// reverse-path check; without it they are ignored. It is off by
	// default because in Calico a pod's owner can set the prefixes (with
	// the cni.projectcalico.org/allowedSourcePrefixes annotation), while
	// this switch is the cluster operator's.
	AllowSourceSpoofing bool
	// FilterAllowAction (iptablesFilterAllowAction) is what the filter
	// table does with traffic policy allowed: "ACCEPT" (the default) ends
	// the built-in chain for it, "RETURN" hands it back to the built-in
	// chain so that other software's later rules see it too.
	FilterAllowAction string
	// NATExcludeHosts (natOutgoingExclusions: IPPoolsAndHostIPs) keeps
	// natOutgoing traffic to the cluster's hosts unmasqueraded, as traffic
	// to the IP pools always is.
	NATExcludeHosts bool
	// ServiceLoopPrevention is what becomes of routed traffic to an
	// advertised service range that kube-proxy did not DNAT (no such
	// service): "DROP" (the default), "REJECT", or "DISABLED" to let it
	// leave by the default route, from where BGP brings it back.
	ServiceLoopPrevention string
	// InterfaceExclude (interfaceExclude) are the interfaces host
	// endpoints are never resolved to: names, or regular expressions
	// between slashes ("/^kube/"). nil means Felix's default, kube-ipvs0
	// (whose addresses are every Service's, not the host's).
	InterfaceExclude []string
	// ServiceCIDRs are the service ranges the default BGPConfiguration
	// advertises (serviceClusterIPs, serviceExternalIPs,
	// serviceLoadBalancerIPs): the ranges ServiceLoopPrevention guards.
	ServiceCIDRs []string
}

// Calico's default failsafe ports (felix v3.31 config defaults).
var (
	defaultFailsafeInbound = []api.ProtoPort{
		{Protocol: "tcp", Port: 22}, {Protocol: "udp", Port: 68}, {Protocol: "tcp", Port: 179},
		{Protocol: "tcp", Port: 2379}, {Protocol: "tcp", Port: 2380}, {Protocol: "tcp", Port: 5473},
		{Protocol: "tcp", Port: 6443}, {Protocol: "tcp", Port: 6666}, {Protocol: "tcp", Port: 6667},
	}
	defaultFailsafeOutbound = []api.ProtoPort{
		{Protocol: "udp", Port: 53}, {Protocol: "udp", Port: 67}, {Protocol: "tcp", Port: 179},
		{Protocol: "tcp", Port: 2379}, {Protocol: "tcp", Port: 2380}, {Protocol: "tcp", Port: 5473},
		{Protocol: "tcp", Port: 6443}, {Protocol: "tcp", Port: 6666}, {Protocol: "tcp", Port: 6667},
	}
)

// DefaultFailsafeInbound returns Calico's default inbound failsafe ports.
func DefaultFailsafeInbound() []api.ProtoPort {
	return append([]api.ProtoPort(nil), defaultFailsafeInbound...)
}

// DefaultFailsafeOutbound returns Calico's default outbound failsafe ports.
func DefaultFailsafeOutbound() []api.ProtoPort {
	return append([]api.ProtoPort(nil), defaultFailsafeOutbound...)
}

// ConfigFromFelix reads the policy compiler's settings from s, the one
// merged FelixConfiguration (felixenv.Merge: default, node.<name>, the
// environment); nil is none. Fields s leaves unset keep Calico's defaults;
// in particular IPv6 is on unless ipv6Support is false, as in felix (the
// caller turns it off where the host has no IPv6).
func ConfigFromFelix(s *api.FelixConfigurationSpec) Config {
	c := Config{IPv6: true}
	if s == nil {
		return c
	}
	if s.IPv6Support != nil {
		c.IPv6 = *s.IPv6Support
	}
	if s.DefaultEndpointToHostAction != "" {
		c.EndpointToHostAction = strings.ToUpper(s.DefaultEndpointToHostAction)
	}
	if s.IptablesFilterDenyAction != "" {
		c.DenyAction = strings.ToUpper(s.IptablesFilterDenyAction)
	}
	if s.IptablesMangleAllowAction != "" {
		c.MangleAllowAction = strings.ToUpper(s.IptablesMangleAllowAction)
	}
	if s.FailsafeInboundHostPorts != nil {
		c.FailsafeInbound = append([]api.ProtoPort{}, (*s.FailsafeInboundHostPorts)...)
	}
	if s.FailsafeOutboundHostPorts != nil {
		c.FailsafeOutbound = append([]api.ProtoPort{}, (*s.FailsafeOutboundHostPorts)...)
	}
	if s.IptablesMarkMask != nil {
		c.MarkMask = *s.IptablesMarkMask
	}
	if s.InterfacePrefix != "" {
		c.InterfacePrefixes = strings.Split(s.InterfacePrefix, ",")
	}
	if s.LogPrefix != "" {
		c.LogPrefix = s.LogPrefix
	}
	if s.DisableConntrackInvalidCheck != nil {
		c.DisableConntrackInvalid = *s.DisableConntrackInvalidCheck
	}
	if s.AllowVXLANPacketsFromWorkloads != nil {
		c.AllowVXLANFromWorkloads = *s.AllowVXLANPacketsFromWorkloads
	}
	if s.AllowIPIPPacketsFromWorkloads != nil {
		c.AllowIPIPFromWorkloads = *s.AllowIPIPPacketsFromWorkloads
	}
	if s.VXLANPort != nil {
		c.VXLANPort = *s.VXLANPort
	}
	if s.VXLANEnabled != nil {
		c.VXLANEnabled = s.VXLANEnabled
	}
	if s.IPIPEnabled != nil {
		c.IPIPEnabled = s.IPIPEnabled
	}
	if s.ExternalNodesCIDRList != nil {
		c.ExternalNodes = append([]string{}, (*s.ExternalNodesCIDRList)...)
	}
	if s.ChainInsertMode != "" {
		c.AppendHooks = strings.EqualFold(s.ChainInsertMode, "append")
	}
	if s.NATOutgoingAddress != "" {
		c.NATOutgoingAddress = s.NATOutgoingAddress
	}
	if s.NATPortRange != nil {
		c.NATPortRange = PortRange{First: s.NATPortRange.MinPort, Last: s.NATPortRange.MaxPort}
	}
	if s.IptablesNATOutgoingInterfaceFilter != "" {
		c.NATOutgoingInterface = s.IptablesNATOutgoingInterfaceFilter
	}
	if s.WorkloadSourceSpoofing != "" {
		c.AllowSourceSpoofing = s.WorkloadSourceSpoofing == "Any"
	}
	if s.IptablesFilterAllowAction != "" {
		c.FilterAllowAction = strings.ToUpper(s.IptablesFilterAllowAction)
	}
	if s.NATOutgoingExclusions != nil {
		c.NATExcludeHosts = *s.NATOutgoingExclusions == "IPPoolsAndHostIPs"
	}
	if s.InterfaceExclude != "" {
		for _, e := range strings.Split(s.InterfaceExclude, ",") {
			if e = strings.TrimSpace(e); e != "" {
				c.InterfaceExclude = append(c.InterfaceExclude, e)
			}
		}
	}
	if s.ServiceLoopPrevention != "" {
		c.ServiceLoopPrevention = strings.ToUpper(s.ServiceLoopPrevention)
	}
	return c
}

// withDefaults fills the unset fields of c.
func (c Config) withDefaults() Config {
	switch c.EndpointToHostAction {
	case "ACCEPT", "RETURN":
	default:
		c.EndpointToHostAction = "DROP"
	}
	if c.DenyAction != "REJECT" {
		c.DenyAction = "DROP"
	}
	if c.MangleAllowAction != "RETURN" {
		c.MangleAllowAction = "ACCEPT"
	}
	if c.InterfaceExclude == nil {
		c.InterfaceExclude = []string{"kube-ipvs0"}
	}
	if c.FilterAllowAction != "RETURN" {
		c.FilterAllowAction = "ACCEPT"
	}
	switch c.ServiceLoopPrevention {
	case "REJECT", "DISABLED":
	default:
		c.ServiceLoopPrevention = "DROP"
	}
	if c.FailsafeInbound == nil {
		c.FailsafeInbound = defaultFailsafeInbound
	}
	if c.FailsafeOutbound == nil {
		c.FailsafeOutbound = defaultFailsafeOutbound
	}
	if c.MarkMask == 0 {
		c.MarkMask = 0xffff0000
	}
	if len(c.InterfacePrefixes) == 0 {
		c.InterfacePrefixes = []string{"cali"}
	}
	if c.LogPrefix == "" {
		c.LogPrefix = "calico-packet"
	}
	if c.VXLANPort == 0 {
		c.VXLANPort = 4789
	}
	return c
}

// marks are the packet mark bits the rules use, allocated from the mask in
// felix's order so that they match felix's (0x10000, 0x20000, ... with the
// default mask).
type marks struct {
	accept, pass, drop, scratch0, scratch1 uint32
}

func allocMarks(mask uint32) (marks, bool) {
	var bits []uint32
	for i := 0; i < 32 && len(bits) < 5; i++ {
		if b := uint32(1) << i; mask&b != 0 {
			bits = append(bits, b)
		}
	}
	if len(bits) < 5 {
		return marks{}, false
	}
	return marks{accept: bits[0], pass: bits[1], drop: bits[2], scratch0: bits[3], scratch1: bits[4]}, true
}

// all is every bit the rules may leave set on a packet.
func (m marks) all() uint32 { return m.accept | m.pass | m.scratch0 | m.scratch1 }
