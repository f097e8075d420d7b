package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

type countingApplier struct{ n atomic.Int64 }

func (c *countingApplier) Apply(context.Context, *policy.Family) error {
	c.n.Add(1)
	return nil
}

func (c *countingApplier) Invalidate() {}

// FelixConfiguration iptablesRefreshInterval steers how often the policy
// actor re-applies (and so repairs drift), node config over default.
func TestPolicyRefreshIntervalFromFelixConfiguration(t *testing.T) {
	fc := func(name string, d time.Duration) *api.FelixConfiguration {
		f := &api.FelixConfiguration{}
		f.Kind, f.APIVersion, f.Name, f.ResourceVersion = "FelixConfiguration", api.GroupVersion, name, "3"
		f.Spec.IptablesRefreshInterval = &api.Duration{Duration: d}
		return f
	}
	ctx, cancel, src, w := runWatcher()
	defer cancel()
	v4 := &countingApplier{}
	p := NewPolicy(PolicyConfig{Node: "n1", Resync: time.Hour, Logger: quiet()}, w, v4, nil)
	go p.Run(ctx)

	// Only the hour-long default: one apply (the snapshot), then quiet.
	time.Sleep(300 * time.Millisecond)
	if n := v4.n.Load(); n != 1 {
		t.Fatalf("%d applies before any refresh interval is configured, want 1", n)
	}
	src.events <- datastore.Event{Type: datastore.Added, Object: fc("default", time.Hour), Revision: 20}
	src.events <- datastore.Event{Type: datastore.Added, Object: fc("node.n1", 50*time.Millisecond), Revision: 21}
	time.Sleep(100 * time.Millisecond)
	start := v4.n.Load()
	time.Sleep(600 * time.Millisecond)
	if got := v4.n.Load() - start; got < 5 {
		t.Errorf("%d applies in 600ms with node.n1 iptablesRefreshInterval 50ms, want several", got)
	}
}
