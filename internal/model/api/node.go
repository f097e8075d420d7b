package api

// Node is a host running Calico: its BGP identity, tunnel addresses and the
// orchestrator's name for it.
type Node struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       NodeSpec `json:"spec,omitempty"`
	// Status is a struct, so encoding/json always writes it ("status":{}),
	// exactly as Calico does.
	Status NodeStatus `json:"status,omitempty"`
}

// Address types of NodeAddress.Type.
const (
	NodeAddressCalicoNodeIP = "CalicoNodeIP"
	NodeAddressInternalIP   = "InternalIP"
	NodeAddressExternalIP   = "ExternalIP"
)

// NodeSpec is the desired state of a Node.
type NodeSpec struct {
	BGP                  *NodeBGPSpec       `json:"bgp,omitempty"`
	IPv4VXLANTunnelAddr  string             `json:"ipv4VXLANTunnelAddr,omitempty"`
	VXLANTunnelMACAddr   string             `json:"vxlanTunnelMACAddr,omitempty"`
	IPv6VXLANTunnelAddr  string             `json:"ipv6VXLANTunnelAddr,omitempty"`
	VXLANTunnelMACAddrV6 string             `json:"vxlanTunnelMACAddrV6,omitempty"`
	OrchRefs             []OrchRef          `json:"orchRefs,omitempty"`
	Wireguard            *NodeWireguardSpec `json:"wireguard,omitempty"`
	Addresses            []NodeAddress      `json:"addresses,omitempty"`
	Interfaces           []NodeInterface    `json:"interfaces,omitempty"`
}

// NodeAddress is one address of the node and where it came from.
type NodeAddress struct {
	Address string `json:"address"`
	Type    string `json:"type,omitempty"`
}

// NodeInterface is a host interface and its addresses.
type NodeInterface struct {
	Name      string   `json:"name,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
}

// NodeStatus is reported by the node itself.
type NodeStatus struct {
	WireguardPublicKey   string   `json:"wireguardPublicKey,omitempty"`
	WireguardPublicKeyV6 string   `json:"wireguardPublicKeyV6,omitempty"`
	PodCIDRs             []string `json:"podCIDRs,omitempty"`
}

// OrchRef is the orchestrator's name for this node.
type OrchRef struct {
	NodeName     string `json:"nodeName,omitempty"`
	Orchestrator string `json:"orchestrator"`
}

// NodeBGPSpec is the node's BGP identity.
type NodeBGPSpec struct {
	// ASNumber overrides the cluster default AS for this node.
	ASNumber *ASNumber `json:"asNumber,omitempty"`
	// IPv4Address and IPv6Address are the node's address with its subnet
	// ("10.0.0.5/24"); the subnet decides what CrossSubnet means.
	IPv4Address             string `json:"ipv4Address,omitempty"`
	IPv6Address             string `json:"ipv6Address,omitempty"`
	IPv4IPIPTunnelAddr      string `json:"ipv4IPIPTunnelAddr,omitempty"`
	RouteReflectorClusterID string `json:"routeReflectorClusterID,omitempty"`
}

// NodeWireguardSpec holds the node's WireGuard interface addresses.
type NodeWireguardSpec struct {
	InterfaceIPv4Address string `json:"interfaceIPv4Address,omitempty"`
	InterfaceIPv6Address string `json:"interfaceIPv6Address,omitempty"`
}
