package explain

import (
	"fmt"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/sim"
)

// translator reads one table traversal's hits back into sections and
// steps (see the package doc).
type translator struct {
	table *policy.Table
	out   []Section
	// cur is the open section; depth the depth of its endpoint chain
	// (-1 for a node section).
	cur   *Section
	depth int
	chain string
	// open is the index in cur.Steps of the policy or profile step whose
	// rules the next rule hits belong to (-1: none); decided says one of
	// them allowed, denied or passed.
	open    int
	decided bool
	// parts are a multi-rule match's rules waiting for the rule they
	// belong to.
	parts []IptablesRule
	// last is the origin of the last step: a second rule with the same
	// origin (a mark set, then the return) belongs to the same step.
	last  *policy.Origin
	lines lineCache
}

// lineCache holds chains' rendered rules and hashes, by table and chain.
type lineCache map[[2]string]renderedChain

type renderedChain struct{ lines, hashes []string }

func translate(t *policy.Table, hits []sim.Hit, lines lineCache) []Section {
	tr := &translator{table: t, open: -1, lines: lines}
	for _, h := range hits {
		tr.hit(h)
	}
	tr.closeSection()
	return tr.out
}

// iptablesRule is the kernel's view of the hit rule.
func (tr *translator) iptablesRule(h sim.Hit) IptablesRule {
	r := IptablesRule{Table: tr.table.Name, Chain: h.Chain, Number: h.Index + 1}
	key := [2]string{tr.table.Name, h.Chain}
	rc, ok := tr.lines[key]
	if !ok {
		// A built-in chain is not in the table: the hit is one of our
		// hooks.
		if c := tr.table.Chain(h.Chain); c != nil {
			rc = renderedChain{c.Lines(), c.Hashes()}
		}
		tr.lines[key] = rc
	}
	if h.Index < len(rc.lines) {
		r.Text, r.Hash = rc.lines[h.Index], policy.HashPrefix+rc.hashes[h.Index]
	} else {
		for _, hk := range tr.table.Hooks {
			if hk.Chain == h.Chain && hk.Rule.Action == h.Rule.Action {
				r.Text, r.Hash = hk.Line(), policy.HashPrefix+hk.Hash()
			}
		}
	}
	return r
}

