package kdd

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// coreCluster is a kube-apiserver with Calico's CRDs and a Store on it as
// admin.
type coreCluster struct {
	c   *kubetest.Cluster
	s   *Store
	ctx context.Context
}

func startCore(t *testing.T) *coreCluster {
	t.Helper()
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	c.InstallCalicoCRDs(t)
	s, err := New(ctx, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{Kubeconfig: c.Kubeconfig}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return &coreCluster{c: c, s: s, ctx: ctx}
}

func (cc *coreCluster) kubectlApply(t *testing.T, file string) {
	t.Helper()
	if out, err := cc.c.RunKubectl(nil, "apply", "-f", refPath(file)); err != nil {
		t.Fatalf("kubectl apply %s: %v\n%s", file, err, out)
	}
}

// normalised is obj as JSON without what differs from one cluster to
// another: uid, creationTimestamp and resourceVersion.
func normalised(t *testing.T, obj any) json.RawMessage {
	t.Helper()
	data, ok := obj.(json.RawMessage)
	if !ok {
		var err error
		if data, err = json.Marshal(obj); err != nil {
			t.Fatal(err)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "uid")
		delete(meta, "creationTimestamp")
		delete(meta, "resourceVersion")
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameAsReference compares obj with a reference v3 document, normalised.
func sameAsReference(t *testing.T, what string, obj api.Object, ref json.RawMessage) {
	t.Helper()
	sameJSON(t, what, normalised(t, obj), normalised(t, ref))
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	var de *datastore.Error
	if !errors.Is(err, target) || !errors.As(err, &de) {
		t.Errorf("%s: got %v, want a *datastore.Error matching %q", what, err, target)
	}
}

// TestCoreMappers runs the Node, WorkloadEndpoint and Profile mappings
// against a real kube-apiserver with the reference capture's inputs, and
// compares what the Store shows and what lands in Kubernetes with what
// real Calico v3.31 showed and wrote.
func TestCoreMappers(t *testing.T) {
	cc := startCore(t)
	t.Run("Node", func(t *testing.T) { testNode(t, cc) })
	t.Run("WorkloadEndpoint", func(t *testing.T) { testEndpoint(t, cc) })
	t.Run("Profile", func(t *testing.T) { testProfile(t, cc) })
	t.Run("Watch", func(t *testing.T) { testWatch(t, cc) })
}

func (cc *coreCluster) k8sNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := cc.c.Client.CoreV1().Nodes().Get(cc.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// k8sCalicoAnnotations are the projectcalico.org/* annotations of a
// Kubernetes object's annotations.
func k8sCalicoAnnotations(anns map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range anns {
		if strings.HasPrefix(k, "projectcalico.org/") {
			out[k] = v
		}
	}
	return out
}

func testNode(t *testing.T, cc *coreCluster) {
	ctx, s := cc.ctx, cc.s
	cc.kubectlApply(t, "inputs/k8snode.yaml")
	t.Cleanup(func() { _ = cc.c.Client.CoreV1().Nodes().Delete(context.Background(), "node1", metav1.DeleteOptions{}) })

	obj, err := s.Get(ctx, "Node", "", "node1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	sameAsReference(t, "node before Calico", obj, refObject(t, "03-node.v3-before.yaml"))
	k := cc.k8sNode(t, "node1")
	if obj.Meta().UID != string(k.UID) || obj.Meta().ResourceVersion != k.ResourceVersion {
		t.Errorf("uid, resourceVersion = %s, %s; want the Kubernetes Node's %s, %s", obj.Meta().UID, obj.Meta().ResourceVersion, k.UID, k.ResourceVersion)
	}

	// calicoctl apply of the full Node, then of the smaller one: each
	// reads back as Calico showed it, and is stored as Calico stored it;
	// the fields the second drops lose their annotations.
	for _, step := range []struct{ input, v3, k8s string }{
		{"inputs/calinode-full.yaml", "03-node-full.v3.yaml", "03-node-full.k8s.yaml"},
		{"inputs/calinode.yaml", "03-node.v3.yaml", "03-node.k8s.yaml"},
	} {
		out, err := s.Apply(ctx, decodeNode(t, refObject(t, step.input)))
		if err != nil {
			t.Fatalf("Apply %s: %v", step.input, err)
		}
		sameAsReference(t, "node after "+step.input, out, refObject(t, step.v3))
		got, err := s.Get(ctx, "Node", "", "node1")
		if err != nil {
			t.Fatal(err)
		}
		sameAsReference(t, "node read after "+step.input, got, refObject(t, step.v3))
		k := cc.k8sNode(t, "node1")
		if want := calicoAnnotations(t, refObject(t, step.k8s)); !reflect.DeepEqual(k8sCalicoAnnotations(k.Annotations), want) {
			t.Errorf("after %s the Kubernetes Node has Calico annotations\n%v\nwant\n%v", step.input, k8sCalicoAnnotations(k.Annotations), want)
		}
		if k.Annotations["kubectl.kubernetes.io/last-applied-configuration"] == "" {
			t.Errorf("after %s the Node lost its other annotations: %v", step.input, k.Annotations)
		}
		if !reflect.DeepEqual(k.Labels, map[string]string{"kubernetes.io/hostname": "node1", "kubernetes.io/os": "linux"}) {
			t.Errorf("after %s the Node's labels are %v: Calico must not touch them", step.input, k.Labels)
		}
		if got.Meta().ResourceVersion != k.ResourceVersion {
			t.Errorf("resourceVersion %s, want the Kubernetes Node's %s", got.Meta().ResourceVersion, k.ResourceVersion)
		}
	}

	// Writing back what was read changes nothing: the Kubernetes labels it
	// shows are not copied into Calico's.
	read, err := s.Get(ctx, "Node", "", "node1")
	if err != nil {
		t.Fatal(err)
	}
	before := k8sCalicoAnnotations(cc.k8sNode(t, "node1").Annotations)
	if _, err := s.Update(ctx, read); err != nil {
		t.Fatalf("Update of what was read: %v", err)
	}
	if after := k8sCalicoAnnotations(cc.k8sNode(t, "node1").Annotations); !reflect.DeepEqual(after, before) {
		t.Errorf("round trip changed the annotations:\n%v\nto\n%v", before, after)
	}

	// An update is conditional on the resourceVersion it carries.
	if _, err := cc.c.Client.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/bump":"1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	stale := read.(*api.Node)
	stale.Spec.BGP.ASNumber = nil
	_, err = s.Update(ctx, stale)
	wantErr(t, "Update at a stale resourceVersion", err, datastore.ErrConflict)

	// Calico neither creates nor deletes Kubernetes Nodes.
	_, err = s.Create(ctx, decodeNode(t, refObject(t, "inputs/calinode.yaml")))
	wantErr(t, "Create of an existing node", err, datastore.ErrNotSupported)
	other := decodeNode(t, refObject(t, "inputs/calinode.yaml"))
	other.Name = "node2"
	_, err = s.Create(ctx, other)
	wantErr(t, "Create without a Kubernetes Node", err, datastore.ErrNotSupported)
	_, err = s.Apply(ctx, other)
	wantErr(t, "Apply without a Kubernetes Node", err, datastore.ErrNotSupported)
	_, err = s.Update(ctx, other)
	wantErr(t, "Update without a Kubernetes Node", err, datastore.ErrNotFound)
	_, err = s.Delete(ctx, "Node", "", "node1", "")
	wantErr(t, "Delete", err, datastore.ErrNotSupported)
	if got := k8sCalicoAnnotations(cc.k8sNode(t, "node1").Annotations); !reflect.DeepEqual(got, before) {
		t.Errorf("a refused delete changed the annotations to %v", got)
	}

	objs, _, err := s.List(ctx, "Node", "")
	if err != nil || len(objs) != 1 || objs[0].Meta().Name != "node1" {
		t.Errorf("List = %v, %v; want node1", objs, err)
	}
}

// cniStore connects as an identity with exactly the Kubernetes rights
// Calico's CNI plugin has on pods: get, and patch of pods/status.
func (cc *coreCluster) cniStore(t *testing.T) *Store {
	t.Helper()
	ctx, cs := cc.ctx, cc.c.Client
	if _, err := cs.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "calico-cni-plugin"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "calico-cni-plugin"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes", "namespaces"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}},
		},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "calico-cni-plugin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "calico-cni-plugin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "calico-cni-plugin", Namespace: "kube-system"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := cc.c.Token(t, "kube-system", "calico-cni-plugin", time.Hour)
	s, err := New(ctx, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{APIEndpoint: cc.c.URL, CAFile: cc.c.CAFile, Token: token}})
	if err != nil {
		t.Fatalf("New as the CNI plugin: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	// RBAC takes effect through the authorizer's cache: wait for it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := s.Get(ctx, "WorkloadEndpoint", "kube-system", "node1-k8s-nopod-eth0")
		if errors.Is(err, datastore.ErrNotFound) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("CNI identity never got its rights: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (cc *coreCluster) podAnnotations(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	p, err := cc.c.Client.CoreV1().Pods(ns).Get(cc.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Annotations
}

func refAnnotations(t *testing.T, file string) map[string]string {
	t.Helper()
	var o coreObject
	if err := json.Unmarshal(refObject(t, file), &o); err != nil {
		t.Fatal(err)
	}
	return o.Metadata.Annotations
}

// cniEndpoint is the endpoint Calico's CNI plugin writes at ADD for the
// pod whose endpoint it found.
func cniEndpoint(existing *api.WorkloadEndpoint) *api.WorkloadEndpoint {
	ep := *existing
	ep.Spec.ContainerID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	ep.Spec.IPNetworks = []string{"10.244.166.129/32"}
	ep.Spec.MAC = "4e:8d:fa:3e:b3:6c"
	return &ep
}

func testEndpoint(t *testing.T, cc *coreCluster) {
	ctx, s := cc.ctx, cc.s
	cc.kubectlApply(t, "inputs/ns-pod.yaml")
	cc.kubectlApply(t, "inputs/pod.yaml")
	cni := cc.cniStore(t)

	// A second pod whose endpoint name extends web-0's prefix: a prefix
	// lookup by the CNI plugin is one GET of its pod, so it is not seen.
	other := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0-x", Namespace: "demo"},
		Spec:       corev1.PodSpec{NodeName: "node1", ServiceAccountName: "web-sa", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if _, err := cc.c.Client.CoreV1().Pods("demo").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	found, err := cni.ListPrefix(ctx, "WorkloadEndpoint", "demo", "node1-k8s-web--0-")
	if err != nil {
		t.Fatalf("ListPrefix as the CNI plugin (get pods only): %v", err)
	}
	if len(found) != 1 || found[0].Meta().Name != "node1-k8s-web--0-eth0" {
		t.Fatalf("ListPrefix = %v, want web-0's endpoint only", found)
	}
	existing := found[0].(*api.WorkloadEndpoint)
	if len(existing.Spec.IPNetworks) != 0 || existing.Spec.ContainerID != "" {
		t.Errorf("endpoint before ADD has addresses or a container: %+v", existing.Spec)
	}
	all, err := s.ListPrefix(ctx, "WorkloadEndpoint", "demo", "node1-k8s-")
	if err != nil || len(all) != 2 {
		t.Errorf("ListPrefix of the node's endpoints = %v, %v; want web-0's and web-0-x's", all, err)
	}

	// ADD: what Calico's plugin writes, as the plugin.
	ep := cniEndpoint(existing)
	out, err := cni.Update(ctx, ep)
	if err != nil {
		t.Fatalf("CNI write: %v", err)
	}
	if want := refAnnotations(t, "04-pod-after-add.k8s.yaml"); !reflect.DeepEqual(cc.podAnnotations(t, "demo", "web-0"), want) {
		t.Errorf("pod annotations after ADD\n%v\nwant\n%v", cc.podAnnotations(t, "demo", "web-0"), want)
	}
	sameAsReference(t, "endpoint returned by the write", out, refObject(t, "04-wep.after-add.v3.yaml"))
	got, err := s.Get(ctx, "WorkloadEndpoint", "demo", "node1-k8s-web--0-eth0")
	if err != nil {
		t.Fatal(err)
	}
	sameAsReference(t, "endpoint after ADD", got, refObject(t, "04-wep.after-add.v3.yaml"))
	pod, err := cc.c.Client.CoreV1().Pods("demo").Get(ctx, "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta().UID != string(pod.UID) || got.Meta().ResourceVersion != pod.ResourceVersion {
		t.Errorf("endpoint uid, resourceVersion = %s, %s; want the pod's %s, %s", got.Meta().UID, got.Meta().ResourceVersion, pod.UID, pod.ResourceVersion)
	}

	// DEL at a stale revision conflicts; at the current one it empties
	// the address annotations and keeps the container ID.
	_, err = cni.Delete(ctx, "WorkloadEndpoint", "demo", "node1-k8s-web--0-eth0", existing.ResourceVersion)
	wantErr(t, "Delete at a stale resourceVersion", err, datastore.ErrConflict)
	if _, err := cni.Delete(ctx, "WorkloadEndpoint", "demo", "node1-k8s-web--0-eth0", got.Meta().ResourceVersion); err != nil {
		t.Fatalf("CNI delete: %v", err)
	}
	if want := refAnnotations(t, "04-pod-after-del.k8s.yaml"); !reflect.DeepEqual(cc.podAnnotations(t, "demo", "web-0"), want) {
		t.Errorf("pod annotations after DEL\n%v\nwant\n%v", cc.podAnnotations(t, "demo", "web-0"), want)
	}
	got, err = cni.Get(ctx, "WorkloadEndpoint", "demo", "node1-k8s-web--0-eth0")
	if err != nil {
		t.Fatal(err)
	}
	sameAsReference(t, "endpoint after DEL", got, refObject(t, "04-wep.after-del.v3.yaml"))

	// A write is not conditional on the pod's resourceVersion (kubelet
	// rewrites the pod's status during ADD), but it is on its uid.
	if _, err := cc.c.Client.CoreV1().Pods("demo").Patch(ctx, "web-0-x", types.MergePatchType, []byte(`{"metadata":{"labels":{"changed":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	staleX, err := cni.Get(ctx, "WorkloadEndpoint", "demo", "node1-k8s-web--0--x-eth0")
	if err != nil {
		t.Fatal(err)
	}
	x := cniEndpoint(staleX.(*api.WorkloadEndpoint))
	if _, err := cc.c.Client.CoreV1().Pods("demo").Patch(ctx, "web-0-x", types.MergePatchType, []byte(`{"metadata":{"labels":{"changed":"again"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cni.Update(ctx, x); err != nil {
		t.Errorf("write after the pod changed: %v", err)
	}
	x.UID = "00000000-0000-4000-8000-000000000000"
	_, err = cni.Update(ctx, x)
	wantErr(t, "write naming another pod's uid", err, datastore.ErrConflict)
	missing := cniEndpoint(existing)
	missing.Name, missing.Spec.Pod, missing.UID = "node1-k8s-gone-eth0", "gone", ""
	_, err = cni.Create(ctx, missing)
	wantErr(t, "write for a pod that does not exist", err, datastore.ErrNotFound)
	_, err = cni.Get(ctx, "WorkloadEndpoint", "demo", "node1-k8s-gone-eth0")
	wantErr(t, "Get for a pod that does not exist", err, datastore.ErrNotFound)
}

// profileRefs are the reference Profiles by name.
func profileRefs(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	out := map[string]json.RawMessage{}
	for _, raw := range refObjects(t, "05-profiles.v3.yaml") {
		var o coreObject
		if err := json.Unmarshal(raw, &o); err != nil {
			t.Fatal(err)
		}
		out[o.Metadata.Name] = raw
	}
	return out
}

func testProfile(t *testing.T, cc *coreCluster) {
	ctx, s := cc.ctx, cc.s
	cc.kubectlApply(t, "inputs/ns-pod.yaml")
	refs := profileRefs(t)
	// The service-account controller creates demo's "default" a moment
	// after the namespace.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := s.Get(ctx, "Profile", "", "ksa.demo.default")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ksa.demo.default: %v", err)
		}
	}
	objs, _, err := s.List(ctx, "Profile", "")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]api.Object{}
	for _, o := range objs {
		byName[o.Meta().Name] = o
	}
	ns, err := cc.c.Client.CoreV1().Namespaces().Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := cc.c.Client.CoreV1().ServiceAccounts("demo").Get(ctx, "web-sa", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsUID, _ := convertUID(string(ns.UID))
	saUID, _ := convertUID(string(sa.UID))
	for _, tc := range []struct{ name, uid, rv string }{
		{defaultAllowName, "", "1"},
		{"kns.default", "", ""},
		{"kns.demo", nsUID, ns.ResourceVersion + "/"},
		{"ksa.demo.web-sa", saUID, "/" + sa.ResourceVersion},
		{"ksa.demo.default", "", ""},
		{"ksa.default.default", "", ""},
	} {
		for _, how := range []string{"List", "Get"} {
			o := byName[tc.name]
			if how == "Get" {
				if o, err = s.Get(ctx, "Profile", "", tc.name); err != nil {
					t.Errorf("Get %s: %v", tc.name, err)
					continue
				}
			}
			if o == nil {
				t.Errorf("%s: no profile %s in %d", how, tc.name, len(objs))
				continue
			}
			sameAsReference(t, how+" "+tc.name, o, refs[tc.name])
			if tc.uid != "" && o.Meta().UID != tc.uid {
				t.Errorf("%s %s: uid %s, want %s (the Kubernetes uid's bits reversed)", how, tc.name, o.Meta().UID, tc.uid)
			}
			if tc.rv != "" && o.Meta().ResourceVersion != tc.rv {
				t.Errorf("%s %s: resourceVersion %s, want %s", how, tc.name, o.Meta().ResourceVersion, tc.rv)
			}
		}
	}
	for _, name := range []string{"kns.nope", "ksa.demo.nope", "ksa.demo", "other"} {
		_, err := s.Get(ctx, "Profile", "", name)
		wantErr(t, "Get "+name, err, datastore.ErrNotFound)
	}

	// Profiles are read-only.
	p := &api.Profile{TypeMeta: api.TypeMeta{Kind: "Profile", APIVersion: api.GroupVersion}}
	p.Name = "kns.demo"
	for _, write := range []func(context.Context, api.Object) (api.Object, error){s.Create, s.Update, s.Apply} {
		_, err := write(ctx, p)
		wantErr(t, "write of a profile", err, datastore.ErrNotSupported)
	}
	_, err = s.Delete(ctx, "Profile", "", "kns.demo", "")
	wantErr(t, "Delete of a profile", err, datastore.ErrNotSupported)
}

// nextEvent waits for the next event on ch that keep accepts.
func nextEvent(t *testing.T, ch <-chan datastore.Event, keep func(datastore.Event) bool) datastore.Event {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			if ev.Err != nil {
				t.Logf("watch error: %v", ev.Err)
				continue
			}
			if keep(ev) {
				return ev
			}
		case <-timeout:
			t.Fatal("no event within 30s")
		}
	}
}

func named(name string) func(datastore.Event) bool {
	return func(ev datastore.Event) bool { return ev.Object != nil && ev.Object.Meta().Name == name }
}

func testWatch(t *testing.T, cc *coreCluster) {
	ctx, s, cs := cc.ctx, cc.s, cc.c.Client
	cc.kubectlApply(t, "inputs/ns-pod.yaml")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Endpoints: a pod has one once scheduled, whatever its addresses;
	// unscheduled and host-network pods have none.
	_, rev, err := s.List(ctx, "WorkloadEndpoint", "")
	if err != nil {
		t.Fatal(err)
	}
	weps := s.Watch(wctx, "WorkloadEndpoint", rev+1)
	newPod := func(name, node string, hostNet bool) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo"},
			Spec:       corev1.PodSpec{NodeName: node, HostNetwork: hostNet, ServiceAccountName: "web-sa", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
		if _, err := cs.CoreV1().Pods("demo").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	newPod("unscheduled", "", false)
	newPod("hostnet", "node1", true)
	newPod("w1", "node1", false)
	ev := nextEvent(t, weps, func(datastore.Event) bool { return true })
	if ev.Type != datastore.Added || ev.Object.Meta().Name != "node1-k8s-w1-eth0" || len(ev.Object.(*api.WorkloadEndpoint).Spec.IPNetworks) != 0 {
		t.Fatalf("first event %v %v, want w1's endpoint Added without addresses (nothing for the others)", ev.Type, ev.Object)
	}
	if _, err := s.Update(ctx, cniEndpoint(ev.Object.(*api.WorkloadEndpoint))); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, weps, func(datastore.Event) bool { return true })
	if ev.Type != datastore.Modified || !slices.Equal(ev.Object.(*api.WorkloadEndpoint).Spec.IPNetworks, []string{"10.244.166.129/32"}) {
		t.Fatalf("after ADD: %v %v, want Modified with the address", ev.Type, ev.Object)
	}
	if _, err := s.Delete(ctx, "WorkloadEndpoint", "demo", ev.Object.Meta().Name, ""); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, weps, func(datastore.Event) bool { return true })
	if ev.Type != datastore.Modified || len(ev.Object.(*api.WorkloadEndpoint).Spec.IPNetworks) != 0 {
		t.Fatalf("after DEL: %v %v, want Modified without addresses", ev.Type, ev.Object)
	}
	if err := cs.CoreV1().Pods("demo").Delete(ctx, "w1", kubetest.ForceDelete()); err != nil {
		t.Fatal(err)
	}
	// (The deletion may first set the pod's deletionTimestamp: Modified.)
	ev = nextEvent(t, weps, func(ev datastore.Event) bool { return ev.Type != datastore.Modified })
	if ev.Type != datastore.Deleted || ev.Object.Meta().Name != "node1-k8s-w1-eth0" {
		t.Fatalf("after the pod's deletion: %v %v, want Deleted", ev.Type, ev.Object)
	}

	// Profiles follow their Namespaces' and ServiceAccounts' labels.
	_, rev, err = s.List(ctx, "Profile", "")
	if err != nil {
		t.Fatal(err)
	}
	profiles := s.Watch(wctx, "Profile", rev+1)
	if _, err := cs.CoreV1().Namespaces().Patch(ctx, "demo", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"green"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, profiles, named("kns.demo"))
	if ev.Type != datastore.Modified || ev.Object.(*api.Profile).Spec.LabelsToApply["pcns.team"] != "green" || !strings.HasSuffix(ev.Object.Meta().ResourceVersion, "/") {
		t.Errorf("namespace label change: %v %+v, want kns.demo Modified with pcns.team=green", ev.Type, ev.Object)
	}
	if _, err := cs.CoreV1().ServiceAccounts("demo").Patch(ctx, "web-sa", types.MergePatchType, []byte(`{"metadata":{"labels":{"sa-role":"backend"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, profiles, named("ksa.demo.web-sa"))
	if ev.Type != datastore.Modified || ev.Object.(*api.Profile).Spec.LabelsToApply["pcsa.sa-role"] != "backend" || !strings.HasPrefix(ev.Object.Meta().ResourceVersion, "/") {
		t.Errorf("service account label change: %v %+v, want ksa.demo.web-sa Modified with pcsa.sa-role=backend", ev.Type, ev.Object)
	}

	// A Reset carries the static default-allow profile too.
	reset := nextEvent(t, s.Watch(wctx, "Profile", -1), func(ev datastore.Event) bool { return ev.Type == datastore.Reset })
	if !slices.ContainsFunc(reset.Objects, func(o api.Object) bool { return o.Meta().Name == defaultAllowName }) ||
		!slices.ContainsFunc(reset.Objects, func(o api.Object) bool { return o.Meta().Name == "kns.demo" }) {
		t.Errorf("Reset lacks default-allow or kns.demo: %d objects", len(reset.Objects))
	}

	// A Node follows its Kubernetes Node.
	cc.kubectlApply(t, "inputs/k8snode.yaml")
	_, rev, err = s.List(ctx, "Node", "")
	if err != nil {
		t.Fatal(err)
	}
	nodes := s.Watch(wctx, "Node", rev+1)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, []byte(`{"metadata":{"labels":{"zone":"a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, nodes, named("node1"))
	if ev.Type != datastore.Modified || ev.Object.Meta().Labels["zone"] != "a" {
		t.Errorf("node label change: %v %+v, want node1 Modified with zone=a", ev.Type, ev.Object)
	}
}
