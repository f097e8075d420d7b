package controllers

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/projectcalico/calico-node/bgp"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/kube"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/ipamkv"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

func lbService(name string, mod func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps", UID: types.UID("uid-" + name)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{{Port: 80}}}}
	if mod != nil {
		mod(s)
	}
	return s
}

func withClass(c string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.LoadBalancerClass = &c }
}

func withAnnotation(k, v string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Annotations = map[string]string{k: v} }
}

func TestLBManaged(t *testing.T) {
	clusterIP := func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }
	tests := []struct {
		name      string
		svc       *corev1.Service
		all, reqd bool // managed with AllServices, with RequestedServicesOnly
		warn      bool // RequestedServicesOnly warns
	}{
		{"plain LoadBalancer", lbService("a", nil), true, false, false},
		{"class calico", lbService("a", withClass("calico")), true, true, false},
		{"other class", lbService("a", withClass("example.com/lb")), false, false, false},
		{"annotated", lbService("a", withAnnotation(AnnotationLoadBalancerIPs, `["192.0.2.1"]`)), true, true, false},
		{"pool annotation", lbService("a", withAnnotation(AnnotationIPv6Pools, `["fd00::/120"]`)), true, true, false},
		{"annotated, other class", lbService("a", func(s *corev1.Service) {
			withAnnotation(AnnotationIPv4Pools, `["lb"]`)(s)
			withClass("example.com/lb")(s)
		}), false, false, true},
		{"ClusterIP", lbService("a", clusterIP), false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := lbManaged(tc.svc, api.AllServices); got != tc.all {
				t.Errorf("AllServices: managed %v, want %v", got, tc.all)
			}
			got, warn := lbManaged(tc.svc, api.RequestedServicesOnly)
			if got != tc.reqd || (warn != "") != tc.warn {
				t.Errorf("RequestedServicesOnly: managed %v warn %q, want %v (warning %v)", got, warn, tc.reqd, tc.warn)
			}
		})
	}
}

func TestLBHandle(t *testing.T) {
	a, b := lbService("web", nil), lbService("web", nil)
	b.UID = "another-uid"
	ha, hb := lbHandle(a), lbHandle(b)
	if !strings.HasPrefix(ha, "lb-") || strings.ContainsAny(ha[3:], "-_.") || len(ha) > 3+43 {
		t.Errorf("handle %q: want lb- and base64url without -_.", ha)
	}
	if ha == hb {
		t.Errorf("a Service created again under its name (new UID) has the handle %q of the old one", ha)
	}
	if lbHandle(a) != ha {
		t.Error("handle not stable")
	}
}