func (tr *translator) hit(h sim.Hit) {
	chain := tr.table.Chain(h.Chain)
	switch {
	case chain != nil && chain.Endpoint != nil && (tr.cur == nil || tr.chain != h.Chain || tr.depth < 0):
		tr.closeSection()
		ep := chain.Endpoint
		dir := "egress"
		if ep.Ingress {
			dir = "ingress"
		}
		kind := KindWorkload
		if ep.Host {
			kind = KindHost
		}
		tr.cur = &Section{Endpoint: ep.Name, EndpointKind: kind, Direction: dir, PolicyKind: ep.Kind,
			Table: tr.table.Name, Chain: h.Chain, Verdict: None}
		tr.depth, tr.chain = h.Depth, h.Chain
	case tr.cur != nil && tr.depth >= 0 && h.Depth <= tr.depth && h.Chain != tr.chain:
		// Back above the endpoint chain: its section is over.
		tr.closeSection()
	}
	o := h.Rule.Origin
	if o == nil {
		return
	}
	if tr.cur == nil {
		tr.cur = &Section{Table: tr.table.Name, Verdict: None}
		tr.depth, tr.chain = -1, ""
	}
	r := tr.iptablesRule(h)
	switch o.Kind {
	case policy.OriginRule, policy.OriginRulePart, policy.OriginRuleVerdict:
	default:
		if o == tr.last {
			tr.attach(r)
			return
		}
	}
	tr.last = o
	switch o.Kind {
	case policy.OriginRulePart:
		tr.parts = append(tr.parts, r)
		return
	case policy.OriginRule:
		idx := o.Rule
		st := Step{Kind: StepRule, Tier: o.Tier, Policy: o.Policy, Profile: o.Profile, Rule: &idx, Action: string(o.Action),
			Text: ruleText(o), Rules: append(tr.parts, r)}
		tr.parts = nil
		tr.add(st)
		if o.Action != api.Log {
			tr.decided = true
		}
		return
	case policy.OriginRuleVerdict:
		tr.attach(r)
		if o.Action == api.Deny {
			tr.cur.Verdict = Deny
		}
		return
	case policy.OriginPolicyAccepted, policy.OriginProfileAccepted:
		tr.attach(r)
		tr.cur.Verdict = Allow
		return
	case policy.OriginNoTrack:
		tr.attach(r)
		tr.lastStep().Text += "; exempted from connection tracking"
		return
	case policy.OriginPolicyGroup:
		// The group's chain jumps to each policy in turn: the policy
		// steps follow.
		tr.parts = append(tr.parts, r)
		return
	}
	tr.closePolicy()
	st := Step{Kind: StepNode, Rules: append(tr.parts, r)}
	tr.parts = nil
	switch o.Kind {
	case policy.OriginTierStart:
		st.Kind, st.Tier, st.Text = StepTier, o.Tier, "tier "+o.Tier
	case policy.OriginPolicy:
		st.Kind, st.Tier, st.Policy = StepPolicy, o.Tier, o.Policy
		st.Text = policyName(o.Policy)
		tr.add(st)
		tr.open, tr.decided = len(tr.cur.Steps)-1, false
		return
	case policy.OriginTierEnd:
		st.Kind, st.Tier, st.Action = StepTierDefault, o.Tier, string(o.Action)
		st.Text = fmt.Sprintf("end of tier %s: no policy allowed, denied or passed the packet: default action %s", o.Tier, o.Action)
		tr.cur.Verdict = Deny
	case policy.OriginProfile:
		if tr.noPolicy() && !tr.hasStep(StepNoPolicy) {
			// The compiler gives the chain tiers only for the policies
			// that select the endpoint: none did.
			tr.add(Step{Kind: StepNoPolicy, Text: "no policy selects the endpoint for " + tr.cur.Direction})
		}
		st.Kind, st.Profile, st.Text = StepProfile, o.Profile, "profile "+o.Profile
		tr.add(st)
		tr.open, tr.decided = len(tr.cur.Steps)-1, false
		return
	case policy.OriginNoProfile:
		st.Kind, st.Action = StepNoProfile, string(api.Deny)
		if tr.noPolicy() {
			st.Text = "no policy selects the endpoint and no profile allowed the packet: Deny"
		} else {
			st.Text = "every tier passed the packet and no profile allowed it: Deny"
		}
		tr.cur.Verdict = Deny
	case policy.OriginEndpointToHost:
		switch o.Detail {
		case "ACCEPT":
			st.Text, tr.cur.Verdict = "traffic from a workload to the host: defaultEndpointToHostAction Accept", Allow
		case "RETURN":
			st.Text = "traffic from a workload to the host: defaultEndpointToHostAction Return (host endpoint policy follows)"
		default:
			st.Text, tr.cur.Verdict = "traffic from a workload to the host: defaultEndpointToHostAction Drop", Deny
		}
	case policy.OriginOverlay:
		st.Text = o.Detail
		if strings.HasPrefix(o.Detail, "Allow") {
			tr.cur.Verdict = Allow
		} else {
			tr.cur.Verdict = Deny
		}
	default:
		ns, ok := nodeSteps[o.Kind]
		if !ok {
			st.Text = o.Kind.String()
			break
		}
		st.Text = ns.text
		if strings.Contains(ns.text, "%s") {
			st.Text = fmt.Sprintf(ns.text, o.Detail)
		}
		if ns.verdict != "" {
			tr.cur.Verdict = ns.verdict
		}
	}
	tr.add(st)
}

