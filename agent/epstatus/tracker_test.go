package epstatus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// clock is a settable time source.
type clock struct{ t time.Time }

func (c *clock) now() time.Time               { return c.t }
func (c *clock) step(d time.Duration)         { c.t = c.t.Add(d) }
func (c *clock) at(d time.Duration) time.Time { return time.Unix(1700000000, 0).Add(d) }

func newClock() *clock { return &clock{t: time.Unix(1700000000, 0)} }

func wep(node, ns, pod, container, rev, iface string, ips ...string) api.WorkloadEndpoint {
	w := api.WorkloadEndpoint{
		ObjectMeta: api.ObjectMeta{Namespace: ns, Name: node + "-k8s-" + pod + "-eth0", ResourceVersion: rev},
		Spec: api.WorkloadEndpointSpec{Orchestrator: api.OrchestratorKubernetes, Node: node, Pod: pod, Endpoint: "eth0",
			ContainerID: container, InterfaceName: iface, IPNetworks: ips},
	}
	return w
}

func route(dst, dev string) routes.Route {
	return routes.Route{Dst: netip.MustParsePrefix(dst), Dev: dev}
}

func newTracker(c *clock, reg prometheus.Registerer, max int) *Tracker {
	return New(Config{Node: "n1", Now: c.now, Registerer: reg, MaxRecords: max}, nil)
}

func TestWait(t *testing.T) {
	w := wep("n1", "default", "web", "c1", "20", "cali1", "10.0.0.5/32")
	older := w
	older.ResourceVersion = "19"
	otherDev := route("10.0.0.5/32", "cali2")
	for _, tc := range []struct {
		name    string
		policy  []api.WorkloadEndpoint // nil: never reported
		routes  []routes.Route         // nil: never reported
		missing string                 // "" : programmed
	}{
		{"both", []api.WorkloadEndpoint{w}, []routes.Route{route("10.0.0.5/32", "cali1")}, ""},
		{"newer policy counts", []api.WorkloadEndpoint{func() api.WorkloadEndpoint { n := w; n.ResourceVersion = "25"; return n }()}, []routes.Route{route("10.0.0.5/32", "cali1")}, ""},
		{"no policy yet", nil, []routes.Route{route("10.0.0.5/32", "cali1")}, "policy dataplane has not been programmed yet"},
		{"not in policy", []api.WorkloadEndpoint{}, []routes.Route{route("10.0.0.5/32", "cali1")}, "its policy is not programmed"},
		{"older revision", []api.WorkloadEndpoint{older}, []routes.Route{route("10.0.0.5/32", "cali1")}, "programmed for revision 19 only"},
		{"no routes yet", []api.WorkloadEndpoint{w}, nil, "route table has not been programmed yet"},
		{"route missing", []api.WorkloadEndpoint{w}, []routes.Route{}, "route 10.0.0.5/32 dev cali1 not installed"},
		{"route via another veth", []api.WorkloadEndpoint{w}, []routes.Route{otherDev}, "route 10.0.0.5/32 dev cali1 not installed"},
		{"blackhole does not count", []api.WorkloadEndpoint{w}, []routes.Route{{Dst: netip.MustParsePrefix("10.0.0.5/32"), Type: routes.Blackhole, Dev: "cali1"}}, "not installed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(newClock(), nil, 0)
			if tc.policy != nil {
				tr.PolicyApplied(tc.policy)
			}
			if tc.routes != nil {
				tr.RoutesApplied(tc.routes, nil)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			err := tr.Wait(ctx, "default", w.Name, "20")
			if tc.missing == "" {
				if err != nil {
					t.Fatalf("Wait: %v", err)
				}
				return
			}
			var np *NotProgrammedError
			if !errors.As(err, &np) || !strings.Contains(err.Error(), tc.missing) {
				t.Fatalf("Wait = %v, want a NotProgrammedError saying %q", err, tc.missing)
			}
			if !strings.Contains(err.Error(), "node n1") || !strings.Contains(err.Error(), "default/"+w.Name) {
				t.Errorf("error does not name the node and endpoint: %v", err)
			}
		})
	}
}

