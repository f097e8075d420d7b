package k8spolicy_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/k8spolicy"
	"github.com/projectcalico/calico-node/internal/policy/sim"
)

// The cases of the upstream Kubernetes network policy e2e suite
// (test/e2e/network/netpol/network_policy.go), re-expressed as pods,
// labels, policies and expected connectivity matrices, and run through
// translation, compilation and the rule simulator. As upstream: namespaces
// x, y and z with the label kubernetes.io/metadata.name; pods labelled
// pod=<name>, each serving ports 80 and 81 on TCP, UDP and SCTP under the
// names serve-<port>-<protocol>; loopback traffic is not judged.

const nsLabel = "kubernetes.io/metadata.name"

// peer selects pods of a truth table; empty fields match any.
type peer struct{ ns, pod string }

func (p peer) matches(pod string) bool {
	ns, name, _ := strings.Cut(pod, "/")
	return (p.ns == "" || p.ns == ns) && (p.pod == "" || p.pod == name)
}

// reach is a truth table: from pod -> to pod -> connected.
type reach struct {
	pods []string
	m    map[[2]string]bool
}

func newReach(pods []string, def bool) *reach {
	r := &reach{pods: pods, m: map[[2]string]bool{}}
	for _, a := range pods {
		for _, b := range pods {
			r.m[[2]string{a, b}] = def
		}
	}
	return r
}

func (r *reach) expect(from, to string, c bool) *reach { r.m[[2]string{from, to}] = c; return r }

func (r *reach) expectPeer(from, to peer, c bool) *reach {
	for _, a := range r.pods {
		for _, b := range r.pods {
			if from.matches(a) && to.matches(b) {
				r.m[[2]string{a, b}] = c
			}
		}
	}
	return r
}

func (r *reach) allIngress(to string, c bool) *reach {
	return r.expectPeer(peer{}, peer{ns: strings.Split(to, "/")[0], pod: strings.Split(to, "/")[1]}, c)
}

func (r *reach) allEgress(from string, c bool) *reach {
	return r.expectPeer(peer{ns: strings.Split(from, "/")[0], pod: strings.Split(from, "/")[1]}, peer{}, c)
}

// check is one probe of every pod pair.
type check struct {
	port  uint16
	proto corev1.Protocol
	want  func(pods []string) *reach
}

// step is a state of the cluster: the policies in force and any label
// changes, and the checks to run in it.
type step struct {
	policies  map[string][]*networkingv1.NetworkPolicy // by namespace
	podLabels map[string]map[string]string             // extra labels by pod
	nsLabels  map[string]map[string]string             // extra labels by namespace
	checks    []check
}

type e2eCase struct {
	name  string
	pods  []string
	steps []step
}

func gen(name string, podSel metav1.LabelSelector, ingress []networkingv1.NetworkPolicyIngressRule, egress []networkingv1.NetworkPolicyEgressRule, types ...networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: podSel, Ingress: ingress, Egress: egress, PolicyTypes: types},
	}
}

func labels(kv ...string) metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return metav1.LabelSelector{MatchLabels: m}
}

func lsp(s metav1.LabelSelector) *metav1.LabelSelector { return &s }

func expr(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

var (
	in  = networkingv1.PolicyTypeIngress
	out = networkingv1.PolicyTypeEgress
)

func from(peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyIngressRule {
	return networkingv1.NetworkPolicyIngressRule{From: peers}
}

func to(peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{To: peers}
}

func tcpPort(p int) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Port: port(p)}
}

// podIP is the address the harness gives a pod: x/a is 10.65.1.1, y/b
// 10.65.2.2 and so on.
func podIP(pod string) netip.Addr {
	ns, name, _ := strings.Cut(pod, "/")
	return netip.AddrFrom4([4]byte{10, 65, byte(ns[0] - 'x' + 1), byte(name[0] - 'a' + 1)})
}

func iface(pod string) string { return "cali" + strings.ReplaceAll(pod, "/", "0") + "000000000" }

func policies(ns string, ps ...*networkingv1.NetworkPolicy) map[string][]*networkingv1.NetworkPolicy {
	return map[string][]*networkingv1.NetworkPolicy{ns: ps}
}

