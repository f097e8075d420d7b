package storetest

import (
	"reflect"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// TestProfiles decodes what the helpers write, as a test's apply would.
func TestProfiles(t *testing.T) {
	docs, err := api.Decode([]byte(NamespaceProfile("prod", map[string]string{"env": "prod", "team": "a"}) + ServiceAccountProfile("prod", "web")))
	if err != nil || len(docs) != 2 {
		t.Fatalf("decode: %d documents, %v", len(docs), err)
	}
	allow := []api.Rule{{Action: api.Allow}}
	for i, want := range []struct {
		name    string
		ingress []api.Rule
		labels  map[string]string
	}{
		{"kns.prod", allow, map[string]string{"pcns.projectcalico.org/name": "prod", "pcns.env": "prod", "pcns.team": "a"}},
		{"ksa.prod.web", nil, map[string]string{"pcsa.projectcalico.org/name": "web"}},
	} {
		if docs[i].Err != nil {
			t.Fatalf("document %d: %v", i, docs[i].Err)
		}
		p, ok := docs[i].Object.(*api.Profile)
		if !ok || p.Name != want.name {
			t.Fatalf("document %d: %#v, want Profile %s", i, docs[i].Object, want.name)
		}
		if !reflect.DeepEqual(p.Spec.Ingress, want.ingress) || !reflect.DeepEqual(p.Spec.Egress, want.ingress) || !reflect.DeepEqual(p.Spec.LabelsToApply, want.labels) {
			t.Errorf("%s: ingress %+v egress %+v labels %v, want rules %+v labels %v", want.name, p.Spec.Ingress, p.Spec.Egress, p.Spec.LabelsToApply, want.ingress, want.labels)
		}
	}
}
