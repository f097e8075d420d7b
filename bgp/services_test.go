package bgp

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// TestServiceRoutes: which nodes advertise a Service's addresses one by
// one, as Calico's route generator decides.
func TestServiceRoutes(t *testing.T) {
	ranges := func(s *api.BGPConfigurationSpec) {
		s.ServiceClusterIPs = []api.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}, {CIDR: "fd00:96::/112"}}
		s.ServiceExternalIPs = []api.ServiceExternalIPBlock{{CIDR: "198.51.100.0/24"}, {CIDR: "192.0.2.99/32"}}
		s.ServiceLoadBalancerIPs = []api.ServiceLoadBalancerIPBlock{{CIDR: "203.0.113.0/25"}, {CIDR: "203.0.113.200/32"}}
	}
	global := bgpConfig("default", ranges)
	disabled := api.ServiceLoadBalancerAggregationDisabled
	noAggregation := bgpConfig("default", func(s *api.BGPConfigurationSpec) {
		ranges(s)
		s.ServiceLoadBalancerAggregation = &disabled
	})
	local := corev1.ServiceExternalTrafficPolicyLocal
	cluster := corev1.ServiceExternalTrafficPolicyCluster
	lb, np, cip := corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort, corev1.ServiceTypeClusterIP
	svc := func(typ corev1.ServiceType, etp corev1.ServiceExternalTrafficPolicy, clusterIP string, mod func(*Service)) Service {
		s := Service{Key: "default/s", Type: typ, ExternalTrafficPolicy: etp, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP}, HasSlices: true}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	here := func(s *Service) { s.ReadyHere, s.ReadyAnywhere = true, true }
	tests := []struct {
		name   string
		svc    Service
		global *api.BGPConfiguration
		labels map[string]string
		want   []string
	}{
		{"Local with a ready endpoint here: cluster IP, allowed external and LoadBalancer addresses",
			svc(lb, local, "10.96.0.10", func(s *Service) {
				here(s)
				s.ExternalIPs, s.IngressIPs = []string{"198.51.100.5", "100.64.0.1"}, []string{"203.0.113.5", "203.0.113.130"}
			}),
			global, nil, []string{"10.96.0.10/32", "198.51.100.5/32", "203.0.113.5/32"}},
		{"Local, dual-stack: both cluster IPs", svc(np, local, "10.96.0.10", func(s *Service) {
			here(s)
			s.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
		}), global, nil, []string{"10.96.0.10/32", "fd00:96::10/128"}},
		{"Local, ready endpoint elsewhere only", svc(np, local, "10.96.0.10", func(s *Service) { s.ReadyAnywhere = true }),
			global, nil, nil},
		{"Local, endpoint here, no EndpointSlice seen", svc(np, local, "10.96.0.10", func(s *Service) { here(s); s.HasSlices = false }),
			global, nil, nil},
		{"Local, node excluded from load balancers", svc(np, local, "10.96.0.10", here),
			global, map[string]string{excludeLBLabel: "true"}, nil},
		{"Local, serviceClusterIPs unset: no cluster IP",
			svc(np, local, "10.96.0.10", func(s *Service) { here(s); s.ExternalIPs = []string{"198.51.100.5"} }),
			bgpConfig("default", func(s *api.BGPConfigurationSpec) {
				s.ServiceExternalIPs = []api.ServiceExternalIPBlock{{CIDR: "198.51.100.0/24"}}
			}), nil, []string{"198.51.100.5/32"}},
		{"Cluster LoadBalancer with a single-address LoadBalancer entry: every node",
			svc(lb, cluster, "10.96.0.11", func(s *Service) { s.IngressIPs = []string{"203.0.113.200"} }),
			global, nil, []string{"10.96.0.11/32", "203.0.113.200/32"}},
		{"Cluster LoadBalancer with a single-address spec.loadBalancerIP, not yet in status",
			svc(lb, cluster, "10.96.0.11", func(s *Service) { s.LoadBalancerIP = "203.0.113.200" }),
			global, nil, []string{"10.96.0.11/32"}},
		{"Cluster LoadBalancer in a range only: the range covers it",
			svc(lb, cluster, "10.96.0.12", func(s *Service) { here(s); s.IngressIPs = []string{"203.0.113.6"} }),
			global, nil, nil},
		{"Cluster LoadBalancer, aggregation Disabled, a ready endpoint somewhere",
			svc(lb, cluster, "10.96.0.12", func(s *Service) { s.ReadyAnywhere = true; s.IngressIPs = []string{"203.0.113.6"} }),
			noAggregation, nil, []string{"10.96.0.12/32", "203.0.113.6/32"}},
		{"Cluster LoadBalancer, aggregation Disabled, no ready endpoint",
			svc(lb, cluster, "10.96.0.12", func(s *Service) { s.IngressIPs = []string{"203.0.113.6"} }),
			noAggregation, nil, nil},
		{"ClusterIP service, aggregation Disabled, a ready endpoint somewhere",
			svc(cip, "", "10.96.0.14", func(s *Service) { s.ReadyAnywhere = true }), noAggregation, nil, []string{"10.96.0.14/32"}},
		{"Cluster with a single-address external IP",
			svc(np, cluster, "10.96.0.13", func(s *Service) { s.ExternalIPs = []string{"192.0.2.99"} }),
			global, nil, []string{"10.96.0.13/32", "192.0.2.99/32"}},
		{"ClusterIP service with a ready endpoint here", svc(cip, "", "10.96.0.14", here), global, nil, nil},
		{"headless", svc(cip, local, corev1.ClusterIPNone, here), global, nil, nil},
		{"ExternalName", svc(corev1.ServiceTypeExternalName, local, "10.96.0.15", here), global, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := RoutingInput{Global: tc.global, Services: []Service{tc.svc},
				Identity: Identity{IPv4: netip.MustParseAddr("192.0.2.11"), Labels: tc.labels}}
			var got []string
			for _, p := range in.serviceRoutes() {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("routes %v, want %v", got, tc.want)
			}
		})
	}
}

