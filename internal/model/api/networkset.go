package api

// NetworkSet is a labelled set of networks in a namespace that policy
// selectors can match.
type NetworkSet struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       NetworkSetSpec `json:"spec,omitempty"`
}

// NetworkSetSpec is the desired state of a NetworkSet.
type NetworkSetSpec struct {
	// Nets are CIDRs or single addresses.
	Nets []string `json:"nets,omitempty"`
}

// GlobalNetworkSet is a labelled, cluster-wide set of networks.
type GlobalNetworkSet struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       GlobalNetworkSetSpec `json:"spec,omitempty"`
}

// GlobalNetworkSetSpec is the desired state of a GlobalNetworkSet.
type GlobalNetworkSetSpec struct {
	// Nets are CIDRs or single addresses.
	Nets []string `json:"nets,omitempty"`
}
