package api

// Names and orders of the tiers Calico creates itself.
const (
	AdminNetworkPolicyTierName          = "adminnetworkpolicy"
	BaselineAdminNetworkPolicyTierName  = "baselineadminnetworkpolicy"
	AdminNetworkPolicyTierOrder         = float64(1_000)
	DefaultTierOrder                    = float64(1_000_000)
	BaselineAdminNetworkPolicyTierOrder = float64(10_000_000)
)

// Tier groups policies: tiers are evaluated in order, and a packet no policy
// of a tier decides gets the tier's default action.
type Tier struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       TierSpec `json:"spec,omitempty"`
}

// TierSpec is the desired state of a Tier.
type TierSpec struct {
	Order *float64 `json:"order,omitempty"`
	// DefaultAction is Deny or Pass.
	DefaultAction *Action `json:"defaultAction,omitempty"`
}
