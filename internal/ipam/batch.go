package ipam

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// Group commit: on a Client with a Cache, AutoAssign calls that name a
// Lock (the node's IPAM lock) queue per node, and the first of them leads
// a batch: it takes the lock once, reads pools, reservations and the Node
// once, plans every queued request in turn from the cached blocks (each
// sees the addresses the ones before it took) and writes the handles and
// the blocks in one Txn. On the Kubernetes datastore, whose Txn creates
// the handles side by side, eight ADDs queued on a node then cost three
// API round trips under the lock instead of twenty-four.
//
// Nothing here decides an allocation either: the Txn is conditional on
// every block's cached revision and every handle's absence. A request the
// cache cannot vouch for (see autoAssign), or a batch whose Txn lost, goes
// back to its caller, which allocates alone from fresh reads under the
// lock, as without a cache. Requests that arrive while a batch runs wait
// for the next one, which the first of them leads.

// batchReq is one queued AutoAssign, or with release set one queued
// ReleaseHandle (of args.HandleID).
type batchReq struct {
	ctx     context.Context
	args    AutoAssignArgs
	use     api.IPPoolAllowedUse
	release bool
	// lead is closed when this request is to lead the next batch; done
	// when a batch has its answer in res.
	lead, done chan struct{}
	res        batchResult
}

type batchResult struct {
	v4, v6 []netip.Prefix
	// alone: the batch could not allocate for it; the caller does.
	alone bool
	err   error
}

// nodeQueue is one node's requests waiting for a batch. running is set
// while a leader is chosen or at work.
type nodeQueue struct {
	pending []*batchReq
	running bool
}

// autoAssignGrouped is AutoAssign through the node's queue.
func (c *Client) autoAssignGrouped(ctx context.Context, args AutoAssignArgs, use api.IPPoolAllowedUse) ([]netip.Prefix, []netip.Prefix, error) {
	r := &batchReq{ctx: ctx, args: args, use: use}
	if c.enqueue(r) {
		return r.res.v4, r.res.v6, r.res.err
	}
	unlock := args.Lock()
	defer unlock()
	return c.assignAlone(ctx, args, use)
}

// ReleaseHandle is ReleaseByHandle for handleID on node, under lock (the
// node's IPAM lock, as AutoAssignArgs.Lock). On a Client with a Cache it
// queues with the node's allocations, and a batch releases it in the
// same write as theirs: its blocks and handle as the cache holds them,
// the handle deleted after the blocks.
func (c *Client) ReleaseHandle(ctx context.Context, node, handleID string, lock func() (unlock func())) error {
	handleID = sanitizeHandle(handleID)
	if c.cache != nil && node != "" && handleID != "" {
		r := &batchReq{ctx: ctx, args: AutoAssignArgs{HandleID: handleID, Node: node, Lock: lock}, release: true}
		if c.enqueue(r) {
			return r.res.err
		}
	}
	unlock := lock()
	defer unlock()
	return c.ReleaseByHandle(ctx, handleID)
}

// enqueue queues r for its node's next batch, leads it if no other
// request does, and waits for its answer. It reports false when the
// batch left r to its caller.
func (c *Client) enqueue(r *batchReq) bool {
	r.lead, r.done = make(chan struct{}), make(chan struct{})
	args := r.args
	m := c.cache
	m.qmu.Lock()
	q := m.queues[args.Node]
	if q == nil {
		q = &nodeQueue{}
		m.queues[args.Node] = q
	}
	q.pending = append(q.pending, r)
	if !q.running {
		q.running = true
		close(r.lead)
	}
	m.qmu.Unlock()

	select {
	case <-r.done:
	case <-r.lead:
		c.leadBatch(q, args.Lock)
		<-r.done
	}
	return !r.res.alone
}

// leadBatch runs one batch of q's requests under lock, answers them, and
// hands the lead to the first request queued since, if any.
func (c *Client) leadBatch(q *nodeQueue, lock func() func()) {
	m := c.cache
	unlock := lock()
	m.qmu.Lock()
	batch := q.pending
	q.pending = nil
	m.qmu.Unlock()

	c.runBatch(batch)
	unlock()

	m.qmu.Lock()
	if len(q.pending) > 0 {
		close(q.pending[0].lead)
	} else {
		q.running = false
	}
	m.qmu.Unlock()
	for _, r := range batch {
		close(r.done)
	}
}