// Wait returns as soon as the second half arrives, whichever it is.
func TestWaitWakesUp(t *testing.T) {
	w := wep("n1", "default", "web", "c1", "7", "cali1", "10.0.0.5/32")
	tr := newTracker(newClock(), nil, 0)
	tr.RoutesApplied([]routes.Route{route("10.0.0.5/32", "cali1")}, nil)
	done := make(chan error, 1)
	go func() { done <- tr.Wait(context.Background(), "default", w.Name, "7") }()
	select {
	case err := <-done:
		t.Fatalf("Wait returned before the policy was programmed: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	tr.PolicyApplied([]api.WorkloadEndpoint{w})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait still blocked after policy and routes were reported")
	}
}

func stageOrder(t *testing.T, r Record, want ...Stage) {
	t.Helper()
	var prev time.Time
	for _, s := range want {
		at, ok := r.At(s)
		if !ok {
			t.Fatalf("stage %s not recorded: %+v", s, r.Stages)
		}
		if at.Before(prev) {
			t.Errorf("stage %s at %v, before the previous stage (%v)", s, at, prev)
		}
		prev = at
	}
}

// A local endpoint ADDed through the agent: every stage, in order, with
// its histogram observation.
func TestLocalTimeline(t *testing.T) {
	c := newClock()
	reg := prometheus.NewRegistry()
	tr := newTracker(c, reg, 0)
	key := Key{"default", "n1-k8s-web-eth0"}
	tr.Advertised([]netip.Prefix{netip.MustParsePrefix("10.9.0.0/26")}) // another block
	tr.ADDReceived(key, "web", "c1", c.now())
	c.step(3 * time.Millisecond)
	tr.ADDProgress(key, "c1", StageIPAM, c.now())
	c.step(time.Millisecond)
	tr.ADDProgress(key, "c1", StageVeth, c.now())
	c.step(time.Millisecond)
	w := wep("n1", "default", "web", "c1", "30", "cali1", "10.0.0.5/32")
	tr.ADDWritten(&w, c.now())
	c.step(time.Millisecond)
	tr.mu.Lock()
	tr.observeLocked([]confwatch.Update{{Type: confwatch.Set, Object: &w}}, false)
	tr.mu.Unlock()
	c.step(2 * time.Millisecond)
	tr.RoutesApplied([]routes.Route{route("10.0.0.5/32", "cali1")}, nil)
	c.step(10 * time.Millisecond)
	tr.PolicyApplied([]api.WorkloadEndpoint{w})
	c.step(5 * time.Millisecond)
	tr.Advertised([]netip.Prefix{netip.MustParsePrefix("10.9.0.0/26"), netip.MustParsePrefix("10.0.0.0/26")})
	tr.ADDProgress(key, "c1", StageADDReturned, c.now())

	recs := tr.Timeline("default", "web")
	if len(recs) != 1 {
		t.Fatalf("timelines of default/web: %d, want 1", len(recs))
	}
	r := recs[0]
	stageOrder(t, r, StageADDReceived, StageIPAM, StageVeth, StageEndpointWritten, StageAgentSeen, StageRoutes, StagePolicy, StageAdvertised, StageADDReturned)
	if at, _ := r.At(StagePolicy); !at.Equal(c.at(18 * time.Millisecond)) {
		t.Errorf("policy_programmed at %v, want 18ms after the ADD", at.Sub(c.at(0)))
	}
	if r.Revision != "30" || r.EndpointNode != "n1" || r.Node != "n1" || len(r.Addresses) != 1 {
		t.Errorf("record identity: %+v", r)
	}
	// One observation per stage after the first.
	if n := testutil.CollectAndCount(tr.stage); n != 8 {
		t.Errorf("stage histogram series: %d, want 8", n)
	}
	if got := samples(t, reg, "policy_programmed"); got != 1 {
		t.Errorf("policy_programmed observations: %v", got)
	}
}

// samples is the sample count of the stage's histogram.
func samples(t *testing.T, reg *prometheus.Registry, stage string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "calico_node_endpoint_stage_seconds" {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "stage" && l.GetValue() == stage {
					return m.Histogram.GetSampleCount()
				}
			}
		}
	}
	t.Fatalf("no %s series", stage)
	return 0
}

