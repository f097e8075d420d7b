package api

// DefaultTierName is the tier of policies that name none.
const DefaultTierName = "default"

// NetworkPolicy is namespaced policy: ordered rules for the endpoints its
// selector picks in its namespace.
type NetworkPolicy struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       NetworkPolicySpec `json:"spec,omitempty"`
}

// NetworkPolicySpec is the desired state of a NetworkPolicy.
type NetworkPolicySpec struct {
	// Tier is the policy's tier; empty means the default tier (see
	// TierName). It is stored as written, as Calico stores it.
	Tier                   string                  `json:"tier,omitempty"`
	Order                  *float64                `json:"order,omitempty"`
	Ingress                []Rule                  `json:"ingress,omitempty"`
	Egress                 []Rule                  `json:"egress,omitempty"`
	Selector               string                  `json:"selector,omitempty"`
	Types                  []PolicyType            `json:"types,omitempty"`
	ServiceAccountSelector string                  `json:"serviceAccountSelector,omitempty"`
	PerformanceHints       []PolicyPerformanceHint `json:"performanceHints,omitempty"`
}

// TierName returns the policy's tier, "default" when none is set.
func (s *NetworkPolicySpec) TierName() string { return tierOrDefault(s.Tier) }

// GlobalNetworkPolicy is cluster-wide policy: ordered rules for the
// endpoints (workloads and hosts) its selector picks.
type GlobalNetworkPolicy struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       GlobalNetworkPolicySpec `json:"spec,omitempty"`
}

// GlobalNetworkPolicySpec is the desired state of a GlobalNetworkPolicy.
type GlobalNetworkPolicySpec struct {
	// Tier: see NetworkPolicySpec.Tier.
	Tier                   string                  `json:"tier,omitempty"`
	Order                  *float64                `json:"order,omitempty"`
	Ingress                []Rule                  `json:"ingress,omitempty"`
	Egress                 []Rule                  `json:"egress,omitempty"`
	Selector               string                  `json:"selector,omitempty"`
	Types                  []PolicyType            `json:"types,omitempty"`
	DoNotTrack             bool                    `json:"doNotTrack,omitempty"`
	PreDNAT                bool                    `json:"preDNAT,omitempty"`
	ApplyOnForward         bool                    `json:"applyOnForward,omitempty"`
	ServiceAccountSelector string                  `json:"serviceAccountSelector,omitempty"`
	NamespaceSelector      string                  `json:"namespaceSelector,omitempty"`
	PerformanceHints       []PolicyPerformanceHint `json:"performanceHints,omitempty"`
}

// TierName returns the policy's tier, "default" when none is set.
func (s *GlobalNetworkPolicySpec) TierName() string { return tierOrDefault(s.Tier) }

func tierOrDefault(t string) string {
	if t == "" {
		return DefaultTierName
	}
	return t
}

// PolicyType is a direction a policy applies to.
type PolicyType string

const (
	PolicyTypeIngress PolicyType = "Ingress"
	PolicyTypeEgress  PolicyType = "Egress"
)

// PolicyPerformanceHint is an optimisation hint for the dataplane.
type PolicyPerformanceHint string

const PerfHintAssumeNeededOnEveryNode PolicyPerformanceHint = "AssumeNeededOnEveryNode"

// defaultPolicyTypes fills empty types from the rules present, as
// libcalico-go does: no egress rules -> Ingress (even with no rules at all);
// egress only -> Egress; both -> Ingress, Egress.
func defaultPolicyTypes(ingress, egress []Rule, types *[]PolicyType) {
	if len(*types) != 0 {
		return
	}
	switch {
	case len(egress) == 0:
		*types = []PolicyType{PolicyTypeIngress}
	case len(ingress) == 0:
		*types = []PolicyType{PolicyTypeEgress}
	default:
		*types = []PolicyType{PolicyTypeIngress, PolicyTypeEgress}
	}
}
