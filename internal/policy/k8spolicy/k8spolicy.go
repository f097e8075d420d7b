// Package k8spolicy translates Kubernetes NetworkPolicies
// (networking.k8s.io/v1) into the Calico NetworkPolicies that enforce them,
// exactly as Calico's libcalico-go conversion (used by kube-controllers'
// policy controller) does, so that the policies stored in the datastore
// are byte for byte the ones Calico would store.
//
// # Model
//
// A Kubernetes policy "<name>" in namespace "<ns>" becomes the Calico
// NetworkPolicy "knp.default.<name>" in "<ns>", order 1000, in the default
// tier, with only name and namespace as metadata. The pod selector becomes
// a selector over workload labels limited to Kubernetes pods
// (projectcalico.org/orchestrator == 'k8s'); a peer's namespaceSelector
// becomes a rule namespaceSelector (which Calico evaluates against the
// namespace's labels); an ipBlock becomes nets and notNets. Each Kubernetes
// rule becomes one Allow rule per protocol and peer, with that protocol's
// ports merged. Kubernetes semantics fall out of Calico's: a policy that
// selects a pod denies, in its directions, whatever no rule allows.
//
// # Design
//
// Convert is a pure function. Unlike Calico, which silently turns an
// unparsable ipBlock into a peer that matches everything, Convert leaves
// such a rule out and reports it; the Kubernetes API server validates
// CIDRs, so this only matters for hand-made objects.
//
// # Thread safety
//
// The package has no state; Convert may be called concurrently.
package k8spolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1 "k8s.io/api/core/v1"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// NamePrefix starts the name of every Calico policy made from a
// Kubernetes one.
const NamePrefix = "knp.default."

// Order is the order of every converted policy.
const Order = 1000.0

// Name returns the Calico name of the Kubernetes policy name.
func Name(k8sName string) string { return NamePrefix + k8sName }

// Convert returns the Calico NetworkPolicy for np. A rule that cannot be
// converted is left out (as Calico does) and reported in the returned
// error; the policy is returned even then, so that the rest of it is
// enforced.
func Convert(np *networkingv1.NetworkPolicy) (*api.NetworkPolicy, error) {
	var errs []error
	var ingress, egress []api.Rule
	for i := range np.Spec.Ingress {
		r := &np.Spec.Ingress[i]
		rules, err := convertRule(r.From, r.Ports, true)
		if err != nil {
			errs = append(errs, fmt.Errorf("convert ingress rule %d: %w", i, err))
			continue
		}
		ingress = append(ingress, rules...)
	}
	for i := range np.Spec.Egress {
		r := &np.Spec.Egress[i]
		rules, err := convertRule(r.To, r.Ports, false)
		if err != nil {
			errs = append(errs, fmt.Errorf("convert egress rule %d: %w", i, err))
			continue
		}
		egress = append(egress, rules...)
	}

	// No policyTypes means the policy predates the field, when policies
	// were ingress only.
	var in, out bool
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			in = true
		case networkingv1.PolicyTypeEgress:
			out = true
		}
	}
	types := []api.PolicyType{}
	if in {
		types = append(types, api.PolicyTypeIngress)
	}
	if out {
		types = append(types, api.PolicyTypeEgress)
	}
	if len(types) == 0 {
		types = append(types, api.PolicyTypeIngress)
	}

	order := Order
	p := &api.NetworkPolicy{
		TypeMeta:   api.TypeMeta{Kind: "NetworkPolicy", APIVersion: api.GroupVersion},
		ObjectMeta: api.ObjectMeta{Name: Name(np.Name), Namespace: np.Namespace},
		Spec: api.NetworkPolicySpec{
			Order:    &order,
			Selector: selectorFor(&np.Spec.PodSelector, true),
			Ingress:  ingress,
			Egress:   egress,
			Types:    types,
		},
	}
	return p, errors.Join(errs...)
}

// selectorFor converts a label selector. A pod selector is limited to
// Kubernetes pods. A present but empty namespace selector selects every
// namespace ("all()"); a nil one is "" (no namespace selector).
func selectorFor(s *metav1.LabelSelector, pod bool) string {
	var parts []string
	if pod {
		parts = append(parts, fmt.Sprintf("%s == '%s'", api.LabelOrchestrator, api.OrchestratorKubernetes))
	}
	if s == nil {
		return strings.Join(parts, " && ")
	}
	if !pod && len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0 {
		return "all()"
	}
	keys := make([]string, 0, len(s.MatchLabels))
	for k := range s.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s == '%s'", k, s.MatchLabels[k]))
	}
	for _, e := range s.MatchExpressions {
		values := strings.Join(e.Values, "', '")
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			parts = append(parts, fmt.Sprintf("%s in { '%s' }", e.Key, values))
		case metav1.LabelSelectorOpNotIn:
			parts = append(parts, fmt.Sprintf("%s not in { '%s' }", e.Key, values))
		case metav1.LabelSelectorOpExists:
			parts = append(parts, fmt.Sprintf("has(%s)", e.Key))
		case metav1.LabelSelectorOpDoesNotExist:
			parts = append(parts, fmt.Sprintf("! has(%s)", e.Key))
		}
	}
	return strings.Join(parts, " && ")
}