func e2eCases() []e2eCase {
	all := func(c bool) func([]string) *reach { return func(p []string) *reach { return newReach(p, c) } }
	denyIngress := gen("deny-ingress", metav1.LabelSelector{}, []networkingv1.NetworkPolicyIngressRule{}, nil)
	denyAll := gen("deny-all", metav1.LabelSelector{}, []networkingv1.NetworkPolicyIngressRule{}, []networkingv1.NetworkPolicyEgressRule{}, in, out)
	nsIs := func(ns string) *metav1.LabelSelector { return lsp(labels(nsLabel, ns)) }
	podIs := func(p string) *metav1.LabelSelector { return lsp(labels("pod", p)) }
	xbCIDR := podIP("x/b").String() + "/32"
	large := netip.PrefixFrom(podIP("x/b"), 4).Masked().String()
	cidrEgress := func(cidr string, except ...string) *networkingv1.NetworkPolicy {
		return gen("allow-client-a-via-cidr-egress-rule", labels("pod", "a"), nil,
			[]networkingv1.NetworkPolicyEgressRule{to(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}})}, out)
	}
	port81From := func(ns string, proto corev1.Protocol) *networkingv1.NetworkPolicy {
		r := from(networkingv1.NetworkPolicyPeer{NamespaceSelector: nsIs(ns)})
		r.Ports = []networkingv1.NetworkPolicyPort{{Port: port(81), Protocol: &proto}}
		return gen("allow-port-81", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{r}, nil)
	}
	nsAndPod := func(proto corev1.Protocol, p int) []step {
		return []step{{
			policies: policies("x", gen("allow-ns-y-pod-a", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{NamespaceSelector: nsIs("y"), PodSelector: podIs("a")})}, nil)),
			checks: []check{{uint16(p), proto, func(ps []string) *reach {
				return newReach(ps, true).allIngress("x/a", false).expect("y/a", "x/a", true)
			}}},
		}}
	}
	sctpUDP := func(proto corev1.Protocol) []e2eCase {
		n := strings.ToLower(string(proto))
		return []e2eCase{
			{n + " default-deny-ingress", []string{"x/a", "x/b", "y/a", "y/b"}, []step{{
				policies: policies("x", denyIngress),
				checks: []check{{80, proto, func(ps []string) *reach {
					return newReach(ps, true).expectPeer(peer{}, peer{ns: "x"}, false)
				}}},
			}}},
			{n + " ports", []string{"x/a", "x/b", "y/a", "z/a"}, []step{{
				policies: policies("x", port81From("y", proto)),
				checks: []check{{81, proto, func(ps []string) *reach {
					return newReach(ps, true).expectPeer(peer{ns: "x"}, peer{"x", "a"}, false).expectPeer(peer{ns: "z"}, peer{"x", "a"}, false)
				}}},
			}}},
			{n + " pod and namespace selector", []string{"x/a", "x/b", "y/a"}, nsAndPod(proto, 80)},
		}
	}

	cases := []e2eCase{
		{"default-deny-ingress", []string{"x/a", "x/b", "y/a", "y/b"}, []step{{
			policies: policies("x", denyIngress),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).expectPeer(peer{}, peer{ns: "x"}, false)
			}}},
		}}},
		{"default-deny-all", []string{"x/a", "x/b", "y/a"}, []step{{
			policies: policies("x", denyAll),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).expectPeer(peer{}, peer{ns: "x"}, false).expectPeer(peer{ns: "x"}, peer{}, false)
			}}},
		}}},
		{"allow from pods in the server namespace by pod selector", []string{"x/a", "x/b", "x/c", "y/a"}, []step{{
			policies: policies("x", gen("x-a-allows-x-b", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{PodSelector: podIs("b")})}, nil)),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).allIngress("x/a", false).expect("x/b", "x/a", true)
			}}},
		}}},
		{"allow ingress for a target", []string{"x/a", "x/b", "y/a"}, []step{{
			policies: policies("x", gen("deny-all", metav1.LabelSelector{}, []networkingv1.NetworkPolicyIngressRule{}, nil),
				gen("allow-all-to-a", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
					from(networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{}, NamespaceSelector: &metav1.LabelSelector{}})}, nil)),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).allIngress("x/a", true).allIngress("x/b", false)
			}}},
		}}},
		{"allow ingress from pods in all namespaces", []string{"x/a", "x/b", "y/a", "z/a"}, []step{{
			policies: policies("x", gen("allow-from-another-ns", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{}}})}, nil)),
			checks: []check{{80, tcp, all(true)}},
		}}},
		{"allow only from another namespace by namespace selector", []string{"x/a", "x/b", "y/a", "z/a"}, []step{{
			policies: policies("x", gen("allow-client-a-via-ns-selector", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{NamespaceSelector: nsIs("y")})}, nil)),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).expectPeer(peer{ns: "x"}, peer{"x", "a"}, false).expectPeer(peer{ns: "z"}, peer{"x", "a"}, false)
			}}},
		}}},
		{"pod selector with match expressions", []string{"x/a", "x/b", "y/a"}, []step{{
			policies: policies("x", gen("x-a-allows-x-b", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{PodSelector: expr("pod", metav1.LabelSelectorOpIn, "b")})}, nil)),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).allIngress("x/a", false).expect("x/b", "x/a", true)
			}}},
		}}},
		{"namespace selector with match expressions", []string{"x/a", "x/b", "y/a", "z/a"}, []step{{
			policies: policies("x", gen("allow-ns-y-match-selector", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{NamespaceSelector: expr(nsLabel, metav1.LabelSelectorOpIn, "y")})}, nil)),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).expectPeer(peer{ns: "x"}, peer{"x", "a"}, false).expectPeer(peer{ns: "z"}, peer{"x", "a"}, false)
			}}},
		}}},
		{"pod selector or namespace selector", []string{"x/a", "x/b", "x/c", "y/a"}, []step{{
			policies: policies("x", gen("allow-ns-y-match-selector", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{NamespaceSelector: expr(nsLabel, metav1.LabelSelectorOpNotIn, "x")},
					networkingv1.NetworkPolicyPeer{PodSelector: podIs("b")})}, nil)),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).expect("x/c", "x/a", false)
			}}},
		}}},
		{"pod selector and namespace selector", []string{"x/a", "x/b", "y/a", "y/b", "z/b"}, []step{{
			policies: policies("x", gen("allow-ns-y-podselector-and-nsselector", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{NamespaceSelector: expr(nsLabel, metav1.LabelSelectorOpNotIn, "x"), PodSelector: podIs("b")})}, nil)),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).allIngress("x/a", false).expect("y/b", "x/a", true).expect("z/b", "x/a", true)
			}}},
		}}},
		{"multiple pod selectors and namespace selectors", []string{"x/a", "x/b", "y/a", "y/b", "y/c"}, []step{{
			policies: policies("x", gen("allow-ns-y-z-pod-b-c", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{NamespaceSelector: expr(nsLabel, metav1.LabelSelectorOpNotIn, "x"),
					PodSelector: expr("pod", metav1.LabelSelectorOpIn, "b", "c")})}, nil)),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).expectPeer(peer{ns: "x"}, peer{"x", "a"}, false).expect("y/a", "x/a", false)
			}}},
		}}},
		{"any pod selectors", []string{"x/a", "x/b", "x/c"}, []step{{
			policies: policies("x", gen("allow-ns-x-pod-b-c", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{PodSelector: podIs("b")}, networkingv1.NetworkPolicyPeer{PodSelector: podIs("c")})}, nil)),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).allIngress("x/a", false).expect("x/b", "x/a", true).expect("x/c", "x/a", true)
			}}},
		}}},
		{"only from a pod in another namespace by pod and namespace selector", []string{"x/a", "x/b", "y/a", "y/b", "z/a"}, nsAndPod(tcp, 80)},
		{"ports", []string{"x/a", "x/b", "y/a", "y/b", "z/a"}, []step{{
			policies: policies("x", port81From("y", tcp)),
			checks: []check{{81, tcp, func(ps []string) *reach {
				return newReach(ps, true).expectPeer(peer{ns: "x"}, peer{"x", "a"}, false).
					expectPeer(peer{ns: "y"}, peer{"x", "a"}, true).expectPeer(peer{ns: "z"}, peer{"x", "a"}, false)
			}}},
		}}},
		func() e2eCase {
			allowFromY := func(ps []string) *reach {
				return newReach(ps, true).expectPeer(peer{ns: "x"}, peer{"x", "a"}, false).
					expectPeer(peer{ns: "y"}, peer{"x", "a"}, true).expectPeer(peer{ns: "z"}, peer{"x", "a"}, false)
			}
			p80 := port81From("y", tcp)
			p80.Name = "allow-client-a-via-ns-selector-80"
			p80.Spec.Ingress[0].Ports[0].Port = port(80)
			return e2eCase{"multiple stacked policies with overlapping pod selectors", []string{"x/a", "x/b", "y/a", "y/b", "z/a"}, []step{
				{policies: policies("x", port81From("y", tcp)), checks: []check{
					{81, tcp, allowFromY},
					{80, tcp, func(ps []string) *reach { return newReach(ps, true).allIngress("x/a", false) }},
				}},
				{policies: policies("x", port81From("y", tcp), p80), checks: []check{{80, tcp, allowFromY}}},
			}}
		}(),
		{"allow-all", []string{"x/a", "x/b", "y/a"}, []step{{
			policies: policies("x", gen("allow-all", labels(), []networkingv1.NetworkPolicyIngressRule{{}}, nil)),
			checks:   []check{{80, tcp, all(true)}, {81, tcp, all(true)}},
		}}},
		{"ingress on one named port", []string{"x/a", "x/b", "y/a"}, []step{{
			policies: policies("x", gen("allow-all", labels(), []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{{Port: namedPort("serve-81-tcp")}}}}, nil)),
			checks: []check{
				{81, tcp, all(true)},
				{80, tcp, func(ps []string) *reach { return newReach(ps, true).expectPeer(peer{}, peer{ns: "x"}, false) }},
			},
		}}},
		{"ingress from a namespace on one named port", []string{"x/a", "x/b", "y/a", "z/a"}, []step{{
			policies: policies("x", func() *networkingv1.NetworkPolicy {
				r := from(networkingv1.NetworkPolicyPeer{NamespaceSelector: nsIs("y")})
				r.Ports = []networkingv1.NetworkPolicyPort{{Port: namedPort("serve-80-tcp"), Protocol: &tcp}}
				return gen("allow-client-a-via-ns-selector-80", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{r}, nil)
			}()),
			checks: []check{
				{80, tcp, func(ps []string) *reach {
					return newReach(ps, true).expectPeer(peer{ns: "x"}, peer{"x", "a"}, false).expectPeer(peer{ns: "z"}, peer{"x", "a"}, false)
				}},
				{81, tcp, func(ps []string) *reach { return newReach(ps, true).allIngress("x/a", false) }},
			},
		}}},
		{"egress on one named port", []string{"x/a", "y/a"}, []step{{
			policies: policies("x", gen("allow-egress", labels(), nil, []networkingv1.NetworkPolicyEgressRule{
				{Ports: []networkingv1.NetworkPolicyPort{{Port: namedPort("serve-80-tcp")}}}}, out)),
			checks: []check{
				{80, tcp, all(true)},
				{81, tcp, func(ps []string) *reach { return newReach(ps, true).expectPeer(peer{ns: "x"}, peer{}, false) }},
			},
		}}},
		{"updated policy", []string{"x/a", "y/a"}, []step{
			{policies: policies("x", gen("allow-all-mutate-to-deny-all", labels(), []networkingv1.NetworkPolicyIngressRule{{}}, nil)),
				checks: []check{{81, tcp, all(true)}}},
			{policies: policies("x", gen("allow-all-mutate-to-deny-all", labels(), []networkingv1.NetworkPolicyIngressRule{}, nil)),
				checks: []check{{81, tcp, func(ps []string) *reach { return newReach(ps, true).expectPeer(peer{}, peer{ns: "x"}, false) }}}},
		}},
		func() e2eCase {
			p := gen("allow-client-a-via-ns-selector", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{NamespaceSelector: lsp(labels("ns2", "updated"))})}, nil)
			return e2eCase{"ingress from an updated namespace", []string{"x/a", "y/a"}, []step{
				{policies: policies("x", p), checks: []check{{80, tcp, func(ps []string) *reach { return newReach(ps, true).allIngress("x/a", false) }}}},
				{policies: policies("x", p), nsLabels: map[string]map[string]string{"y": {"ns2": "updated"}},
					checks: []check{{80, tcp, func(ps []string) *reach {
						return newReach(ps, true).allIngress("x/a", false).expectPeer(peer{ns: "y"}, peer{}, true)
					}}}},
			}}
		}(),
		func() e2eCase {
			p := gen("allow-client-a-via-pod-selector", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{PodSelector: lsp(labels("pod", "b", "pod2", "updated"))})}, nil)
			return e2eCase{"ingress from an updated pod", []string{"x/a", "x/b"}, []step{
				{policies: policies("x", p), checks: []check{{80, tcp, func(ps []string) *reach { return newReach(ps, true).allIngress("x/a", false) }}}},
				{policies: policies("x", p), podLabels: map[string]map[string]string{"x/b": {"pod2": "updated"}},
					checks: []check{{80, tcp, func(ps []string) *reach {
						return newReach(ps, true).allIngress("x/a", false).expect("x/b", "x/a", true)
					}}}},
			}}
		}(),
		{"deny ingress from pods in other namespaces", []string{"x/a", "x/b", "y/a", "z/a"}, []step{{
			policies: policies("x", gen("deny-empty-policy", metav1.LabelSelector{}, []networkingv1.NetworkPolicyIngressRule{
				from(networkingv1.NetworkPolicyPeer{PodSelector: lsp(labels())})}, nil)),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).expectPeer(peer{ns: "y"}, peer{ns: "x"}, false).expectPeer(peer{ns: "z"}, peer{ns: "x"}, false)
			}}},
		}}},
		func() e2eCase {
			p := gen("deny-ingress-via-label-selector", labels("target", "isolated"), []networkingv1.NetworkPolicyIngressRule{}, nil)
			return e2eCase{"deny ingress to an updated pod", []string{"x/a", "y/a"}, []step{
				{policies: policies("x", p), checks: []check{{80, tcp, all(true)}}},
				{policies: policies("x", p), podLabels: map[string]map[string]string{"x/a": {"target": "isolated"}},
					checks: []check{{80, tcp, func(ps []string) *reach { return newReach(ps, true).allIngress("x/a", false) }}}},
			}}
		}(),
		{"deny egress from pods by pod selector", []string{"x/a", "x/b", "y/a"}, []step{{
			policies: policies("x", gen("deny-egress-pod-a", labels("pod", "a"), nil, []networkingv1.NetworkPolicyEgressRule{}, out)),
			checks:   []check{{80, tcp, func(ps []string) *reach { return newReach(ps, true).allEgress("x/a", false) }}},
		}}},
		{"deny egress from all pods in a namespace", []string{"x/a", "x/b", "y/a"}, []step{{
			policies: policies("x", gen("deny-egress-ns-x", metav1.LabelSelector{}, nil, []networkingv1.NetworkPolicyEgressRule{}, out)),
			checks:   []check{{80, tcp, func(ps []string) *reach { return newReach(ps, true).expectPeer(peer{ns: "x"}, peer{}, false) }}},
		}}},
		{"ingress and egress together", []string{"x/a", "x/b", "x/c", "y/a"}, []step{{
			policies: policies("x", gen("allow-client-a-via-pod-selector", labels("pod", "a"),
				[]networkingv1.NetworkPolicyIngressRule{from(networkingv1.NetworkPolicyPeer{PodSelector: podIs("b")})},
				[]networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{tcpPort(80)}}}, out, in)),
			checks: []check{
				{80, tcp, func(ps []string) *reach {
					return newReach(ps, true).allIngress("x/a", false).expect("x/b", "x/a", true)
				}},
				{81, tcp, func(ps []string) *reach {
					return newReach(ps, true).allIngress("x/a", false).allEgress("x/a", false).expect("x/b", "x/a", true)
				}},
			},
		}}},
		{"deny egress on the client side even if the server allows it", []string{"x/a", "y/a", "y/b"}, []step{{
			policies: func() map[string][]*networkingv1.NetworkPolicy {
				ing := []networkingv1.NetworkPolicyIngressRule{from(networkingv1.NetworkPolicyPeer{NamespaceSelector: nsIs("x"), PodSelector: podIs("a")})}
				return map[string][]*networkingv1.NetworkPolicy{
					"x": {gen("allow-to-ns-y-pod-a", labels("pod", "a"), nil, []networkingv1.NetworkPolicyEgressRule{
						to(networkingv1.NetworkPolicyPeer{NamespaceSelector: nsIs("y"), PodSelector: podIs("a")})}, out)},
					"y": {gen("allow-from-xa-on-ya-match-selector", labels("pod", "a"), ing, nil),
						gen("allow-from-xa-on-yb-match-selector", labels("pod", "b"), ing, nil)},
				}
			}(),
			checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).expectPeer(peer{"x", "a"}, peer{}, false).expectPeer(peer{}, peer{"y", "a"}, false).
					expectPeer(peer{"x", "a"}, peer{"y", "a"}, true).expectPeer(peer{}, peer{"y", "b"}, false)
			}}},
		}}},
		{"egress to a server in another namespace by pod and namespace selector", []string{"x/a", "y/a", "y/b"}, []step{{
			policies: policies("x", gen("allow-to-ns-y-pod-a", labels("pod", "a"), nil, []networkingv1.NetworkPolicyEgressRule{
				to(networkingv1.NetworkPolicyPeer{NamespaceSelector: nsIs("y"), PodSelector: podIs("a")})}, out)),
			checks: []check{{80, tcp, func(ps []string) *reach { return newReach(ps, true).allEgress("x/a", false).expect("x/a", "y/a", true) }}},
		}}},
		{"ingress on any port of one protocol", []string{"x/a", "y/a"}, []step{{
			policies: policies("x", gen("allow-ingress-by-proto", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp}}}}, nil)),
			checks: []check{
				{80, tcp, all(true)},
				{80, udp, func(ps []string) *reach { return newReach(ps, true).expectPeer(peer{}, peer{"x", "a"}, false) }},
			},
		}}},
		{"ingress allow-all takes precedence", []string{"x/a", "y/a"}, []step{
			{policies: policies("x", gen("allow-ingress-port-80", labels(), []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{tcpPort(80)}}}, nil)),
				checks: []check{{81, tcp, func(ps []string) *reach { return newReach(ps, true).expectPeer(peer{}, peer{ns: "x"}, false) }}}},
			{policies: policies("x", gen("allow-ingress-port-80", labels(), []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{tcpPort(80)}}}, nil),
				gen("allow-ingress", labels(), []networkingv1.NetworkPolicyIngressRule{{}}, nil)),
				checks: []check{{81, tcp, all(true)}}},
		}},
		{"egress allow-all takes precedence", []string{"x/a", "y/a"}, []step{
			{policies: policies("x", gen("allow-egress-port-80", labels(), nil, []networkingv1.NetworkPolicyEgressRule{
				{Ports: []networkingv1.NetworkPolicyPort{tcpPort(80)}}}, out)),
				checks: []check{{81, tcp, func(ps []string) *reach { return newReach(ps, true).expectPeer(peer{ns: "x"}, peer{}, false) }}}},
			{policies: policies("x", gen("allow-egress-port-80", labels(), nil, []networkingv1.NetworkPolicyEgressRule{
				{Ports: []networkingv1.NetworkPolicyPort{tcpPort(80)}}}, out),
				gen("allow-egress", labels(), nil, []networkingv1.NetworkPolicyEgressRule{{}}, out)),
				checks: []check{{81, tcp, all(true)}}},
		}},
		{"stop enforcing policies after they are deleted", []string{"x/a", "y/a"}, []step{
			{policies: policies("x", denyAll), checks: []check{{80, tcp, func(ps []string) *reach {
				return newReach(ps, true).expectPeer(peer{ns: "x"}, peer{}, false).expectPeer(peer{}, peer{ns: "x"}, false)
			}}}},
			{checks: []check{{80, tcp, all(true)}}},
		}},
		{"egress to a server in a CIDR block", []string{"x/a", "y/a", "y/b"}, []step{{
			policies: policies("x", cidrEgress(podIP("y/b").String()+"/32")),
			checks:   []check{{80, tcp, func(ps []string) *reach { return newReach(ps, true).allEgress("x/a", false).expect("x/a", "y/b", true) }}},
		}}},
		{"except clause of a CIDR block", []string{"x/a", "x/b", "x/c"}, []step{{
			policies: policies("x", cidrEgress(large, xbCIDR)),
			checks:   []check{{80, tcp, func(ps []string) *reach { return newReach(ps, true).expect("x/a", "x/b", false) }}},
		}}},
		{"an address in both CIDR and except is allowed by another rule", []string{"x/a", "x/b", "x/c"}, []step{
			{policies: policies("x", cidrEgress(large, xbCIDR)),
				checks: []check{{80, tcp, func(ps []string) *reach { return newReach(ps, true).expect("x/a", "x/b", false) }}}},
			{policies: policies("x", cidrEgress(xbCIDR)),
				checks: []check{{80, tcp, func(ps []string) *reach { return newReach(ps, true).allEgress("x/a", false).expect("x/a", "x/b", true) }}}},
		}},
		{"ingress and egress controlled independently", []string{"x/a", "x/b", "y/a"}, []step{
			{policies: policies("x", gen("allow-egress-for-target", labels("pod", "a"), nil, []networkingv1.NetworkPolicyEgressRule{{}}, out)),
				checks: []check{{80, tcp, all(true)}}},
			{policies: policies("x", gen("allow-egress-for-target", labels("pod", "a"), nil, []networkingv1.NetworkPolicyEgressRule{{}}, out),
				gen("deny-ingress-via-label-selector", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{}, nil)),
				checks: []check{{80, tcp, func(ps []string) *reach { return newReach(ps, true).allIngress("x/a", false) }}}},
		}},
		{"sctp is not tcp", []string{"x/a", "y/a"}, []step{{
			policies: policies("x", denyIngress, func() *networkingv1.NetworkPolicy {
				return gen("allow-only-sctp-ingress-on-port-81", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
					{Ports: []networkingv1.NetworkPolicyPort{{Port: port(81), Protocol: &sctp}}}}, nil)
			}()),
			checks: []check{{81, tcp, func(ps []string) *reach { return newReach(ps, true).expectPeer(peer{}, peer{ns: "x"}, false) }}},
		}}},
		{"a policy allowing sctp isolates the pod", []string{"x/a", "y/a"}, []step{{
			policies: policies("x", gen("allow-only-sctp-ingress-on-port-80", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{{Port: port(80), Protocol: &sctp}}}}, nil)),
			checks: []check{{81, tcp, func(ps []string) *reach { return newReach(ps, true).allIngress("x/a", false) }}},
		}}},
		{"udp only does not allow tcp", []string{"x/a", "y/a"}, []step{{
			policies: policies("x", gen("allow-only-udp-ingress-on-port-81", labels("pod", "a"), []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{{Port: port(81), Protocol: &udp}}}}, nil)),
			checks: []check{{81, tcp, func(ps []string) *reach { return newReach(ps, true).allIngress("x/a", false) }}},
		}}},
		{"namespace selector on the default namespace name label, egress", []string{"x/a", "x/b", "y/a", "z/a"}, []step{{
			policies: policies("x", gen("allow-ns-y-match-selector-for-immutable-ns-label", labels("pod", "a"), nil,
				[]networkingv1.NetworkPolicyEgressRule{to(networkingv1.NetworkPolicyPeer{NamespaceSelector: expr(nsLabel, metav1.LabelSelectorOpNotIn, "y")})}, out)),
			checks: []check{{80, tcp, func(ps []string) *reach { return newReach(ps, true).expectPeer(peer{"x", "a"}, peer{ns: "y"}, false) }}},
		}}},
	}
	cases = append(cases, sctpUDP(udp)...)
	return append(cases, sctpUDP(sctp)...)
}

