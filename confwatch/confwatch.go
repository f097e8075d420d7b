package confwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Source is the part of the datastore the watcher reads.
type Source interface {
	List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error)
	Watch(ctx context.Context, kind string, fromRevision int64) <-chan datastore.Event
}

// UpdateType says what happened to a resource.
type UpdateType int

const (
	// Set means the resource was created or changed; Object is its new value.
	Set UpdateType = iota
	// Delete means the resource is gone; Object is its last known value.
	Delete
)

func (t UpdateType) String() string {
	if t == Delete {
		return "delete"
	}
	return "set"
}

// Key identifies a resource in the cache.
type Key struct {
	Kind      string
	Namespace string
	Name      string
}

func (k Key) String() string {
	if k.Namespace != "" {
		return k.Kind + "(" + k.Namespace + "/" + k.Name + ")"
	}
	return k.Kind + "(" + k.Name + ")"
}

// KeyOf returns the cache key of obj.
func KeyOf(obj api.Object) Key {
	m := obj.Meta()
	return Key{Kind: obj.Type().Kind, Namespace: m.Namespace, Name: m.Name}
}

// Update is one change delivered to a subscriber.
type Update struct {
	Type   UpdateType
	Key    Key
	Object api.Object
}

type entry struct {
	obj api.Object
	rev int64
}

// HealthReporter receives the watcher's health: always live (an
// unreachable datastore is no reason to restart the agent, whose dataplane
// stays as it is), ready while the cache is in sync with a datastore that
// answers. A health.Reporter is one.
type HealthReporter interface {
	Report(live, ready bool, detail string)
}

// Watcher is the cache actor.
type Watcher struct {
	src    Source
	log    *slog.Logger
	kinds  []string
	synced chan struct{}
	health HealthReporter // nil: none

	// unreachable is when the datastore stopped answering the watch
	// (zero while it answers); owned by Run.
	unreachable time.Time

	// mu guards subs, cache and isSynced. Only Run writes the cache; the
	// lock lets Subscribe take a consistent snapshot from any goroutine.
	mu       sync.Mutex
	subs     []*Subscription
	cache    map[Key]entry
	isSynced bool

	counts map[string]int // resources per kind; owned by Run

	events   prometheus.Counter
	resets   prometheus.Counter
	errs     prometheus.Counter
	resource *prometheus.GaugeVec
}

// New builds a watcher over every registered kind. reg may be nil.
func New(src Source, logger *slog.Logger, reg prometheus.Registerer) *Watcher {
	w := &Watcher{
		src:    src,
		log:    logger.With("component", "confwatch"),
		synced: make(chan struct{}),
		cache:  make(map[Key]entry),
		counts: make(map[string]int),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "calico_confwatch_events_total", Help: "Datastore watch events applied to the cache.",
		}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "calico_confwatch_resyncs_total", Help: "Full relists after the watch revision was compacted.",
		}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "calico_confwatch_errors_total", Help: "Datastore list/watch errors.",
		}),
		resource: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "calico_confwatch_resources", Help: "Resources in the cache by kind.",
		}, []string{"kind"}),
	}
	for _, k := range api.Kinds() {
		w.kinds = append(w.kinds, k.Kind)
	}
	if reg != nil {
		reg.MustRegister(w.events, w.resets, w.errs, w.resource)
	}
	return w
}

// ReportHealthTo makes the watcher report its health to r from Run on:
// waiting for the datastore, in sync, or the datastore unreachable since
// when (not ready, still live). Call it before Run.
func (w *Watcher) ReportHealthTo(r HealthReporter) { w.health = r }

func (w *Watcher) report(ready bool, detail string) {
	if w.health != nil {
		w.health.Report(true, ready, detail)
	}
}

// Synced is closed once the first complete list is in the cache.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// Subscribe registers interest in kinds (none = every kind). The first
// batch a subscription returns is the complete current set of those kinds
// as Set updates (the snapshot); later batches carry changes.
func (w *Watcher) Subscribe(kinds ...string) *Subscription {
	s := &Subscription{kinds: map[string]bool{}, notify: make(chan struct{}, 1)}
	for _, k := range kinds {
		if info, ok := api.LookupKind(k); ok {
			s.kinds[info.Kind] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs = append(w.subs, s)
	if w.isSynced {
		s.pushSnapshot(w.cache)
	}
	return s
}

// Run lists, then watches until ctx is done. Datastore errors are retried
// with backoff; Run only returns when ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	rev, err := w.initialList(ctx)
	if err != nil {
		return err // ctx done
	}
	events := w.src.Watch(ctx, "", rev+1)
	w.markSynced()
	w.log.Info("in sync", "resources", len(w.cache), "revision", rev)
	w.report(true, "in sync")
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			w.handle(ev)
		}
	}
}

