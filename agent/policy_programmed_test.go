package agent

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// failFirstApplier fails its first n applies.
type failFirstApplier struct{ n int }

func (f *failFirstApplier) Apply(context.Context, *policy.Family) error {
	if f.n > 0 {
		f.n--
		return errors.New("iptables-restore: exit status 1")
	}
	return nil
}

func (f *failFirstApplier) Invalidate() {}

// Programmed hears of a snapshot only once it is in the kernel: CNI ADD
// waits on it, so a failed apply must not count.
func TestPolicyProgrammedReport(t *testing.T) {
	p := NewPolicy(PolicyConfig{Node: "n1", Resync: time.Minute, Logger: slog.New(slog.DiscardHandler)}, nil, &failFirstApplier{n: 1}, nil)
	var reports [][]api.WorkloadEndpoint
	p.Programmed = func(weps []api.WorkloadEndpoint) { reports = append(reports, weps) }
	for _, ep := range []struct{ node, name string }{{"n1", "local"}, {"n2", "remote"}} {
		w := &api.WorkloadEndpoint{Spec: api.WorkloadEndpointSpec{Node: ep.node, Orchestrator: "k8s", Pod: ep.name, Endpoint: "eth0",
			InterfaceName: "cali" + ep.name, IPNetworks: []string{"10.0.0.1/32"}}}
		w.Kind, w.Namespace, w.Name, w.ResourceVersion = "WorkloadEndpoint", "default", ep.name, "5"
		p.apply([]confwatch.Update{{Type: confwatch.Set, Key: confwatch.KeyOf(w), Object: w}})
	}
	if err := p.program(context.Background()); err == nil {
		t.Fatal("the failing apply succeeded")
	}
	if len(reports) != 0 {
		t.Fatalf("a failed apply was reported programmed: %v", reports)
	}
	if err := p.program(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(reports) != 1 || len(reports[0]) != 2 {
		t.Fatalf("reports after a successful apply: %v, want one with both endpoints", reports)
	}
}

// rendezvousApplier's Apply waits up to a second for the other family's
// to start, and says whether it did.
type rendezvousApplier struct {
	started, other chan struct{}
	met            bool
}

func (r *rendezvousApplier) Apply(context.Context, *policy.Family) error {
	close(r.started)
	select {
	case <-r.other:
		r.met = true
	case <-time.After(time.Second):
	}
	return nil
}

func (r *rendezvousApplier) Invalidate() {}

// The two families are programmed side by side: a change (a new pod's
// endpoint, which its CNI ADD waits for) costs one restore's time.
func TestPolicyFamiliesSideBySide(t *testing.T) {
	c4, c6 := make(chan struct{}), make(chan struct{})
	v4, v6 := &rendezvousApplier{started: c4, other: c6}, &rendezvousApplier{started: c6, other: c4}
	p := NewPolicy(PolicyConfig{Node: "n1", Resync: time.Minute, Logger: slog.New(slog.DiscardHandler)}, nil, v4, v6)
	if err := p.program(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !v4.met || !v6.met {
		t.Errorf("IPv4 and IPv6 programmed one after the other (v4 saw v6 start: %v, v6 saw v4: %v)", v4.met, v6.met)
	}
}