// world builds the Calico view of the cluster in one step: pods as
// workload endpoints on one node, namespaces as kns.* profiles, and the
// converted policies.
func world(t *testing.T, pods []string, st step) *policy.Snapshot {
	t.Helper()
	s := &policy.Snapshot{Node: "node1"}
	for _, ns := range []string{"x", "y", "z"} {
		labels := map[string]string{"pcns." + nsLabel: ns, "pcns.projectcalico.org/name": ns}
		for k, v := range st.nsLabels[ns] {
			labels["pcns."+k] = v
		}
		s.Profiles = append(s.Profiles, api.Profile{
			ObjectMeta: api.ObjectMeta{Name: "kns." + ns},
			Spec: api.ProfileSpec{Ingress: []api.Rule{{Action: api.Allow}}, Egress: []api.Rule{{Action: api.Allow}},
				LabelsToApply: labels},
		})
		for _, knp := range st.policies[ns] {
			knp = knp.DeepCopy()
			knp.Namespace = ns
			p, err := k8spolicy.Convert(knp)
			if err != nil {
				t.Fatalf("convert %s/%s: %v", ns, knp.Name, err)
			}
			s.NetworkPolicies = append(s.NetworkPolicies, *p)
		}
	}
	for _, pod := range pods {
		ns, name, _ := strings.Cut(pod, "/")
		w := api.WorkloadEndpoint{ObjectMeta: api.ObjectMeta{Namespace: ns, Labels: map[string]string{"pod": name}}}
		for k, v := range st.podLabels[pod] {
			w.Labels[k] = v
		}
		w.Spec = api.WorkloadEndpointSpec{Orchestrator: "k8s", Node: "node1", Pod: name, Endpoint: "eth0",
			InterfaceName: iface(pod), IPNetworks: []string{podIP(pod).String() + "/32"}, Profiles: []string{"kns." + ns},
			ServiceAccountName: "default"}
		for _, p := range []uint16{80, 81} {
			for _, proto := range []string{"TCP", "UDP", "SCTP"} {
				w.Spec.Ports = append(w.Spec.Ports, api.WorkloadEndpointPort{
					Name: fmt.Sprintf("serve-%d-%s", p, strings.ToLower(proto)), Protocol: api.ProtocolFromString(proto), Port: p})
			}
		}
		w.Default()
		s.WorkloadEndpoints = append(s.WorkloadEndpoints, w)
	}
	return s
}

