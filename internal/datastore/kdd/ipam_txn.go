package kdd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// errCondFailed: a write found its key changed since the caller read it.
var errCondFailed = fmt.Errorf("IPAM write: condition failed: %w", datastore.ErrConflict)

// unconditionalRetries bounds the read-modify-write loop of an unconditional op.
const unconditionalRetries = 10

// Txn applies t as datastore.KV documents for a datastore without
// multi-object transactions:
//
//  1. the conditions on keys that no write of t checks (keys only
//     compared, or only created if absent) are checked by reading them;
//  2. the writes are applied in t.Ops' order, each conditional on its
//     key's Cond: a create (Rev 0) is a POST that fails if the object
//     exists, an update a PUT at the Cond's resourceVersion, a delete a
//     DELETE with that resourceVersion as precondition; OpCreateIfAbsent
//     is a POST that tolerates an existing object; an Op without a Cond
//     is a read-modify-write of whatever is stored; a run of creates, or
//     of deletes, of handles is written side by side (handleRun);
//  3. when a write fails, the writes before it are undone in reverse
//     order, each conditional on the resourceVersion this Txn left (an
//     object created is deleted, one updated gets the Cond's Value back,
//     one deleted is created again), so that a change someone made since
//     is never overwritten. A failed condition then returns
//     Succeeded=false with fresh reads of every Cond's key and of the
//     Refresh prefixes; any other error is returned after the undo.
//
// One write is added to the caller's: an affinity that a Txn confirms
// together with a block write (a block claim) is written "pending" in its
// place and confirmed once every op applied, as libcalico-go claims
// blocks on this datastore. A claim interrupted half-way (a crash, a lost
// connection, a failed undo) thus never leaves a confirmed affinity to a
// block the node does not hold, which BGP would announce; IPAM completes
// or drops a pending one (see package ipam). The confirmation comes after
// the block write that decided the claim and so never fails the Txn (see
// confirm).
//
// The API server does not give a write that changes nothing a new
// resourceVersion, so such a write does not show to the conditions of
// others; IPAM's block writes always change the block (its sequence
// number), and confirm covers the one case where it matters.
func (k *ipamKV) Txn(ctx context.Context, t datastore.Txn) (datastore.TxnResult, error) {
	conds := make(map[string]datastore.Cond, len(t.Conds))
	for _, c := range t.Conds {
		conds[c.Key] = c
	}
	checked := map[string]bool{} // keys whose write checks their Cond
	for _, op := range t.Ops {
		if _, ok := conds[op.Key]; ok && op.Type != datastore.OpCreateIfAbsent {
			checked[op.Key] = true
		}
	}
	var readKeys []string
	for _, c := range t.Conds {
		if !checked[c.Key] {
			readKeys = append(readKeys, c.Key)
		}
	}
	if len(readKeys) > 0 {
		cur, err := k.Get(ctx, readKeys...)
		if err != nil {
			return datastore.TxnResult{}, err
		}
		for i, kv := range cur {
			if kv.Rev != conds[readKeys[i]].Rev {
				return k.failed(ctx, t)
			}
		}
	}

	w := &txnWriter{k: k, conds: conds, state: map[string]*txnKey{}}
	ops, confirms := w.plan(t.Ops)
	for i := 0; i < len(ops); {
		// Handles created or deleted side by side (a batch of
		// allocations and releases, see package ipam), else one op.
		n := w.handleRun(ops[i:])
		for j := i; j < i+max(n, 1); j++ {
			if k.beforeWrite != nil {
				if err := k.beforeWrite(ctx, j, ops[j].Key); err != nil {
					w.undo(ctx)
					return k.failedOr(ctx, t, err)
				}
			}
		}
		var err error
		if n > 1 {
			err = w.writeAll(ctx, ops[i:i+n])
		} else {
			n = 1
			err = w.apply(ctx, ops[i])
		}
		if err != nil {
			w.undo(ctx)
			return k.failedOr(ctx, t, err)
		}
		i += n
	}
	res := datastore.TxnResult{Succeeded: true}
	for _, key := range w.order {
		if !slices.Contains(confirms, key) {
			st := w.state[key]
			res.Written = append(res.Written, datastore.KeyValue{Key: key, Value: st.value, Rev: st.rev})
		}
	}
	for _, key := range confirms {
		if kv, ok := w.confirm(ctx, key); ok {
			res.Written = append(res.Written, kv)
		}
	}
	return res, nil
}

// failedOr reports a failed condition as Succeeded=false and returns any
// other error.
func (k *ipamKV) failedOr(ctx context.Context, t datastore.Txn, err error) (datastore.TxnResult, error) {
	if errors.Is(err, datastore.ErrConflict) {
		return k.failed(ctx, t)
	}
	return datastore.TxnResult{}, err
}

