package agent

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// TestPolicySnapshotReusesUnchangedKinds: after every step of a random
// sequence of sets and deletes over several kinds, the actor's snapshot
// equals PolicySnapshot of its cache, and the kinds the step left alone
// are the very slices of the snapshot before (a change to one policy
// does not copy the thousand endpoints again).
func TestPolicySnapshotReusesUnchangedKinds(t *testing.T) {
	p := newTestPolicy()
	rng := rand.New(rand.NewPCG(1, 2))
	object := func(kind string, i int) (confwatch.Key, api.Object) {
		name := fmt.Sprint("o", i)
		var o api.Object
		switch kind {
		case "WorkloadEndpoint":
			w := wep("n1", name, fmt.Sprintf("cali%d", i), rng.IntN(1000), fmt.Sprintf("10.0.0.%d/32", i))
			w.Name = name
			o = w
		case "NetworkPolicy":
			o = &api.NetworkPolicy{Spec: api.NetworkPolicySpec{Selector: fmt.Sprintf("app == 'a%d'", rng.IntN(5))}}
			o.Type().Kind, o.Meta().Namespace, o.Meta().Name = kind, "default", name
		case "Profile":
			o = &api.Profile{Spec: api.ProfileSpec{LabelsToApply: map[string]string{"x": fmt.Sprint(rng.IntN(5))}}}
			o.Type().Kind, o.Meta().Name = kind, name
		}
		return confwatch.KeyOf(o), o
	}
	kinds := []string{"WorkloadEndpoint", "NetworkPolicy", "Profile"}
	slice := func(s *policy.Snapshot, kind string) any {
		return map[string]any{"WorkloadEndpoint": s.WorkloadEndpoints, "NetworkPolicy": s.NetworkPolicies, "Profile": s.Profiles}[kind]
	}
	same := func(a, b any) bool {
		va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
		return va.Len() == vb.Len() && (va.Len() == 0 || va.Pointer() == vb.Pointer())
	}
	prev := p.Snapshot()
	for step := range 300 {
		kind := kinds[rng.IntN(len(kinds))]
		k, o := object(kind, rng.IntN(8))
		u := confwatch.Update{Type: confwatch.Set, Key: k, Object: o}
		if rng.IntN(3) == 0 {
			u = confwatch.Update{Type: confwatch.Delete, Key: k}
		}
		p.apply([]confwatch.Update{u})
		got := p.Snapshot()
		if want := PolicySnapshot(p.objs, p.node, p.Overrides); !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d (%v %s): snapshot differs from PolicySnapshot:\n got %+v\nwant %+v", step, u.Type, k, got, want)
		}
		for _, other := range kinds {
			if other != kind && !same(slice(got, other), slice(prev, other)) {
				t.Fatalf("step %d changed a %s: the %ss were copied again", step, kind, other)
			}
		}
		prev = got
	}
}
