package kdd

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// startKDD runs a kube-apiserver with Calico's CRDs and connects a Store.
func startKDD(t *testing.T) (*kubetest.Cluster, *Store) {
	t.Helper()
	c := kubetest.Start(t, kubetest.WithoutControllerManager())
	c.InstallCalicoCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := New(ctx, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{Kubeconfig: c.Kubeconfig}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return c, s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// decodeDocs parses a v3 document the way calicoctl reads a file.
func decodeDocs(t *testing.T, data []byte) []api.Object {
	t.Helper()
	docs, err := api.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	var out []api.Object
	for _, d := range docs {
		if d.Err != nil {
			t.Fatalf("document %d: %v", d.Index, d.Err)
		}
		out = append(out, d.Object)
	}
	return out
}

func readRef(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(refDir, file))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// goldenCases ties each kind's capture (02-<file>.crd.yaml and .v3.yaml) to
// what made it: the calicoctl inputs, and the objects Calico's own
// initialisation wrote on the first calicoctl write (ClusterInformation
// and the built-in tiers), which are created here from their v3 capture.
var goldenCases = []struct {
	file, kind string
	inputs     []string
	fromV3     []string
}{
	{"tier", "Tier", []string{"tier.yaml"}, []string{"default", "adminnetworkpolicy", "baselineadminnetworkpolicy"}},
	{"clusterinformation", "ClusterInformation", nil, []string{"default"}},
	{"ippool", "IPPool", []string{"ippool.yaml"}, nil},
	{"bgpconfiguration", "BGPConfiguration", []string{"bgpconfig.yaml"}, nil},
	{"bgppeer", "BGPPeer", []string{"bgppeer.yaml"}, nil},
	{"bgpfilter", "BGPFilter", []string{"bgpfilter.yaml"}, nil},
	{"felixconfiguration", "FelixConfiguration", []string{"felixconfig.yaml"}, nil},
	{"globalnetworkpolicy", "GlobalNetworkPolicy", []string{"gnp-default.yaml", "gnp-tier.yaml"}, nil},
	{"networkpolicy", "NetworkPolicy", []string{"np-default.yaml", "np-tier.yaml"}, nil},
	{"networkset", "NetworkSet", []string{"ns-set.yaml"}, nil},
	{"hostendpoint", "HostEndpoint", []string{"hep.yaml"}, nil},
	{"ipreservation", "IPReservation", []string{"ipres.yaml"}, nil},
	{"kubecontrollersconfiguration", "KubeControllersConfiguration", []string{"kcc.yaml"}, nil},
	{"globalnetworkset", "GlobalNetworkSet", []string{"gns.yaml"}, nil},
}

var annotationTimestamp = regexp.MustCompile(`"creationTimestamp":"[^"]*"`)

// normalise drops what differs between any two runs: identity, times,
// revisions and server bookkeeping (the creationTimestamp recorded in the
// metadata annotation too).
func normalise(obj map[string]any) map[string]any {
	m, _ := obj["metadata"].(map[string]any)
	for _, f := range []string{"uid", "creationTimestamp", "resourceVersion", "generation", "managedFields"} {
		delete(m, f)
	}
	if a, ok := m["annotations"].(map[string]any); ok {
		if meta, ok := a[datastore.MetadataAnnotation].(string); ok {
			a[datastore.MetadataAnnotation] = annotationTimestamp.ReplaceAllString(meta, `"creationTimestamp":"T"`)
		}
	}
	return obj
}

func toMap(t *testing.T, v any) map[string]any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func sortItems(items []map[string]any) {
	slices.SortFunc(items, func(a, b map[string]any) int {
		return cmp.Or(cmp.Compare(metaField(a, "namespace"), metaField(b, "namespace")), cmp.Compare(metaField(a, "name"), metaField(b, "name")))
	})
}

func compareItems(t *testing.T, what string, got, want []map[string]any) {
	t.Helper()
	sortItems(got)
	sortItems(want)
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("%s differs from Calico's\n got: %s\nwant: %s", what, g, w)
	}
}

// stored lists a Calico custom resource with kubectl, as the capture did.
func stored(t *testing.T, c *kubetest.Cluster, plural string) []map[string]any {
	t.Helper()
	out, err := c.RunKubectl(nil, "get", plural+".crd.projectcalico.org", "-A", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// clientView adds what Calico's clientv3 adds to every policy it returns
// (not stored, not part of this Store's view, which keeps the default tier
// implicit as the etcd backend does): the default tier's label and name.
func clientView(obj map[string]any) map[string]any {
	if k := obj["kind"]; k != "NetworkPolicy" && k != "GlobalNetworkPolicy" {
		return obj
	}
	m := obj["metadata"].(map[string]any)
	labels, _ := m["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
		m["labels"] = labels
	}
	if _, ok := labels[api.LabelTier]; !ok {
		labels[api.LabelTier] = api.DefaultTierName
	}
	spec := obj["spec"].(map[string]any)
	if _, ok := spec["tier"]; !ok {
		spec["tier"] = api.DefaultTierName
	}
	return obj
}

// TestKDD runs the Kubernetes datastore's CRD kinds against one
// kube-apiserver: Calico's stored shapes, its names, Kubernetes
// NetworkPolicies, CRUD with compare-and-swap, watches and RBAC errors.
func TestKDD(t *testing.T) {
	c, s := startKDD(t)
	t.Run("golden", func(t *testing.T) { testGolden(t, c, s) })
	t.Run("policy names", func(t *testing.T) { testPolicyNames(t, c, s) })
	t.Run("kubernetes network policy", func(t *testing.T) { testKNP(t, c, s) })
	t.Run("crud", func(t *testing.T) { testCRUD(t, s) })
	t.Run("bgpfilter", func(t *testing.T) { testBGPFilter(t, c, s) })
	t.Run("watch", func(t *testing.T) { testCRDWatch(t, c, s) })
	t.Run("forbidden", func(t *testing.T) { testForbidden(t, c) })
}

// testGolden writes each reference input through the Store and compares
// the custom resources with what Calico stored, and the Store's view with
// what calicoctl showed.
func testGolden(t *testing.T, c *kubetest.Cluster, s *Store) {
	ctx := testCtx(t)
	for _, gc := range goldenCases {
		var objs []api.Object
		for _, in := range gc.inputs {
			objs = append(objs, decodeDocs(t, readRef(t, "inputs/"+in))...)
		}
		for _, it := range refItems(t, "02-"+gc.file+".v3.yaml") {
			if !slices.Contains(gc.fromV3, metaField(it, "name")) {
				continue
			}
			m := it["metadata"].(map[string]any)
			delete(m, "uid")
			delete(m, "resourceVersion")
			delete(m, "creationTimestamp")
			data, _ := json.Marshal(it)
			objs = append(objs, decodeDocs(t, data)...)
		}
		for _, o := range objs {
			if _, err := s.Create(ctx, o); err != nil {
				t.Fatalf("create %s %s: %v", o.Type().Kind, o.Meta().Name, err)
			}
		}
	}
	for _, gc := range goldenCases {
		t.Run(gc.kind, func(t *testing.T) {
			info, _ := api.LookupKind(gc.kind)
			crds := stored(t, c, info.Plural)
			crdUID := map[string]string{} // by resourceVersion
			for _, it := range crds {
				crdUID[metaField(it, "resourceVersion")] = metaField(it, "uid")
				normalise(it)
			}
			want := refItems(t, "02-"+gc.file+".crd.yaml")
			for _, it := range want {
				normalise(it)
			}
			compareItems(t, "stored "+info.Plural, crds, want)

			objs, _, err := s.List(ctx, gc.kind, "")
			if err != nil {
				t.Fatal(err)
			}
			var got []map[string]any
			for _, o := range objs {
				m := o.Meta()
				uid, ok := crdUID[m.ResourceVersion]
				if !ok {
					t.Errorf("%s %s: resourceVersion %s is no stored object's", gc.kind, m.Name, m.ResourceVersion)
				} else if conv, _ := convertUID(uid); m.UID != conv {
					t.Errorf("%s %s: uid %s, want %s (stored %s converted)", gc.kind, m.Name, m.UID, conv, uid)
				}
				if _, err := time.Parse(time.RFC3339, m.CreationTimestamp); err != nil {
					t.Errorf("%s %s: creationTimestamp %q", gc.kind, m.Name, m.CreationTimestamp)
				}
				got = append(got, normalise(clientView(toMap(t, o))))
			}
			want = refItems(t, "02-"+gc.file+".v3.yaml")
			for _, it := range want {
				normalise(it)
			}
			compareItems(t, gc.kind+" read back", got, want)
		})
	}
}

// testPolicyNames replays 02b-*: the name Calico stores a policy under, its
// tier label and the recorded metadata, and the names the Store shows. The
// two names Calico v3.31 refuses (no tier prefix outside the default tier)
// are accepted and stored under the full name, as the etcd backend does.
func testPolicyNames(t *testing.T, c *kubetest.Cluster, s *Store) {
	ctx := testCtx(t)
	for _, o := range decodeDocs(t, readRef(t, "inputs/naming.yaml")) {
		if _, err := s.Create(ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", o.Type().Kind, o.Meta().Name, err)
		}
	}
	type row struct{ kind, ns, crdName, labels, meta string }
	var want []row
	sc := bufio.NewScanner(bytes.NewReader(readRef(t, "02b-policy-naming.crd.txt")))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 5 || strings.HasPrefix(f[0], "#") || f[0] == "KIND" {
			continue
		}
		want = append(want, row{f[0], strings.ReplaceAll(f[1], "<none>", ""), f[2], f[3], f[4]})
	}
	// Ours only: Calico refuses these two names.
	want = append(want,
		row{"GlobalNetworkPolicy", "", "security.noprefix", "map[projectcalico.org/tier:security]",
			`{"name":"security.noprefix","creationTimestamp":"T","labels":{"projectcalico.org/tier":"security"}}`},
		row{"NetworkPolicy", "default", "security.ns-noprefix", "map[projectcalico.org/tier:security]",
			`{"name":"security.ns-noprefix","creationTimestamp":"T","labels":{"projectcalico.org/tier":"security"}}`})
	if len(want) != 7 {
		t.Fatalf("read %d rows from 02b-policy-naming.crd.txt", len(want))
	}
	var got []row
	for _, kind := range []string{"GlobalNetworkPolicy", "NetworkPolicy"} {
		info, _ := api.LookupKind(kind)
		for _, it := range stored(t, c, info.Plural) {
			m := it["metadata"].(map[string]any)
			labels := "<none>"
			if l, ok := m["labels"].(map[string]any); ok {
				var parts []string
				for k, v := range l {
					parts = append(parts, k+":"+v.(string))
				}
				slices.Sort(parts)
				labels = "map[" + strings.Join(parts, " ") + "]"
			}
			meta := m["annotations"].(map[string]any)[datastore.MetadataAnnotation].(string)
			got = append(got, row{kind, metaField(it, "namespace"), metaField(it, "name"), labels,
				annotationTimestamp.ReplaceAllString(meta, `"creationTimestamp":"T"`)})
		}
	}
	for i := range want {
		want[i].meta = annotationTimestamp.ReplaceAllString(want[i].meta, `"creationTimestamp":"T"`)
	}
	byKey := func(a, b row) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.ns, b.ns), cmp.Compare(a.crdName, b.crdName))
	}
	slices.SortFunc(got, byKey)
	slices.SortFunc(want, byKey)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stored policies:\n got %q\nwant %q", got, want)
	}

	// The v3 names (02b-policy-naming.v3.txt, plus ours), and each found
	// by the name shown and by its stored name.
	wantNames := map[string][]string{
		"GlobalNetworkPolicy": {"allow-dns", "default.withprefix", "security.block-bad", "security.noprefix"},
		"NetworkPolicy":       {"default/allow-web", "default/security.ns-deny", "default/security.ns-noprefix"},
	}
	for kind, names := range wantNames {
		objs, _, err := s.List(ctx, kind, "")
		if err != nil {
			t.Fatal(err)
		}
		var gotNames []string
		for _, o := range objs {
			gotNames = append(gotNames, qualifiedName(o))
			if _, err := s.Get(ctx, kind, o.Meta().Namespace, o.Meta().Name); err != nil {
				t.Errorf("get %s by its name: %v", qualifiedName(o), err)
			}
		}
		if !slices.Equal(gotNames, names) {
			t.Errorf("%s names %q, want %q", kind, gotNames, names)
		}
	}
	if o, err := s.Get(ctx, "GlobalNetworkPolicy", "", "default.allow-dns"); err != nil || o.Meta().Name != "allow-dns" {
		t.Errorf("get by stored name default.allow-dns: %v %v", o, err)
	}
}

