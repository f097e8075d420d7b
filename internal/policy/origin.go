package policy

import "github.com/projectcalico/calico-node/internal/model/api"

// Origin says which part of Calico's policy model a compiled rule
// enforces: the start or end of a tier, the jump into a policy or a
// profile, one rule of a policy or profile, a failsafe port. Package
// explain reads it to turn a packet's path through the rules (package
// sim's trace) back into endpoints, tiers, policies and rules, so that
// what it answers comes from the rules the kernel runs, not from a second
// model of the semantics. Rendering ignores it: it is not part of a rule's
// text or hash. Origins may be shared by rules and are never modified.
type Origin struct {
	Kind OriginKind
	// Tier is the tier of a policy, or the tier a start or end rule
	// belongs to.
	Tier string
	// Policy is felix's key of a policy ("namespace/name" for a
	// NetworkPolicy, "name" for a GlobalNetworkPolicy); Profile the name
	// of a profile.
	Policy, Profile string
	// Ingress says the policy's or profile's ingress rules are meant
	// (else its egress rules).
	Ingress bool
	// Rule is the index of a policy's or profile's rule in its ingress or
	// egress list (OriginRule, OriginRulePart, OriginRuleVerdict).
	Rule int
	// Action is that rule's action as compiled (a Pass the compiler had
	// to enforce as a Deny says Deny), or a tier's default action
	// (OriginTierEnd).
	Action api.Action
	// Detail names what a rule of the other kinds matches: the failsafe
	// port ("tcp:22"), the encapsulation, the interface.
	Detail string
}

// OriginKind is what a rule does in the policy model.
type OriginKind uint8

const (
	// OriginNone: a rule with no place in the policy model of its own
	// (mark housekeeping, dispatch to an endpoint's chain, hooks).
	OriginNone OriginKind = iota
	// OriginRule carries the whole match of one policy or profile rule:
	// it fires exactly when that rule matches the packet (it logs, or
	// sets the verdict mark the next rule acts on).
	OriginRule
	// OriginRulePart is one of the extra rules a match needs when it
	// cannot be one iptables rule (several nets or port groups are OR-ed
	// through a scratch mark bit).
	OriginRulePart
	// OriginRuleVerdict acts on the verdict the OriginRule set: drops the
	// packet (Deny) or returns to the endpoint chain (Allow, Pass).
	OriginRuleVerdict
	// OriginTierStart starts a tier in an endpoint chain.
	OriginTierStart
	// OriginPolicy jumps to a policy's chain (from an endpoint chain or a
	// policy group chain).
	OriginPolicy
	// OriginPolicyGroup jumps to the chain of a group of policies with
	// one selector; the group chain jumps to each (OriginPolicy).
	OriginPolicyGroup
	// OriginPolicyAccepted returns from the endpoint chain once a policy
	// allowed the packet.
	OriginPolicyAccepted
	// OriginNoTrack exempts what untracked policy allowed from conntrack.
	OriginNoTrack
	// OriginTierEnd applies the tier's default action (Deny) to a packet
	// no policy of the tier allowed, denied or passed.
	OriginTierEnd
	// OriginProfile jumps to a profile's chain.
	OriginProfile
	// OriginProfileAccepted returns once a profile allowed the packet.
	OriginProfileAccepted
	// OriginNoProfile drops what no profile allowed.
	OriginNoProfile
	// OriginForwardDefault allows routed traffic through a host endpoint
	// that no applyOnForward policy governs in that direction.
	OriginForwardDefault
	// OriginEstablished accepts packets of established connections.
	OriginEstablished
	// OriginInvalid drops packets conntrack calls INVALID.
	OriginInvalid
	// OriginFailsafe jumps to the failsafe chain; OriginFailsafePort
	// accepts one failsafe port there (Detail "tcp:22").
	OriginFailsafe
	OriginFailsafePort
	// OriginWorkloadEncap drops VXLAN or IP-in-IP a workload sends.
	OriginWorkloadEncap
	// OriginEndpointToHost is what happens to traffic from a workload to
	// the host once its egress policy allowed it
	// (defaultEndpointToHostAction).
	OriginEndpointToHost
	// OriginUnknownInterface drops traffic of a workload interface no
	// endpoint has.
	OriginUnknownInterface
	// OriginSpoofed drops a workload's packet whose source does not route
	// back out of its interface; OriginSpoofAllowed accepts one of the
	// workload's allowSpoofedSourcePrefixes first.
	OriginSpoofed
	OriginSpoofAllowed
	// OriginHostToWorkload lets the host's traffic to its own workloads
	// through unpoliced.
	OriginHostToWorkload
	// OriginOverlay accepts or drops the overlay's encapsulated packets
	// between the nodes, before host endpoint policy.
	OriginOverlay
	// OriginAccepted accepts what policy accepted (the end of cali-INPUT,
	// cali-OUTPUT, cali-FORWARD and the raw and mangle chains).
	OriginAccepted
	// OriginNATOutgoing masquerades (or SNATs) traffic from a natOutgoing
	// pool leaving the pools.
	OriginNATOutgoing
	// OriginServiceLoop drops or rejects routed traffic to an advertised
	// service range that was not DNAT-ed (serviceLoopPrevention; Detail
	// the range).
	OriginServiceLoop
)

