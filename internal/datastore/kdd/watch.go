package kdd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// objectKey identifies a Calico object in a watcher's state.
type objectKey struct{ kind, ns, name string }

func keyOf(o api.Object) objectKey {
	return objectKey{o.Type().Kind, o.Meta().Namespace, o.Meta().Name}
}

// Watch streams the changes to kind ("" for every kind). Each source of
// each kind is watched on its own; a Kubernetes object that changes is
// converted again and the difference in the Calico objects it yields is
// sent (a Pod that loses its address is a Deleted WorkloadEndpoint).
//
// fromRevision > 0 continues a List read at fromRevision-1: each source is
// listed again at exactly that revision to learn what the caller knows,
// then watched from it. fromRevision 0 starts from now. fromRevision < 0,
// or a revision the server no longer has, starts with one Reset event
// carrying the complete current set. A watch that fails, or whose revision
// expires, is resumed by a fresh list whose difference from what was sent
// is emitted as ordinary events, so no Reset is needed after the start;
// once every source that failed is watching again, one InSync event says
// the stream is current (the API server is back).
func (s *Store) Watch(ctx context.Context, kind string, fromRevision int64) <-chan datastore.Event {
	out := make(chan datastore.Event, datastore.WatchBuffer)
	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.ctx, cancel)
	var ms []mapper
	if kind == "" {
		for _, info := range api.Kinds() {
			if m, ok := s.mappers[info.Kind]; ok {
				ms = append(ms, m)
			}
		}
	} else if m, err := s.mapperFor("watch", kind, "", ""); err == nil {
		ms = append(ms, m)
	} else {
		go func() {
			defer close(out)
			defer stopOnClose()
			defer cancel()
			if datastore.Send(ctx, out, datastore.Event{Err: err}) {
				<-ctx.Done()
			}
		}()
		return out
	}
	go func() {
		defer close(out)
		defer stopOnClose()
		defer cancel()
		s.runWatch(ctx, ms, fromRevision, out)
	}()
	return out
}

// runWatch seeds a sourceWatch per source, sends the Reset if one is
// due, then runs them until ctx ends.
func (s *Store) runWatch(ctx context.Context, ms []mapper, fromRevision int64, out chan<- datastore.Event) {
	var ws []*sourceWatch
	health := &watchHealth{out: out, failing: map[*sourceWatch]bool{}}
	for _, m := range ms {
		for i, src := range m.sources() {
			ws = append(ws, &sourceWatch{s: s, m: m, i: i, src: src, out: out, health: health, state: map[string][]api.Object{}})
		}
	}
	reset := fromRevision < 0
	seedFailed := false
	for !reset {
		ok := true
		for _, w := range ws {
			rv := ""
			if fromRevision > 0 {
				rv = strconv.FormatInt(fromRevision-1, 10)
			}
			err := w.seed(ctx, rv)
			if ctx.Err() != nil {
				return
			}
			if gone(err) {
				reset = true
				break
			}
			if err != nil {
				ok, seedFailed = false, true
				if !w.fail(ctx, fmt.Errorf("list %s: %w", w.src.resource, err)) {
					return
				}
				break
			}
		}
		if ok {
			break
		}
	}
	if reset {
		var all []api.Object
		var rev int64
		for _, w := range ws {
			for {
				err := w.seed(ctx, "")
				if ctx.Err() != nil {
					return
				}
				if err == nil {
					break
				}
				if !w.fail(ctx, fmt.Errorf("list %s: %w", w.src.resource, err)) {
					return
				}
			}
			all = append(all, w.objects()...)
			if rev == 0 || w.rv < rev {
				rev = w.rv
			}
		}
		for _, m := range ms {
			if sl, ok := m.(staticLister); ok {
				all = append(all, sl.static()...)
			}
		}
		sortObjects(all)
		if !datastore.Send(ctx, out, datastore.Event{Type: datastore.Reset, Objects: all, Revision: rev}) {
			return
		}
	}
	if seedFailed && !reset {
		// Seeded at the caller's revision after a failure (the API server
		// was unreachable): a watch from that revision would replay what
		// changed since only after the server accepted it, which is when
		// a source counts as current. So every source lists afresh and
		// sends the difference before it watches, and InSync waits for
		// all of them.
		health.stale(ws)
		for _, w := range ws {
			w.relistFirst = true
		}
	}
	done := make(chan struct{}, len(ws))
	for _, w := range ws {
		go func() {
			w.run(ctx)
			done <- struct{}{}
		}()
	}
	for range ws {
		<-done
	}
}

