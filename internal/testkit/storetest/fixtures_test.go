package storetest

import (
	"reflect"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// TestProfiles reads what the profile helpers write back through Objects.
func TestProfiles(t *testing.T) {
	objs := Objects(t, NamespaceProfile("prod", map[string]string{"env": "prod", "team": "a"})+ServiceAccountProfile("prod", "web"))
	if len(objs) != 2 {
		t.Fatalf("%d documents, want 2", len(objs))
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
		p, ok := objs[i].(*api.Profile)
		if !ok || p.Name != want.name {
			t.Fatalf("document %d: %#v, want Profile %s", i, objs[i], want.name)
		}
		if !reflect.DeepEqual(p.Spec.Ingress, want.ingress) || !reflect.DeepEqual(p.Spec.Egress, want.ingress) || !reflect.DeepEqual(p.Spec.LabelsToApply, want.labels) {
			t.Errorf("%s: ingress %+v egress %+v labels %v, want rules %+v labels %v", want.name, p.Spec.Ingress, p.Spec.Egress, p.Spec.LabelsToApply, want.ingress, want.labels)
		}
	}
}