// failed reads what a caller whose Txn lost needs to retry.
func (k *ipamKV) failed(ctx context.Context, t datastore.Txn) (datastore.TxnResult, error) {
	res := datastore.TxnResult{}
	keys := make([]string, len(t.Conds))
	for i, c := range t.Conds {
		keys[i] = c.Key
	}
	var err error
	if res.Current, err = k.Get(ctx, keys...); err != nil {
		return datastore.TxnResult{}, err
	}
	for _, p := range t.Refresh {
		kvs, _, err := k.List(ctx, p, false)
		if err != nil {
			return datastore.TxnResult{}, err
		}
		res.Refreshed = append(res.Refreshed, kvs)
	}
	return res, nil
}

// txnWriter applies one Txn's writes and remembers how to undo them.
type txnWriter struct {
	k     *ipamKV
	conds map[string]datastore.Cond
	state map[string]*txnKey // keys written so far
	order []string           // keys in the order of their first write
}

// txnKey is one key this Txn wrote: as it was before (rev 0: absent) and
// as the Txn left it.
type txnKey struct {
	r           *ipamResource
	name        string
	beforeRev   int64
	beforeValue []byte
	rev         int64
	value       []byte
}

// plan is the ops to apply: t.Ops, with a claim's affinity written
// pending, and the affinities to confirm once they all applied (see Txn).
func (w *txnWriter) plan(ops []datastore.Op) ([]datastore.Op, []string) {
	out := make([]datastore.Op, 0, len(ops))
	var confirms []string
	for i, op := range ops {
		if pending, ok := w.deferConfirm(op, ops[i+1:]); ok {
			out = append(out, datastore.Op{Type: datastore.OpPut, Key: op.Key, Value: pending})
			confirms = append(confirms, op.Key)
			continue
		}
		out = append(out, op)
	}
	return out, confirms
}

// confirm makes a claimed block's affinity confirmed once the Txn's block
// writes, which decided the claim, are in. It cannot undo them any more,
// so it never fails the Txn. It acts only while the block is the
// affinity's node's, and then makes sure the affinity exists and is
// confirmed, creating it again if need be: two claims of one node may
// share a pending affinity, and when the one that created it loses the
// block to the other, its undo deletes it, because the API server gives a
// write that changes nothing no new resourceVersion, so the winner's
// rewrite did not show. An affinity that is not pending (confirmed, or
// released since) is left as it is. What cannot be confirmed stays
// pending, which IPAM confirms at the node's next use of the block.
// It returns the affinity as it wrote it, ok false when it did not.
func (w *txnWriter) confirm(ctx context.Context, key string) (written datastore.KeyValue, ok bool) {
	ctx = context.WithoutCancel(ctx)
	_, node, cidr, parsed := ipamkv.ParseAffinityKey(key)
	if !parsed {
		return written, false
	}
	fail := func(err error) {
		w.k.s.logger.Warn("could not confirm a claimed block's affinity", "key", key, "err", err)
	}
	for attempt := 0; attempt < unconditionalRetries; attempt++ {
		kv, err := w.k.read(ctx, key)
		if err != nil {
			fail(err)
			return written, false
		}
		var v ipamkv.Affinity
		if kv.Rev != 0 && (json.Unmarshal(kv.Value, &v) != nil || v.State != ipamkv.StatePending) {
			return written, false
		}
		if kv.Rev == 0 {
			b, err := w.k.read(ctx, ipamkv.BlockKey(cidr))
			if err != nil {
				fail(err)
				return written, false
			}
			var bv ipamkv.Block
			if b.Rev == 0 || json.Unmarshal(b.Value, &bv) != nil || bv.Affinity == nil || *bv.Affinity != ipamkv.HostAffinityPrefix+node {
				return written, false
			}
		}
		v.State = ipamkv.StateConfirmed
		value, err := json.Marshal(v)
		if err != nil {
			return written, false
		}
		obj, err := encodeAffinity(key, value)
		if err != nil {
			fail(err)
			return written, false
		}
		var rev int64
		if kv.Rev == 0 {
			rev, err = w.k.createObject(ctx, ipamAffinities, obj)
		} else {
			rev, err = w.k.updateObject(ctx, ipamAffinities, obj, kv.Rev)
		}
		if err == nil {
			return datastore.KeyValue{Key: key, Value: value, Rev: rev}, true
		}
		if !lostRace(err) {
			fail(err)
			return written, false
		}
	}
	return written, false
}