var originNames = [...]string{
	OriginNone: "none", OriginRule: "rule", OriginRulePart: "rule-part", OriginRuleVerdict: "rule-verdict",
	OriginTierStart: "tier", OriginPolicy: "policy", OriginPolicyGroup: "policy-group",
	OriginPolicyAccepted: "policy-accepted", OriginNoTrack: "notrack", OriginTierEnd: "tier-end",
	OriginProfile: "profile", OriginProfileAccepted: "profile-accepted", OriginNoProfile: "no-profile",
	OriginForwardDefault: "forward-default", OriginEstablished: "established", OriginInvalid: "invalid",
	OriginFailsafe: "failsafe", OriginFailsafePort: "failsafe-port", OriginWorkloadEncap: "workload-encap",
	OriginEndpointToHost: "endpoint-to-host", OriginUnknownInterface: "unknown-interface",
	OriginSpoofed: "spoofed", OriginSpoofAllowed: "spoof-allowed", OriginHostToWorkload: "host-to-workload",
	OriginOverlay: "overlay", OriginAccepted: "accepted", OriginNATOutgoing: "nat-outgoing",
	OriginServiceLoop: "service-loop",
}

func (k OriginKind) String() string {
	if int(k) < len(originNames) {
		return originNames[k]
	}
	return "OriginKind(?)"
}

// ChainEndpoint says whose chain an endpoint chain is: package explain
// groups a packet's path by the endpoint whose policy it met.
type ChainEndpoint struct {
	// Name is the endpoint's name: "namespace/name" for a workload
	// endpoint, the name for a host endpoint.
	Name string
	// Host says it is a host endpoint's chain.
	Host bool
	// Iface is the endpoint's interface ("any-interface-at-all" for the
	// host endpoint with interfaceName "*").
	Iface string
	// Ingress says the chain applies the endpoint's ingress policy, else
	// its egress policy.
	Ingress bool
	// Kind is the kind of policy the chain applies: "normal",
	// "applyOnForward", "doNotTrack" or "preDNAT".
	Kind string
}

// origins interns the origins of one family's rules: endpoint chains
// repeat the same tier and policy origins for every endpoint, so they
// share one value each.
type origins map[Origin]*Origin

func (o origins) get(v Origin) *Origin {
	if p, ok := o[v]; ok {
		return p
	}
	// A copy, so that v itself does not escape (every lookup would
	// allocate).
	p := new(Origin)
	*p = v
	o[v] = p
	return p
}

// with returns the rules with origin set on each that has none.
func with(o *Origin, rules ...Rule) []Rule {
	for i := range rules {
		if rules[i].Origin == nil {
			rules[i].Origin = o
		}
	}
	return rules
}

func (k chainKind) String() string {
	switch k {
	case kindForward:
		return "applyOnForward"
	case kindUntracked:
		return "doNotTrack"
	case kindPreDNAT:
		return "preDNAT"
	}
	return "normal"
}