// runBatch plans and writes the batch's requests, setting each one's res.
// It runs on the leader's context, without its cancellation (the others
// wait on it), bounded by the earliest deadline of the batch.
func (c *Client) runBatch(batch []*batchReq) {
	for _, r := range batch {
		r.res.alone = true
	}
	ctx := context.WithoutCancel(batch[0].ctx)
	for _, r := range batch {
		if d, ok := r.ctx.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d)
			defer cancel()
		}
	}
	// Pools, reservations and the Node only when something is allocated.
	loadPools := slices.ContainsFunc(batch, func(r *batchReq) bool { return !r.release })
	var e *env
	if loadPools {
		var err error
		if e, err = c.loadEnv(ctx, batch[0].args.Node, true); err != nil || !e.cached {
			return
		}
	} else {
		e = &env{node: batch[0].args.Node, snap: snapshot{}, blockKeys: map[int]map[string]bool{}}
		if _, e.cached = c.cache.nodeEnv(e.node, e.snap); !e.cached {
			return
		}
	}
	// Releases first, then allocations on the blocks as they leave them.
	blocks := map[string]*block{}
	var released []string
	var members []*batchReq
	seen := map[string]bool{} // one request per handle in a batch
	for _, r := range batch {
		if r.release && !seen[r.args.HandleID] && c.releaseCached(e, r.args.HandleID, blocks) {
			released = append(released, r.args.HandleID)
			members = append(members, r)
			seen[r.args.HandleID] = true
		}
	}
	var plans []*plan
	for _, r := range batch {
		if r.release || seen[r.args.HandleID] {
			continue
		}
		p, ok := c.planCached(ctx, e, r, blocks)
		if !ok {
			continue
		}
		plans = append(plans, p)
		members = append(members, r)
		blocks = p.blocks
		seen[r.args.HandleID] = true
	}
	if len(members) == 0 {
		return
	}
	t, err := batchTxn(e.node, plans, blocks, released)
	if err != nil {
		return
	}
	ok, _, err := c.commit(ctx, e.snap, t)
	switch {
	case err != nil:
		// The write may have applied: the callers decide, as after a
		// failed AutoAssign (they release the handle).
		for _, r := range members {
			what := "auto-assign for"
			if r.release {
				what = "release handle"
			}
			r.res = batchResult{err: fmt.Errorf("%s %s: %w", what, r.args.HandleID, err)}
		}
	case ok:
		for _, r := range members {
			r.res = batchResult{}
		}
		for i, r := range members[len(released):] {
			r.res = batchResult{v4: plans[i].got[4], v6: plans[i].got[6]}
		}
	default:
		c.logger.Debug("IPAM batch write from cached blocks lost a race, allocating one by one", "requests", len(members))
	}
}

// planCached plans r from e, the Cache's environment, on copies of
// blocks (the batch's blocks so far). It fails, leaving blocks as they
// were, when r needs anything an allocation from the cache may not do.
func (c *Client) planCached(ctx context.Context, e *env, r *batchReq, blocks map[string]*block) (*plan, bool) {
	args := r.args
	if err := checkHolder(args.HandleID, args.Node); err != nil || args.Num4 < 0 || args.Num6 < 0 {
		return nil, false
	}
	p := &plan{env: e, handleID: args.HandleID, attrs: c.attrs(args.Attrs, args.Node),
		seq: uint64(c.now().UnixNano()), skip: map[string]bool{},
		blocks: map[string]*block{}, handleN: map[string]int{}, got: map[int][]netip.Prefix{}}
	for key, b := range blocks {
		if len(b.ordinalsOf(args.HandleID)) > 0 {
			return nil, false // a second request of one handle
		}
		cp, err := b.clone()
		if err != nil {
			return nil, false
		}
		p.blocks[key] = cp
	}
	fams, err := families(e, args, r.use)
	if err != nil {
		return nil, false
	}
	for _, f := range fams {
		if err := c.planFamily(ctx, p, f); err != nil {
			return nil, false
		}
	}
	if len(p.handleN) == 0 || !p.ownBlocksOnly() {
		return nil, false
	}
	return p, true
}

// releaseCached releases handle in blocks (copies of e's, the cache's)
// when the cache holds the handle and its blocks, all the node's own,
// and records the handle's revision in e.snap for its deletion. It
// reports false, leaving blocks as they were, otherwise.
func (c *Client) releaseCached(e *env, handle string, blocks map[string]*block) bool {
	hkey := HandleKey(handle)
	c.cache.fill(e.snap, []string{hkey})
	he := e.snap[hkey]
	if he.rev == 0 {
		return false
	}
	h, err := decodeHandle(he)
	if err != nil {
		return false
	}
	keys := blockKeysOf(h)
	work := map[string]*block{}
	for _, key := range keys {
		b := blocks[key]
		if b == nil {
			if b = c.snapBlock(e.snap, key); b == nil {
				return false
			}
		} else if b, err = b.clone(); err != nil {
			return false
		}
		if b.owner() != e.node {
			return false
		}
		b.releaseByHandle(b.ordinalsOf(handle))
		work[key] = b
	}
	maps.Copy(blocks, work)
	return true
}

// batchTxn is the Txn of a batch: each plan's handle, created (it is
// conditional on its absence: the cache does not read handles), the
// blocks as the releases and the last plan left them (see plan.txn), and
// the released handles, deleted after their blocks (see ReleaseByHandle).
func batchTxn(node string, plans []*plan, blocks map[string]*block, released []string) (*txn, error) {
	t := &txn{refresh: []string{nodeAffinityPrefix(node)}}
	for _, p := range plans {
		h := handleValue{Block: map[string]int{}}
		for _, b := range blocks {
			if n := len(b.ordinalsOf(p.handleID)); n > 0 {
				h.Block[b.cidr.String()] = n
			}
		}
		t.put(HandleKey(p.handleID), mustJSON(h))
	}
	for _, key := range slices.Sorted(maps.Keys(blocks)) {
		data, err := blocks[key].encode()
		if err != nil {
			return nil, err
		}
		t.put(key, data)
	}
	for _, h := range released {
		t.del(HandleKey(h))
	}
	return t, nil
}

// clone is a deep copy of b.
func (b *block) clone() (*block, error) {
	data, err := json.Marshal(&b.v)
	if err != nil {
		return nil, fmt.Errorf("copy block %s: %w", b.cidr, err)
	}
	return decodeBlock(data)
}
