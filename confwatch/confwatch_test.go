package confwatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// fakeSource is a hand-written datastore: lists come from a map, watch
// events from a channel the test feeds.
type fakeSource struct {
	mu        sync.Mutex
	objs      map[string][]api.Object // by kind
	revs      map[string]int64
	listFails int
	failKind  map[string]int // kind -> lists of it that fail
	lists     map[string]int // kind -> lists answered
	events    chan datastore.Event
	watchFrom int64
}

func newFake() *fakeSource {
	return &fakeSource{objs: map[string][]api.Object{}, revs: map[string]int64{}, failKind: map[string]int{},
		lists: map[string]int{}, events: make(chan datastore.Event, 100)}
}

func (f *fakeSource) List(ctx context.Context, kind, ns string) ([]api.Object, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listFails > 0 {
		f.listFails--
		return nil, 0, errors.New("etcd unavailable")
	}
	if f.failKind[kind] > 0 {
		f.failKind[kind]--
		return nil, 0, errors.New("timeout")
	}
	f.lists[kind]++
	rev := f.revs[kind]
	if rev == 0 {
		rev = 10
	}
	return f.objs[kind], rev, nil
}

func (f *fakeSource) Watch(ctx context.Context, kind string, from int64) <-chan datastore.Event {
	f.mu.Lock()
	f.watchFrom = from
	f.mu.Unlock()
	return f.events
}

func pool(name string, rev int64) api.Object {
	p := &api.IPPool{}
	p.Kind, p.APIVersion, p.Name = "IPPool", api.GroupVersion, name
	p.ResourceVersion = strconv.FormatInt(rev, 10)
	p.Spec.CIDR = "10.0.0.0/16"
	return p
}

func node(name string, rev int64) api.Object {
	n := &api.Node{}
	n.Kind, n.APIVersion, n.Name = "Node", api.GroupVersion, name
	n.ResourceVersion = strconv.FormatInt(rev, 10)
	return n
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func start(t *testing.T, src Source) (*Watcher, context.CancelFunc) {
	t.Helper()
	w := New(src, quiet(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
	})
	return w, cancel
}

func next(t *testing.T, s *Subscription) []Update {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ups, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return ups
}

func names(ups []Update) []string {
	var out []string
	for _, u := range ups {
		out = append(out, u.Type.String()+":"+u.Key.String())
	}
	sort.Strings(out)
	return out
}

func TestSnapshotThenUpdates(t *testing.T) {
	f := newFake()
	f.objs["IPPool"] = []api.Object{pool("a", 5), pool("b", 6)}
	f.objs["Node"] = []api.Object{node("n1", 7)}
	f.revs["IPPool"], f.revs["Node"] = 8, 9
	w := New(f, quiet(), nil)
	pools := w.Subscribe("ippools") // before Run: gets the snapshot at sync
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)

	select {
	case <-w.Synced():
	case <-time.After(5 * time.Second):
		t.Fatal("never synced")
	}
	if got := names(next(t, pools)); !slices.Equal(got, []string{"set:IPPool(a)", "set:IPPool(b)"}) {
		t.Errorf("snapshot = %v", got)
	}
	// The watch replays from the lowest list revision + 1.
	f.mu.Lock()
	if f.watchFrom != 9 {
		t.Errorf("watch from %d, want 9 (lowest list revision 8, plus one)", f.watchFrom)
	}
	f.mu.Unlock()

	// Replayed events no newer than the listed object are dropped; newer
	// ones are delivered; Node events don't reach an IPPool subscriber.
	f.events <- datastore.Event{Type: datastore.Modified, Object: pool("a", 5), Revision: 5}
	f.events <- datastore.Event{Type: datastore.Modified, Object: node("n1", 11), Revision: 11}
	f.events <- datastore.Event{Type: datastore.Modified, Object: pool("b", 12), Revision: 12}
	f.events <- datastore.Event{Type: datastore.Deleted, Object: pool("a", 5), Revision: 13}
	var got []Update
	for len(got) < 2 {
		got = append(got, next(t, pools)...)
	}
	if len(got) != 2 || got[0].Type != Set || got[0].Key.Name != "b" || got[0].Object.Meta().ResourceVersion != "12" || got[1].Type != Delete || got[1].Key.Name != "a" {
		t.Errorf("updates = %v", names(got))
	}

	// A late subscriber gets the current state as its snapshot.
	all := w.Subscribe()
	if got := names(next(t, all)); !slices.Equal(got, []string{"set:IPPool(b)", "set:Node(n1)"}) {
		t.Errorf("late snapshot = %v", got)
	}
}

