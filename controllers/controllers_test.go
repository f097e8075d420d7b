package controllers

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy/k8spolicy"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

const deadline = 30 * time.Second

func TestParseEnabled(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"", nil, false},
		{"namespace,serviceaccount,workloadendpoint,policy,node,ipamgc,loadbalancer", All, false},
		{" Node , profile,pod,node", []string{Node, Namespace, WorkloadEndpoint}, false},
		{"namespace,flannelmigration", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseEnabled(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func specJSON(t *testing.T, o api.Object) string {
	t.Helper()
	var spec any
	switch v := o.(type) {
	case *api.Profile:
		spec = v.Spec
	case *api.NetworkPolicy:
		spec = v.Spec
	default:
		t.Fatalf("no spec for %T", o)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// profileIs waits for the profile's spec to have the given JSON.
func (e *env) profileIs(name, want string) func() error {
	return func() error {
		o, err := e.get("Profile", "", name)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(o.(*api.Profile).Spec)
		if string(b) != want {
			return fmt.Errorf("profile %s spec = %s\nwant %s", name, b, want)
		}
		return nil
	}
}

// nsProfile is the profile of a namespace; the API server labels every
// namespace with kubernetes.io/metadata.name.
func nsProfile(name string, labels map[string]string) string {
	l := map[string]string{"pcns.projectcalico.org/name": name, "pcns.kubernetes.io/metadata.name": name}
	for k, v := range labels {
		l["pcns."+k] = v
	}
	b, _ := json.Marshal(l)
	return `{"ingress":[{"action":"Allow","source":{},"destination":{}}],"egress":[{"action":"Allow","source":{},"destination":{}}],"labelsToApply":` + string(b) + `}`
}

func saProfile(name string, labels map[string]string) string {
	l := map[string]string{"pcsa.projectcalico.org/name": name}
	for k, v := range labels {
		l["pcsa."+k] = v
	}
	b, _ := json.Marshal(l)
	return `{"labelsToApply":` + string(b) + `}`
}

// TestControllers runs every controller against one control plane and
// datastore: state that exists before they start is reconciled, then
// changes are followed.
func TestControllers(t *testing.T) {
	e := newEnv(t)
	k := e.kube.Client

	// Before the controllers start: Kubernetes objects without Calico
	// counterparts, and Calico objects whose Kubernetes objects are gone.
	e.kube.CreateNamespace(t, "early", map[string]string{"team": "a"})
	stale := newProfile(NamespaceProfilePrefix + "ghost")
	staleSA := newProfile(ServiceAccountProfilePrefix + "ghost.sa.with.dots")
	stalePolicy := &api.NetworkPolicy{}
	stalePolicy.Kind, stalePolicy.APIVersion = "NetworkPolicy", api.GroupVersion
	stalePolicy.Name, stalePolicy.Namespace = k8spolicy.Name("removed"), "early"
	stalePolicy.Spec.Selector = "all()"
	e.create(t, stale, staleSA, stalePolicy)
	e.pod(t, "early", "web", "node-a", map[string]string{"app": "web"})
	e.create(t, endpoint(t, "early", "node-a", "web", "c1", map[string]string{"app": "old"}, "10.0.0.1/32"))

	e.start(t, e.fastConfig("only", All...))

	t.Run("namespace", func(t *testing.T) {
		eventually(t, deadline, e.profileIs("kns.early", nsProfile("early", map[string]string{"team": "a"})))
		eventually(t, deadline, e.gone("Profile", "", "kns.ghost"))

		e.kube.CreateNamespace(t, "ns1", map[string]string{"env": "prod"})
		eventually(t, deadline, e.profileIs("kns.ns1", nsProfile("ns1", map[string]string{"env": "prod"})))

		ns, err := k.CoreV1().Namespaces().Get(e.ctx, "ns1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ns.Labels = map[string]string{"env": "dev", "tier": "web"}
		if _, err := k.CoreV1().Namespaces().Update(e.ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, deadline, e.profileIs("kns.ns1", nsProfile("ns1", map[string]string{"env": "dev", "tier": "web"})))

		if err := k.CoreV1().Namespaces().Delete(e.ctx, "ns1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, deadline, e.gone("Profile", "", "kns.ns1"))
	})

	t.Run("serviceaccount", func(t *testing.T) {
		eventually(t, deadline, e.profileIs("ksa.early.default", saProfile("default", nil)))
		eventually(t, deadline, e.gone("Profile", "", "ksa.ghost.sa.with.dots"))

		sa, err := k.CoreV1().ServiceAccounts("early").Create(e.ctx, &corev1.ServiceAccount{
			ObjectMeta: metav1.ObjectMeta{Name: "builder.v2", Labels: map[string]string{"role": "ci"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, deadline, e.profileIs("ksa.early.builder.v2", saProfile("builder.v2", map[string]string{"role": "ci"})))

		sa.Labels["role"] = "cd"
		if _, err := k.CoreV1().ServiceAccounts("early").Update(e.ctx, sa, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, deadline, e.profileIs("ksa.early.builder.v2", saProfile("builder.v2", map[string]string{"role": "cd"})))

		if err := k.CoreV1().ServiceAccounts("early").Delete(e.ctx, "builder.v2", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, deadline, e.gone("Profile", "", "ksa.early.builder.v2"))
	})

	t.Run("workloadendpoint", func(t *testing.T) {
		name := endpoint(t, "early", "node-a", "web", "c1", nil).Name
		wantLabels := func(extra map[string]string) func() error {
			want := map[string]string{
				"projectcalico.org/namespace":      "early",
				"projectcalico.org/orchestrator":   "k8s",
				"projectcalico.org/serviceaccount": "default",
			}
			maps.Copy(want, extra)
			return func() error {
				o, err := e.get("WorkloadEndpoint", "early", name)
				if err != nil {
					return err
				}
				if got := o.Meta().Labels; !maps.Equal(got, want) {
					return fmt.Errorf("endpoint labels = %v, want %v", got, want)
				}
				return nil
			}
		}
		// The stale labels written before start are corrected.
		eventually(t, deadline, wantLabels(map[string]string{"app": "web"}))

		pod, err := k.CoreV1().Pods("early").Get(e.ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Labels = map[string]string{"app": "web", "version": "2"}
		if _, err := k.CoreV1().Pods("early").Update(e.ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, deadline, wantLabels(map[string]string{"app": "web", "version": "2"}))
		// The rest of the endpoint is the plugin's and stays as written.
		o, _ := e.get("WorkloadEndpoint", "early", name)
		if w := o.(*api.WorkloadEndpoint); w.Spec.IPNetworks[0] != "10.0.0.1/32" || w.Spec.ContainerID != "c1" {
			t.Errorf("endpoint spec changed: %+v", w.Spec)
		}
	})

	t.Run("policy", func(t *testing.T) {
		eventually(t, deadline, e.gone("NetworkPolicy", "early", k8spolicy.Name("removed")))

		port := intstr.FromInt32(80)
		np := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "allow-web", Namespace: "early"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
				}},
			},
		}
		np, err := k.NetworkingV1().NetworkPolicies("early").Create(e.ctx, np, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		policyIs := func(np *networkingv1.NetworkPolicy) func() error {
			want, _ := k8spolicy.Convert(np)
			want.Default()
			wantJSON := specJSON(t, want)
			return func() error {
				o, err := e.get("NetworkPolicy", "early", k8spolicy.Name(np.Name))
				if err != nil {
					return err
				}
				if got := specJSON(t, o); got != wantJSON {
					return fmt.Errorf("policy spec = %s\nwant %s", got, wantJSON)
				}
				return nil
			}
		}
		eventually(t, deadline, policyIs(np))
		o, _ := e.get("NetworkPolicy", "early", "knp.default.allow-web")
		if s := o.(*api.NetworkPolicy).Spec; s.Selector != "projectcalico.org/orchestrator == 'k8s' && app == 'web'" {
			t.Errorf("selector = %q", s.Selector)
		}

		np.Spec.Ingress[0].From = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.0.0/16"}}}
		np, err = k.NetworkingV1().NetworkPolicies("early").Update(e.ctx, np, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, deadline, policyIs(np))

		if err := k.NetworkingV1().NetworkPolicies("early").Delete(e.ctx, "allow-web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, deadline, e.gone("NetworkPolicy", "early", "knp.default.allow-web"))
	})

	t.Run("node", func(t *testing.T) {
		testNode(t, e)
	})

	t.Run("ipamgc", func(t *testing.T) {
		testIPAMGC(t, e)
	})
}

// testNode: labels follow the Kubernetes node; a deleted node's Calico
// side goes once its last pod is gone.
func testNode(t *testing.T, e *env) {
	k := e.kube.Client
	e.create(t, ippool("10.20.0.0/16"))
	kn, err := k.CoreV1().Nodes().Create(e.ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "k8s-node-b", Labels: map[string]string{"zone": "z1"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A label set with calicoctl, which the sync must keep.
	e.create(t, calicoNode("calico-b", "k8s-node-b", map[string]string{"rack": "r7"}))
	// A Calico node Kubernetes does not know: never touched.
	e.create(t, calicoNode("bare-metal", "", nil))

	labelsAre := func(want map[string]string) func() error {
		return func() error {
			o, err := e.get("Node", "", "calico-b")
			if err != nil {
				return err
			}
			if got := o.Meta().Labels; !maps.Equal(got, want) {
				return fmt.Errorf("calico node labels = %v, want %v", got, want)
			}
			return nil
		}
	}
	eventually(t, deadline, labelsAre(map[string]string{"rack": "r7", "zone": "z1"}))
	kn.Labels = map[string]string{"disk": "ssd"}
	if _, err := k.CoreV1().Nodes().Update(e.ctx, kn, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, deadline, labelsAre(map[string]string{"rack": "r7", "disk": "ssd"}))

	// A pod on the node with its address and endpoint; a BGP peer and the
	// node's own Felix configuration.
	e.kube.CreateNamespace(t, "apps", nil)
	e.pod(t, "apps", "db", "k8s-node-b", nil)
	ip := e.allocate(t, "calico-b", "k8s-pod-network.db1", "apps", "db")
	w := endpoint(t, "apps", "calico-b", "db", "db1", nil, ip.String()+"/32")
	peer := &api.BGPPeer{}
	peer.Kind, peer.APIVersion, peer.Name = "BGPPeer", api.GroupVersion, "tor-b"
	peer.Spec.Node, peer.Spec.PeerIP = "calico-b", "192.0.2.1"
	asn := api.ASNumber(64512)
	peer.Spec.ASNumber = asn
	fc := &api.FelixConfiguration{}
	fc.Kind, fc.APIVersion, fc.Name = "FelixConfiguration", api.GroupVersion, "node.calico-b"
	e.create(t, w, peer, fc)
	blocks, err := e.ipam.AffineBlocks(e.ctx, "calico-b")
	if err != nil || len(blocks) != 1 {
		t.Fatalf("affine blocks = %v, %v", blocks, err)
	}

	if err := k.CoreV1().Nodes().Delete(e.ctx, "k8s-node-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pod is still in the API: nothing is removed.
	never(t, 3*time.Second, "calico node removed while its pod exists", e.gone("Node", "", "calico-b"))
	if err := e.allocated(ip)(); err != nil {
		t.Fatalf("address released while its pod exists: %v", err)
	}

	if err := k.CoreV1().Pods("apps").Delete(e.ctx, "db", kubetest.ForceDelete()); err != nil {
		t.Fatal(err)
	}
	eventually(t, deadline, e.gone("Node", "", "calico-b"))
	checkAll(t,
		e.gone("WorkloadEndpoint", "apps", w.Name),
		e.gone("BGPPeer", "", "tor-b"),
		e.gone("FelixConfiguration", "", "node.calico-b"),
		e.released(ip),
	)
	if blocks, err := e.ipam.AffineBlocks(e.ctx, "calico-b"); err != nil || len(blocks) != 0 {
		t.Errorf("affinities left: %v, %v", blocks, err)
	}
	if err := e.exists("Node", "", "bare-metal")(); err != nil {
		t.Errorf("node without a Kubernetes orchRef: %v", err)
	}
	if !strings.Contains(e.logs.String(), "released address of removed node") {
		t.Error("release not logged")
	}
}

// testIPAMGC: only an address whose pod is gone and which no endpoint
// uses is released, after the grace period, and the release is logged.
func testIPAMGC(t *testing.T, e *env) {
	k := e.kube.Client
	kcc := leakGracePeriod(2 * time.Second)
	e.create(t, ippool("10.30.0.0/16"))
	if _, err := k.CoreV1().Nodes().Create(e.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "k8s-node-c"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.create(t, calicoNode("calico-c", "k8s-node-c", nil))
	e.kube.CreateNamespace(t, "gc", nil)

	// Live pod with its endpoint.
	e.pod(t, "gc", "live", "k8s-node-c", nil)
	live := e.allocate(t, "calico-c", "k8s-pod-network.live", "gc", "live")
	e.create(t, endpoint(t, "gc", "calico-c", "live", "live", nil, live.String()+"/32"))
	// Live pod whose endpoint the plugin has not written yet.
	e.pod(t, "gc", "starting", "k8s-node-c", nil)
	starting := e.allocate(t, "calico-c", "k8s-pod-network.starting", "gc", "starting")
	// Pod gone from the API but its endpoint still there (CNI DEL not run).
	ended := e.allocate(t, "calico-c", "k8s-pod-network.ended", "gc", "ended")
	e.create(t, endpoint(t, "gc", "calico-c", "ended", "ended", nil, ended.String()+"/32"))
	// Not a pod's address.
	other := e.allocate(t, "calico-c", "someone-else", "", "")
	// The leak: no pod, no endpoint.
	leaked := e.allocate(t, "calico-c", "k8s-pod-network.leaked", "gc", "leaked")

	// While a migration has the datastore locked nothing is released, for
	// longer than the grace period; the grace period starts again at the
	// unlock.
	locked, unlocked := false, true
	ci := &api.ClusterInformation{}
	ci.Kind, ci.APIVersion, ci.Name = "ClusterInformation", api.GroupVersion, "default"
	ci.Spec.ClusterGUID, ci.Spec.DatastoreReady = "0123456789abcdef0123456789abcdef", &locked
	e.create(t, ci)
	e.create(t, kcc)
	time.Sleep(3 * time.Second)
	if _, err := e.ipam.Lookup(e.ctx, leaked); err != nil {
		t.Fatalf("leaked address %s released while the datastore was locked: %v", leaked, err)
	}
	if !strings.Contains(e.logs.String(), "datastore is locked, skipping IPAM garbage collection") {
		t.Errorf("the locked datastore was not logged:\n%s", e.logs.String())
	}
	o, err := e.store.Get(e.ctx, "ClusterInformation", "", "default")
	if err != nil {
		t.Fatal(err)
	}
	ci = o.(*api.ClusterInformation)
	ci.Spec.DatastoreReady = &unlocked
	if _, err := e.store.Update(e.ctx, ci); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	eventually(t, deadline, e.released(leaked))
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("leak released %s after the unlock, before the 2s grace period", d)
	}
	e.onlyLeakReleased(t, leaked, map[string]netip.Addr{"live": live, "starting": starting, "ended": ended, "other": other})
}

// TestLeaderFailover: of two instances only the lease holder acts; when it
// stops the other takes over, and an instance that loses its lease stops
// acting until it holds it again.
func TestLeaderFailover(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.fastConfig("instance-a", Namespace))
	eventually(t, deadline, e.holder("instance-a"))
	b := e.start(t, e.fastConfig("instance-b", Namespace))

	e.kube.CreateNamespace(t, "first", nil)
	eventually(t, deadline, e.exists("Profile", "", "kns.first"))
	if got := leaderValue(a); got != 1 {
		t.Errorf("instance-a leader gauge = %v, want 1", got)
	}
	if got := leaderValue(b); got != 0 {
		t.Errorf("instance-b leader gauge = %v, want 0 while standing by", got)
	}

	// A stops: it releases the lease and B takes over at once, well
	// before the 2s lease would have expired.
	transitions := e.leaseTransitions(t)
	a.stop(t)
	stopped := time.Now()
	eventually(t, deadline, e.holder("instance-b"))
	took := time.Since(stopped)
	t.Logf("instance-b took over %s after instance-a stopped", took.Round(time.Millisecond))
	if took >= 2*time.Second {
		t.Errorf("instance-b took over %s after instance-a stopped: the lease was not released", took)
	}
	if got := e.leaseTransitions(t); got != transitions+1 {
		t.Errorf("leaseTransitions = %d after the handover, want %d", got, transitions+1)
	}
	e.kube.CreateNamespace(t, "second", nil)
	eventually(t, deadline, e.exists("Profile", "", "kns.second"))

	// Someone else takes the lease: B must stop acting.
	e.stealLease(t, "thief", 8*time.Second)
	eventually(t, deadline, func() error {
		if leaderValue(b) != 0 {
			return fmt.Errorf("instance-b still leading")
		}
		return nil
	})
	e.kube.CreateNamespace(t, "third", nil)
	never(t, 3*time.Second, "profile created while instance-b lost the lease", e.exists("Profile", "", "kns.third"))

	// The stolen lease expires unrenewed; B leads again and catches up.
	eventually(t, deadline, e.holder("instance-b"))
	eventually(t, deadline, e.exists("Profile", "", "kns.third"))
}

func leaderValue(in *instance) float64 { return testutil.ToFloat64(in.c.metrics.leader) }

// holder waits for the lease to name id.
func (e *env) holder(id string) func() error {
	return func() error {
		l, err := e.kube.Client.CoordinationV1().Leases(DefaultLeaseNamespace).Get(e.ctx, "calico-test", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != id {
			return fmt.Errorf("lease holder = %v, want %s", l.Spec.HolderIdentity, id)
		}
		return nil
	}
}

func (e *env) leaseTransitions(t *testing.T) int32 {
	t.Helper()
	l, err := e.kube.Client.CoordinationV1().Leases(DefaultLeaseNamespace).Get(e.ctx, "calico-test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

// stealLease makes the lease name another holder, renewed now, valid for d.
func (e *env) stealLease(t *testing.T, id string, d time.Duration) {
	t.Helper()
	leases := e.kube.Client.CoordinationV1().Leases(DefaultLeaseNamespace)
	eventually(t, deadline, func() error {
		l, err := leases.Get(e.ctx, "calico-test", metav1.GetOptions{})
		if err != nil {
			return err
		}
		secs := int32(d / time.Second)
		now := metav1.NewMicroTime(time.Now())
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}
		_, err = leases.Update(e.ctx, l, metav1.UpdateOptions{})
		return err // a conflict with B's renewal: try again
	})
}
