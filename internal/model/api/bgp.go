package api

// BGPConfiguration holds cluster-wide BGP settings (name "default") or
// per-node overrides (name "node.<nodename>").
type BGPConfiguration struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       BGPConfigurationSpec `json:"spec,omitempty"`
}

// BGPConfigurationSpec is the desired BGP configuration.
type BGPConfigurationSpec struct {
	LogSeverityScreen string `json:"logSeverityScreen,omitempty"`
	// NodeToNodeMeshEnabled defaults to true when unset.
	NodeToNodeMeshEnabled *bool `json:"nodeToNodeMeshEnabled,omitempty"`
	// ASNumber is the default AS of nodes without their own (64512 when
	// unset).
	ASNumber                       *ASNumber                       `json:"asNumber,omitempty"`
	ServiceLoadBalancerIPs         []ServiceLoadBalancerIPBlock    `json:"serviceLoadBalancerIPs,omitempty"`
	ServiceExternalIPs             []ServiceExternalIPBlock        `json:"serviceExternalIPs,omitempty"`
	ServiceClusterIPs              []ServiceClusterIPBlock         `json:"serviceClusterIPs,omitempty"`
	ServiceLoadBalancerAggregation *ServiceLoadBalancerAggregation `json:"serviceLoadBalancerAggregation,omitempty"`
	Communities                    []Community                     `json:"communities,omitempty"`
	PrefixAdvertisements           []PrefixAdvertisement           `json:"prefixAdvertisements,omitempty"`
	ListenPort                     uint16                          `json:"listenPort,omitempty"`
	NodeMeshPassword               *BGPPassword                    `json:"nodeMeshPassword,omitempty"`
	NodeMeshMaxRestartTime         *Duration                       `json:"nodeMeshMaxRestartTime,omitempty"`
	BindMode                       *BindMode                       `json:"bindMode,omitempty"`
	IgnoredInterfaces              []string                        `json:"ignoredInterfaces,omitempty"`
	LocalWorkloadPeeringIPV4       string                          `json:"localWorkloadPeeringIPV4,omitempty"`
	LocalWorkloadPeeringIPV6       string                          `json:"localWorkloadPeeringIPV6,omitempty"`
}

// BindMode is which addresses the BGP daemon listens on.
type BindMode string

const (
	BindModeNone   BindMode = "None"
	BindModeNodeIP BindMode = "NodeIP"
)

// ServiceLoadBalancerAggregation is whether LoadBalancer service routes are
// advertised aggregated.
type ServiceLoadBalancerAggregation string

const (
	ServiceLoadBalancerAggregationEnabled  ServiceLoadBalancerAggregation = "Enabled"
	ServiceLoadBalancerAggregationDisabled ServiceLoadBalancerAggregation = "Disabled"
)

// ServiceLoadBalancerIPBlock is a CIDR of LoadBalancer service addresses to
// advertise.
type ServiceLoadBalancerIPBlock struct {
	CIDR string `json:"cidr,omitempty"`
}

// ServiceExternalIPBlock is a CIDR of service external IPs to advertise.
type ServiceExternalIPBlock struct {
	CIDR string `json:"cidr,omitempty"`
}

// ServiceClusterIPBlock is a CIDR of service cluster IPs to advertise.
type ServiceClusterIPBlock struct {
	CIDR string `json:"cidr,omitempty"`
}

// Community names a BGP community value ("aa:nn" or "aa:nn:mm").
type Community struct {
	Name  string `json:"name,omitempty"`
	Value string `json:"value,omitempty"`
}

// PrefixAdvertisement attaches communities to routes for a CIDR.
type PrefixAdvertisement struct {
	CIDR        string   `json:"cidr,omitempty"`
	Communities []string `json:"communities,omitempty"`
}

// BGPPassword says where a BGP session password comes from.
type BGPPassword struct {
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef,omitempty"`
}

// SecretKeySelector picks a key of a Kubernetes Secret (Kubernetes shape).
type SecretKeySelector struct {
	Name     string `json:"name,omitempty"`
	Key      string `json:"key"`
	Optional *bool  `json:"optional,omitempty"`
}

// BGPPeer is a BGP session to set up: from which nodes (all, one, or those
// matching nodeSelector) to which peers (peerIP, or the nodes matching
// peerSelector).
type BGPPeer struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       BGPPeerSpec `json:"spec,omitempty"`
}

// BGPPeerSpec is the desired state of a BGPPeer.
type BGPPeerSpec struct {
	Node         string `json:"node,omitempty"`
	NodeSelector string `json:"nodeSelector,omitempty"`
	// PeerIP is "IP", "IPv4:port" or "[IPv6]:port".
	PeerIP                   string          `json:"peerIP,omitempty"`
	ASNumber                 ASNumber        `json:"asNumber,omitempty"`
	LocalASNumber            *ASNumber       `json:"localASNumber,omitempty"`
	PeerSelector             string          `json:"peerSelector,omitempty"`
	KeepOriginalNextHop      bool            `json:"keepOriginalNextHop,omitempty"`
	NextHopMode              *NextHopMode    `json:"nextHopMode,omitempty"`
	Password                 *BGPPassword    `json:"password,omitempty"`
	SourceAddress            SourceAddress   `json:"sourceAddress,omitempty"`
	MaxRestartTime           *Duration       `json:"maxRestartTime,omitempty"`
	NumAllowedLocalASNumbers *int32          `json:"numAllowedLocalASNumbers,omitempty"`
	TTLSecurity              *uint8          `json:"ttlSecurity,omitempty"`
	ReachableBy              string          `json:"reachableBy,omitempty"`
	Filters                  []string        `json:"filters,omitempty"`
	LocalWorkloadSelector    string          `json:"localWorkloadSelector,omitempty"`
	ReversePeering           *ReversePeering `json:"reversePeering,omitempty"`
}

// SourceAddress is the source address used for a BGP session.
type SourceAddress string

const (
	SourceAddressUseNodeIP SourceAddress = "UseNodeIP"
	SourceAddressNone      SourceAddress = "None"
)

// NextHopMode is how the next hop of routes sent to a peer is chosen.
type NextHopMode string

const (
	NextHopModeAuto NextHopMode = "Auto"
	NextHopModeSelf NextHopMode = "Self"
	NextHopModeKeep NextHopMode = "Keep"
)

// ReversePeering is whether the peer nodes set up the reverse session
// themselves.
type ReversePeering string

const (
	ReversePeeringAuto   ReversePeering = "Auto"
	ReversePeeringManual ReversePeering = "Manual"
)