func TestEmptySnapshotIsDelivered(t *testing.T) {
	f := newFake()
	w, _ := start(t, f)
	s := w.Subscribe("Node")
	if ups := next(t, s); len(ups) != 0 {
		t.Errorf("snapshot of an empty datastore = %v", names(ups))
	}
	_ = w
}

func TestListRetriedUntilItWorks(t *testing.T) {
	f := newFake()
	f.listFails = 2
	f.objs["Node"] = []api.Object{node("n1", 3)}
	w, _ := start(t, f)
	select {
	case <-w.Synced():
	case <-time.After(5 * time.Second):
		t.Fatal("never synced after transient list errors")
	}
	if got := names(next(t, w.Subscribe("Node"))); !slices.Equal(got, []string{"set:Node(n1)"}) {
		t.Errorf("snapshot = %v", got)
	}
}

// A list that fails is retried alone: the kinds listed before it are not
// listed again, and what they returned is in the snapshot.
func TestListRetryKeepsListedKinds(t *testing.T) {
	f := newFake()
	f.objs["IPPool"] = []api.Object{pool("a", 5)}
	f.objs["WorkloadEndpoint"] = []api.Object{wep("ns1", "w1", 6)}
	f.failKind["WorkloadEndpoint"] = 3
	w, _ := start(t, f)
	if got := names(next(t, w.Subscribe("IPPool", "WorkloadEndpoint"))); !slices.Equal(got, []string{"set:IPPool(a)", "set:WorkloadEndpoint(ns1/w1)"}) {
		t.Errorf("snapshot = %v", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range api.Kinds() {
		if n := f.lists[k.Kind]; n != 1 {
			t.Errorf("%s listed %d times, want once", k.Kind, n)
		}
	}
}

// A Reset (relist after compaction) reaches subscribers as the difference.
func TestResetDeliveredAsDiff(t *testing.T) {
	f := newFake()
	f.objs["Node"] = []api.Object{node("keep", 3), node("change", 4), node("gone", 5)}
	w, _ := start(t, f)
	s := w.Subscribe("Node")
	next(t, s) // snapshot
	f.events <- datastore.Event{Type: datastore.Reset, Revision: 50, Objects: []api.Object{
		node("keep", 3), node("change", 40), node("new", 41),
	}}
	got := names(next(t, s))
	want := []string{"delete:Node(gone)", "set:Node(change)", "set:Node(new)"}
	if !slices.Equal(got, want) {
		t.Errorf("reset diff = %v, want %v", got, want)
	}
	// Afterwards the cache reflects the reset: an old event is ignored.
	f.events <- datastore.Event{Type: datastore.Modified, Object: node("change", 39), Revision: 39}
	f.events <- datastore.Event{Type: datastore.Added, Object: node("later", 60), Revision: 60}
	if got := names(next(t, s)); !slices.Equal(got, []string{"set:Node(later)"}) {
		t.Errorf("after reset = %v", got)
	}
}

// A slow subscriber never blocks the watcher; it gets everything batched.
func TestSlowSubscriberBatches(t *testing.T) {
	f := newFake()
	w, _ := start(t, f)
	s := w.Subscribe("Node")
	next(t, s)
	for i := 1; i <= 50; i++ {
		f.events <- datastore.Event{Type: datastore.Added, Object: node("n"+strconv.Itoa(i), int64(100+i)), Revision: int64(100 + i)}
	}
	seen := 0
	deadline := time.Now().Add(5 * time.Second)
	for seen < 50 && time.Now().Before(deadline) {
		seen += len(next(t, s))
	}
	if seen != 50 {
		t.Errorf("received %d of 50 updates", seen)
	}
}

func TestNextHonoursContext(t *testing.T) {
	f := newFake()
	w, _ := start(t, f)
	s := w.Subscribe("Node")
	next(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Next on an idle subscription with a done ctx = %v", err)
	}
}

// healthLog records every report, in order.
type healthLog struct {
	mu      sync.Mutex
	reports []string
}

func (h *healthLog) Report(live, ready bool, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reports = append(h.reports, fmt.Sprintf("live=%v ready=%v %s", live, ready, detail))
}

func (h *healthLog) last() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.reports) == 0 {
		return ""
	}
	return h.reports[len(h.reports)-1]
}

