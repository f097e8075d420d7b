package agent

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// kindSource lists fixed objects per kind and streams events.
type kindSource struct {
	objs   map[string][]api.Object
	events chan datastore.Event
}

func (f *kindSource) List(_ context.Context, kind, _ string) ([]api.Object, int64, error) {
	return f.objs[kind], 5, nil
}

func (f *kindSource) Watch(context.Context, string, int64) <-chan datastore.Event { return f.events }

func clusterInfo(ready *bool, rev string) *api.ClusterInformation {
	ci := &api.ClusterInformation{}
	ci.Kind, ci.APIVersion, ci.Name, ci.ResourceVersion = "ClusterInformation", api.GroupVersion, "default", rev
	ci.Spec.ClusterGUID, ci.Spec.DatastoreReady = "g", ready
	return ci
}

func ptr[T any](v T) *T { return &v }

// waitGate waits until g is open == want.
func waitGate(t *testing.T, g Gate, want bool) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		open, changed := g.State()
		if open == want {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("gate open = %v, want %v", open, want)
		}
	}
}

// TestDatastoreReadyFollowsClusterInformation: the gate is open exactly
// while ClusterInformation default exists with datastoreReady true or
// unset, and reports each change.
func TestDatastoreReadyFollowsClusterInformation(t *testing.T) {
	tests := []struct {
		name    string
		initial *api.ClusterInformation // nil: none
		want    bool
	}{
		{"ready", clusterInfo(ptr(true), "1"), true},
		{"locked", clusterInfo(ptr(false), "1"), false},
		{"flag unset", clusterInfo(nil, "1"), true},
		{"no ClusterInformation", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := &kindSource{objs: map[string][]api.Object{}, events: make(chan datastore.Event, 10)}
			if tc.initial != nil {
				src.objs["ClusterInformation"] = []api.Object{tc.initial}
			}
			w := confwatch.New(src, quiet(), nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go w.Run(ctx)
			d := NewDatastoreReady(w, quiet())
			go d.Run(ctx)
			select {
			case <-d.Known():
			case <-time.After(5 * time.Second):
				t.Fatal("gate never known")
			}
			if open, _ := d.State(); open != tc.want {
				t.Fatalf("open = %v at start, want %v", open, tc.want)
			}
			// Then: lock, unlock, delete.
			src.events <- datastore.Event{Type: datastore.Modified, Object: clusterInfo(ptr(false), "10"), Revision: 10}
			waitGate(t, d, false)
			src.events <- datastore.Event{Type: datastore.Modified, Object: clusterInfo(ptr(true), "11"), Revision: 11}
			waitGate(t, d, true)
			src.events <- datastore.Event{Type: datastore.Deleted, Object: clusterInfo(ptr(true), "12"), Revision: 12}
			waitGate(t, d, false)
		})
	}
}

// TestLockedDatastoreHoldsDataplane: while the datastore is locked the
// endpoint routes and sysctls, blackholes and policy stay as programmed
// whatever changes; the unlock programs the current state.
func TestLockedDatastoreHoldsDataplane(t *testing.T) {
	src := &kindSource{objs: map[string][]api.Object{
		"ClusterInformation": {clusterInfo(ptr(true), "1")},
		"WorkloadEndpoint":   {wep("n1", "a", "cali1", 2, "10.0.0.1/32")},
	}, events: make(chan datastore.Event, 10)}
	w := confwatch.New(src, quiet(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	gate := NewDatastoreReady(w, quiet())
	go gate.Run(ctx)
	<-gate.Known()

	s := &sink{got: map[string][]routes.Route{}, ch: make(chan struct{}, 1)}
	var mu sync.Mutex
	sysctls := map[string]bool{}
	e := NewEndpoints("n1", w, s, func(path, _ string) error {
		mu.Lock()
		defer mu.Unlock()
		sysctls[path] = true
		return nil
	}, time.Hour, quiet())
	e.Gate = gate
	go e.Run(ctx)

	v4 := &countingApplier{}
	p := NewPolicy(PolicyConfig{Node: "n1", Resync: time.Hour, Logger: quiet()}, w, v4, nil)
	p.Gate = gate
	go p.Run(ctx)

	blocks := make(chan ipam.BlockSnapshot, 2)
	b := NewBlackholes("n1", func(context.Context) <-chan ipam.BlockSnapshot { return blocks }, s, quiet())
	b.Gate = gate
	go b.Run(ctx)
	blocks <- ipam.BlockSnapshot{Affinity: map[netip.Prefix]string{netip.MustParsePrefix("10.0.0.0/26"): "n1"}}
	blackholes := func() string {
		s.mu.Lock()
		defer s.mu.Unlock()
		out := ""
		for _, r := range s.got[routes.SourceBlackhole] {
			out += r.Dst.String() + " "
		}
		return out
	}

	s.wait(t, "10.0.0.1/32@cali1 ")
	waitFor(t, "first policy apply", func() bool { return v4.n.Load() >= 1 })
	waitFor(t, "first blackholes", func() bool { return blackholes() == "10.0.0.0/26 " })

	// Lock, then change what each actor follows.
	src.events <- datastore.Event{Type: datastore.Modified, Object: clusterInfo(ptr(false), "10"), Revision: 10}
	waitGate(t, gate, false)
	time.Sleep(100 * time.Millisecond) // the actors see the gate close
	applies := v4.n.Load()
	src.events <- datastore.Event{Type: datastore.Added, Object: wep("n1", "b", "cali2", 11, "10.0.0.2/32"), Revision: 11}
	blocks <- ipam.BlockSnapshot{Affinity: map[netip.Prefix]string{netip.MustParsePrefix("10.0.0.0/26"): "n1", netip.MustParsePrefix("10.0.0.64/26"): "n1"}}
	time.Sleep(500 * time.Millisecond)
	s.mu.Lock()
	held := len(s.got[routes.SourceWorkloads]) == 1
	s.mu.Unlock()
	mu.Lock()
	cali2 := sysctls["net/ipv4/conf/cali2/proxy_arp"]
	mu.Unlock()
	if !held || cali2 || v4.n.Load() != applies || blackholes() != "10.0.0.0/26 " {
		t.Fatalf("locked datastore: routes held %v, cali2 sysctls written %v, policy applies %d → %d, blackholes %q",
			held, cali2, applies, v4.n.Load(), blackholes())
	}

	// Unlock: everything catches up.
	src.events <- datastore.Event{Type: datastore.Modified, Object: clusterInfo(ptr(true), "12"), Revision: 12}
	s.wait(t, "10.0.0.1/32@cali1 10.0.0.2/32@cali2 ")
	waitFor(t, "policy programmed after the unlock", func() bool { return v4.n.Load() > applies })
	waitFor(t, "blackholes after the unlock", func() bool { return blackholes() == "10.0.0.0/26 10.0.0.64/26 " })
	waitFor(t, "sysctls after the unlock", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return sysctls["net/ipv4/conf/cali2/proxy_arp"]
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