// sourceWatch follows one source of one kind. Its state, owned by its
// goroutine, is what each Kubernetes object (by namespace/name) last
// yielded, so that a change or a relist can be turned into the difference.
type sourceWatch struct {
	s      *Store
	m      mapper
	i      int
	src    source
	out    chan<- datastore.Event
	health *watchHealth
	state  map[string][]api.Object
	rv     int64
	wait   time.Duration
	// relistFirst makes run list afresh, and send the difference from
	// the seeded state, before its first watch.
	relistFirst bool
}

// watchHealth is which sources of one Watch failed last time they tried
// and have not watched since, so that the stream can tell its consumer
// when all of them are current again (InSync) — after an API server
// outage every source fails on its own and recovers on its own.
type watchHealth struct {
	out chan<- datastore.Event

	// mu orders the error and InSync events of all sources as the
	// failing set changes, so an InSync is never sent after a newer
	// failure's error.
	mu      sync.Mutex
	failing map[*sourceWatch]bool
}

// failed marks w failing and sends its error; false when ctx ended.
func (h *watchHealth) failed(ctx context.Context, w *sourceWatch, ev datastore.Event) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failing[w] = true
	return datastore.Send(ctx, h.out, ev)
}

// stale marks every source of ws failing without an error of its own:
// each is current again only once it watches (see watching).
func (h *watchHealth) stale(ws []*sourceWatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range ws {
		h.failing[w] = true
	}
}

// watching marks w current (its watch was accepted after the relist
// whose difference it sent); the last failing source to recover sends
// InSync. False when ctx ended.
func (h *watchHealth) watching(ctx context.Context, w *sourceWatch) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.failing[w] {
		return true
	}
	delete(h.failing, w)
	if len(h.failing) > 0 {
		return true
	}
	return datastore.Send(ctx, h.out, datastore.Event{Type: datastore.InSync})
}

type rawMeta struct {
	Metadata struct {
		Namespace       string `json:"namespace"`
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

func rawKey(raw json.RawMessage) (string, int64, error) {
	var m rawMeta
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", 0, err
	}
	rv, _ := strconv.ParseInt(m.Metadata.ResourceVersion, 10, 64)
	return m.Metadata.Namespace + "/" + m.Metadata.Name, rv, nil
}

// seed lists the source (at rv exactly, when set) and makes the result
// the state, sending nothing.
func (w *sourceWatch) seed(ctx context.Context, rv string) error {
	state, rev, err := w.list(ctx, rv)
	if err != nil {
		return err
	}
	w.state, w.rv = state, rev
	return nil
}

// list reads the source into a fresh state.
func (w *sourceWatch) list(ctx context.Context, rv string) (map[string][]api.Object, int64, error) {
	lctx, cancel := listCtx(ctx)
	defer cancel()
	list, rev, err := w.s.listRaw(lctx, w.src, "", rv)
	if err != nil {
		return nil, 0, err
	}
	state := make(map[string][]api.Object, len(list.Items))
	for _, item := range list.Items {
		key, _, err := rawKey(item)
		if err != nil {
			continue
		}
		objs, err := w.m.convert(w.i, item)
		if err != nil {
			w.s.logger.Warn("skipping object that does not convert", "resource", w.src.resource, "object", key, "err", err)
			continue
		}
		if len(objs) > 0 {
			state[key] = objs
		}
	}
	return state, rev, nil
}

func (w *sourceWatch) objects() []api.Object {
	var out []api.Object
	for _, objs := range w.state {
		out = append(out, objs...)
	}
	return out
}

// run watches from w.rv until ctx ends, resuming after every end of the
// stream and relisting when the revision has expired or the watch failed.
func (w *sourceWatch) run(ctx context.Context) {
	relist := w.relistFirst
	for ctx.Err() == nil {
		if relist {
			state, rev, err := w.list(ctx, "")
			if err != nil {
				if ctx.Err() != nil || !w.fail(ctx, fmt.Errorf("relist %s: %w", w.src.resource, err)) {
					return
				}
				continue
			}
			for key := range w.state {
				if _, ok := state[key]; !ok {
					if !w.change(ctx, key, nil, rev) {
						return
					}
				}
			}
			for key, objs := range state {
				if !w.change(ctx, key, objs, rev) {
					return
				}
			}
			w.rv, relist = rev, false
		}
		err := w.s.c.watch(ctx, w.src.path, strconv.FormatInt(w.rv, 10), func() {
			w.health.watching(ctx, w)
		}, func(ev watchEvent) error {
			return w.handle(ctx, ev)
		})
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			w.wait = 0 // the server ended the stream; resume from w.rv
		case gone(err):
			relist = true // expected after a long outage: no report
		default:
			relist = true
			if !w.fail(ctx, fmt.Errorf("watch %s: %w", w.src.resource, err)) {
				return
			}
		}
	}
}

