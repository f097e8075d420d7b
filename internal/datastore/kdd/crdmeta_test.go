package kdd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// refDir holds what real Calico v3.31 stored in a real kube-apiserver
// (copied from shared/reference/calico-3.31-kdd; see its README.md).
const refDir = "testdata/calico-3.31-kdd"

// refItems reads a captured list (kubectl or calicoctl -o yaml) as JSON
// objects.
func refItems(t *testing.T, file string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(refDir, file))
	if err != nil {
		t.Fatal(err)
	}
	// A backend dump starts with a comment line and "---".
	if i := strings.Index(string(data), "\n---\n"); i >= 0 && strings.HasPrefix(string(data), "#") {
		data = data[i+5:]
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	items, ok := doc["items"].([]any)
	if !ok {
		return []map[string]any{doc}
	}
	out := make([]map[string]any, len(items))
	for i, it := range items {
		out[i] = it.(map[string]any)
	}
	return out
}

func metaField(obj map[string]any, field string) string {
	m, _ := obj["metadata"].(map[string]any)
	s, _ := m[field].(string)
	return s
}

// TestConvertUIDReferencePairs checks the uid mapping on every pair Calico
// produced: the v3 view and the stored object of the same resourceVersion.
func TestConvertUIDReferencePairs(t *testing.T) {
	type pair struct{ crd, v3 string }
	var pairs []pair
	for _, k := range []string{"bgpconfiguration", "bgppeer", "clusterinformation", "felixconfiguration", "globalnetworkpolicy",
		"globalnetworkset", "hostendpoint", "ippool", "ipreservation", "kubecontrollersconfiguration", "networkpolicy", "networkset", "tier"} {
		byRV := map[string]string{}
		for _, it := range refItems(t, "02-"+k+".crd.yaml") {
			byRV[metaField(it, "resourceVersion")] = metaField(it, "uid")
		}
		for _, it := range refItems(t, "02-"+k+".v3.yaml") {
			crd, ok := byRV[metaField(it, "resourceVersion")]
			if !ok {
				t.Fatalf("%s: no stored object at resourceVersion %s", k, metaField(it, "resourceVersion"))
			}
			pairs = append(pairs, pair{crd, metaField(it, "uid")})
		}
	}
	knp := refItems(t, "05-k8s-networkpolicy.k8s.yaml")[0]
	pairs = append(pairs, pair{metaField(knp, "uid"), metaField(refItems(t, "05-knp.backend-v3.yaml")[0], "uid")})
	if len(pairs) < 15 {
		t.Fatalf("only %d reference pairs", len(pairs))
	}
	for _, p := range pairs {
		if got, err := convertUID(p.crd); err != nil || got != p.v3 {
			t.Errorf("convertUID(%s) = %s, %v; want %s", p.crd, got, err, p.v3)
		}
		if got, err := convertUID(p.v3); err != nil || got != p.crd {
			t.Errorf("convertUID(%s) = %s, %v; want %s (the mapping is its own inverse)", p.v3, got, err, p.crd)
		}
	}
	for _, bad := range []string{"", "not-a-uid", "a3c28b20a0b644a6b4f1478351317da1", "a3c28b20-a0b6-44a6-b4f1-478351317dzz"} {
		if _, err := convertUID(bad); err == nil {
			t.Errorf("convertUID(%q) accepted", bad)
		}
	}
}

// TestMetadataAnnotation: the annotation is byte for byte what Calico
// writes, and reads back into the v3 metadata.
func TestMetadataAnnotation(t *testing.T) {
	ts := "2026-11-24T19:17:41Z"
	tests := []struct {
		name       string
		meta       api.ObjectMeta
		recordName bool
		want       string
	}{
		{"plain kind", api.ObjectMeta{Name: "pool1", Namespace: "x", UID: "u", ResourceVersion: "7", CreationTimestamp: ts}, false,
			`{"creationTimestamp":"2026-11-24T19:17:41Z"}`},
		{"labels", api.ObjectMeta{Name: "bad-ips", CreationTimestamp: ts, Labels: map[string]string{"role": "blocklist"}}, false,
			`{"creationTimestamp":"2026-11-24T19:17:41Z","labels":{"role":"blocklist"}}`},
		{"tiered policy", api.ObjectMeta{Name: "security.block-bad", CreationTimestamp: ts,
			Labels: map[string]string{"projectcalico.org/tier": "security", "owner": "secteam"}, Annotations: map[string]string{"note": "hello"}}, true,
			`{"name":"security.block-bad","creationTimestamp":"2026-11-24T19:17:41Z","labels":{"owner":"secteam","projectcalico.org/tier":"security"},"annotations":{"note":"hello"}}`},
		{"no timestamp", api.ObjectMeta{Name: "b"}, false, `{"creationTimestamp":null}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := encodeMetadata(&tc.meta, tc.recordName)
			if err != nil || got != tc.want {
				t.Fatalf("encodeMetadata = %s, %v; want %s", got, err, tc.want)
			}
			back, name, err := decodeMetadata(&k8sMeta{Name: "stored", Annotations: map[string]string{"projectcalico.org/metadata": got}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.recordName && name != tc.meta.Name || !tc.recordName && name != "" {
				t.Errorf("recorded name %q", name)
			}
			for k, v := range tc.meta.Labels {
				if back.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, back.Labels[k], v)
				}
			}
			for k, v := range tc.meta.Annotations {
				if back.Annotations[k] != v {
					t.Errorf("annotation %s = %q, want %q", k, back.Annotations[k], v)
				}
			}
			if back.CreationTimestamp != tc.meta.CreationTimestamp {
				t.Errorf("creationTimestamp %q", back.CreationTimestamp)
			}
		})
	}
}

// TestMetadataOwners: a Calico owner is recorded as its custom resource
// (crd.projectcalico.org/v1 and that uid) and read back as the v3 owner;
// other owners pass through.
func TestMetadataOwners(t *testing.T) {
	v3uid, crduid := "c543d104-056d-4465-b48f-e2c18a8cbe85", "a3c28b20-a0b6-44a6-b4f1-478351317da1"
	m := api.ObjectMeta{Name: "x", CreationTimestamp: "2026-11-24T19:17:41Z", OwnerReferences: []api.OwnerReference{
		{APIVersion: "projectcalico.org/v3", Kind: "Tier", Name: "t", UID: v3uid},
		{APIVersion: "v1", Kind: "Namespace", Name: "n", UID: "whatever"},
	}}
	ann, err := encodeMetadata(&m, false)
	if err != nil {
		t.Fatal(err)
	}
	var rec annotationMeta
	if err := json.Unmarshal([]byte(ann), &rec); err != nil {
		t.Fatal(err)
	}
	if o := rec.OwnerReferences[0]; o.APIVersion != "crd.projectcalico.org/v1" || o.UID != crduid {
		t.Errorf("recorded owner %+v", o)
	}
	back, _, err := decodeMetadata(&k8sMeta{Name: "x", Annotations: map[string]string{"projectcalico.org/metadata": ann}})
	if err != nil {
		t.Fatal(err)
	}
	if o := back.OwnerReferences[0]; o.APIVersion != "projectcalico.org/v3" || o.UID != v3uid {
		t.Errorf("owner read back %+v", o)
	}
	if o := back.OwnerReferences[1]; o.UID != "whatever" || o.APIVersion != "v1" {
		t.Errorf("other owner read back %+v", o)
	}
}
