package k8spolicy_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/projectcalico/calico-node/internal/policy/k8spolicy"
	"github.com/projectcalico/calico-node/internal/testkit/goldentest"
)

func ptr[T any](v T) *T { return &v }

var (
	tcp  = corev1.ProtocolTCP
	udp  = corev1.ProtocolUDP
	sctp = corev1.ProtocolSCTP
)

func port(p int) *intstr.IntOrString         { v := intstr.FromInt32(int32(p)); return &v }
func namedPort(n string) *intstr.IntOrString { v := intstr.FromString(n); return &v }

func k8sNP(name string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns1", UID: "5f0e3a2c-0000-4000-8000-000000000001", ResourceVersion: "42"},
		Spec:       spec,
	}
}

func TestConvertGolden(t *testing.T) {
	podA := metav1.LabelSelector{MatchLabels: map[string]string{"pod": "a"}}
	tests := []struct {
		name string
		np   *networkingv1.NetworkPolicy
	}{
		{"deny-all-ingress", k8sNP("deny", networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}})},
		{"no-policy-types", k8sNP("legacy", networkingv1.NetworkPolicySpec{
			PodSelector: podA,
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{}},
		})},
		{"allow-all-both-directions", k8sNP("allow-all", networkingv1.NetworkPolicySpec{
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress, networkingv1.PolicyTypeIngress},
		})},
		{"pod-selectors", k8sNP("pods", networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{
				MatchLabels: map[string]string{"pod": "a", "app": "web"},
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"fe", "be"}},
					{Key: "env", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"dev"}},
					{Key: "canary", Operator: metav1.LabelSelectorOpDoesNotExist},
					{Key: "team", Operator: metav1.LabelSelectorOpExists},
				},
			},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pod": "b"}}},
				{PodSelector: &metav1.LabelSelector{}},
			}}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		})},
		{"namespace-selectors", k8sNP("namespaces", networkingv1.NetworkPolicySpec{
			PodSelector: podA,
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{NamespaceSelector: &metav1.LabelSelector{}},
				{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "y"}}},
				{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"x"}}}},
					PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pod": "b"}}},
				{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{}},
			}}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		})},
		{"ip-blocks", k8sNP("cidrs", networkingv1.NetworkPolicySpec{
			PodSelector: podA,
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16", "10.2.3.4/32"}}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "fd00::1/64"}},
			}}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		})},
		{"ports", k8sNP("ports", networkingv1.NetworkPolicySpec{
			PodSelector: podA,
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{
					{Port: port(80)}, // TCP by default
					{Protocol: &tcp, Port: port(81)},
					{Protocol: &tcp, Port: port(82)},
					{Protocol: &tcp, Port: namedPort("serve-80-tcp")},
					{Protocol: &udp, Port: port(8000), EndPort: ptr(int32(9000))},
					{Protocol: &sctp, Port: port(9000)},
				}},
				// A port entry without a port allows every port of its
				// protocol, whatever else is listed for it.
				{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: port(53)}, {Protocol: &udp}}},
				{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}, {IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.0/24"}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: port(53)}, {Protocol: &tcp, Port: port(53)}},
				},
			},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: namedPort("dns")}}}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		})},
		{"empty-rule-lists", k8sNP("empty", networkingv1.NetworkPolicySpec{
			PodSelector: podA,
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
			Egress:      []networkingv1.NetworkPolicyEgressRule{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := k8spolicy.Convert(tc.np)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Validate(); err != nil {
				t.Errorf("converted policy does not validate: %v", err)
			}
			var b strings.Builder
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(p); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, b.String())
		})
	}
}

func TestConvertReportsBadRules(t *testing.T) {
	np := k8sNP("bad", networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "not-a-cidr"}}}},
			{},
		},
	})
	p, err := k8spolicy.Convert(np)
	if err == nil {
		t.Error("no error for a bad ipBlock")
	}
	if p == nil || len(p.Spec.Ingress) != 1 {
		t.Fatalf("want the good rule kept, got %+v", p)
	}
	if p.Name != "knp.default.bad" || p.Namespace != "ns1" || *p.Spec.Order != 1000 {
		t.Errorf("metadata %s/%s order %v", p.Namespace, p.Name, *p.Spec.Order)
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	goldentest.Check(t, filepath.Join("testdata", name+".golden"), []byte(got))
}