// handle applies one watch event.
func (w *sourceWatch) handle(ctx context.Context, ev watchEvent) error {
	key, rev, err := rawKey(ev.Object)
	if err != nil {
		return fmt.Errorf("decode %s event: %w", w.src.resource, err)
	}
	switch ev.Type {
	case "BOOKMARK":
	case "DELETED":
		if !w.change(ctx, key, nil, rev) {
			return ctx.Err()
		}
	case "ADDED", "MODIFIED":
		objs, err := w.m.convert(w.i, ev.Object)
		if err != nil {
			// Keep what was known: a bad write should not remove it.
			datastore.Send(ctx, w.out, datastore.Event{Err: &datastore.Error{Op: "watch", Kind: w.m.info().Kind, Err: fmt.Errorf("%s %s: %w", w.src.resource, key, err)}, Revision: rev})
			break
		}
		if !w.change(ctx, key, objs, rev) {
			return ctx.Err()
		}
	}
	if rev > w.rv {
		w.rv = rev
	}
	w.wait = 0
	return nil
}

// change replaces what the object key yields and sends the difference.
func (w *sourceWatch) change(ctx context.Context, key string, objs []api.Object, rev int64) bool {
	old := w.state[key]
	if len(objs) == 0 {
		delete(w.state, key)
	} else {
		w.state[key] = objs
	}
	prev := make(map[objectKey]api.Object, len(old))
	for _, o := range old {
		prev[keyOf(o)] = o
	}
	for _, o := range objs {
		k := keyOf(o)
		p, had := prev[k]
		delete(prev, k)
		typ := datastore.Added
		if had {
			if p.Meta().ResourceVersion == o.Meta().ResourceVersion {
				continue // unchanged (a relist, or another object of the source changed)
			}
			typ = datastore.Modified
		}
		if !datastore.Send(ctx, w.out, datastore.Event{Type: typ, Object: o, Revision: revOf(o, rev)}) {
			return false
		}
	}
	for _, o := range prev {
		if !datastore.Send(ctx, w.out, datastore.Event{Type: datastore.Deleted, Object: o, Revision: rev}) {
			return false
		}
	}
	return true
}

func revOf(o api.Object, fallback int64) int64 {
	if r, err := strconv.ParseInt(o.Meta().ResourceVersion, 10, 64); err == nil && r > 0 {
		return r
	}
	return fallback
}

// fail reports err and waits out the backoff; false when ctx ended.
func (w *sourceWatch) fail(ctx context.Context, err error) bool {
	if !w.health.failed(ctx, w, datastore.Event{Err: &datastore.Error{Op: "watch", Kind: w.m.info().Kind, Err: err}}) {
		return false
	}
	w.wait = datastore.NextWatchBackoff(w.wait)
	t := time.NewTimer(w.wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