// A block advertised before the pod existed covers it from the moment
// its address was assigned.
func TestAdvertisedBeforeThePod(t *testing.T) {
	c := newClock()
	tr := newTracker(c, nil, 0)
	tr.Advertised([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/26")})
	key := Key{"default", "n1-k8s-web-eth0"}
	tr.ADDReceived(key, "web", "c1", c.now())
	c.step(4 * time.Millisecond)
	tr.ADDProgress(key, "c1", StageIPAM, c.now())
	c.step(time.Millisecond)
	w := wep("n1", "default", "web", "c1", "30", "cali1", "10.0.0.5/32")
	tr.ADDWritten(&w, c.now())
	r := tr.Timeline("default", "web")[0]
	if at, ok := r.At(StageAdvertised); !ok || !at.Equal(c.at(4*time.Millisecond)) {
		t.Errorf("route_advertised = %v, %v; want at IPAM (4ms)", at.Sub(c.at(0)), ok)
	}
}

// Another node's endpoint: programmed here once policy holds it and a
// route covers its address, whichever comes last.
func TestRemoteTimeline(t *testing.T) {
	c := newClock()
	tr := newTracker(c, nil, 0)
	tr.mu.Lock()
	tr.observeLocked(nil, true) // the snapshot
	tr.mu.Unlock()
	tr.RoutesApplied([]routes.Route{{Dst: netip.MustParsePrefix("10.1.0.0/26"), Via: netip.MustParseAddr("192.0.2.2")}}, nil)
	c.step(time.Second)
	w := wep("n2", "default", "db", "c9", "40", "cali9", "10.1.0.7/32")
	tr.mu.Lock()
	tr.observeLocked([]confwatch.Update{{Type: confwatch.Set, Object: &w}}, false)
	tr.mu.Unlock()
	c.step(20 * time.Millisecond)
	r := tr.Timeline("default", "db")[0]
	if _, ok := r.At(StageRemoteProgrammed); ok {
		t.Fatal("remote_programmed before the policy had it")
	}
	tr.PolicyApplied([]api.WorkloadEndpoint{w})
	r = tr.Timeline("default", "db")[0]
	at, ok := r.At(StageRemoteProgrammed)
	if !ok || !at.Equal(c.at(time.Second+20*time.Millisecond)) {
		t.Errorf("remote_programmed = %v %v, want when the policy had it", at, ok)
	}
	if r.Node != "n1" || r.EndpointNode != "n2" {
		t.Errorf("record nodes: %+v", r)
	}
	// Local stages are never claimed for it.
	if _, ok := r.At(StagePolicy); ok {
		t.Error("a remote endpoint got policy_programmed")
	}
}

// A new sandbox starts a new timeline; an update of an endpoint whose
// timeline was dropped starts none; at most MaxRecords are kept.
func TestRecordsBounded(t *testing.T) {
	c := newClock()
	tr := newTracker(c, nil, 3)
	observe := func(ws ...api.WorkloadEndpoint) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for i := range ws {
			tr.observeLocked([]confwatch.Update{{Type: confwatch.Set, Object: &ws[i]}}, false)
		}
	}
	observe(wep("n1", "default", "a", "c1", "1", "cali1", "10.0.0.1/32"))
	observe(wep("n1", "default", "a", "c2", "2", "cali1", "10.0.0.2/32")) // new sandbox
	if got := tr.Timeline("default", "a"); len(got) != 2 || got[1].ContainerID != "c2" {
		t.Fatalf("timelines after a new sandbox: %+v", got)
	}
	observe(wep("n1", "default", "b", "c3", "3", "cali2", "10.0.0.3/32"), wep("n1", "default", "c", "c4", "4", "cali3", "10.0.0.4/32"))
	if got := tr.Timeline("default", "a"); len(got) != 1 || got[0].ContainerID != "c2" {
		t.Fatalf("the oldest timeline is not the one dropped: %+v", got)
	}
	observe(wep("n1", "default", "d", "c5", "5", "cali4", "10.0.0.5/32"))
	if got := tr.Timeline("default", "a"); len(got) != 0 {
		t.Fatalf("kept %d timelines of a past the bound", len(got))
	}
	observe(wep("n1", "default", "a", "c2", "6", "cali1", "10.0.0.2/32")) // a label change
	if got := tr.Timeline("default", "a"); len(got) != 0 {
		t.Errorf("an update of a known sandbox started a timeline: %+v", got)
	}
	if len(tr.order) > 3 || len(tr.records) > 3 {
		t.Errorf("kept %d/%d records, bound 3", len(tr.order), len(tr.records))
	}
}

// An endpoint of a pod not networked yet (the Kubernetes datastore has
// one per Pod) starts no timeline; its ADD does.
func TestPodBeforeADDStartsNoTimeline(t *testing.T) {
	c := newClock()
	tr := newTracker(c, nil, 0)
	bare := wep("n1", "default", "a", "", "1", "")
	tr.mu.Lock()
	tr.observeLocked([]confwatch.Update{{Type: confwatch.Set, Object: &bare}}, false)
	tr.mu.Unlock()
	tr.PolicyApplied([]api.WorkloadEndpoint{bare})
	if got := tr.Timeline("default", "a"); len(got) != 0 {
		t.Fatalf("a pod before its ADD has timelines: %+v", got)
	}
	tr.ADDReceived(KeyOf(&bare), "a", "c1", c.now())
	w := wep("n1", "default", "a", "c1", "2", "cali1", "10.0.0.1/32")
	tr.mu.Lock()
	tr.observeLocked([]confwatch.Update{{Type: confwatch.Set, Object: &w}}, false)
	tr.mu.Unlock()
	if got := tr.Timeline("default", "a"); len(got) != 1 || got[0].ContainerID != "c1" {
		t.Fatalf("timelines after the ADD: %+v", got)
	}
}

// The snapshot starts no timelines: those endpoints existed before.
func TestSnapshotStartsNoTimeline(t *testing.T) {
	tr := newTracker(newClock(), nil, 0)
	w := wep("n1", "default", "a", "c1", "1", "cali1", "10.0.0.1/32")
	tr.mu.Lock()
	tr.observeLocked([]confwatch.Update{{Type: confwatch.Set, Object: &w}}, true)
	tr.mu.Unlock()
	if got := tr.Timeline("default", "a"); len(got) != 0 {
		t.Errorf("timelines from the snapshot: %+v", got)
	}
}

func TestADDFailedRecorded(t *testing.T) {
	c := newClock()
	tr := newTracker(c, nil, 0)
	key := Key{"default", "n1-k8s-web-eth0"}
	tr.ADDReceived(key, "web", "c1", c.now())
	tr.ADDFailed(key, "c1", errors.New("policy and routes not programmed within 5s"))
	tr.ADDFailed(key, "other", errors.New("not this ADD's"))
	r := tr.Timeline("default", "web")[0]
	if r.Error != "policy and routes not programmed within 5s" {
		t.Errorf("error = %q", r.Error)
	}
	if _, ok := r.At(StageADDReturned); ok {
		t.Error("a failed ADD has add_returned")
	}
}

// TestRoutesAppliedChanges: fed the route table's changes, pass after
// pass, the tracker's view of the installed routes (and since when each
// has been as it is) is the one it would build from the whole set each
// time: main-table unicast routes only, by destination, a route's time
// kept while it stays the same.
func TestRoutesAppliedChanges(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 3))
		c := newClock()
		tr := newTracker(c, nil, 0)
		// The route table's view: by table and destination, as it keys.
		installed := map[string]routes.Route{}
		ref := map[netip.Prefix]since{}
		for step := range 200 {
			c.step(time.Second)
			before := maps.Clone(installed)
			for range rng.IntN(8) {
				r := routes.Route{Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(16))}), 32),
					Dev: []string{"cali1", "cali2"}[rng.IntN(2)], Table: []int{0, 0, 0, 254, 100}[rng.IntN(5)]}
				if rng.IntN(5) == 0 {
					r.Type, r.Dev = routes.Blackhole, ""
				}
				tbl := r.Table
				if tbl == 0 {
					tbl = 254
				}
				if k := fmt.Sprint(tbl, r.Dst); rng.IntN(3) == 0 {
					delete(installed, k)
				} else {
					installed[k] = r
				}
			}
			// The report: what changed, as the route table reports it.
			var set, del []routes.Route
			for k, r := range before {
				if _, ok := installed[k]; !ok {
					del = append(del, r)
				}
			}
			for k, r := range installed {
				if prev, ok := before[k]; !ok || prev != r {
					set = append(set, r)
				}
			}
			tr.RoutesApplied(set, del)
			// The reference: the whole set, as the tracker took it before.
			next := map[netip.Prefix]since{}
			for _, r := range installed {
				if r.Table != 0 || r.Type != routes.Unicast {
					continue
				}
				s, ok := ref[r.Dst]
				if !ok || s.route != r {
					s = since{r, c.now()}
				}
				next[r.Dst] = s
			}
			ref = next
			tr.mu.Lock()
			got := maps.Clone(tr.installed)
			tr.mu.Unlock()
			if !maps.Equal(got, ref) {
				t.Fatalf("seed %d step %d: tracker has\n%v\nthe whole set gives\n%v", seed, step, got, ref)
			}
		}
	}
}
