package kdd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// The reference capture: what real Calico v3.31 stored in a real
// kube-apiserver and showed through calicoctl (testdata/calico-3.31-kdd,
// a verbatim copy of shared/reference/calico-3.31-kdd; its README.md has
// the mapping rules).
func refPath(name string) string { return filepath.Join("testdata", "calico-3.31-kdd", name) }

// refObjects reads a reference YAML file as JSON objects: the items of a
// List, else the one object.
func refObjects(t *testing.T, name string) []json.RawMessage {
	t.Helper()
	data, err := os.ReadFile(refPath(name))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(js, &list); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if list.Items != nil {
		return list.Items
	}
	return []json.RawMessage{js}
}

func refObject(t *testing.T, name string) json.RawMessage {
	t.Helper()
	objs := refObjects(t, name)
	if len(objs) != 1 {
		t.Fatalf("%s: %d objects, want 1", name, len(objs))
	}
	return objs[0]
}

// sameJSON compares an object with a reference document field by field
// (as decoded JSON, so key order and formatting do not matter, but every
// field present on one side must be on the other).
func sameJSON(t *testing.T, what string, got any, want json.RawMessage) {
	t.Helper()
	gotJSON, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(gotJSON, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	// calicoctl prints Go's zero metav1.Time as "creationTimestamp: null";
	// api.ObjectMeta has no null timestamp: it omits an unset one.
	if wm, ok := w.(map[string]any)["metadata"].(map[string]any); ok {
		if ts, ok := wm["creationTimestamp"]; ok && ts == nil {
			delete(wm, "creationTimestamp")
		}
	}
	if !reflect.DeepEqual(g, w) {
		gy, _ := yaml.JSONToYAML(gotJSON)
		wy, _ := yaml.JSONToYAML(want)
		t.Errorf("%s differs from the reference\n--- got:\n%s--- want:\n%s", what, gy, wy)
	}
}

// TestNodeFromReference: each Kubernetes Node of the capture reads as the
// Calico Node calicoctl showed for it, field for field, uid and
// resourceVersion included.
func TestNodeFromReference(t *testing.T) {
	m := &nodeMapper{}
	for _, tc := range []struct{ k8s, v3 string }{
		{"03-node.k8s-before.yaml", "03-node.v3-before.yaml"},
		{"03-node.k8s.yaml", "03-node.v3.yaml"},
		{"03-node-full.k8s.yaml", "03-node-full.v3.yaml"},
	} {
		t.Run(tc.k8s, func(t *testing.T) {
			objs, err := m.convert(0, refObject(t, tc.k8s))
			if err != nil || len(objs) != 1 {
				t.Fatalf("convert: %v, %d objects", err, len(objs))
			}
			sameJSON(t, "node", objs[0], refObject(t, tc.v3))
		})
	}
}

// calicoAnnotations are the projectcalico.org/* annotations of a
// Kubernetes object.
func calicoAnnotations(t *testing.T, raw json.RawMessage) map[string]string {
	t.Helper()
	var o coreObject
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range o.Metadata.Annotations {
		if len(k) > len("projectcalico.org/") && k[:len("projectcalico.org/")] == "projectcalico.org/" {
			out[k] = v
		}
	}
	return out
}

func decodeNode(t *testing.T, raw json.RawMessage) *api.Node {
	t.Helper()
	var n api.Node
	if err := json.Unmarshal(raw, &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestNodeAnnotationsFromReference: a Calico Node is stored as exactly the
// annotations real Calico wrote for it, whether it comes from the user's
// YAML or is written back as it was read (the Kubernetes labels it shows
// are not copied into Calico's).
func TestNodeAnnotationsFromReference(t *testing.T) {
	for _, tc := range []struct{ calico, k8s string }{
		{"inputs/calinode.yaml", "03-node.k8s.yaml"},
		{"inputs/calinode-full.yaml", "03-node-full.k8s.yaml"},
		{"03-node.v3.yaml", "03-node.k8s.yaml"},
		{"03-node-full.v3.yaml", "03-node-full.k8s.yaml"},
		{"03-node.v3-before.yaml", "03-node.k8s-before.yaml"},
	} {
		t.Run(tc.calico, func(t *testing.T) {
			got, err := nodeAnnotations(decodeNode(t, refObject(t, tc.calico)))
			if err != nil {
				t.Fatal(err)
			}
			want := calicoAnnotations(t, refObject(t, tc.k8s))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("annotations\n got %v\nwant %v", got, want)
			}
		})
	}
}

// TestNodePatchDropsFields: applying the smaller Node over the full one
// removes the annotations of the fields it no longer has, and touches no
// annotation that is not Calico's.
func TestNodePatchDropsFields(t *testing.T) {
	cur := map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}
	for k, v := range calicoAnnotations(t, refObject(t, "03-node-full.k8s.yaml")) {
		cur[k] = v
	}
	want, err := nodeAnnotations(decodeNode(t, refObject(t, "inputs/calinode.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	patch := nodePatch(cur, want, "314")
	meta := patch["metadata"].(map[string]any)
	if meta["resourceVersion"] != "314" {
		t.Errorf("patch resourceVersion = %v, want the one given", meta["resourceVersion"])
	}
	// Apply it as a JSON merge patch does.
	after := map[string]string{}
	for k, v := range cur {
		after[k] = v
	}
	for k, v := range meta["annotations"].(map[string]any) {
		if v == nil {
			delete(after, k)
		} else {
			after[k] = v.(string)
		}
	}
	wantAfter := calicoAnnotations(t, refObject(t, "03-node.k8s.yaml"))
	wantAfter["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
	if !reflect.DeepEqual(after, wantAfter) {
		t.Errorf("annotations after the patch\n got %v\nwant %v", after, wantAfter)
	}
}

// TestEndpointFromReference: the Pod before and after Calico's CNI DEL
// reads as the WorkloadEndpoint calicoctl showed, field for field.
func TestEndpointFromReference(t *testing.T) {
	m := newEndpointMapper(nil, api.KindInfo{}).(*endpointMapper)
	m.vethPrefix = "cali"
	for _, tc := range []struct{ k8s, v3 string }{
		{"04-pod-after-add.k8s.yaml", "04-wep.after-add.v3.yaml"},
		{"04-pod-after-del.k8s.yaml", "04-wep.after-del.v3.yaml"},
	} {
		t.Run(tc.k8s, func(t *testing.T) {
			objs, err := m.convert(0, refObject(t, tc.k8s))
			if err != nil || len(objs) != 1 {
				t.Fatalf("convert: %v, %d objects", err, len(objs))
			}
			sameJSON(t, "workload endpoint", objs[0], refObject(t, tc.v3))
		})
	}
}

// TestProfilesFromReference: every Namespace and ServiceAccount of the
// capture reads as the Profile calicoctl showed (uid bit-reversed,
// composite resourceVersion), and the static default-allow profile is
// Calico's.
func TestProfilesFromReference(t *testing.T) {
	want := map[string]json.RawMessage{}
	for _, raw := range refObjects(t, "05-profiles.v3.yaml") {
		var meta struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &meta); err != nil {
			t.Fatal(err)
		}
		want[meta.Metadata.Name] = raw
	}
	m := &profileMapper{}
	seen := 0
	for i, file := range []string{"05-namespaces.k8s.yaml", "05-serviceaccounts.k8s.yaml"} {
		for _, raw := range refObjects(t, file) {
			objs, err := m.convert(i, raw)
			if err != nil || len(objs) != 1 {
				t.Fatalf("%s: convert: %v, %d objects", file, err, len(objs))
			}
			name := objs[0].Meta().Name
			ref, ok := want[name]
			if !ok {
				t.Errorf("%s: profile %s is not in the reference", file, name)
				continue
			}
			seen++
			sameJSON(t, "profile "+name, objs[0], ref)
		}
	}
	if seen < 10 {
		t.Errorf("only %d profiles compared", seen)
	}
	sameJSON(t, "default-allow profile", m.static()[0], want[defaultAllowName])
}

func TestProfileUID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// Namespace default and ServiceAccount demo/web-sa of the capture.
		{"2dab5ef6-3d64-4ed9-9172-2f5ce555529a", "b4d57a6f-bc26-4e9b-914e-f43aa7aa4a59"},
		{"bc30bbe6-cdff-462c-b0f0-b6b4245126b7", "3d0cdd67-b3ff-4634-b00f-6d2d248a64ed"},
	} {
		got, err := convertUID(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("convertUID(%s) = %q, %v; want %s", tc.in, got, err, tc.want)
		}
		back, err := convertUID(got)
		if err != nil || back != tc.in {
			t.Errorf("profileUID is not its own inverse: %s -> %s -> %s", tc.in, got, back)
		}
	}
	for _, bad := range []string{"", "not-a-uuid", "2dab5ef63d644ed991722f5ce555529a"} {
		if _, err := convertUID(bad); err == nil {
			t.Errorf("convertUID(%q) accepted", bad)
		}
	}
}
