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

// batchReq is one queued AutoAssign.
type batchReq struct {
	ctx  context.Context
	args AutoAssignArgs
	use  api.IPPoolAllowedUse
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
	r := &batchReq{ctx: ctx, args: args, use: use, lead: make(chan struct{}), done: make(chan struct{})}
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
		c.leadBatch(args.Node, q, args.Lock)
		<-r.done
	}
	if !r.res.alone {
		return r.res.v4, r.res.v6, r.res.err
	}
	unlock := args.Lock()
	defer unlock()
	return c.assignAlone(ctx, args, use)
}

// leadBatch runs one batch of q's requests under lock, answers them, and
// hands the lead to the first request queued since, if any.
func (c *Client) leadBatch(node string, q *nodeQueue, lock func() func()) {
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
	e, err := c.loadEnv(ctx, batch[0].args.Node, true)
	if err != nil || !e.cached {
		return
	}
	blocks := map[string]*block{}
	var plans []*plan
	var members []*batchReq
	for _, r := range batch {
		p, ok := c.planCached(ctx, e, r, blocks)
		if !ok {
			continue
		}
		plans = append(plans, p)
		members = append(members, r)
		blocks = p.blocks
	}
	if len(plans) == 0 {
		return
	}
	t, err := batchTxn(plans, blocks)
	if err != nil {
		return
	}
	ok, _, err := c.commit(ctx, e.snap, t)
	switch {
	case err != nil:
		// The write may have applied: the callers decide, as after a
		// failed AutoAssign (they release the handle).
		for _, r := range members {
			r.res = batchResult{err: fmt.Errorf("auto-assign for %s: %w", r.args.HandleID, err)}
		}
	case ok:
		for i, r := range members {
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
	for _, f := range []struct {
		v, n  int
		pools []string
	}{{4, args.Num4, args.IPv4Pools}, {6, args.Num6, args.IPv6Pools}} {
		if f.n == 0 {
			continue
		}
		pools, err := choosePools(e.pools, poolRequest{
			version: f.v, requested: f.pools, use: r.use, node: args.Node,
			nodeLabels: e.nodeLabels, nsLabels: args.NamespaceLabels,
		})
		if err != nil {
			return nil, false
		}
		if err := c.planFamily(ctx, p, family{version: f.v, n: f.n, pools: pools}); err != nil {
			return nil, false
		}
	}
	if len(p.handleN) == 0 || !p.ownBlocksOnly() {
		return nil, false
	}
	return p, true
}

// batchTxn is the Txn of a batch: each plan's handle, created (it is
// conditional on its absence: the cache does not read handles), then
// the blocks as the last plan left them, last (see plan.txn).
func batchTxn(plans []*plan, blocks map[string]*block) (*txn, error) {
	t := &txn{refresh: []string{nodeAffinityPrefix(plans[0].env.node)}}
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
