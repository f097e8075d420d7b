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
)

// maxTxnOps stays under etcd's default --max-txn-ops (128).
const maxTxnOps = 120

// kvStore is datastore.KV on etcd: Calico's IPAM keys as they are.
type kvStore struct{ s *Store }

// IPAM returns the store IPAM runs on: the etcd keyspace itself.
func (s *Store) IPAM() datastore.KV { return kvStore{s} }

// Type is datastore.TypeEtcd.
func (s *Store) Type() string { return datastore.TypeEtcd }

func (k kvStore) String() string { return "etcd at " + k.s.endpoints }

func (k kvStore) err(err error) error { return k.s.etcdErr(err) }

// Get reads keys in as few transactions as possible (one, unless there
// are more than maxTxnOps).
func (k kvStore) Get(ctx context.Context, keys ...string) ([]datastore.KeyValue, error) {
	out := make([]datastore.KeyValue, 0, len(keys))
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), maxTxnOps)]
		keys = keys[len(chunk):]
		ops := make([]clientv3.Op, len(chunk))
		for i, key := range chunk {
			ops[i] = clientv3.OpGet(key)
		}
		resp, err := k.s.client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, k.err(err)
		}
		for i, key := range chunk {
			out = append(out, pick(key, resp.Responses[i].GetResponseRange().Kvs))
		}
	}
	return out, nil
}

// pick returns key's value among kvs, or an absent KeyValue.
func pick(key string, kvs []*mvccpb.KeyValue) datastore.KeyValue {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return datastore.KeyValue{Key: key, Value: kv.Value, Rev: kv.ModRevision}
		}
	}
	return datastore.KeyValue{Key: key}
}

func convertKVs(kvs []*mvccpb.KeyValue) []datastore.KeyValue {
	out := make([]datastore.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = datastore.KeyValue{Key: string(kv.Key), Value: kv.Value, Rev: kv.ModRevision}
	}
	return out
}

func (k kvStore) List(ctx context.Context, prefix string, keysOnly bool) ([]datastore.KeyValue, int64, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	resp, err := k.s.client.Get(ctx, prefix, opts...)
	if err != nil {
		return nil, 0, k.err(err)
	}
	return convertKVs(resp.Kvs), resp.Header.Revision, nil
}

// Snapshot reads the prefixes in one transaction, at one revision.
func (k kvStore) Snapshot(ctx context.Context, prefixes ...string) ([][]datastore.KeyValue, error) {
	ops := make([]clientv3.Op, len(prefixes))
	for i, p := range prefixes {
		ops[i] = clientv3.OpGet(p, clientv3.WithPrefix())
	}
	resp, err := k.s.client.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, k.err(err)
	}
	out := make([][]datastore.KeyValue, len(prefixes))
	for i := range prefixes {
		out[i] = convertKVs(resp.Responses[i].GetResponseRange().Kvs)
	}
	return out, nil
}