// initialList lists every kind, retrying until it succeeds or ctx ends. It
// returns the lowest revision seen, the point the watch replays from.
//
// A retry lists only the kinds not listed yet. Many agents starting at
// once against the Kubernetes API (a rollout, the API server back after an
// outage) make lists slow; starting over from the first kind on every
// timeout would repeat the largest lists (every pod) until none finishes.
// Keeping the earlier lists is sound: the watch replays from the lowest
// revision of all, and replayed events no newer than the cached object
// are dropped.
func (w *Watcher) initialList(ctx context.Context) (int64, error) {
	backoff := 100 * time.Millisecond
	minRev := int64(0)
	cache := make(map[Key]entry)
	pending := w.kinds
	for {
		var err error
		for len(pending) > 0 {
			kind := pending[0]
			var objs []api.Object
			var rev int64
			objs, rev, err = w.src.List(ctx, kind, "")
			if err != nil {
				err = fmt.Errorf("list %s: %w", kind, err)
				break
			}
			if minRev == 0 || rev < minRev {
				minRev = rev
			}
			for _, o := range objs {
				cache[KeyOf(o)] = entry{obj: o, rev: revisionOf(o)}
			}
			pending = pending[1:]
		}
		if err == nil {
			w.mu.Lock()
			w.cache = cache
			w.mu.Unlock()
			w.updateGauges()
			return minRev, nil
		}
		w.errs.Inc()
		w.log.Warn("initial list failed, retrying", "err", err, "kinds left", len(pending), "backoff", backoff)
		w.report(false, "waiting for datastore: "+err.Error())
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// Load reads the resources of kinds from src once: what a Watcher's
// cache holds when it is in sync, for the commands that compute what the
// actors would (calicoctl policy explain, calico-node plan).
func Load(ctx context.Context, src Source, kinds ...string) (map[Key]api.Object, error) {
	out := map[Key]api.Object{}
	for _, kind := range kinds {
		objs, _, err := src.List(ctx, kind, "")
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", kind, err)
		}
		for _, o := range objs {
			out[KeyOf(o)] = o
		}
	}
	return out, nil
}

func (w *Watcher) markSynced() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.isSynced = true
	close(w.synced)
	for _, s := range w.subs {
		s.pushSnapshot(w.cache)
	}
}

func (w *Watcher) handle(ev datastore.Event) {
	switch {
	case ev.Err != nil:
		w.errs.Inc()
		w.watchError(ev.Err)
		return
	case ev.Type == datastore.InSync:
		w.reachable()
		return
	case ev.Type == datastore.Reset:
		w.resets.Inc()
		w.reset(ev.Objects)
		w.reachable()
		return
	}
	k := KeyOf(ev.Object)
	cur, have := w.cache[k]
	rev := ev.Revision
	if rev == 0 {
		rev = revisionOf(ev.Object)
	}
	if have && cur.rev >= rev {
		return // already reflected by the initial list
	}
	w.events.Inc()
	w.mu.Lock()
	switch ev.Type {
	case datastore.Deleted:
		if !have {
			w.mu.Unlock()
			return
		}
		delete(w.cache, k)
		w.counts[k.Kind]--
		w.publishLocked([]Update{{Type: Delete, Key: k, Object: cur.obj}})
	default:
		if !have {
			w.counts[k.Kind]++
		}
		w.cache[k] = entry{obj: ev.Object, rev: rev}
		w.publishLocked([]Update{{Type: Set, Key: k, Object: ev.Object}})
	}
	w.mu.Unlock()
	w.updateGauge(k.Kind)
}

// watchError notes a problem the datastore's watch reported. An
// unreachable datastore makes the watcher not ready until the stream is
// current again; the cache, and so the dataplane, stay as they are. While
// it lasts, the watch's retries (every source's, every few seconds) are
// logged at debug level only.
func (w *Watcher) watchError(err error) {
	if !errors.Is(err, datastore.ErrUnavailable) {
		w.log.Warn("datastore watch", "err", err)
		return
	}
	if !w.unreachable.IsZero() {
		w.log.Debug("datastore still unreachable", "since", w.unreachable, "err", err)
		return
	}
	w.unreachable = time.Now()
	w.log.Warn("datastore unreachable: keeping the cache and the dataplane as they are until it is back", "err", err)
	w.report(false, "datastore unreachable since "+w.unreachable.Format(time.TimeOnly)+": "+err.Error())
}

