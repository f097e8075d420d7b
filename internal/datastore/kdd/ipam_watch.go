package kdd

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
)

// ipamWatched are the resources a Watch follows: blocks and affinities,
// what BGP and the dataplane route by. Handles and the config are not
// watched (libcalico-go cannot watch handles either): they change with
// every pod and nobody follows them.
var ipamWatched = []*ipamResource{ipamBlocks, ipamAffinities}

// Watch lists every watched resource whose keys can fall under prefix,
// sends one Reset with what is under prefix, then follows each resource
// with its own Kubernetes watch from its list's revision and sends every
// change as a Put or Delete. A watch the server ends is resumed from the
// last revision seen; a failed or expired one (410 Gone) makes the whole
// Watch list again and send a fresh Reset.
func (k *ipamKV) Watch(ctx context.Context, prefix string) <-chan datastore.KVEvent {
	out := make(chan datastore.KVEvent, datastore.WatchBuffer)
	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(k.s.ctx, cancel)
	var rs []*ipamResource
	for _, r := range ipamWatched {
		if r.covers(prefix) {
			rs = append(rs, r)
		}
	}
	go func() {
		defer close(out)
		defer stopOnClose()
		defer cancel()
		var wait time.Duration
		for ctx.Err() == nil {
			err := k.listAndWatch(ctx, prefix, rs, out, func() { wait = 0 })
			if ctx.Err() != nil {
				return
			}
			wait = datastore.NextWatchBackoff(wait)
			if gone(err) {
				wait = 0 // the revision expired: relist at once
			}
			if !datastore.Send(ctx, out, datastore.KVEvent{Err: fmt.Errorf("watch %s on %s: %w", prefix, k, err)}) {
				return
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// ipamResourceWatch follows one resource; its state is owned by its
// goroutine.
type ipamResourceWatch struct {
	k      *ipamKV
	r      *ipamResource
	prefix string
	rv     string
	// keys are the objects seen, by name: their key and last value.
	keys map[string]datastore.KeyValue
}

// listAndWatch runs one listing and the watches that follow it, until one
// of them fails.
func (k *ipamKV) listAndWatch(ctx context.Context, prefix string, rs []*ipamResource, out chan<- datastore.KVEvent, healthy func()) error {
	var all []datastore.KeyValue
	var rev int64
	ws := make([]*ipamResourceWatch, len(rs))
	for i, r := range rs {
		w := &ipamResourceWatch{k: k, r: r, prefix: prefix, keys: map[string]datastore.KeyValue{}}
		lrev, err := w.list(ctx)
		if err != nil {
			return err
		}
		for _, kv := range w.keys {
			if strings.HasPrefix(kv.Key, prefix) {
				all = append(all, kv)
			}
		}
		rev = max(rev, lrev)
		ws[i] = w
	}
	slices.SortFunc(all, func(a, b datastore.KeyValue) int { return cmp.Compare(a.Key, b.Key) })
	if !datastore.Send(ctx, out, datastore.KVEvent{Type: datastore.KVReset, Snapshot: all, Rev: rev}) {
		return ctx.Err()
	}
	healthy()

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(ws))
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- w.run(wctx, out)
		}()
	}
	var err error
	if len(ws) > 0 {
		err = <-errc
	} else {
		<-ctx.Done()
		err = ctx.Err()
	}
	cancel()
	wg.Wait()
	return err
}

// list reads the resource into w.keys and returns the list's revision.
func (w *ipamResourceWatch) list(ctx context.Context) (int64, error) {
	items, rev, err := w.k.listObjects(ctx, w.r, "")
	if err != nil {
		return 0, err
	}
	for _, obj := range items {
		key, value, deleted, err := w.r.decode(obj)
		if err != nil {
			w.k.s.logger.Warn("skipping IPAM object that does not convert", "resource", w.r.plural, "name", obj.Metadata.Name, "err", err)
			continue
		}
		orev, _ := strconv.ParseInt(obj.Metadata.ResourceVersion, 10, 64)
		if !deleted && key != "" {
			w.keys[obj.Metadata.Name] = datastore.KeyValue{Key: key, Value: value, Rev: orev}
		}
	}
	w.rv = strconv.FormatInt(rev, 10)
	return rev, nil
}

// run watches from w.rv, resuming when the server ends the stream, until
// the watch fails (410 Gone included) or ctx ends.
func (w *ipamResourceWatch) run(ctx context.Context, out chan<- datastore.KVEvent) error {
	for {
		err := w.k.s.c.watch(ctx, w.r.path(), w.rv, nil, func(ev watchEvent) error {
			return w.handle(ctx, ev, out)
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return fmt.Errorf("watch %s: %w", w.r.plural, apiErr("watch", w.r, err))
		}
	}
}

// handle turns one Kubernetes watch event into KV events.
func (w *ipamResourceWatch) handle(ctx context.Context, ev watchEvent, out chan<- datastore.KVEvent) error {
	var obj ipamObject
	if err := json.Unmarshal(ev.Object, &obj); err != nil {
		return fmt.Errorf("decode %s event: %w", w.r.plural, err)
	}
	rv := obj.Metadata.ResourceVersion
	rev, _ := strconv.ParseInt(rv, 10, 64)
	name := obj.Metadata.Name
	old, had := w.keys[name]
	switch ev.Type {
	case "BOOKMARK":
	case "DELETED":
		if had {
			delete(w.keys, name)
			if !w.send(ctx, out, datastore.KVEvent{Type: datastore.KVDelete, KV: datastore.KeyValue{Key: old.Key, Value: old.Value}, Rev: rev}) {
				return ctx.Err()
			}
		}
	case "ADDED", "MODIFIED":
		key, value, deleted, err := w.r.decode(obj)
		if err != nil {
			// Keep what was known: a bad write should not remove it.
			if !datastore.Send(ctx, out, datastore.KVEvent{Err: fmt.Errorf("%s %s: %w", w.r.plural, name, err), Rev: rev}) {
				return ctx.Err()
			}
			break
		}
		if had && (deleted || key != old.Key) {
			// Marked deleted by Calico (the DELETE follows), or, never
			// in practice, moved to another key.
			delete(w.keys, name)
			if !w.send(ctx, out, datastore.KVEvent{Type: datastore.KVDelete, KV: datastore.KeyValue{Key: old.Key, Value: old.Value}, Rev: rev}) {
				return ctx.Err()
			}
		}
		if deleted || key == "" {
			break
		}
		kv := datastore.KeyValue{Key: key, Value: value, Rev: rev}
		w.keys[name] = kv
		if !w.send(ctx, out, datastore.KVEvent{Type: datastore.KVPut, KV: kv, Rev: rev}) {
			return ctx.Err()
		}
	}
	if rv != "" {
		w.rv = rv
	}
	return nil
}

// send passes on an event for a key under the watched prefix.
func (w *ipamResourceWatch) send(ctx context.Context, out chan<- datastore.KVEvent, ev datastore.KVEvent) bool {
	if !strings.HasPrefix(ev.KV.Key, w.prefix) {
		return true
	}
	return datastore.Send(ctx, out, ev)
}
