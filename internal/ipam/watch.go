package ipam

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
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

// watchRetry is the pause before relisting after a failed watch; a
// compacted revision relists at once.
const watchRetry = 2 * time.Second

// WatchBlocks lists every IPAM block (both IP versions), then watches them
// from the revision after the list, and sends a complete BlockSnapshot
// after the list and after every event that changes an affinity or a
// borrowed address. Allocations within a block that change neither (the
// common pod ADD/DEL) send nothing.
//
// A receiver that falls behind gets the newest snapshot only: snapshots
// are coalesced, never queued, and the watch never waits for the
// receiver. Each snapshot's maps are fresh; the receiver owns them. When
// the watch revision has been compacted, or the watch fails, the blocks
// are listed again (after a short pause for failures) and the resulting
// state is diffed against the last snapshot sent, so no change is lost.
// The channel is closed when ctx ends.
func WatchBlocks(ctx context.Context, kv *clientv3.Client, logger *slog.Logger) <-chan BlockSnapshot {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &blockWatch{kv: kv, log: logger, out: make(chan BlockSnapshot)}
	go w.run(ctx)
	return w.out
}

// blockWatch is WatchBlocks' state, owned by its goroutine.
type blockWatch struct {
	kv  *clientv3.Client
	log *slog.Logger
	out chan BlockSnapshot

	blocks map[string]blockInfo // block key -> what it contributes
	rev    int64
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

func (w *blockWatch) run(ctx context.Context) {
	defer close(w.out)
	for ctx.Err() == nil {
		err := w.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		pause := watchRetry
		if errors.Is(err, rpctypes.ErrCompacted) {
			pause = 0
		}
		w.log.Warn("IPAM block watch failed; relisting", "err", err, "backoff", pause)
		if !w.wait(ctx, pause) {
			return
		}
	}
}

// wait sleeps for d while still handing the pending snapshot to the
// receiver; false when ctx ended.
func (w *blockWatch) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		// select evaluates the value to send even when out is nil.
		out, next := w.offer()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case out <- next:
			w.pending = nil
		}
	}
}

func (w *blockWatch) listAndWatch(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	resp, err := w.kv.Get(lctx, blockPrefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return fmt.Errorf("list IPAM blocks: %w", err)
	}
	w.blocks = make(map[string]blockInfo, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		w.apply(string(kv.Key), kv.Value, false)
	}
	w.rev = resp.Header.Revision
	w.publish()

	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	ch := w.kv.Watch(wctx, blockPrefix, clientv3.WithPrefix(), clientv3.WithRev(w.rev+1))
	for {
		// select evaluates the value to send even when out is nil.
		out, next := w.offer()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case out <- next:
			w.pending = nil
		case wr, ok := <-ch:
			if !ok {
				return errors.New("watch IPAM blocks: channel closed")
			}
			if err := wr.Err(); err != nil {
				return fmt.Errorf("watch IPAM blocks: %w", err)
			}
			for _, ev := range wr.Events {
				w.apply(string(ev.Kv.Key), ev.Kv.Value, ev.Type == mvccpb.DELETE)
			}
			if wr.Header.Revision > w.rev {
				w.rev = wr.Header.Revision
			}
			w.publish()
		}
	}
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
	if _, ok := parseBlockKey(key); !ok {
		return
	}
	if deleted {
		delete(w.blocks, key)
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
	w.blocks[key] = info
}

// publish queues a snapshot when the state differs from the last one sent
// (always, the first time).
func (w *blockWatch) publish() {
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