// reachable is the stream being current again.
func (w *Watcher) reachable() {
	if w.unreachable.IsZero() {
		return
	}
	w.log.Info("datastore reachable again, in sync", "outage", time.Since(w.unreachable).Round(time.Millisecond), "resources", len(w.cache))
	w.unreachable = time.Time{}
	w.report(true, "in sync")
}

// reset replaces the cache with a full relist, publishing the difference.
func (w *Watcher) reset(objs []api.Object) {
	next := make(map[Key]entry, len(objs))
	var ups []Update
	for _, o := range objs {
		k := KeyOf(o)
		e := entry{obj: o, rev: revisionOf(o)}
		next[k] = e
		// The versions compared as strings: the Kubernetes datastore's
		// profiles have "<namespace's>/" or "/<service account's>",
		// which parse to no number, and a Remote's cache holds its own
		// sequence (remote.go), not the object's number.
		if cur, ok := w.cache[k]; !ok || o.Meta().ResourceVersion == "" || cur.obj.Meta().ResourceVersion != o.Meta().ResourceVersion {
			ups = append(ups, Update{Type: Set, Key: k, Object: o})
		}
	}
	for k, cur := range w.cache {
		if _, ok := next[k]; !ok {
			ups = append(ups, Update{Type: Delete, Key: k, Object: cur.obj})
		}
	}
	w.mu.Lock()
	w.cache = next
	w.publishLocked(ups)
	w.mu.Unlock()
	w.log.Info("resynced after compaction", "resources", len(next), "changes", len(ups))
	w.updateGauges()
}

// publishLocked queues ups for every subscriber; w.mu must be held so the
// order of updates matches the order of cache changes.
func (w *Watcher) publishLocked(ups []Update) {
	if len(ups) == 0 {
		return
	}
	for _, s := range w.subs {
		s.push(ups)
	}
}

func (w *Watcher) updateGauge(kind string) {
	w.resource.WithLabelValues(kind).Set(float64(w.counts[kind]))
}

// updateGauges recounts the whole cache (after a list or reset).
func (w *Watcher) updateGauges() {
	clear(w.counts)
	for k := range w.cache {
		w.counts[k.Kind]++
	}
	for _, kind := range w.kinds {
		w.updateGauge(kind)
	}
}

func revisionOf(o api.Object) int64 {
	r, _ := strconv.ParseInt(o.Meta().ResourceVersion, 10, 64)
	return r
}

// Subscription is one consumer's queue of updates.
type Subscription struct {
	kinds  map[string]bool // empty = all
	notify chan struct{}

	mu      sync.Mutex
	pending []Update
	started bool // snapshot queued
	taken   bool // snapshot handed to the consumer
}

// ErrClosed is returned by Next when the context ends.
var ErrClosed = errors.New("confwatch: subscription closed")

func (s *Subscription) wants(kind string) bool { return len(s.kinds) == 0 || s.kinds[kind] }

func (s *Subscription) pushSnapshot(cache map[Key]entry) {
	var ups []Update
	for k, e := range cache {
		if s.wants(k.Kind) {
			ups = append(ups, Update{Type: Set, Key: k, Object: e.obj})
		}
	}
	s.mu.Lock()
	// The snapshot supersedes anything queued before it.
	s.pending = ups
	s.started = true
	s.mu.Unlock()
	s.wake()
}

func (s *Subscription) push(ups []Update) {
	s.mu.Lock()
	for _, u := range ups {
		if s.wants(u.Key.Kind) {
			s.pending = append(s.pending, u)
		}
	}
	n := len(s.pending)
	s.mu.Unlock()
	if n > 0 {
		s.wake()
	}
}

func (s *Subscription) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next blocks until updates are pending and returns them all. The first
// call after in-sync returns the snapshot (possibly empty).
func (s *Subscription) Next(ctx context.Context) ([]Update, error) {
	for {
		s.mu.Lock()
		if s.started && (len(s.pending) > 0 || !s.taken) {
			ups := s.pending
			s.pending = nil
			s.taken = true
			s.mu.Unlock()
			return ups, nil
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ErrClosed
		case <-s.notify:
		}
	}
}

// Updates delivers the subscription's batches on a channel for use in a
// select loop; the channel closes when ctx ends. The forwarding goroutine
// lives only as long as ctx.
func (s *Subscription) Updates(ctx context.Context) <-chan []Update {
	out := make(chan []Update)
	go func() {
		defer close(out)
		for {
			ups, err := s.Next(ctx)
			if err != nil {
				return
			}
			select {
			case out <- ups:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