func TestKubernetesE2ECases(t *testing.T) {
	protoNum := map[corev1.Protocol]uint8{corev1.ProtocolTCP: 6, corev1.ProtocolUDP: 17, corev1.ProtocolSCTP: 132}
	for _, tc := range e2eCases() {
		t.Run(tc.name, func(t *testing.T) {
			for si, st := range tc.steps {
				s := world(t, tc.pods, st)
				res := policy.Compile(s)
				if len(res.Problems) > 0 {
					t.Fatalf("step %d: problems: %v", si, res.Problems)
				}
				sets, err := sim.NewSets(res.V4)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range st.checks {
					want := c.want(tc.pods)
					var wrong []string
					for _, a := range tc.pods {
						for _, b := range tc.pods {
							if a == b {
								continue // loopback is not judged upstream either
							}
							got, err := sim.Traverse(res.V4, sets, policy.TableFilter, "FORWARD", sim.Packet{
								Src: podIP(a), Dst: podIP(b), Proto: protoNum[c.proto], SrcPort: 40000, DstPort: c.port,
							}, iface(a), iface(b))
							if err != nil {
								t.Fatal(err)
							}
							if (got.Verdict == sim.Accept) != want.m[[2]string{a, b}] {
								wrong = append(wrong, fmt.Sprintf("%s -> %s: got %v, want connected=%v", a, b, got.Verdict, want.m[[2]string{a, b}]))
							}
						}
					}
					if len(wrong) > 0 {
						t.Errorf("step %d, %s/%d:\n  %s", si, c.proto, c.port, strings.Join(wrong, "\n  "))
					}
				}
			}
		})
	}
}