// TestServiceRanges: the ranges every node advertises, never imports into
// the kernel, and passes on to peers, as confd's updateGlobalRoutes and
// BIRD's export filter have them.
func TestServiceRanges(t *testing.T) {
	disabled := api.ServiceLoadBalancerAggregationDisabled
	conf := func(aggregation *api.ServiceLoadBalancerAggregation) *api.BGPConfiguration {
		return bgpConfig("default", func(s *api.BGPConfigurationSpec) {
			s.ServiceClusterIPs = []api.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}, {CIDR: "10.100.0.1/32"}}
			s.ServiceExternalIPs = []api.ServiceExternalIPBlock{{CIDR: "198.51.100.0/24"}, {CIDR: "192.0.2.99/32"}}
			s.ServiceLoadBalancerIPs = []api.ServiceLoadBalancerIPBlock{{CIDR: "203.0.113.0/25"}, {CIDR: "203.0.113.200/32"}, {CIDR: "fd00:1b::/120"}}
			s.ServiceLoadBalancerAggregation = aggregation
		})
	}
	local := Service{Key: "default/l", Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
		ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}, HasSlices: true, ReadyHere: true, ReadyAnywhere: true}
	strs := func(ps []netip.Prefix) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.String())
		}
		slices.Sort(out)
		return out
	}
	tests := []struct {
		name                  string
		global                *api.BGPConfiguration
		clusterID             string
		labels                map[string]string
		adverts, kernelReject []string
		exportAccept          []string
	}{
		{"aggregation Enabled (default)", conf(nil), "", nil,
			[]string{"10.100.0.1/32", "10.96.0.0/12", "10.96.0.10/32", "198.51.100.0/24", "203.0.113.0/25", "fd00:1b::/120"},
			[]string{"10.100.0.1/32", "10.96.0.0/12", "198.51.100.0/24", "203.0.113.0/25", "fd00:1b::/120"},
			[]string{"10.100.0.1/32", "10.96.0.0/12", "10.96.0.10/32", "198.51.100.0/24", "203.0.113.0/25", "fd00:1b::/120"}},
		{"aggregation Disabled: no LoadBalancer ranges", conf(&disabled), "", nil,
			[]string{"10.100.0.1/32", "10.96.0.0/12", "10.96.0.10/32", "198.51.100.0/24"},
			[]string{"10.100.0.1/32", "10.96.0.0/12", "198.51.100.0/24"},
			[]string{"10.100.0.1/32", "10.96.0.0/12", "10.96.0.10/32", "198.51.100.0/24"}},
		{"route reflector: passes on anything in the IPv4 LoadBalancer entries", conf(&disabled), "1.0.0.1", nil,
			[]string{"10.100.0.1/32", "10.96.0.0/12", "10.96.0.10/32", "198.51.100.0/24"},
			[]string{"10.100.0.1/32", "10.96.0.0/12", "198.51.100.0/24"},
			[]string{"10.100.0.1/32", "10.96.0.0/12", "10.96.0.10/32", "198.51.100.0/24", "203.0.113.0/25", "203.0.113.200/32"}},
		{"excluded node: advertises nothing, still never imports the ranges", conf(nil), "", map[string]string{excludeLBLabel: "true"},
			nil,
			[]string{"10.100.0.1/32", "10.96.0.0/12", "198.51.100.0/24", "203.0.113.0/25", "fd00:1b::/120"},
			nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := RoutingInput{Global: tc.global, Services: []Service{local},
				Identity: Identity{IPv4: netip.MustParseAddr("192.0.2.11"), IPv6: netip.MustParseAddr("fd00::11"),
					ClusterID: tc.clusterID, Labels: tc.labels}}
			var adverts []string
			for _, a := range Adverts(in) {
				adverts = append(adverts, a.Prefix.String())
			}
			slices.Sort(adverts)
			if !slices.Equal(adverts, tc.adverts) {
				t.Errorf("adverts %v, want %v", adverts, tc.adverts)
			}
			if got := strs(in.serviceCIDRs()); !slices.Equal(got, tc.kernelReject) {
				t.Errorf("kernel reject %v, want %v", got, tc.kernelReject)
			}
			if got := strs(Filter(in, nil, nil, nil).Services); !slices.Equal(got, tc.exportAccept) {
				t.Errorf("export accept %v, want %v", got, tc.exportAccept)
			}
		})
	}
	// A learned route inside a range is not imported; a learned per-service
	// /32 of a single-address entry is.
	in := RoutingInput{Global: conf(nil), Identity: Identity{IPv4: netip.MustParseAddr("192.0.2.11")}}
	learned := []Learned{
		{Prefix: netip.MustParsePrefix("10.96.0.20/32"), NextHop: netip.MustParseAddr("192.0.2.12")},
		{Prefix: netip.MustParsePrefix("203.0.113.200/32"), NextHop: netip.MustParseAddr("192.0.2.12")},
	}
	var got []string
	for _, r := range KernelRoutes(learned, in, nil) {
		got = append(got, r.Dst.String())
	}
	if !slices.Equal(got, []string{"203.0.113.200/32"}) {
		t.Errorf("kernel routes %v, want [203.0.113.200/32]", got)
	}
}