// peer is a converted NetworkPolicyPeer; the zero value matches anything.
type peer struct {
	selector, nsSelector string
	nets, notNets        []string
}

// convertRule turns one Kubernetes rule into Calico rules: one per
// protocol (sorted) and peer, each with all that protocol's ports.
func convertRule(peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort, ingress bool) ([]api.Rule, error) {
	var ps []peer
	for i := range peers {
		p, err := convertPeer(&peers[i])
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		ps = []peer{{}}
	}

	// Ports by protocol; a nil list means every port of the protocol, and
	// the "" protocol with a nil list means no port or protocol match at
	// all (a rule without ports).
	byProto := map[string][]api.Port{}
	if len(ports) == 0 {
		byProto[""] = nil
	}
	for i := range ports {
		np := &ports[i]
		protocol := string(corev1.ProtocolTCP)
		if np.Protocol != nil {
			protocol = string(*np.Protocol)
		}
		var list []api.Port
		if np.Port != nil {
			text := np.Port.String()
			if np.EndPort != nil {
				text = fmt.Sprintf("%s:%d", text, *np.EndPort)
			}
			port, err := api.PortFromString(text)
			if err != nil {
				return nil, fmt.Errorf("convert port %q: %w", text, err)
			}
			list = []api.Port{port}
		}
		if list == nil {
			byProto[protocol] = nil
		} else if cur, ok := byProto[protocol]; !ok || len(cur) > 0 {
			// An earlier entry without a port already allows every port
			// of the protocol; do not narrow it.
			byProto[protocol] = append(cur, list...)
		}
	}
	protocols := make([]string, 0, len(byProto))
	for k := range byProto {
		protocols = append(protocols, k)
	}
	sort.Strings(protocols)

	var rules []api.Rule
	for _, protoName := range protocols {
		ports := simplifyPorts(byProto[protoName])
		var protocol *api.Protocol
		if protoName != "" {
			p := api.ProtocolFromString(protoName)
			protocol = &p
		}
		for _, pr := range ps {
			r := api.Rule{Action: api.Allow, Protocol: protocol}
			entity := api.EntityRule{Selector: pr.selector, NamespaceSelector: pr.nsSelector, Nets: pr.nets, NotNets: pr.notNets}
			if ingress {
				r.Source = entity
				r.Destination = api.EntityRule{Ports: ports}
			} else {
				entity.Ports = ports
				r.Destination = entity
			}
			rules = append(rules, r)
		}
	}
	return rules, nil
}

func convertPeer(p *networkingv1.NetworkPolicyPeer) (peer, error) {
	if b := p.IPBlock; b != nil {
		// An ipBlock excludes the selectors.
		cidr, err := netip.ParsePrefix(b.CIDR)
		if err != nil {
			return peer{}, fmt.Errorf("parse ipBlock cidr: %w", err)
		}
		out := peer{nets: []string{cidr.Masked().String()}}
		for _, e := range b.Except {
			ex, err := netip.ParsePrefix(e)
			if err != nil {
				return peer{}, fmt.Errorf("parse ipBlock except: %w", err)
			}
			out.notNets = append(out.notNets, ex.Masked().String())
		}
		return out, nil
	}
	return peer{
		selector:   selectorFor(p.PodSelector, true),
		nsSelector: selectorFor(p.NamespaceSelector, false),
	}, nil
}

// simplifyPorts merges numeric ports into the fewest ranges, keeping named
// ports, as Calico's SimplifyPorts does (so [80, 81, 82, 9090, "foo"]
// becomes ["foo", 80:82, 9090]).
func simplifyPorts(ports []api.Port) []api.Port {
	if len(ports) <= 1 {
		return ports
	}
	var numeric []int
	var out []api.Port
	for _, p := range ports {
		if p.PortName != "" {
			out = append(out, p)
			continue
		}
		for i := int(p.MinPort); i <= int(p.MaxPort); i++ {
			numeric = append(numeric, i)
		}
	}
	if len(numeric) <= 1 {
		return ports
	}
	slices.Sort(numeric)
	for len(numeric) > 0 {
		first, last := numeric[0], numeric[0]
		numeric = numeric[1:]
		for len(numeric) > 0 && numeric[0] <= last+1 {
			last = numeric[0]
			numeric = numeric[1:]
		}
		r, _ := api.PortFromRange(uint16(first), uint16(last))
		out = append(out, r)
	}
	return out
}