func qualifiedName(o api.Object) string {
	if ns := o.Meta().Namespace; ns != "" {
		return ns + "/" + o.Meta().Name
	}
	return o.Meta().Name
}

// testKNP: a Kubernetes NetworkPolicy reads as Calico's knp.default.*
// policy (05-knp.backend-v3.yaml), is listed with the Calico policies, and
// cannot be written through the Store.
func testKNP(t *testing.T, c *kubetest.Cluster, s *Store) {
	ctx := testCtx(t)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Labels: map[string]string{"team": "blue"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := c.RunKubectl(bytes.NewReader(readRef(t, "inputs/knp.yaml")), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	np, err := c.Client.NetworkingV1().NetworkPolicies("demo").Get(ctx, "allow-frontend", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.Get(ctx, "NetworkPolicy", "demo", "knp.default.allow-frontend")
	if err != nil {
		t.Fatal(err)
	}
	m := obj.Meta()
	if conv, _ := convertUID(string(np.UID)); m.UID != conv {
		t.Errorf("uid %s, want %s (the Kubernetes policy's %s converted)", m.UID, conv, np.UID)
	}
	if m.ResourceVersion != np.ResourceVersion || m.CreationTimestamp != np.CreationTimestamp.UTC().Format(time.RFC3339) {
		t.Errorf("resourceVersion %s creationTimestamp %s; Kubernetes policy has %s %s", m.ResourceVersion, m.CreationTimestamp, np.ResourceVersion, np.CreationTimestamp)
	}
	compareItems(t, "knp.default.allow-frontend", []map[string]any{normalise(toMap(t, obj))},
		[]map[string]any{normalise(refItems(t, "05-knp.backend-v3.yaml")[0])})

	objs, _, err := s.List(ctx, "NetworkPolicy", "demo")
	if err != nil || len(objs) != 1 || objs[0].Meta().Name != "knp.default.allow-frontend" {
		t.Errorf("List NetworkPolicy in demo = %v, %v; want the knp.default policy", objs, err)
	}
	all, _, err := s.List(ctx, "NetworkPolicy", "")
	if err != nil || !slices.ContainsFunc(all, func(o api.Object) bool { return o.Meta().Name == "knp.default.allow-frontend" }) ||
		!slices.ContainsFunc(all, func(o api.Object) bool { return o.Meta().Name == "allow-web" }) {
		t.Errorf("List NetworkPolicy = %v, %v; want Calico's and Kubernetes' policies", all, err)
	}

	// Writes to it are refused, naming the Kubernetes object.
	p := obj.(*api.NetworkPolicy)
	p.Spec.Selector = "all()"
	_, updateErr := s.Update(ctx, p)
	other := *p
	other.ResourceVersion, other.Name = "", "knp.default.other"
	_, createErr := s.Create(ctx, &other)
	_, deleteErr := s.Delete(ctx, "NetworkPolicy", "demo", "knp.default.allow-frontend", "")
	for _, tc := range []struct {
		op  string
		err error
	}{{"update", updateErr}, {"create", createErr}, {"delete", deleteErr}} {
		var de *datastore.Error
		if !errors.As(tc.err, &de) || !strings.Contains(tc.err.Error(), "change the Kubernetes NetworkPolicy") {
			t.Errorf("%s knp.default policy: %v, want refusal", tc.op, tc.err)
		}
	}
	if _, err := c.Client.NetworkingV1().NetworkPolicies("demo").Get(ctx, "allow-frontend", metav1.GetOptions{}); err != nil {
		t.Errorf("Kubernetes policy after refused delete: %v", err)
	}
	if _, err := s.Get(ctx, "NetworkPolicy", "demo", "knp.default.missing"); !errors.Is(err, datastore.ErrNotFound) {
		t.Errorf("get missing knp: %v", err)
	}
}

// testCRUD: the Store's write semantics on custom resources.
func testCRUD(t *testing.T, s *Store) {
	ctx := testCtx(t)
	pool := func(cidr string) *api.IPPool {
		p := &api.IPPool{TypeMeta: api.TypeMeta{Kind: "IPPool", APIVersion: api.GroupVersion}}
		p.Name, p.Spec.CIDR = "crud-pool", cidr
		return p
	}
	created, err := s.Create(ctx, pool("10.10.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	c0 := created.Meta()
	if c0.UID == "" || c0.ResourceVersion == "" || c0.CreationTimestamp == "" {
		t.Fatalf("created metadata %+v", c0)
	}
	if _, err := s.Create(ctx, pool("10.11.0.0/16")); !errors.Is(err, datastore.ErrAlreadyExists) {
		t.Errorf("create existing: %v, want ErrAlreadyExists", err)
	}
	if _, err := s.Get(ctx, "IPPool", "", "no-such-pool"); !errors.Is(err, datastore.ErrNotFound) {
		t.Errorf("get missing: %v, want ErrNotFound", err)
	}
	missing := pool("10.12.0.0/16")
	missing.Name = "no-such-pool"
	if _, err := s.Update(ctx, missing); !errors.Is(err, datastore.ErrNotFound) {
		t.Errorf("update missing: %v, want ErrNotFound", err)
	}

	// CAS: at the version read it succeeds, at a stale one it conflicts.
	upd := pool("10.10.0.0/16")
	upd.Spec.NATOutgoing = true
	upd.ResourceVersion = c0.ResourceVersion
	updated, err := s.Update(ctx, upd)
	if err != nil {
		t.Fatal(err)
	}
	u := updated.Meta()
	if u.ResourceVersion == c0.ResourceVersion || u.UID != c0.UID || u.CreationTimestamp != c0.CreationTimestamp || !updated.(*api.IPPool).Spec.NATOutgoing {
		t.Errorf("updated %+v %+v; created %+v", u, updated.(*api.IPPool).Spec, c0)
	}
	stale := pool("10.10.0.0/16")
	stale.ResourceVersion = c0.ResourceVersion
	if _, err := s.Update(ctx, stale); !errors.Is(err, datastore.ErrConflict) {
		t.Errorf("update at stale version: %v, want ErrConflict", err)
	}
	if _, err := s.Apply(ctx, stale); !errors.Is(err, datastore.ErrConflict) {
		t.Errorf("apply at stale version: %v, want ErrConflict", err)
	}
	// Without a version the write overwrites, keeping the identity even
	// when the caller sends another.
	blind := pool("10.10.0.0/16")
	blind.CreationTimestamp, blind.UID = "2000-01-01T00:00:00Z", "5eec1bca-2c21-4ae7-afda-9a3c3a261892"
	applied, err := s.Apply(ctx, blind)
	if err != nil {
		t.Fatal(err)
	}
	if a := applied.Meta(); a.CreationTimestamp != c0.CreationTimestamp || a.UID != c0.UID || applied.(*api.IPPool).Spec.NATOutgoing {
		t.Errorf("unconditional apply %+v %+v", a, applied.(*api.IPPool).Spec)
	}
	got, err := s.Get(ctx, "IPPool", "", "crud-pool")
	if err != nil || !reflect.DeepEqual(got, applied) {
		t.Errorf("get after apply = %+v, %v; want %+v", got, err, applied)
	}
	// Apply creates what does not exist.
	fresh := pool("10.13.0.0/16")
	fresh.Name = "crud-applied"
	if _, err := s.Apply(ctx, fresh); err != nil {
		t.Errorf("apply new: %v", err)
	}

	// Delete: conditional on the version, returning the object as it was.
	if _, err := s.Delete(ctx, "IPPool", "", "crud-pool", c0.ResourceVersion); !errors.Is(err, datastore.ErrConflict) {
		t.Errorf("delete at stale version: %v, want ErrConflict", err)
	}
	gone, err := s.Delete(ctx, "IPPool", "", "crud-pool", applied.Meta().ResourceVersion)
	if err != nil || !reflect.DeepEqual(gone, applied) {
		t.Errorf("delete = %+v, %v; want %+v", gone, err, applied)
	}
	if _, err := s.Get(ctx, "IPPool", "", "crud-pool"); !errors.Is(err, datastore.ErrNotFound) {
		t.Errorf("get deleted: %v", err)
	}
	if _, err := s.Delete(ctx, "IPPool", "", "crud-pool", ""); !errors.Is(err, datastore.ErrNotFound) {
		t.Errorf("delete missing: %v", err)
	}
	if o, err := s.Delete(ctx, "IPPool", "", "crud-applied", ""); err != nil || o.Meta().Name != "crud-applied" {
		t.Errorf("unconditional delete: %v %v", o, err)
	}

	// Policies by the name the user wrote, in a namespace.
	np := &api.NetworkPolicy{TypeMeta: api.TypeMeta{Kind: "NetworkPolicy", APIVersion: api.GroupVersion}}
	np.Name, np.Namespace, np.Spec.Selector = "crud-np", "default", "all()"
	if _, err := s.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	if o, err := s.Delete(ctx, "NetworkPolicy", "default", "crud-np", ""); err != nil || o.Meta().Name != "crud-np" || o.Meta().Namespace != "default" {
		t.Errorf("delete policy: %v %v", o, err)
	}

	// What Calico refuses only on this datastore.
	kcc := &api.KubeControllersConfiguration{TypeMeta: api.TypeMeta{Kind: "KubeControllersConfiguration", APIVersion: api.GroupVersion}}
	kcc.Name = "default"
	kcc.Spec.Controllers.Node = &api.NodeControllerConfig{SyncLabels: "Disabled"}
	var ve api.ValidationError
	if _, err := s.Apply(ctx, kcc); !errors.As(err, &ve) || !strings.Contains(err.Error(), "syncLabels") {
		t.Errorf("syncLabels Disabled: %v, want a validation error", err)
	}
}

// testCRDWatch: Added, Modified and Deleted from a List's revision, for a
// custom resource kind and for Kubernetes NetworkPolicies.
func testCRDWatch(t *testing.T, c *kubetest.Cluster, s *Store) {
	ctx := testCtx(t)
	next := func(t *testing.T, ch <-chan datastore.Event) datastore.Event {
		t.Helper()
		return nextEvent(t, ch, func(datastore.Event) bool { return true })
	}
	expect := func(t *testing.T, ch <-chan datastore.Event, typ datastore.EventType, ns, name, rv string) {
		t.Helper()
		ev := next(t, ch)
		if ev.Type != typ || ev.Object == nil || ev.Object.Meta().Namespace != ns || ev.Object.Meta().Name != name ||
			rv != "" && ev.Object.Meta().ResourceVersion != rv {
			t.Fatalf("event %v %v, want %v %s/%s at %s", ev.Type, ev.Object, typ, ns, name, rv)
		}
	}

	t.Run("custom resource", func(t *testing.T) {
		_, rev, err := s.List(ctx, "GlobalNetworkSet", "")
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := s.Watch(wctx, "GlobalNetworkSet", rev+1)
		gns := &api.GlobalNetworkSet{TypeMeta: api.TypeMeta{Kind: "GlobalNetworkSet", APIVersion: api.GroupVersion}}
		gns.Name, gns.Spec.Nets = "watched", []string{"198.51.100.0/24"}
		created, err := s.Create(ctx, gns)
		if err != nil {
			t.Fatal(err)
		}
		expect(t, ch, datastore.Added, "", "watched", created.Meta().ResourceVersion)
		gns.Spec.Nets = []string{"198.51.100.0/25"}
		updated, err := s.Update(ctx, gns)
		if err != nil {
			t.Fatal(err)
		}
		expect(t, ch, datastore.Modified, "", "watched", updated.Meta().ResourceVersion)
		if _, err := s.Delete(ctx, "GlobalNetworkSet", "", "watched", ""); err != nil {
			t.Fatal(err)
		}
		expect(t, ch, datastore.Deleted, "", "watched", "")
	})

	t.Run("kubernetes network policy", func(t *testing.T) {
		_, rev, err := s.List(ctx, "NetworkPolicy", "")
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := s.Watch(wctx, "NetworkPolicy", rev+1)
		knp := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "watched", Namespace: "demo"},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
		created, err := c.Client.NetworkingV1().NetworkPolicies("demo").Create(ctx, knp, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		expect(t, ch, datastore.Added, "demo", "knp.default.watched", created.ResourceVersion)
		created.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
		updated, err := c.Client.NetworkingV1().NetworkPolicies("demo").Update(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ev := next(t, ch)
		if ev.Type != datastore.Modified || ev.Object.Meta().ResourceVersion != updated.ResourceVersion ||
			ev.Object.(*api.NetworkPolicy).Spec.Selector != "projectcalico.org/orchestrator == 'k8s' && app == 'x'" {
			t.Fatalf("event %v %+v, want the policy modified", ev.Type, ev.Object)
		}
		if err := c.Client.NetworkingV1().NetworkPolicies("demo").Delete(ctx, "watched", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		expect(t, ch, datastore.Deleted, "demo", "knp.default.watched", "")

		// A Calico policy of the same kind on the same watch.
		np := &api.NetworkPolicy{TypeMeta: api.TypeMeta{Kind: "NetworkPolicy", APIVersion: api.GroupVersion}}
		np.Name, np.Namespace, np.Spec.Selector = "watched-np", "demo", "all()"
		if _, err := s.Create(ctx, np); err != nil {
			t.Fatal(err)
		}
		expect(t, ch, datastore.Added, "demo", "watched-np", "")
	})
}

// testForbidden: an identity without RBAC gets errors that name the verb
// and the resource, as configuration errors.
func testForbidden(t *testing.T, c *kubetest.Cluster) {
	ctx := testCtx(t)
	if _, err := c.Client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := c.Token(t, "default", "nobody", 10*time.Minute)
	s, err := New(ctx, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{
		APIEndpoint: c.URL, CAFile: c.CAFile, Token: token}})
	if err != nil {
		t.Fatalf("New as a service account without RBAC: %v", err)
	}
	defer s.Close()
	p := &api.IPPool{TypeMeta: api.TypeMeta{Kind: "IPPool", APIVersion: api.GroupVersion}}
	p.Name, p.Spec.CIDR = "forbidden", "10.20.0.0/16"
	_, createErr := s.Create(ctx, p)
	_, _, listErr := s.List(ctx, "NetworkPolicy", "")
	_, nodeErr := s.Get(ctx, "Node", "", "some-node")
	// IPAM's reads and writes, on its own custom resources.
	_, blockErr := s.IPAM().Get(ctx, "/calico/ipam/v2/assignment/ipv4/block/10.20.0.0-26")
	_, _, affErr := s.IPAM().List(ctx, "/calico/ipam/v2/host/some-node/ipv4/block/", false)
	// Allowed to read handles but not to write them: the write's verb.
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "read-handles"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"crd.projectcalico.org"}, Resources: []string{"ipamhandles"},
			Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nobody-reads-handles"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "read-handles"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "nobody"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var txnErr error
	// The authorizer sees the binding a moment after it is written.
	polltest.Until(t, 30*time.Second, "the binding to let nobody read IPAM handles", func() bool {
		_, txnErr = s.IPAM().Txn(ctx, datastore.Txn{Ops: []datastore.Op{{Type: datastore.OpPut,
			Key: "/calico/ipam/v2/handle/forbidden", Value: []byte(`{"block":{}}`)}}})
		return !strings.Contains(fmt.Sprint(txnErr), "cannot get")
	})
	for _, tc := range []struct {
		err                  error
		verb, resource, kind string
	}{
		{createErr, "create", "ippools", "IPPool"},
		{listErr, "list", "networkpolicies", "NetworkPolicy"},
		{nodeErr, "get", "nodes", "Node"},
		{blockErr, "get", "ipamblocks", ""},
		{affErr, "list", "blockaffinities", ""},
		{txnErr, "create", "ipamhandles", ""},
	} {
		var ce *datastore.ConfigError
		if !errors.As(tc.err, &ce) {
			t.Errorf("%s: %v, want a ConfigError", tc.verb, tc.err)
			continue
		}
		t.Logf("%s: %v", tc.verb, tc.err)
		texttest.Contains(t, tc.verb+" error", tc.err.Error(), tc.verb, tc.resource, tc.kind, "forbidden")
	}
}

// testBGPFilter: the rule fields the golden capture has none of (IPv6,
// prefixLength, source) are stored in the bgpfilters custom resource as
// the user wrote them, and read back the same.
func testBGPFilter(t *testing.T, c *kubetest.Cluster, s *Store) {
	ctx := testCtx(t)
	input := []byte(`apiVersion: projectcalico.org/v3
kind: BGPFilter
metadata: {name: tor}
spec:
  exportV4:
  - {action: Reject, matchOperator: In, cidr: 10.244.2.0/24, prefixLength: {min: 26}}
  importV6:
  - {action: Accept, matchOperator: NotEqual, cidr: "fd00::/8", source: RemotePeers}
`)
	var written struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(input, &written); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, decodeDocs(t, input)[0]); err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	for _, it := range stored(t, c, "bgpfilters") {
		if metaField(it, "name") == "tor" {
			spec, _ = it["spec"].(map[string]any)
		}
	}
	if !reflect.DeepEqual(spec, written.Spec) {
		t.Errorf("stored bgpfilters/tor spec:\n got %v\nwant %v", spec, written.Spec)
	}
	obj, err := s.Get(ctx, "BGPFilter", "", "tor")
	if err != nil {
		t.Fatal(err)
	}
	if got := toMap(t, obj.(*api.BGPFilter).Spec); !reflect.DeepEqual(got, written.Spec) {
		t.Errorf("read back:\n got %v\nwant %v", got, written.Spec)
	}
}