// birdPrefixes are the prefixes BIRD learned over its protocol proto.
func birdPrefixes(t *testing.T, b *bird, proto string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(b.ctl(t, "show", "route", "protocol", proto), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "/") {
			out = append(out, f[0])
		}
	}
	slices.Sort(out)
	return out
}

// TestBIRDServiceAdvertisement: with serviceClusterIPs, serviceExternalIPs
// and serviceLoadBalancerIPs set, every node advertises the ranges, and
// the nodes with a ready endpoint of an externalTrafficPolicy Local
// Service its addresses one by one; a Cluster LoadBalancer whose address
// is a single-address entry is advertised by every node. The Services and
// EndpointSlices come from a real kube-apiserver (the test writes the
// slices, as the endpoint-slice controller would); the ToR is BIRD. When
// the endpoint moves to the other node, so do the routes; a not-ready
// endpoint and a deleted Service take them away.
func TestBIRDServiceAdvertisement(t *testing.T) {
	kube := kubetest.Start(t)
	f := newFabric(t)
	needBIRD(t)
	f.apply(
		poolObj("pool", "10.244.0.0/16"),
		bgpConfigObj("default", func(s *api.BGPConfigurationSpec) {
			// No mesh: each node's own routes reach the ToR only from it.
			// (With the mesh, a node passes on to an eBGP peer, next hop
			// itself, the per-service routes it learned from the others,
			// as Calico's BIRD does: see TestServiceRanges.)
			s.NodeToNodeMeshEnabled = ptr(false)
			s.ServiceClusterIPs = []api.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}}
			s.ServiceExternalIPs = []api.ServiceExternalIPBlock{{CIDR: "198.51.100.0/24"}}
			s.ServiceLoadBalancerIPs = []api.ServiceLoadBalancerIPBlock{{CIDR: "203.0.113.0/25"}, {CIDR: "203.0.113.200/32"}}
		}),
		bgpPeerObj("tor", api.BGPPeerSpec{PeerIP: "192.0.2.1", ASNumber: 65000}),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := kube.Client
	svc := func(name string, typ corev1.ServiceType, etp corev1.ServiceExternalTrafficPolicy, ext []string, ingress string) *corev1.Service {
		t.Helper()
		s, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: typ, ExternalTrafficPolicy: etp, ExternalIPs: ext,
				Ports: []corev1.ServicePort{{Port: 80}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ingress != "" {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ingress}}
			if s, err = cs.CoreV1().Services("default").UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	ready := true
	slice := func(svc, node, addr string) *discoveryv1.EndpointSlice {
		t.Helper()
		es, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: svc + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr}, NodeName: &node,
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	localSvc := svc("local", corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, []string{"198.51.100.5"}, "203.0.113.5")
	clusterSvc := svc("cluster", corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyCluster, nil, "203.0.113.200")
	plainSvc := svc("plain", corev1.ServiceTypeClusterIP, "", nil, "")
	localSlice := slice("local", "n1", "10.244.1.5")
	slice("cluster", "n2", "10.244.2.5")
	slice("plain", "n1", "10.244.1.6")

	tor := f.host("tor", "192.0.2.1")
	h1, h2 := f.host("n1", "192.0.2.11"), f.host("n2", "192.0.2.12")
	// The agents in the nodes' namespaces reach the API server at its own
	// address, so that they use the unchanged kubeconfig.
	kube.RelayInto(t, "/var/run/netns/"+h1.ns)
	kube.RelayInto(t, "/var/run/netns/"+h2.ns)
	b := f.bird(tor, `
log stderr all;
router id 192.0.2.1;
protocol device { }
template bgp node {
  local 192.0.2.1 as 65000;
  ipv4 { import all; export none; };
}
`+birdNeighbors(h1, h2))
	f.agent(h1, "n1", "--kubeconfig="+kube.Kubeconfig)
	f.agent(h2, "n2", "--kubeconfig="+kube.Kubeconfig)
	b.waitEstablished(t, 60*time.Second, "n1", "n2")

	// The single-address LoadBalancer entry is not advertised as a range.
	ranges := []string{"10.96.0.0/12", "198.51.100.0/24", "203.0.113.0/25"}
	clusterRoutes := []string{clusterSvc.Spec.ClusterIP + "/32", "203.0.113.200/32"}
	localRoutes := []string{localSvc.Spec.ClusterIP + "/32", "198.51.100.5/32", "203.0.113.5/32"}
	sorted := func(ls ...[]string) []string {
		out := slices.Concat(ls...)
		slices.Sort(out)
		return out
	}
	waitAdverts := func(what string, want map[string][]string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ok := true
			got := map[string][]string{}
			for proto, w := range want {
				got[proto] = birdPrefixes(t, b, proto)
				ok = ok && slices.Equal(got[proto], w)
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: BIRD learned %v, want %v (%s is the plain ClusterIP service, never advertised)", what, got, want, plainSvc.Spec.ClusterIP)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitAdverts("endpoint on n1", map[string][]string{
		"n1": sorted(ranges, clusterRoutes, localRoutes),
		"n2": sorted(ranges, clusterRoutes),
	})

	// The endpoint moves to n2: n1 withdraws the Local service's routes
	// and n2 advertises them.
	node := "n2"
	localSlice.Endpoints[0].NodeName = &node
	localSlice, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, localSlice, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitAdverts("endpoint moved to n2", map[string][]string{
		"n1": sorted(ranges, clusterRoutes),
		"n2": sorted(ranges, clusterRoutes, localRoutes),
	})

	// Not ready: nobody advertises the Local service.
	notReady := false
	localSlice.Endpoints[0].Conditions.Ready = &notReady
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, localSlice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAdverts("endpoint not ready", map[string][]string{
		"n1": sorted(ranges, clusterRoutes),
		"n2": sorted(ranges, clusterRoutes),
	})

	// The Cluster service goes: both nodes withdraw its addresses.
	if err := cs.CoreV1().Services("default").Delete(ctx, "cluster", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAdverts("Cluster service deleted", map[string][]string{"n1": ranges, "n2": ranges})
}