// Txn is one etcd transaction: the conditions compare mod revisions (or
// absence), the else branch reads back the compared keys and the refresh
// prefixes so a loser retries without another round trip.
func (k kvStore) Txn(ctx context.Context, t datastore.Txn) (datastore.TxnResult, error) {
	cmps := make([]clientv3.Cmp, len(t.Conds))
	for i, c := range t.Conds {
		if c.Rev != 0 {
			cmps[i] = clientv3.Compare(clientv3.ModRevision(c.Key), "=", c.Rev)
		} else {
			cmps[i] = clientv3.Compare(clientv3.CreateRevision(c.Key), "=", 0)
		}
	}
	ops := make([]clientv3.Op, len(t.Ops))
	for i, op := range t.Ops {
		switch op.Type {
		case datastore.OpPut:
			ops[i] = clientv3.OpPut(op.Key, string(op.Value))
		case datastore.OpDelete:
			ops[i] = clientv3.OpDelete(op.Key)
		case datastore.OpCreateIfAbsent:
			ops[i] = clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(op.Key), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(op.Key, string(op.Value))}, nil)
		default:
			return datastore.TxnResult{}, fmt.Errorf("txn: unknown op type %d", op.Type)
		}
	}
	var elseOps []clientv3.Op
	inline := len(t.Conds)+len(t.Refresh) <= maxTxnOps
	if inline {
		for _, c := range t.Conds {
			elseOps = append(elseOps, clientv3.OpGet(c.Key))
		}
		for _, p := range t.Refresh {
			elseOps = append(elseOps, clientv3.OpGet(p, clientv3.WithPrefix()))
		}
	}
	resp, err := k.s.client.Txn(ctx).If(cmps...).Then(ops...).Else(elseOps...).Commit()
	if err != nil {
		return datastore.TxnResult{}, k.err(err)
	}
	if resp.Succeeded {
		// Every key a transaction writes gets its revision.
		res := datastore.TxnResult{Succeeded: true}
		for i, op := range t.Ops {
			switch op.Type {
			case datastore.OpPut:
				res.Written = append(res.Written, datastore.KeyValue{Key: op.Key, Value: op.Value, Rev: resp.Header.Revision})
			case datastore.OpDelete:
				res.Written = append(res.Written, datastore.KeyValue{Key: op.Key})
			case datastore.OpCreateIfAbsent:
				if inner := resp.Responses[i].GetResponseTxn(); inner != nil && inner.Succeeded {
					res.Written = append(res.Written, datastore.KeyValue{Key: op.Key, Value: op.Value, Rev: resp.Header.Revision})
				}
			}
		}
		return res, nil
	}
	res := datastore.TxnResult{}
	if inline {
		for i, c := range t.Conds {
			res.Current = append(res.Current, pick(c.Key, resp.Responses[i].GetResponseRange().Kvs))
		}
		for _, r := range resp.Responses[len(t.Conds):] {
			res.Refreshed = append(res.Refreshed, convertKVs(r.GetResponseRange().Kvs))
		}
		return res, nil
	}
	// Too many keys to read back in the same transaction: a second round
	// trip, only on this rare path.
	keys := make([]string, len(t.Conds))
	for i, c := range t.Conds {
		keys[i] = c.Key
	}
	if res.Current, err = k.Get(ctx, keys...); err != nil {
		return res, err
	}
	for _, p := range t.Refresh {
		kvs, _, err := k.List(ctx, p, false)
		if err != nil {
			return res, err
		}
		res.Refreshed = append(res.Refreshed, kvs)
	}
	return res, nil
}

// kvWatchRetry is the pause before relisting after a failed watch; a
// compacted revision relists at once.
const kvWatchRetry = 2 * time.Second

func (k kvStore) Watch(ctx context.Context, prefix string) <-chan datastore.KVEvent {
	out := make(chan datastore.KVEvent, datastore.WatchBuffer)
	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(k.s.ctx, cancel)
	go func() {
		defer close(out)
		defer stopOnClose()
		defer cancel()
		for ctx.Err() == nil {
			err := k.listAndWatch(ctx, prefix, out)
			if ctx.Err() != nil {
				return
			}
			pause := kvWatchRetry
			if errors.Is(err, rpctypes.ErrCompacted) {
				pause = 0
			}
			if !datastore.Send(ctx, out, datastore.KVEvent{Err: fmt.Errorf("watch %s: %w", prefix, err)}) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
		}
	}()
	return out
}

func (k kvStore) listAndWatch(ctx context.Context, prefix string, out chan<- datastore.KVEvent) error {
	lctx, cancel := k.s.callCtx(ctx)
	kvs, rev, err := k.List(lctx, prefix, false)
	cancel()
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if !datastore.Send(ctx, out, datastore.KVEvent{Type: datastore.KVReset, Snapshot: kvs, Rev: rev}) {
		return ctx.Err()
	}
	// Without a leader a member cannot know it is current; make it cancel
	// the watch instead of silently serving nothing.
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	ch := k.s.client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithPrevKV())
	for resp := range ch {
		if resp.CompactRevision != 0 {
			return fmt.Errorf("from revision %d: %w", rev+1, rpctypes.ErrCompacted)
		}
		if err := resp.Err(); err != nil {
			return k.err(err)
		}
		for _, ev := range resp.Events {
			e := datastore.KVEvent{Type: datastore.KVPut, Rev: ev.Kv.ModRevision,
				KV: datastore.KeyValue{Key: string(ev.Kv.Key), Value: ev.Kv.Value, Rev: ev.Kv.ModRevision}}
			if ev.Type == mvccpb.DELETE {
				e.Type = datastore.KVDelete
				e.KV.Value = nil
				if ev.PrevKv != nil {
					e.KV.Value = ev.PrevKv.Value
				}
			}
			if !datastore.Send(ctx, out, e) {
				return ctx.Err()
			}
			rev = ev.Kv.ModRevision
		}
	}
	return errors.New("channel closed")
}