// deferConfirm returns the pending form of op when op confirms an
// affinity its Cond shows unconfirmed (or absent) and a block write
// follows.
func (w *txnWriter) deferConfirm(op datastore.Op, later []datastore.Op) ([]byte, bool) {
	c, ok := w.conds[op.Key]
	if !ok || op.Type != datastore.OpPut {
		return nil, false
	}
	if !slices.ContainsFunc(later, func(o datastore.Op) bool { _, ok := ipamkv.ParseBlockKey(o.Key); return ok }) {
		return nil, false
	}
	if _, _, _, ok := ipamkv.ParseAffinityKey(op.Key); !ok {
		return nil, false
	}
	var v, was ipamkv.Affinity
	if json.Unmarshal(op.Value, &v) != nil || v.State != ipamkv.StateConfirmed {
		return nil, false
	}
	if c.Rev != 0 && json.Unmarshal(c.Value, &was) == nil && was.State == ipamkv.StateConfirmed {
		return nil, false
	}
	v.State = ipamkv.StatePending
	data, err := json.Marshal(v)
	return data, err == nil
}

// current is what is known of key before a write: the Txn's own last
// write, else the caller's Cond (checked by the write), else a fresh read
// (for an op without a Cond, which then retries on a conflict).
func (w *txnWriter) current(ctx context.Context, op datastore.Op) (rev int64, value []byte, conditional bool, err error) {
	if st, ok := w.state[op.Key]; ok {
		return st.rev, st.value, true, nil
	}
	if c, ok := w.conds[op.Key]; ok && op.Type != datastore.OpCreateIfAbsent {
		if c.Rev == 0 || c.Value != nil {
			return c.Rev, c.Value, true, nil
		}
		// The caller gave no value to restore on undo: read it.
		kv, err := w.k.read(ctx, op.Key)
		if err != nil {
			return 0, nil, true, err
		}
		if kv.Rev != c.Rev {
			return 0, nil, true, errCondFailed
		}
		return kv.Rev, kv.Value, true, nil
	}
	if op.Type == datastore.OpCreateIfAbsent {
		// The create itself finds out whether the key exists.
		return 0, nil, false, nil
	}
	kv, err := w.k.read(ctx, op.Key)
	return kv.Rev, kv.Value, false, err
}

// apply makes one write.
func (w *txnWriter) apply(ctx context.Context, op datastore.Op) error {
	r, name, err := resourceOfKey(op.Key)
	if err != nil {
		return fmt.Errorf("write %s: %w", op.Key, err)
	}
	var obj ipamObject
	if op.Type != datastore.OpDelete {
		if obj, err = r.encode(op.Key, op.Value); err != nil {
			return fmt.Errorf("write %s: %w", op.Key, err)
		}
	}
	for attempt := 0; ; attempt++ {
		rev, value, conditional, err := w.current(ctx, op)
		if err != nil {
			return err
		}
		newRev, err := w.write(ctx, op, r, name, obj, rev)
		switch {
		case err == nil:
			w.record(op, r, name, rev, value, newRev)
			return nil
		case errors.Is(err, errSkip):
			return nil
		case !lostRace(err):
			return fmt.Errorf("write %s: %w", op.Key, err)
		case conditional:
			return errCondFailed
		case attempt+1 >= unconditionalRetries:
			// Not a failed condition (there is none): an error.
			return fmt.Errorf("write %s: gave up after %d attempts, the last: %v", op.Key, unconditionalRetries, err)
		}
	}
}

// handleRun is how many of ops, from the first, are creates of distinct
// handles (a Put whose Cond says absent), or deletes of distinct handles
// (at the Cond's revision, whose value it has for the undo). Such writes
// depend on nothing but their own handle, and every subset of them is a
// state IPAM understands (a handle that counts addresses no block holds
// for it yet, as after a crash between a handle and its block, or still
// counts addresses its block released, as after a crash between a
// release's block and its handle), so they may be written at once.
func (w *txnWriter) handleRun(ops []datastore.Op) int {
	seen := map[string]bool{}
	n := 0
	for _, op := range ops {
		c, ok := w.conds[op.Key]
		create := op.Type == datastore.OpPut && c.Rev == 0
		del := op.Type == datastore.OpDelete && c.Rev != 0 && c.Value != nil
		if !ok || (!create && !del) || op.Type != ops[0].Type || seen[op.Key] || w.state[op.Key] != nil {
			break
		}
		if r, _, err := resourceOfKey(op.Key); err != nil || r != ipamHandles {
			break
		}
		seen[op.Key] = true
		n++
	}
	return n
}