func TestParseLBRequest(t *testing.T) {
	pools := []api.Pool{{Name: "lb4", CIDR: netip.MustParsePrefix("192.0.2.0/24")}, {Name: "lb6", CIDR: netip.MustParsePrefix("fd00:50::/120")}}
	tests := []struct {
		name    string
		ann     map[string]string
		want    lbRequest
		wantErr string
	}{
		{"none", nil, lbRequest{}, ""},
		{"addresses", map[string]string{AnnotationLoadBalancerIPs: `["192.0.2.9","fd00:50::9"]`},
			lbRequest{ips: []netip.Addr{netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("fd00:50::9")}}, ""},
		{"pools by name and CIDR", map[string]string{AnnotationIPv4Pools: `["lb4"]`, AnnotationIPv6Pools: `["fd00:50::1/120"]`},
			lbRequest{pools4: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, pools6: []netip.Prefix{netip.MustParsePrefix("fd00:50::/120")}}, ""},
		{"two IPv4 addresses", map[string]string{AnnotationLoadBalancerIPs: `["192.0.2.9","192.0.2.10"]`}, lbRequest{},
			"at max only one ipv4 and one ipv6 address can be specified. Received 2 ipv4 and 0 ipv6 addresses"},
		{"not an address", map[string]string{AnnotationLoadBalancerIPs: `["nope"]`}, lbRequest{}, "could not parse nope as a valid IP address"},
		{"not JSON", map[string]string{AnnotationLoadBalancerIPs: `192.0.2.9`}, lbRequest{}, "not a JSON list"},
		{"unknown pool", map[string]string{AnnotationIPv4Pools: `["workload"]`}, lbRequest{}, `error parsing pool "workload"`},
		{"IPv6 pool in the IPv4 annotation", map[string]string{AnnotationIPv4Pools: `["lb6"]`}, lbRequest{}, `"fd00:50::" isn't a IPv4 address`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLBRequest(tc.ann, pools)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.ips, tc.want.ips) || !slices.Equal(got.pools4, tc.want.pools4) || !slices.Equal(got.pools6, tc.want.pools6) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPlanLB(t *testing.T) {
	manual := api.Pool{Name: "manual", CIDR: netip.MustParsePrefix("198.51.100.0/24"), AssignmentMode: api.AssignmentModeManual}
	auto := api.Pool{Name: "auto", CIDR: netip.MustParsePrefix("192.0.2.0/24"), AssignmentMode: api.AssignmentModeAutomatic}
	pools := []api.Pool{manual, auto}
	a := netip.MustParseAddr
	dual := func(s *corev1.Service) {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	tests := []struct {
		name string
		svc  *corev1.Service
		req  lbRequest
		have []netip.Addr
		want lbPlan
	}{
		{"new IPv4 service", lbService("s", nil), lbRequest{}, nil, lbPlan{auto4: true}},
		{"new dual-stack service", lbService("s", dual), lbRequest{}, nil, lbPlan{auto4: true, auto6: true}},
		{"dual stack, IPv4 there", lbService("s", dual), lbRequest{}, []netip.Addr{a("192.0.2.1")}, lbPlan{auto6: true}},
		{"served", lbService("s", nil), lbRequest{}, []netip.Addr{a("192.0.2.1")}, lbPlan{}},
		{"back to single stack", lbService("s", nil), lbRequest{}, []netip.Addr{a("192.0.2.1"), a("fd00::1")}, lbPlan{release: []netip.Addr{a("fd00::1")}}},
		{"two of a family", lbService("s", nil), lbRequest{}, []netip.Addr{a("192.0.2.1"), a("192.0.2.2")}, lbPlan{release: []netip.Addr{a("192.0.2.2")}}},
		{"manual pool no longer named", lbService("s", nil), lbRequest{}, []netip.Addr{a("198.51.100.4")},
			lbPlan{release: []netip.Addr{a("198.51.100.4")}, auto4: true}},
		{"manual pool named", lbService("s", nil), lbRequest{pools4: []netip.Prefix{manual.CIDR}}, []netip.Addr{a("198.51.100.4")}, lbPlan{}},
		{"pool annotation changed", lbService("s", nil), lbRequest{pools4: []netip.Prefix{manual.CIDR}}, []netip.Addr{a("192.0.2.1")},
			lbPlan{release: []netip.Addr{a("192.0.2.1")}, auto4: true}},
		{"requested address", lbService("s", nil), lbRequest{ips: []netip.Addr{a("192.0.2.50")}}, []netip.Addr{a("192.0.2.1")},
			lbPlan{release: []netip.Addr{a("192.0.2.1")}, assign: []netip.Addr{a("192.0.2.50")}}},
		{"requested address held", lbService("s", nil), lbRequest{ips: []netip.Addr{a("192.0.2.50")}}, []netip.Addr{a("192.0.2.50")}, lbPlan{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := planLB(tc.svc, tc.req, tc.have, pools)
			if !slices.Equal(got.release, tc.want.release) || !slices.Equal(got.assign, tc.want.assign) || got.auto4 != tc.want.auto4 || got.auto6 != tc.want.auto6 {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestLoadBalancer runs the LoadBalancer controller against a real
// kube-apiserver on both datastores.
func TestLoadBalancer(t *testing.T) {
	for _, ds := range []struct {
		name string
		env  func(*testing.T) *env
	}{{"etcd", newEnv}, {"kdd", newKDDEnv}} {
		t.Run(ds.name, func(t *testing.T) { testLoadBalancer(t, ds.env(t)) })
	}
}

func lbPool(name, cidr string, mode api.AssignmentMode) *api.IPPool {
	p := &api.IPPool{}
	p.Kind, p.APIVersion, p.Name = "IPPool", api.GroupVersion, name
	p.Spec.CIDR, p.Spec.BlockSize = cidr, 28
	p.Spec.AllowedUses = []api.IPPoolAllowedUse{api.IPPoolAllowedUseLoadBalancer}
	p.Spec.AssignmentMode = &mode
	return p
}

func testLoadBalancer(t *testing.T, e *env) {
	// Instances started in subtests live until the end of this test.
	top := t
	cs := e.kube.Client
	e.create(t, ippool("10.40.0.0/16"), lbPool("lb", "192.0.2.0/24", api.AssignmentModeAutomatic),
		lbPool("lb-manual", "198.51.100.0/24", api.AssignmentModeManual))
	e.kube.CreateNamespace(t, "apps", nil)
	create := func(name string, mod func(*corev1.Service)) {
		t.Helper()
		s := lbService(name, mod)
		s.UID = ""
		if _, err := cs.CoreV1().Services("apps").Create(e.ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create service %s: %v", name, err)
		}
	}
	get := func(name string) *corev1.Service {
		t.Helper()
		s, err := cs.CoreV1().Services("apps").Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get service %s: %v", name, err)
		}
		return s
	}
	ingress := func(name string) []string {
		t.Helper()
		var out []string
		for _, i := range get(name).Status.LoadBalancer.Ingress {
			out = append(out, i.IP)
		}
		return out
	}
	// served waits for one ingress address inside within, held in IPAM by
	// the Service's handle in a block of the virtual host, and returns it.
	served := func(name, within string) netip.Addr {
		t.Helper()
		var ip netip.Addr
		eventually(t, 30*time.Second, func() error {
			ing := ingress(name)
			if len(ing) != 1 {
				return fmt.Errorf("service %s ingress %v, want one address", name, ing)
			}
			a, err := netip.ParseAddr(ing[0])
			if err != nil || !netip.MustParsePrefix(within).Contains(a) {
				return fmt.Errorf("service %s ingress %v, want an address in %s", name, ing, within)
			}
			ip = a
			return nil
		})
		h, err := e.ipam.Lookup(e.ctx, ip)
		if err != nil {
			t.Fatalf("%s of service %s not in IPAM: %v", ip, name, err)
		}
		svc := get(name)
		if h.Handle != lbHandle(svc) || h.Affinity != "virtual:load-balancer" || h.Attrs["service"] != name ||
			h.Attrs["namespace"] != "apps" || h.Attrs["type"] != "LoadBalancer" || h.Attrs["node"] != "" {
			t.Errorf("%s in IPAM: handle %q affinity %q attrs %v; want handle %q in a virtual:load-balancer block with Calico's attributes",
				ip, h.Handle, h.Affinity, h.Attrs, lbHandle(svc))
		}
		return ip
	}
	unserved := func(name string) func() error {
		return func() error {
			if ing := ingress(name); len(ing) > 0 {
				return nil
			}
			return fmt.Errorf("service %s has no ingress", name)
		}
	}

	create("web", nil)
	create("fixed", withAnnotation(AnnotationLoadBalancerIPs, `["192.0.2.200"]`))
	create("manual", withAnnotation(AnnotationIPv4Pools, `["lb-manual"]`))
	create("other", withClass("example.com/lb"))
	create("internal", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })
	// Local traffic policy: its node advertises its /32 (below).
	create("local", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal })

	cfg := e.fastConfig("lb-1", LoadBalancer)
	in := e.start(t, cfg)

	var web, fixed, manual, local netip.Addr
	t.Run("addresses from the LoadBalancer pools", func(t *testing.T) {
		web = served("web", "192.0.2.0/24")
		fixed = served("fixed", "192.0.2.200/32")
		manual = served("manual", "198.51.100.0/24")
		local = served("local", "192.0.2.0/24")
		never(t, 2*time.Second, "a Service of another class or type got an address", func() error {
			if err := unserved("other")(); err == nil {
				return nil
			}
			return unserved("internal")()
		})
	})

	t.Run("the address is advertised by BGP", func(t *testing.T) {
		// An endpoint of the Local service on n1: n1's speaker advertises
		// the assigned address as a /32 when serviceLoadBalancerIPs
		// covers it, from the status this controller wrote.
		ready := true
		node := "n1"
		if _, err := cs.DiscoveryV1().EndpointSlices("apps").Create(e.ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "local-1", Labels: map[string]string{discoveryv1.LabelServiceName: "local"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.40.0.5"}, NodeName: &node,
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		kc, err := kube.New(e.kube.Config)
		if err != nil {
			t.Fatal(err)
		}
		w := bgp.NewServiceWatcher(kc, node, slog.New(slog.DiscardHandler))
		w.Enable()
		go w.Run(e.ctx) //nolint:errcheck // ends with the test's context
		global := &api.BGPConfiguration{}
		global.Spec.ServiceLoadBalancerIPs = []api.ServiceLoadBalancerIPBlock{{CIDR: "192.0.2.0/24"}}
		id := bgp.Identity{Node: node, IPv4: netip.MustParseAddr("10.0.0.1"), AS: 64512}
		want := netip.PrefixFrom(local, 32)
		eventually(t, 30*time.Second, func() error {
			svcs, ok := w.Services()
			if !ok {
				return fmt.Errorf("service watcher not in sync")
			}
			var got []netip.Prefix
			for _, a := range bgp.Adverts(bgp.RoutingInput{Identity: id, Global: global, Services: svcs}) {
				got = append(got, a.Prefix)
			}
			if !slices.Contains(got, want) {
				return fmt.Errorf("adverts %v lack %s", got, want)
			}
			return nil
		})
	})

	t.Run("a restart keeps the assignments", func(t *testing.T) {
		in.stop(t)
		before, err := e.ipam.LoadBalancerAllocations(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		in = e.start(top, e.fastConfig("lb-2", LoadBalancer))
		// Something to wait for: a new Service served means the new
		// leader's first full pass is done.
		create("after-restart", nil)
		served("after-restart", "192.0.2.0/24")
		for name, ip := range map[string]netip.Addr{"web": web, "fixed": fixed, "manual": manual, "local": local} {
			if got := ingress(name); !slices.Equal(got, []string{ip.String()}) {
				t.Errorf("service %s after restart: ingress %v, want [%s]", name, got, ip)
			}
		}
		after, err := e.ipam.LoadBalancerAllocations(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before)+1 {
			t.Errorf("LoadBalancer allocations %d before the restart, %d after (one new Service): want no others", len(before), len(after))
		}
	})

	t.Run("type change and delete release the address", func(t *testing.T) {
		s := get("web")
		s.Spec.Type = corev1.ServiceTypeClusterIP
		s.Spec.ExternalTrafficPolicy = ""
		if _, err := cs.CoreV1().Services("apps").Update(e.ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, e.released(web))
		if err := cs.CoreV1().Services("apps").Delete(e.ctx, "fixed", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, e.released(fixed))
	})

	t.Run("a Service deleted while no controller ran", func(t *testing.T) {
		in.stop(t)
		if err := cs.CoreV1().Services("apps").Delete(e.ctx, "manual", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		in = e.start(top, e.fastConfig("lb-3", LoadBalancer))
		eventually(t, 30*time.Second, e.released(manual))
	})

	t.Run("an allocation whose handle is gone is released with its Service", func(t *testing.T) {
		// The block still holds the address under the handle, the handle
		// object is gone (on KDD an interrupted write can leave that): a
		// release by handle alone finds nothing to release.
		create("orphan", nil)
		ip := served("orphan", "192.0.2.0/24")
		svc := get("orphan")
		in.stop(t)
		if res, err := e.kv.Txn(e.ctx, datastore.Txn{Ops: []datastore.Op{{Type: datastore.OpDelete, Key: ipamkv.HandleKey(lbHandle(svc))}}}); err != nil || !res.Succeeded {
			t.Fatalf("delete the handle: %v %+v", err, res)
		}
		if err := cs.CoreV1().Services("apps").Delete(e.ctx, "orphan", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		in = e.start(top, e.fastConfig("lb-4", LoadBalancer))
		eventually(t, 30*time.Second, e.released(ip))
	})

	t.Run("a Service waiting for its pool is served when the pool comes", func(t *testing.T) {
		create("late", withAnnotation(AnnotationIPv4Pools, `["198.18.0.0/24"]`))
		eventually(t, 30*time.Second, func() error {
			if !e.logged("level=WARN", `msg="LoadBalancer service not served"`, "service=apps/late") {
				return fmt.Errorf("no warning that apps/late waits for its pool")
			}
			return nil
		})
		e.create(t, lbPool("lb-late", "198.18.0.0/24", api.AssignmentModeAutomatic))
		served("late", "198.18.0.0/24")
	})

	t.Run("RequestedServicesOnly", func(t *testing.T) {
		e.create(t, kcc(func(s *api.KubeControllersConfigurationSpec) {
			s.Controllers.LoadBalancer = &api.LoadBalancerControllerConfig{AssignIPs: api.RequestedServicesOnly}
		}))
		// The unannotated Services are not Calico's any more.
		eventually(t, 30*time.Second, e.released(local))
		eventually(t, 30*time.Second, func() error {
			if ing := ingress("local"); len(ing) > 0 {
				return fmt.Errorf("service local ingress %v after RequestedServicesOnly, want none", ing)
			}
			return nil
		})
		create("plain", nil)
		create("asked", withAnnotation(AnnotationIPv4Pools, `["192.0.2.0/24"]`))
		served("asked", "192.0.2.0/24")
		never(t, 2*time.Second, "an unannotated Service got an address with RequestedServicesOnly", unserved("plain"))
	})

	t.Run("deleting every Service leaves IPAM clean", func(t *testing.T) {
		svcs, err := cs.CoreV1().Services("apps").List(e.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range svcs.Items {
			if err := cs.CoreV1().Services("apps").Delete(e.ctx, s.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, 30*time.Second, func() error {
			allocs, err := e.ipam.LoadBalancerAllocations(e.ctx)
			if err != nil || len(allocs) > 0 {
				return fmt.Errorf("LoadBalancer allocations left: %v (%v)", allocs, err)
			}
			return nil
		})
		r, err := e.ipam.Check(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := r.Problems(); n != 0 {
			t.Errorf("ipam check: %d problems: leaked %v, handles %v", n, r.Leaked(), r.LeakedHandles)
		}
	})
}

// TestLoadBalancerDualStack: a dual-stack Service gets one address of
// each family, both released with it.
func TestLoadBalancerDualStack(t *testing.T) {
	kc := kubetest.Start(t, kubetest.WithAPIServerArgs("--service-cluster-ip-range=10.96.0.0/12,fd00:96::/112"))
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	e := envOn(t, ctx, kc, storetest.Etcd(t, ctx, srv.Endpoints))
	lb6 := lbPool("lb6", "fd00:50::/120", api.AssignmentModeAutomatic)
	lb6.Spec.BlockSize = 124
	e.create(t, lbPool("lb4", "192.0.2.0/24", api.AssignmentModeAutomatic), lb6)
	e.kube.CreateNamespace(t, "apps", nil)
	policy := corev1.IPFamilyPolicyRequireDualStack
	s := lbService("dual", func(s *corev1.Service) {
		s.UID = ""
		s.Spec.IPFamilyPolicy = &policy
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	})
	if _, err := e.kube.Client.CoreV1().Services("apps").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.start(t, e.fastConfig("dual", LoadBalancer))
	var ips []netip.Addr
	eventually(t, 30*time.Second, func() error {
		svc, err := e.kube.Client.CoreV1().Services("apps").Get(ctx, "dual", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ips = ips[:0]
		for _, i := range svc.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(i.IP); err == nil {
				ips = append(ips, a)
			}
		}
		if len(ips) != 2 || !netip.MustParsePrefix("192.0.2.0/24").Contains(ips[0]) || !netip.MustParsePrefix("fd00:50::/120").Contains(ips[1]) {
			return fmt.Errorf("ingress %v, want an IPv4 then an IPv6 LoadBalancer address", svc.Status.LoadBalancer.Ingress)
		}
		return nil
	})
	if err := e.kube.Client.CoreV1().Services("apps").Delete(ctx, "dual", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, a := range ips {
		eventually(t, 30*time.Second, e.released(a))
	}
}
