package health

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable time source for the timeout logic.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestAggregatorSummary(t *testing.T) {
	type step struct {
		advance   time.Duration
		report    string // component name; "" for none
		live      bool
		ready     bool
		wantLive  bool
		wantReady bool
	}
	tests := []struct {
		name     string
		register func(a *Aggregator) map[string]*Reporter
		steps    []step
	}{
		{
			name:     "no components is live and ready",
			register: func(a *Aggregator) map[string]*Reporter { return nil },
			steps:    []step{{wantLive: true, wantReady: true}},
		},
		{
			name: "new component is live but not ready until it says so",
			register: func(a *Aggregator) map[string]*Reporter {
				return map[string]*Reporter{"bgp": a.Register("bgp", true, true, 0)}
			},
			steps: []step{
				{wantLive: true, wantReady: false},
				{report: "bgp", live: true, ready: true, wantLive: true, wantReady: true},
				{report: "bgp", live: true, ready: false, wantLive: true, wantReady: false},
			},
		},
		{
			name: "every component must be ready",
			register: func(a *Aggregator) map[string]*Reporter {
				return map[string]*Reporter{
					"bgp":       a.Register("bgp", true, true, 0),
					"dataplane": a.Register("dataplane", true, true, 0),
				}
			},
			steps: []step{
				{report: "bgp", live: true, ready: true, wantLive: true, wantReady: false},
				{report: "dataplane", live: true, ready: true, wantLive: true, wantReady: true},
			},
		},
		{
			name: "liveness and readiness are separate",
			register: func(a *Aggregator) map[string]*Reporter {
				return map[string]*Reporter{"confwatch": a.Register("confwatch", true, true, 0)}
			},
			steps: []step{
				{report: "confwatch", live: false, ready: true, wantLive: false, wantReady: true},
				{report: "confwatch", live: true, ready: false, wantLive: true, wantReady: false},
			},
		},
		{
			name: "component outside readiness does not affect it",
			register: func(a *Aggregator) map[string]*Reporter {
				return map[string]*Reporter{
					"etcd":      a.Register("etcd", true, false, 0),
					"dataplane": a.Register("dataplane", false, true, 0),
				}
			},
			steps: []step{
				{report: "dataplane", live: false, ready: true, wantLive: true, wantReady: true},
				{report: "etcd", live: false, ready: false, wantLive: false, wantReady: true},
			},
		},
		{
			name: "stale report is neither live nor ready",
			register: func(a *Aggregator) map[string]*Reporter {
				return map[string]*Reporter{"dataplane": a.Register("dataplane", true, true, 10*time.Second)}
			},
			steps: []step{
				{report: "dataplane", live: true, ready: true, wantLive: true, wantReady: true},
				{advance: 10 * time.Second, wantLive: true, wantReady: true},
				{advance: time.Second, wantLive: false, wantReady: false},
				{report: "dataplane", live: true, ready: true, wantLive: true, wantReady: true},
			},
		},
		{
			name: "component that never reports times out from registration",
			register: func(a *Aggregator) map[string]*Reporter {
				return map[string]*Reporter{"bgp": a.Register("bgp", true, false, 30*time.Second)}
			},
			steps: []step{
				{advance: 30 * time.Second, wantLive: true, wantReady: true},
				{advance: time.Millisecond, wantLive: false, wantReady: true},
			},
		},
		{
			name: "no timeout never goes stale",
			register: func(a *Aggregator) map[string]*Reporter {
				return map[string]*Reporter{"cni": a.Register("cni", true, true, 0)}
			},
			steps: []step{
				{report: "cni", live: true, ready: true, wantLive: true, wantReady: true},
				{advance: 1000 * time.Hour, wantLive: true, wantReady: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			a := NewAggregator()
			a.Now = clock.Now
			reps := tt.register(a)
			for i, s := range tt.steps {
				clock.Advance(s.advance)
				if s.report != "" {
					reps[s.report].Report(s.live, s.ready, "")
				}
				got := a.Summary()
				if got.Live != s.wantLive || got.Ready != s.wantReady {
					t.Fatalf("step %d: live=%v ready=%v, want live=%v ready=%v (%+v)", i, got.Live, got.Ready, s.wantLive, s.wantReady, got.Components)
				}
			}
		})
	}
}

func TestSummaryRows(t *testing.T) {
	clock := newFakeClock()
	a := NewAggregator()
	a.Now = clock.Now
	bgp := a.Register("bgp", true, true, 20*time.Second)
	a.Register("agent", true, false, 0)
	bgp.Report(true, false, "2 of 3 peers down")
	clock.Advance(21 * time.Second)

	got := a.Summary().Components
	if len(got) != 2 || got[0].Name != "agent" || got[1].Name != "bgp" {
		t.Fatalf("components = %+v, want agent then bgp", got)
	}
	b := got[1]
	if b.Detail != "2 of 3 peers down" || b.Timeout != 20*time.Second || !b.Stale || b.IsLive() || b.IsReady() {
		t.Errorf("bgp row = %+v, want stale with detail and 20s timeout", b)
	}
	if want := clock.Now().Add(-21 * time.Second); !b.LastReport.Equal(want) {
		t.Errorf("bgp LastReport = %v, want %v", b.LastReport, want)
	}
	if !got[0].IsReady() {
		t.Errorf("agent does not take part in readiness but counts as not ready")
	}
}

func TestRegisterAgainReplaces(t *testing.T) {
	a := NewAggregator()
	old := a.Register("bgp", true, true, 0)
	cur := a.Register("bgp", true, true, 0)
	old.Report(true, true, "old")
	if s := a.Summary(); s.Ready || len(s.Components) != 1 {
		t.Fatalf("report through replaced reporter counted: %+v", s)
	}
	cur.Report(true, true, "new")
	if s := a.Summary(); !s.Ready || s.Components[0].Detail != "new" {
		t.Fatalf("summary = %+v, want ready with detail new", s)
	}
}