// An unreachable datastore makes the watcher not ready, still live, with
// the error in the detail, and keeps the cache; the stream's InSync (or a
// Reset) makes it ready again. Other watch errors (an object that does not
// decode) change nothing.
func TestHealthFollowsTheDatastore(t *testing.T) {
	unreachable := &datastore.Error{Op: "watch", Kind: "IPPool", Err: fmt.Errorf("kubernetes API server https://10.0.0.1:6443 unreachable: %w", datastore.ErrUnavailable)}
	for _, tc := range []struct {
		name   string
		events []datastore.Event
		want   string // the last report, as a prefix
	}{
		{"in sync", nil, "live=true ready=true in sync"},
		{"a bad object", []datastore.Event{{Err: &datastore.Error{Op: "watch", Kind: "IPPool", Err: errors.New("decode: bad")}}}, "live=true ready=true in sync"},
		{"unreachable", []datastore.Event{{Err: unreachable}, {Err: unreachable}},
			"live=true ready=false datastore unreachable since "},
		{"back: InSync", []datastore.Event{{Err: unreachable}, {Type: datastore.InSync}}, "live=true ready=true in sync"},
		{"back: Reset", []datastore.Event{{Err: unreachable}, {Type: datastore.Reset, Objects: []api.Object{pool("a", 5)}}}, "live=true ready=true in sync"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.objs["IPPool"] = []api.Object{pool("a", 5)}
			h := &healthLog{}
			w := New(f, quiet(), nil)
			w.ReportHealthTo(h)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			defer func() { cancel(); <-done }()
			sub := w.Subscribe()
			next(t, sub)
			for _, ev := range tc.events {
				f.events <- ev
			}
			// A change after the events shows they were all handled.
			f.events <- datastore.Event{Type: datastore.Added, Object: pool("z", 50), Revision: 50}
			if ups := next(t, sub); len(ups) != 1 || ups[0].Key.Name != "z" {
				t.Fatalf("updates %v, want z added", names(ups))
			}
			got := h.last()
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("last report %q, want %q...", got, tc.want)
			}
			if tc.name == "unreachable" && !strings.Contains(got, "https://10.0.0.1:6443 unreachable") {
				t.Errorf("report %q does not say what is unreachable", got)
			}
			w.mu.Lock()
			_, ok := w.cache[Key{Kind: "IPPool", Name: "a"}]
			w.mu.Unlock()
			if !ok {
				t.Error("the cache lost pool a")
			}
		})
	}
}

// profile is a Profile as the Kubernetes datastore computes it from a
// Namespace: its resourceVersion is "<namespace's>/", not a number.
func profile(name, rv, env string) api.Object {
	p := &api.Profile{}
	p.Kind, p.APIVersion, p.Name = "Profile", api.GroupVersion, name
	p.ResourceVersion = rv
	p.Spec.LabelsToApply = map[string]string{"env": env}
	return p
}

// Objects whose resourceVersion is not a number (KDD's profiles) still
// reach subscribers when a Reset brings a new version of them.
func TestResetDiffNonNumericVersions(t *testing.T) {
	f := newFake()
	f.objs["Profile"] = []api.Object{profile("kns.a", "10/", "dev"), profile("kns.b", "11/", "dev")}
	w, _ := start(t, f)
	s := w.Subscribe("Profile")
	next(t, s)
	f.events <- datastore.Event{Type: datastore.Reset, Revision: 50, Objects: []api.Object{
		profile("kns.a", "10/", "dev"), profile("kns.b", "42/", "prod"),
	}}
	ups := next(t, s)
	if got := names(ups); !slices.Equal(got, []string{"set:Profile(kns.b)"}) {
		t.Fatalf("reset diff = %v, want only the changed profile", got)
	}
	if env := ups[0].Object.(*api.Profile).Spec.LabelsToApply["env"]; env != "prod" {
		t.Errorf("profile kns.b env = %q after the reset, want prod", env)
	}
}
