package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Watch streams the changes to resources of kind ("" for all kinds) from
// fromRevision on, inclusive; 0 means changes after the call. A consumer
// that starts from List's revision r passes r+1. The channel is closed when
// ctx is done or the Store is closed, and only then.
func (s *Store) Watch(ctx context.Context, kind string, fromRevision int64) <-chan datastore.Event {
	out := make(chan datastore.Event, datastore.WatchBuffer)
	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.ctx, cancel)
	w := &watcher{s: s, out: out, prefix: Prefix}
	var unknown error
	if kind != "" {
		if k, ok := s.kinds.lookup(kind); ok {
			w.kind, w.prefix = k, k.prefix
		} else {
			unknown = &datastore.Error{Op: "watch", Kind: kind, Err: datastore.ErrUnknownKind}
		}
	}
	go func() {
		defer close(out)
		defer stopOnClose()
		defer cancel()
		if unknown != nil {
			// Nothing to watch, but the channel still lives until ctx is
			// done, as promised.
			if w.emit(ctx, datastore.Event{Err: unknown}) {
				<-ctx.Done()
			}
			return
		}
		w.run(ctx, fromRevision)
	}()
	return out
}

type watcher struct {
	s      *Store
	out    chan<- datastore.Event
	prefix string
	kind   *kindEntry // nil: all kinds
	wait   backoff
}

func (w *watcher) run(ctx context.Context, next int64) {
	relist := false
	for ctx.Err() == nil {
		switch {
		case relist:
			rev, err := w.relist(ctx)
			if err != nil {
				w.fail(ctx, fmt.Errorf("relist: %w", err))
				continue
			}
			relist, next = false, rev+1
			w.wait.reset()
		case next <= 0:
			rev, err := w.currentRevision(ctx)
			if err != nil {
				w.fail(ctx, fmt.Errorf("read current revision: %w", err))
				continue
			}
			next = rev + 1
		}
		err := w.watch(ctx, &next)
		if ctx.Err() != nil {
			return
		}
		// Whatever ended the watch, a fresh list is the one state known to
		// be complete. Compaction is routine and needs no report or pause.
		relist = true
		if !errors.Is(err, rpctypes.ErrCompacted) {
			w.fail(ctx, err)
		}
	}
}

// watch streams events from *next until the etcd watch ends, advancing
// *next past every revision delivered.
func (w *watcher) watch(ctx context.Context, next *int64) error {
	// Without a leader a member cannot know it is current; make it cancel
	// the watch instead of silently serving nothing.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := w.s.client.Watch(wctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(*next), clientv3.WithPrevKV())
	for resp := range ch {
		if resp.CompactRevision != 0 {
			return fmt.Errorf("watch from revision %d: %w (oldest available %d)", *next, rpctypes.ErrCompacted, resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch from revision %d: %w", *next, w.s.etcdErr(err))
		}
		for _, ev := range resp.Events {
			if e, ok := w.convert(ev); ok && !w.emit(ctx, e) {
				return ctx.Err()
			}
			*next = ev.Kv.ModRevision + 1
		}
		w.wait.reset()
	}
	return fmt.Errorf("watch from revision %d: channel closed", *next)
}

// convert turns an etcd event into a store event; ok is false for keys of
// kinds the registry does not know.
func (w *watcher) convert(ev *clientv3.Event) (datastore.Event, bool) {
	key := string(ev.Kv.Key)
	rev := ev.Kv.ModRevision
	k, ns, etcdName, known, err := w.s.kinds.parseKey(key)
	if !known {
		return datastore.Event{}, false
	}
	if err != nil {
		return datastore.Event{Err: &datastore.Error{Op: "watch", Kind: k.info.Kind, Err: err}, Revision: rev}, true
	}
	if ev.Type == mvccpb.DELETE {
		var obj api.Object
		if ev.PrevKv != nil {
			obj, err = k.decode(ev.PrevKv.Value, ev.PrevKv.ModRevision)
		}
		if obj == nil || err != nil {
			// The deletion must reach the consumer even when the old
			// value is gone (compacted) or unreadable.
			obj = k.stub(ns, etcdName, rev)
		}
		return datastore.Event{Type: datastore.Deleted, Object: obj, Revision: rev}, true
	}
	obj, err := k.decode(ev.Kv.Value, rev)
	if err != nil {
		return datastore.Event{Err: &datastore.Error{Op: "watch", Kind: k.info.Kind, Namespace: ns, Name: etcdName,
			Err: fmt.Errorf("decode %s: %w", key, err)}, Revision: rev}, true
	}
	typ := datastore.Modified
	if ev.IsCreate() {
		typ = datastore.Added
	}
	return datastore.Event{Type: typ, Object: obj, Revision: rev}, true
}

// relist emits the complete current set as one Reset event and returns its
// revision.
func (w *watcher) relist(ctx context.Context) (int64, error) {
	lctx, cancel := w.s.callCtx(ctx)
	defer cancel()
	objs, rev, err := w.s.list(lctx, w.prefix, func(key string, err error) {
		w.emit(ctx, datastore.Event{Err: &datastore.Error{Op: "watch", Kind: w.kindName(), Err: fmt.Errorf("decode %s: %w", key, err)}})
	})
	if err != nil {
		return 0, w.s.etcdErr(err)
	}
	objs = withStatic(w.prefix, objs)
	if !w.emit(ctx, datastore.Event{Type: datastore.Reset, Objects: objs, Revision: rev}) {
		return 0, ctx.Err()
	}
	return rev, nil
}

func (w *watcher) currentRevision(ctx context.Context) (int64, error) {
	cctx, cancel := w.s.callCtx(ctx)
	defer cancel()
	resp, err := w.s.client.Get(cctx, w.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, w.s.etcdErr(err)
	}
	return resp.Header.Revision, nil
}

func (w *watcher) kindName() string {
	if w.kind == nil {
		return "all kinds"
	}
	return w.kind.info.Kind
}

// fail reports err and waits out the backoff.
func (w *watcher) fail(ctx context.Context, err error) {
	if !w.emit(ctx, datastore.Event{Err: &datastore.Error{Op: "watch", Kind: w.kindName(), Err: err}}) {
		return
	}
	t := time.NewTimer(w.wait.next())
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (w *watcher) emit(ctx context.Context, e datastore.Event) bool {
	return datastore.Send(ctx, w.out, e)
}

// backoff is a capped exponential delay.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	b.d = datastore.NextWatchBackoff(b.d)
	return b.d
}

func (b *backoff) reset() { b.d = 0 }