// writeAll makes the writes of handleRun side by side, recording each
// that succeeded (for the undo), and returns the first failure
// (errCondFailed for a handle that exists, or changed).
func (w *txnWriter) writeAll(ctx context.Context, ops []datastore.Op) error {
	revs := make([]int64, len(ops))
	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Go(func() {
			if op.Type == datastore.OpDelete {
				_, name, _ := resourceOfKey(op.Key)
				errs[i] = w.k.deleteObject(ctx, ipamHandles, name, strconv.FormatInt(w.conds[op.Key].Rev, 10))
				return
			}
			obj, err := ipamHandles.encode(op.Key, op.Value)
			if err != nil {
				errs[i] = fmt.Errorf("write %s: %w", op.Key, err)
				return
			}
			revs[i], errs[i] = w.k.createObject(ctx, ipamHandles, obj)
		})
	}
	wg.Wait()
	var first error
	for i, op := range ops {
		switch err := errs[i]; {
		case err == nil:
			_, name, _ := resourceOfKey(op.Key)
			c := w.conds[op.Key]
			w.record(op, ipamHandles, name, c.Rev, c.Value, revs[i])
		case first != nil:
		case lostRace(err):
			first = errCondFailed
		default:
			first = fmt.Errorf("write %s: %w", op.Key, err)
		}
	}
	return first
}

// errSkip: the op had nothing to do.
var errSkip = errors.New("nothing to write")

// lostRace reports the API errors that mean the object is not at the
// version the write assumed.
func lostRace(err error) bool {
	return errors.Is(err, datastore.ErrConflict) || errors.Is(err, datastore.ErrAlreadyExists) ||
		errors.Is(err, datastore.ErrNotFound) || errors.Is(err, errCondFailed)
}

// write sends one op for a key at rev (0: absent) and returns the
// resourceVersion it left (0: deleted).
func (w *txnWriter) write(ctx context.Context, op datastore.Op, r *ipamResource, name string, obj ipamObject, rev int64) (int64, error) {
	switch op.Type {
	case datastore.OpPut:
		if rev == 0 {
			return w.k.createObject(ctx, r, obj)
		}
		return w.k.updateObject(ctx, r, obj, rev)
	case datastore.OpCreateIfAbsent:
		if rev != 0 {
			return 0, errSkip
		}
		newRev, err := w.k.createObject(ctx, r, obj)
		if errors.Is(err, datastore.ErrAlreadyExists) {
			return 0, errSkip
		}
		return newRev, err
	case datastore.OpDelete:
		if rev == 0 {
			if _, written := w.state[op.Key]; written {
				return 0, errSkip
			}
			// Absent by the Cond or a read: make sure it still is.
			kv, err := w.k.read(ctx, op.Key)
			switch {
			case err != nil:
				return 0, err
			case kv.Rev != 0:
				return 0, errCondFailed
			}
			return 0, errSkip
		}
		return 0, w.k.deleteObject(ctx, r, name, strconv.FormatInt(rev, 10))
	}
	return 0, fmt.Errorf("unknown op type %d", op.Type)
}

func (w *txnWriter) record(op datastore.Op, r *ipamResource, name string, rev int64, value []byte, newRev int64) {
	st, ok := w.state[op.Key]
	if !ok {
		st = &txnKey{r: r, name: name, beforeRev: rev, beforeValue: value}
		w.state[op.Key] = st
		w.order = append(w.order, op.Key)
	}
	st.rev = newRev
	st.value = nil
	if newRev != 0 {
		st.value = op.Value
	}
}

// undo puts back, newest first, every key the Txn wrote, each only if it
// is still as the Txn left it. It runs to the end even when ctx is done
// (a half-applied Txn is worse than a late one), bounded by the request
// timeout per call. Failures are logged: the key was changed by someone
// who saw this Txn's write, and IPAM repairs what it finds.
func (w *txnWriter) undo(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	for i := len(w.order) - 1; i >= 0; i-- {
		key := w.order[i]
		st := w.state[key]
		var err error
		switch {
		case st.beforeRev == 0 && st.rev == 0:
		case st.beforeRev == 0:
			err = w.k.deleteObject(ctx, st.r, st.name, strconv.FormatInt(st.rev, 10))
		case st.beforeValue == nil:
			err = errors.New("its earlier value was unreadable")
		default:
			obj, eerr := st.r.encode(key, st.beforeValue)
			switch {
			case eerr != nil:
				err = eerr
			case st.rev == 0:
				_, err = w.k.createObject(ctx, st.r, obj)
			default:
				_, err = w.k.updateObject(ctx, st.r, obj, st.rev)
			}
		}
		switch {
		case err == nil:
		case lostRace(err):
			// Someone wrote the key since: they saw this write and built
			// on it, and their value stands.
			w.k.s.logger.Debug("not undoing a write of a failed IPAM transaction: the key changed since", "key", key, "err", err)
		default:
			w.k.s.logger.Warn("could not undo a write of a failed IPAM transaction", "key", key, "err", err)
		}
	}
}
