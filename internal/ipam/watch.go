package ipam

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/netip"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// BlockSnapshot is the cluster's block affinities at one etcd revision:
// which node each block is routed to.
type BlockSnapshot struct {
	// Revision is the etcd revision the snapshot reflects.
	Revision int64
	// Affinity maps every block's CIDR to the node it is affine to; "" for
	// a block affine to no node (or to something other than a host).
	Affinity map[netip.Prefix]string
	// Borrowed maps each address allocated for a node other than its
	// block's affine node (the allocation's "node" attribute) to that node:
	// the address lives there, not where its block is routed, so Calico's
	// dataplane routes it individually.
	Borrowed map[netip.Addr]string
}

// WatchBlocks follows every IPAM block (both IP versions) through
// kv.Watch and sends a complete BlockSnapshot after the initial list and
// after every batch of events that changes an affinity or a borrowed
// address. Allocations within a block that change neither (the common pod
// ADD/DEL) send nothing.
//
// A receiver that falls behind gets the newest snapshot only: snapshots
// are coalesced, never queued, and the watch never waits for the
// receiver. Each snapshot's maps are fresh; the receiver owns them. When
// the watch restarts (compaction, failure) its Reset is diffed against the
// last snapshot sent, so no change is lost. The channel is closed when ctx
// ends.
func WatchBlocks(ctx context.Context, kv datastore.KV, logger *slog.Logger) <-chan BlockSnapshot {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &blockWatch{log: logger, out: make(chan BlockSnapshot), blocks: map[string]blockInfo{}}
	go w.run(ctx, kv.Watch(ctx, blockPrefix))
	return w.out
}

// blockWatch is WatchBlocks' state, owned by its goroutine.
type blockWatch struct {
	log *slog.Logger
	out chan BlockSnapshot

	blocks map[string]blockInfo // block key -> what it contributes
	rev    int64
	synced bool // a Reset has been seen
	// changed: a block's contribution changed since the last publish.
	// Most events (a pod's address allocated or released in its node's
	// block) change none, and publish then costs nothing instead of a
	// snapshot of every block in the cluster.
	changed bool
	// failing is set from an unreachable datastore's error to the Reset
	// that follows the watch's recovery: while the datastore is down the
	// watch retries every few seconds, logged once.
	failing bool
	// last is the state as last published (nil before the first), kept
	// private because the receiver owns the maps it is given; pending is
	// the newest snapshot not yet taken by the receiver.
	last, pending *BlockSnapshot
}

// blockInfo is the routing-relevant content of one block.
type blockInfo struct {
	cidr     netip.Prefix
	host     string
	borrowed map[netip.Addr]string
}

func (w *blockWatch) run(ctx context.Context, events <-chan datastore.KVEvent) {
	defer close(w.out)
	for {
		// select evaluates the value to send even when out is nil.
		out, next := w.offer()
		select {
		case <-ctx.Done():
			return
		case out <- next:
			w.pending = nil
		case ev, ok := <-events:
			if !ok {
				return
			}
			w.handle(ev)
			// Fold everything already queued into one snapshot.
			for more := true; more; {
				select {
				case ev, ok := <-events:
					if !ok {
						return
					}
					w.handle(ev)
				default:
					more = false
				}
			}
			if w.synced {
				w.publish()
			}
		}
	}
}

func (w *blockWatch) handle(ev datastore.KVEvent) {
	switch ev.Type {
	case datastore.KVReset:
		clear(w.blocks)
		for _, kv := range ev.Snapshot {
			w.apply(kv.Key, kv.Value, false)
		}
		w.synced, w.changed = true, true
		if w.failing {
			w.log.Info("IPAM block watch current again")
			w.failing = false
		}
	case datastore.KVPut:
		w.apply(ev.KV.Key, ev.KV.Value, false)
	case datastore.KVDelete:
		w.apply(ev.KV.Key, nil, true)
	default:
		switch {
		case ev.Err == nil:
		case !errors.Is(ev.Err, datastore.ErrUnavailable):
			w.log.Warn("IPAM block watch failed; relisting", "err", ev.Err)
		case w.failing:
			w.log.Debug("IPAM block watch: datastore still unreachable", "err", ev.Err)
		default:
			w.log.Warn("IPAM block watch: datastore unreachable; the routes stay as they are until it is back", "err", ev.Err)
			w.failing = true
		}
		return
	}
	w.rev = max(w.rev, ev.Rev)
}

// offer returns the channel and value to send: a nil channel (blocks
// forever in select) when nothing is pending.
func (w *blockWatch) offer() (chan BlockSnapshot, BlockSnapshot) {
	if w.pending == nil {
		return nil, BlockSnapshot{}
	}
	return w.out, *w.pending
}

// apply folds one block key into the state.
func (w *blockWatch) apply(key string, value []byte, deleted bool) {
	if _, ok := ipamkv.ParseBlockKey(key); !ok {
		return
	}
	if deleted {
		if _, ok := w.blocks[key]; ok {
			delete(w.blocks, key)
			w.changed = true
		}
		return
	}
	b, err := decodeBlock(value)
	if err != nil {
		// Keep what we knew: a corrupt write should not pull routes.
		w.log.Warn("skipping undecodable IPAM block", "key", key, "err", err)
		return
	}
	info := blockInfo{cidr: b.cidr, host: b.host()}
	for ord, idx := range b.v.Allocations {
		if idx == nil {
			continue
		}
		node := b.v.Attributes[*idx].Secondary[AttrNode]
		if node == "" || node == info.host {
			continue
		}
		if info.borrowed == nil {
			info.borrowed = map[netip.Addr]string{}
		}
		info.borrowed[b.addr(ord)] = node
	}
	if old, ok := w.blocks[key]; !ok || old.cidr != info.cidr || old.host != info.host || !maps.Equal(old.borrowed, info.borrowed) {
		w.changed = true
	}
	w.blocks[key] = info
}

// publish queues a snapshot when the state differs from the last one sent
// (always, the first time).
func (w *blockWatch) publish() {
	if !w.changed {
		return
	}
	w.changed = false
	s := BlockSnapshot{Revision: w.rev, Affinity: map[netip.Prefix]string{}, Borrowed: map[netip.Addr]string{}}
	for _, b := range w.blocks {
		s.Affinity[b.cidr] = b.host
		maps.Copy(s.Borrowed, b.borrowed)
	}
	if w.last != nil && maps.Equal(w.last.Affinity, s.Affinity) && maps.Equal(w.last.Borrowed, s.Borrowed) {
		return
	}
	w.last = &s
	w.pending = &BlockSnapshot{Revision: s.Revision, Affinity: maps.Clone(s.Affinity), Borrowed: maps.Clone(s.Borrowed)}
}