// nodeSteps is what the node's own rules of each kind say, %s standing for
// the origin's Detail, and the verdict they give the section ("": none,
// the packet goes on).
var nodeSteps = map[policy.OriginKind]struct{ text, verdict string }{
	policy.OriginForwardDefault:   {"no applyOnForward policy governs routed traffic here: allowed", Allow},
	policy.OriginEstablished:      {"part of an established connection: allowed", Allow},
	policy.OriginInvalid:          {"conntrack calls the packet INVALID: dropped", Deny},
	policy.OriginFailsafe:         {"failsafe ports are checked first", ""},
	policy.OriginFailsafePort:     {"failsafe port %s: allowed before any policy", Allow},
	policy.OriginWorkloadEncap:    {"%s sent by a workload: dropped (allowVXLANPacketsFromWorkloads / allowIPIPPacketsFromWorkloads)", Deny},
	policy.OriginUnknownInterface: {"no workload endpoint has this interface: dropped", Deny},
	policy.OriginSpoofed:          {"the workload sent from an address that is not its own (reverse-path check): dropped", Deny},
	policy.OriginSpoofAllowed:     {"source is one of %s's allowSpoofedSourcePrefixes: allowed", Allow},
	policy.OriginHostToWorkload:   {"the host's traffic to its own workloads is not policed", Allow},
	policy.OriginAccepted:         {"accepted: policy allowed the packet", Allow},
	policy.OriginNATOutgoing:      {"leaves a natOutgoing pool for outside the pools: source NAT", ""},
	policy.OriginServiceLoop:      {"to the advertised service range %s without a service (not DNAT-ed): stopped (serviceLoopPrevention)", Deny},
}

// noPolicy reports whether the open section met no policy at all.
func (tr *translator) noPolicy() bool {
	for _, s := range tr.cur.Steps {
		if s.Kind == StepTier {
			return false
		}
	}
	return true
}

func (tr *translator) hasStep(kind string) bool {
	for _, s := range tr.cur.Steps {
		if s.Kind == kind {
			return true
		}
	}
	return false
}

func (tr *translator) add(st Step) { tr.cur.Steps = append(tr.cur.Steps, st) }

func (tr *translator) lastStep() *Step {
	if len(tr.cur.Steps) == 0 {
		tr.add(Step{Kind: StepNode})
	}
	return &tr.cur.Steps[len(tr.cur.Steps)-1]
}

// attach adds r to the last step.
func (tr *translator) attach(r IptablesRule) {
	st := tr.lastStep()
	st.Rules = append(st.Rules, tr.parts...)
	st.Rules = append(st.Rules, r)
	tr.parts = nil
}

// closePolicy ends the open policy or profile: if none of its rules
// decided, that is a step of its own.
func (tr *translator) closePolicy() {
	if tr.open < 0 || tr.cur == nil {
		tr.open = -1
		return
	}
	p := tr.cur.Steps[tr.open]
	if !tr.decided {
		st := Step{Kind: StepNoRule, Tier: p.Tier, Policy: p.Policy, Profile: p.Profile, Rules: tr.parts}
		st.Text = "no rule matched"
		if len(tr.cur.Steps)-1 > tr.open {
			st.Text = "no further rule matched"
		}
		if p.Kind == StepPolicy {
			st.Text += ": on to the next policy"
		} else {
			st.Text += ": on to the next profile"
		}
		tr.parts = nil
		tr.add(st)
	}
	tr.open, tr.decided = -1, false
}

func (tr *translator) closeSection() {
	tr.closePolicy()
	if tr.cur != nil {
		if len(tr.parts) > 0 {
			// Parts of a match that did not match as a whole.
			st := tr.lastStep()
			st.Rules = append(st.Rules, tr.parts...)
		}
		tr.out = append(tr.out, *tr.cur)
	}
	tr.cur, tr.parts, tr.last = nil, nil, nil
}

// policyName says which kind of policy a felix key names.
func policyName(key string) string {
	ns, name, ok := strings.Cut(key, "/")
	switch {
	case !ok:
		return "GlobalNetworkPolicy " + key
	case strings.HasPrefix(name, "knp.default."):
		return "NetworkPolicy " + key + " (Kubernetes NetworkPolicy " + ns + "/" + strings.TrimPrefix(name, "knp.default.") + ")"
	}
	return "NetworkPolicy " + key
}

func ruleText(o *policy.Origin) string {
	dir := "egress"
	if o.Ingress {
		dir = "ingress"
	}
	head := fmt.Sprintf("%s rule %d matched: %s", dir, o.Rule, o.Action)
	switch o.Action {
	case api.Allow:
		return head + " (allowed)"
	case api.Deny:
		return head + " (denied)"
	case api.Pass:
		return head + " (on to the next tier)"
	case api.Log:
		return head + " (logged; evaluation continues)"
	}
	return head
}
