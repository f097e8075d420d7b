package api

// IPPool is a range of addresses Calico IPAM hands out in blocks, with the
// encapsulation and NAT used for traffic from it.
type IPPool struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       IPPoolSpec `json:"spec,omitempty"`
}

// IPPoolSpec is the desired state of an IPPool.
type IPPoolSpec struct {
	// CIDR is the pool's network, strictly masked ("10.244.0.0/16").
	CIDR string `json:"cidr"`
	// VXLANMode and IPIPMode select the overlay for traffic between pods on
	// different nodes: Never, Always or CrossSubnet. At most one may be on.
	VXLANMode VXLANMode `json:"vxlanMode,omitempty"`
	IPIPMode  IPIPMode  `json:"ipipMode,omitempty"`
	// NATOutgoing masquerades traffic from the pool to outside all pools.
	NATOutgoing bool `json:"natOutgoing,omitempty"`
	// Disabled pools hand out no new addresses.
	Disabled bool `json:"disabled,omitempty"`
	// DisableBGPExport keeps the pool's routes out of BGP.
	DisableBGPExport bool `json:"disableBGPExport,omitempty"`
	// BlockSize is the prefix length of the blocks IPAM carves from the pool.
	BlockSize int `json:"blockSize,omitempty"`
	// NodeSelector picks the nodes that may allocate from the pool.
	NodeSelector string `json:"nodeSelector,omitempty"`
	// NamespaceSelector picks the namespaces whose pods may use the pool.
	NamespaceSelector string `json:"namespaceSelector,omitempty"`
	// IPIP and NATOutgoingV1 are the calicoctl v1 spellings. They exist so
	// that a v1 spec pasted into a v3 document is reported as such rather
	// than as an unknown field; Validate rejects them.
	IPIP          *IPIPConfiguration `json:"ipip,omitempty"`
	NATOutgoingV1 bool               `json:"nat-outgoing,omitempty"`
	// AllowedUses: Workload, Tunnel and/or LoadBalancer.
	AllowedUses []IPPoolAllowedUse `json:"allowedUses,omitempty"`
	// AssignmentMode: Automatic pools serve any request, Manual pools only
	// requests that name them.
	AssignmentMode *AssignmentMode `json:"assignmentMode,omitempty"`
}

// IPPoolAllowedUse says what addresses from a pool may be used for.
type IPPoolAllowedUse string

const (
	IPPoolAllowedUseWorkload     IPPoolAllowedUse = "Workload"
	IPPoolAllowedUseTunnel       IPPoolAllowedUse = "Tunnel"
	IPPoolAllowedUseLoadBalancer IPPoolAllowedUse = "LoadBalancer"
)

// VXLANMode is when to VXLAN-encapsulate traffic between nodes.
type VXLANMode string

const (
	VXLANModeNever       VXLANMode = "Never"
	VXLANModeAlways      VXLANMode = "Always"
	VXLANModeCrossSubnet VXLANMode = "CrossSubnet"
)

// IPIPMode is when to IP-in-IP-encapsulate traffic between nodes.
type IPIPMode string

const (
	IPIPModeNever       IPIPMode = "Never"
	IPIPModeAlways      IPIPMode = "Always"
	IPIPModeCrossSubnet IPIPMode = "CrossSubnet"
)

// EncapMode is the calicoctl v1 IP-in-IP mode ("always", "cross-subnet").
type EncapMode string

const (
	EncapModeUndefined   EncapMode = ""
	EncapModeAlways      EncapMode = "always"
	EncapModeCrossSubnet EncapMode = "cross-subnet"
)

// AssignmentMode is whether IPAM may pick the pool on its own.
type AssignmentMode string

const (
	AssignmentModeAutomatic AssignmentMode = "Automatic"
	AssignmentModeManual    AssignmentMode = "Manual"
)

// IPIPConfiguration is the calicoctl v1 "ipip" block of a pool.
type IPIPConfiguration struct {
	Enabled bool      `json:"enabled,omitempty"`
	Mode    EncapMode `json:"mode,omitempty"`
}

// IPReservation lists addresses that IPAM must never hand out.
type IPReservation struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       IPReservationSpec `json:"spec,omitempty"`
}

// IPReservationSpec is the desired state of an IPReservation.
type IPReservationSpec struct {
	// ReservedCIDRs are CIDRs or single addresses.
	ReservedCIDRs []string `json:"reservedCIDRs,omitempty"`
}
