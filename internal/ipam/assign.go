package ipam

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// AutoAssignArgs is an automatic allocation request.
type AutoAssignArgs struct {
	// Num4 and Num6 are how many IPv4 and IPv6 addresses to allocate.
	Num4, Num6 int
	// HandleID names the holder, e.g. "k8s-pod-network.<containerID>".
	HandleID string
	// Node is the hostname the blocks are affine to. With Use
	// LoadBalancer it is "" or LoadBalancerHost: the blocks are then the
	// virtual host's ("virtual:load-balancer"), as Calico's LoadBalancer
	// controller allocates, and the pools' node selectors see a node
	// without labels.
	Node string
	// IPv4Pools and IPv6Pools restrict the choice to these pools, by CIDR
	// or name, in preference order; empty = every pool the node may use.
	IPv4Pools, IPv6Pools []string
	// Attrs are stored in the allocation's "secondary" attributes. "node"
	// (= Node, not for a virtual host) and "timestamp" (now, Calico's
	// format) are added when missing; Calico's CNI plugin also sets
	// "namespace" and "pod".
	Attrs map[string]string
	// MaxBlocksPerHost caps the node's blocks; 0 = the IPAM config's
	// maxBlocksPerHost, which 0 makes unlimited. The stricter of the two
	// applies when both are set.
	MaxBlocksPerHost int
	// Use is the intended use pools must allow; "" = Workload.
	Use api.IPPoolAllowedUse
	// NamespaceLabels are the labels of the workload's namespace, matched
	// against pools' namespaceSelector (nil matches only pools without
	// one, or whose selector accepts no labels, as in Calico).
	NamespaceLabels map[string]string
	// Replace releases whatever HandleID already holds before allocating,
	// so that the handle ends up with exactly this request's addresses.
	// See replaceHandle.
	Replace bool
	// Lock, if set, takes the node's IPAM lock (which serialises the
	// node's allocators) and returns its release: AutoAssign holds it
	// around its datastore work. On a Client with a Cache, requests for
	// one Node that wait for the lock together are allocated in one
	// write under one hold of the first one's Lock (batch.go).
	Lock func() (unlock func())
}

// AssignIPArgs is a request for one specific address.
type AssignIPArgs struct {
	IP       netip.Addr
	HandleID string
	// Node: as AutoAssignArgs.Node.
	Node  string
	Attrs map[string]string
	// Use is the intended use ("" = Workload). LoadBalancer allocates to
	// the virtual host LoadBalancerHost and requires a pool that allows
	// the use (see AssignIP).
	Use api.IPPoolAllowedUse
	// Replace is AutoAssignArgs.Replace: the handle's earlier addresses are
	// released first.
	Replace bool
}

// AutoAssign allocates args.Num4 IPv4 and args.Num6 IPv6 addresses and
// returns them as host prefixes (/32, /128). It is all or nothing: on
// error nothing was allocated, with one exception no client can rule out:
// when the connection to etcd fails while the write is in flight (a
// transport error or deadline, not a sentinel error), etcd may have
// applied it. A caller that needs certainty then releases the handle.
//
// Addresses come from the node's affine blocks first (lowest free address
// in Calico's order), then from newly claimed blocks, and only when no
// unclaimed block is left in the usable pools and strict affinity is off,
// from other nodes' blocks. Everything (blocks, affinities, handle) is
// written in one etcd transaction conditional on the revisions read; a
// lost race is retried with the winners' values.
func (c *Client) AutoAssign(ctx context.Context, args AutoAssignArgs) (v4, v6 []netip.Prefix, err error) {
	node, err := ownerFor(args.Use, args.Node)
	if err != nil {
		return nil, nil, fmt.Errorf("auto-assign: %w", err)
	}
	args.Node = node
	if err := checkHolder(args.HandleID, args.Node); err != nil {
		return nil, nil, fmt.Errorf("auto-assign: %w", err)
	}
	if args.Num4 < 0 || args.Num6 < 0 {
		return nil, nil, fmt.Errorf("auto-assign: negative address count")
	}
	if args.Num4 == 0 && args.Num6 == 0 {
		return nil, nil, nil
	}
	use := args.Use
	if use == "" {
		use = api.IPPoolAllowedUseWorkload
	}
	if args.Lock != nil {
		if c.cache != nil {
			return c.autoAssignGrouped(ctx, args, use)
		}
		unlock := args.Lock()
		defer unlock()
	}
	return c.assignAlone(ctx, args, use)
}

// assignAlone is AutoAssign on its own: with a Cache, the first attempt
// starts from it; anything the cache cannot vouch for starts again from
// fresh reads (see autoAssign).
func (c *Client) assignAlone(ctx context.Context, args AutoAssignArgs, use api.IPPoolAllowedUse) ([]netip.Prefix, []netip.Prefix, error) {
	for fromCache := c.cache != nil; ; fromCache = false {
		v4, v6, retry, err := c.autoAssign(ctx, args, use, fromCache)
		if !retry {
			return v4, v6, err
		}
	}
}

// autoAssign is AutoAssign from one environment. An environment from the
// Cache (fromCache) vouches only for an allocation in the node's own
// blocks as cached, with the handle absent: one that needs anything else
// (a new block, a borrowed address, an affinity to confirm or drop, a
// retry after a lost race, the handle's earlier addresses released), or
// fails, comes back with retry set and nothing written, so that
// AutoAssign starts again from fresh reads.
func (c *Client) autoAssign(ctx context.Context, args AutoAssignArgs, use api.IPPoolAllowedUse, fromCache bool) (v4, v6 []netip.Prefix, retry bool, err error) {
	e, err := c.loadEnv(ctx, args.Node, fromCache, args.HandleID)
	if err != nil {
		return nil, nil, false, fmt.Errorf("auto-assign for %s: %w", args.HandleID, err)
	}
	if args.Replace {
		if e, err = c.replaceHandle(ctx, e, args.Node, args.HandleID); err != nil {
			return nil, nil, false, fmt.Errorf("auto-assign for %s: %w", args.HandleID, err)
		}
	}
	fams, err := families(e, args, use)
	if err != nil {
		return nil, nil, false, fmt.Errorf("auto-assign for %s: %w", args.HandleID, err)
	}
	maxBlocks := args.MaxBlocksPerHost
	if m := e.cfg.MaxBlocksPerHost; m > 0 && (maxBlocks == 0 || m < maxBlocks) {
		maxBlocks = m
	}
	attrs := c.attrs(args.Attrs, args.Node)
	// The node's blocks of both versions in one round trip (those the
	// cache does not hold).
	var affKeys []string
	for _, cidr := range e.affinities {
		if (ipVersion(cidr.Addr()) == 4 && args.Num4 > 0) || (ipVersion(cidr.Addr()) == 6 && args.Num6 > 0) {
			affKeys = append(affKeys, BlockKey(cidr))
		}
	}
	if err := c.read(ctx, e.snap, e.snap.missing(affKeys)); err != nil {
		return nil, nil, false, fmt.Errorf("auto-assign for %s: %w", args.HandleID, err)
	}

	for attempt := 0; ; attempt++ {
		p := &plan{env: e, handleID: args.HandleID, attrs: attrs, maxBlocks: maxBlocks,
			seq: uint64(c.now().UnixNano()), skip: map[string]bool{}}
		for _, f := range fams {
			if err := c.planFamily(ctx, p, f); err != nil {
				if e.cached {
					return nil, nil, true, nil
				}
				return nil, nil, false, fmt.Errorf("auto-assign for %s on node %s: %w", args.HandleID, args.Node, err)
			}
		}
		if e.cached && !p.ownBlocksOnly() {
			return nil, nil, true, nil
		}
		t, err := p.txn()
		if err != nil {
			return nil, nil, false, err
		}
		ok, refreshed, err := c.commit(ctx, e.snap, t)
		if err != nil {
			return nil, nil, false, fmt.Errorf("auto-assign for %s: %w", args.HandleID, err)
		}
		if ok {
			return p.got[4], p.got[6], false, nil
		}
		if e.cached {
			c.logger.Debug("IPAM write from cached blocks lost a race, reading them again", "handle", args.HandleID)
			return nil, nil, true, nil
		}
		e.setAffinities(refreshed[0])
		// Blocks may have been claimed since the listing: list again
		// if the retry needs a new block.
		clear(e.blockKeys)
		if err := retryAfter(ctx, attempt); err != nil {
			return nil, nil, false, fmt.Errorf("auto-assign for %s: %w", args.HandleID, err)
		}
		c.logger.Debug("IPAM write lost a race, retrying", "handle", args.HandleID, "attempt", attempt+1)
	}
}

// families is the request of args for each IP version it asks for, with
// the pools it may use.
func families(e *env, args AutoAssignArgs, use api.IPPoolAllowedUse) ([]family, error) {
	var fams []family
	for _, f := range []struct {
		v, n  int
		pools []string
	}{{4, args.Num4, args.IPv4Pools}, {6, args.Num6, args.IPv6Pools}} {
		if f.n == 0 {
			continue
		}
		pools, err := choosePools(e.pools, poolRequest{
			version: f.v, requested: f.pools, use: use, node: args.Node,
			nodeLabels: e.nodeLabels, nsLabels: args.NamespaceLabels,
		})
		if err != nil {
			return nil, err
		}
		fams = append(fams, family{version: f.v, n: f.n, pools: pools})
	}
	return fams, nil
}

// ownBlocksOnly reports whether the plan writes nothing but the handle
// and blocks that existed, affine to the node: all an allocation from the
// Cache may write.
func (p *plan) ownBlocksOnly() bool {
	if p.newCount > 0 || len(p.affPut) > 0 || len(p.affDel) > 0 {
		return false
	}
	for key, b := range p.blocks {
		if p.env.snap[key].rev == 0 || b.owner() != p.env.node {
			return false
		}
	}
	return true
}

// replaceHandle releases what handle holds when e shows that it exists,
// and returns the environment read again after the release.
//
// This is for a CNI ADD. Its handle is named after the container, and the
// CNI spec forbids a second ADD of a container without a DEL in between,
// so addresses the handle already holds were left by an earlier ADD of the
// same container that failed and could not undo its allocation: etcd went
// away after the allocation was written (or its answer was lost). Calico
// keeps those until the runtime's DEL or IPAM garbage collection; here a
// retried ADD frees them instead of adding a second address to the
// handle, which `ipam check` would report as leaked for the pod's whole
// life. The handle was read by loadEnv, so the usual case (no handle)
// costs nothing; the rare one costs a release and a second read.
func (c *Client) replaceHandle(ctx context.Context, e *env, node, handle string) (*env, error) {
	if e.snap[HandleKey(handle)].rev == 0 {
		return e, nil
	}
	c.logger.Info("handle already holds addresses: releasing them before allocating", "handle", handle)
	if err := c.ReleaseByHandle(ctx, handle); err != nil {
		return nil, err
	}
	return c.loadEnv(ctx, node, false, handle)
}

// ownerFor is the owner an allocation of use for node goes to: the node,
// or for LoadBalancer addresses the virtual host (Calico switches the
// affinity type on the use the same way).
func ownerFor(use api.IPPoolAllowedUse, node string) (string, error) {
	if use != api.IPPoolAllowedUseLoadBalancer {
		return node, nil
	}
	if node != "" && node != LoadBalancerHost {
		return "", fmt.Errorf("LoadBalancer addresses belong to the virtual host %q, not node %q", LoadBalancerHost, node)
	}
	return lbOwner, nil
}

// checkHolder validates a handle and node name for use in keys.
func checkHolder(handle, node string) error {
	switch {
	case handle == "":
		return errors.New("handle ID must be set")
	case strings.Contains(handle, "/"):
		return fmt.Errorf("handle ID %q must not contain '/'", handle)
	case node == "":
		return errors.New("node must be set")
	case strings.Contains(node, "/"):
		return fmt.Errorf("node name %q must not contain '/'", node)
	}
	return nil
}

// attrs completes the caller's attributes with the node and the time, as
// Calico's CNI plugin records them.
func (c *Client) attrs(in map[string]string, node string) map[string]string {
	out := maps.Clone(in)
	if out == nil {
		out = map[string]string{}
	}
	if _, virtual := virtualHost(node); out[AttrNode] == "" && !virtual {
		out[AttrNode] = node
	}
	if out[AttrTimestamp] == "" {
		out[AttrTimestamp] = c.now().UTC().String()
	}
	return out
}

// family is the request for one IP version.
type family struct {
	version int
	n       int
	pools   []api.Pool
}

// plan is one attempt at an allocation: the blocks, affinities and handle
// as they would be after it, built from the snapshot without writing.
type plan struct {
	env       *env
	handleID  string
	attrs     map[string]string
	maxBlocks int
	seq       uint64 // initial sequence number of new blocks

	blocks   map[string]*block // key -> block as it will be written
	affPut   []string          // affinity keys to write as confirmed
	affDel   []string          // stale affinity keys to delete
	handleN  map[string]int    // block CIDR -> addresses taken
	got      map[int][]netip.Prefix
	newCount int
	skip     map[string]bool // wholly reserved blocks passed over
}

// block returns the plan's copy of the block at key, decoding it from the
// snapshot on first use; nil if it does not exist or is unreadable.
func (p *plan) block(c *Client, key string) *block {
	if b, ok := p.blocks[key]; ok {
		return b
	}
	return c.snapBlock(p.env.snap, key)
}

// take allocates up to n addresses from b and records them.
func (p *plan) take(b *block, n int) int {
	ords := b.take(n, p.handleID, p.attrs, p.env.res)
	if len(ords) == 0 {
		return 0
	}
	if p.blocks == nil {
		p.blocks = map[string]*block{}
		p.handleN = map[string]int{}
		p.got = map[int][]netip.Prefix{}
	}
	p.blocks[BlockKey(b.cidr)] = b
	p.handleN[b.cidr.String()] += len(ords)
	v := ipVersion(b.cidr.Addr())
	for _, ord := range ords {
		a := b.addr(ord)
		p.got[v] = append(p.got[v], netip.PrefixFrom(a, a.BitLen()))
	}
	return len(ords)
}

// planFamily allocates f.n addresses of one IP version in the plan.
func (c *Client) planFamily(ctx context.Context, p *plan, f family) error {
	e := p.env
	need := f.n
	poolIndex := func(cidr netip.Prefix) int {
		return slices.IndexFunc(f.pools, func(q api.Pool) bool { return q.CIDR.Contains(cidr.Addr()) && q.BlockSize == cidr.Bits() })
	}

	// 1. Blocks affine to the node in the usable pools, in pool preference
	// order, then by address.
	var affine []netip.Prefix
	for _, cidr := range e.affinities {
		if ipVersion(cidr.Addr()) == f.version && poolIndex(cidr) >= 0 {
			affine = append(affine, cidr)
		}
	}
	slices.SortFunc(affine, func(a, b netip.Prefix) int {
		if d := poolIndex(a) - poolIndex(b); d != 0 {
			return d
		}
		return a.Addr().Compare(b.Addr())
	})
	keys := make([]string, len(affine))
	for i, cidr := range affine {
		keys[i] = BlockKey(cidr)
	}
	if err := c.read(ctx, e.snap, e.snap.missing(keys)); err != nil {
		return err
	}
	owned := 0
	for _, cidr := range affine {
		key, akey := BlockKey(cidr), AffinityKey(e.node, cidr)
		b := p.block(c, key)
		switch {
		case b == nil && e.snap[key].rev != 0:
			continue // unreadable; logged
		case b == nil:
			// An affinity without its block: a claim that stopped half-way
			// (Calico writes the affinity first). Finish it.
			b = newBlock(cidr, e.node, p.seq)
		case b.owner() != e.node:
			// The block went to someone else: the affinity is stale.
			p.affDel = append(p.affDel, akey)
			continue
		}
		owned++
		if need == 0 || e.res.coversAll(cidr) {
			continue
		}
		if n := p.take(b, need); n > 0 {
			need -= n
			if e.snap[key].rev == 0 || affinityState(e.snap[akey].value) != stateConfirmed {
				p.affPut = append(p.affPut, akey)
			}
		}
	}

	// 2. New blocks.
	limited := false
	for need > 0 && e.cfg.AutoAllocateBlocks {
		if p.maxBlocks > 0 && owned+p.newCount >= p.maxBlocks {
			limited = true
			break
		}
		cidr, ok, err := c.freeBlock(ctx, p, f)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		b := newBlock(cidr, e.node, p.seq)
		p.newCount++
		p.affPut = append(p.affPut, AffinityKey(e.node, cidr))
		if n := p.take(b, need); n > 0 {
			need -= n
		} else {
			// Every address of the new block is reserved (by several
			// reservations together): pass over it without claiming it.
			p.affPut = p.affPut[:len(p.affPut)-1]
			p.newCount--
			p.skip[BlockKey(cidr)] = true
		}
	}
	if need > 0 && limited {
		return fmt.Errorf("%w (%d blocks)", ErrBlockLimit, p.maxBlocks)
	}

	// 3. Borrow from other nodes' blocks.
	if need > 0 && !e.cfg.StrictAffinity {
		n, err := c.borrow(ctx, p, f, need)
		if err != nil {
			return err
		}
		need -= n
	}
	if need > 0 {
		cidrs := make([]string, len(f.pools))
		for i, q := range f.pools {
			cidrs[i] = q.CIDR.String()
		}
		if e.cfg.StrictAffinity {
			return fmt.Errorf("%w: IPv%d pools %s (strict affinity: the node's blocks are full and no block is free to claim)",
				ErrNoFreeAddresses, f.version, strings.Join(cidrs, ", "))
		}
		return fmt.Errorf("%w: IPv%d pools %s", ErrNoFreeAddresses, f.version, strings.Join(cidrs, ", "))
	}
	return nil
}

// freeBlock finds an unclaimed block in f's pools, starting each pool at a
// position derived from the node name (as Calico does) so that nodes
// claiming at the same time rarely want the same block.
func (c *Client) freeBlock(ctx context.Context, p *plan, f family) (netip.Prefix, bool, error) {
	e := p.env
	existing, err := c.listBlockKeys(ctx, e, f.version)
	if err != nil {
		return netip.Prefix{}, false, err
	}
	for _, q := range f.pools {
		n := numBlocks(q.CIDR, q.BlockSize)
		start := nodeHash(e.node) % n
		// Walk past existing blocks and wholly reserved ones; the bound
		// keeps a huge IPv6 pool with a huge reservation from spinning.
		limit := uint64(len(existing)) + 1<<16
		for i := uint64(0); i < n && i < limit; i++ {
			cidr := nthBlock(q.CIDR, q.BlockSize, (start+i)%n)
			if e.res.coversAll(cidr) {
				continue
			}
			key := BlockKey(cidr)
			if _, ok := p.blocks[key]; ok || p.skip[key] {
				continue
			}
			if s, ok := e.snap[key]; ok {
				if s.rev == 0 {
					return cidr, true, nil
				}
				continue
			}
			if !existing[key] {
				return cidr, true, nil
			}
		}
	}
	return netip.Prefix{}, false, nil
}

// borrow takes up to need addresses from existing blocks of f's pools that
// are not affine to the node.
func (c *Client) borrow(ctx context.Context, p *plan, f family, need int) (int, error) {
	e := p.env
	existing, err := c.listBlockKeys(ctx, e, f.version)
	if err != nil {
		return 0, err
	}
	// Blocks learned of since the listing (from lost races) count too:
	// freeBlock only gives up when every block of the pools is known.
	known := maps.Clone(existing)
	prefix := ipamkv.BlockVersionPrefix(f.version)
	for key, s := range e.snap {
		if s.rev > 0 && strings.HasPrefix(key, prefix) {
			known[key] = true
		}
	}
	got := 0
	for _, q := range f.pools {
		var cands []string
		for key := range known {
			cidr, ok := ipamkv.ParseBlockKey(key)
			if ok && cidr.Bits() == q.BlockSize && q.CIDR.Contains(cidr.Addr()) && !e.res.coversAll(cidr) {
				cands = append(cands, key)
			}
		}
		if len(cands) == 0 {
			continue
		}
		slices.SortFunc(cands, func(a, b string) int {
			ca, _ := ipamkv.ParseBlockKey(a)
			cb, _ := ipamkv.ParseBlockKey(b)
			return ca.Addr().Compare(cb.Addr())
		})
		// Spread borrowers over the pool instead of piling onto its first
		// block.
		r := int(nodeHash(e.node) % uint64(len(cands)))
		cands = append(cands[r:], cands[:r]...)
		for len(cands) > 0 && got < need {
			chunk := cands[:min(len(cands), 64)]
			cands = cands[len(chunk):]
			if err := c.read(ctx, e.snap, e.snap.missing(chunk)); err != nil {
				return got, err
			}
			for _, key := range chunk {
				b := p.block(c, key)
				if b == nil || b.owner() == e.node {
					continue // gone, unreadable, or ours (used already)
				}
				got += p.take(b, need-got)
				if got == need {
					return got, nil
				}
			}
		}
	}
	return got, nil
}

func nodeHash(node string) uint64 {
	h := fnv.New32a()
	h.Write([]byte(node))
	return uint64(h.Sum32())
}

// txn turns the plan into its transaction: conditional on every key it
// writes, and reading back the node's affinities if it fails. The order
// is the safe one for a datastore that applies writes one by one and
// undoes them when a later one fails (see txn): the handle's count and the
// new affinities (intents), the stale affinities' removal and the config
// (cleanups that are right whatever follows), and the blocks last. A
// block write decides the allocation, and once it is in, another
// allocator may build on it, so that it could no longer be undone: nothing
// that can lose a race comes after it.
func (p *plan) txn() (*txn, error) {
	e := p.env
	t := &txn{refresh: []string{nodeAffinityPrefix(e.node)}}
	if len(p.handleN) > 0 {
		hkey := HandleKey(p.handleID)
		h, err := decodeHandle(e.snap[hkey])
		if err != nil {
			return nil, fmt.Errorf("handle %s: %w", p.handleID, err)
		}
		// The count of each block written is what the block will hold for
		// the handle: normally the old count plus this allocation, and
		// also right after an earlier attempt's allocation stayed behind
		// in the block (on the Kubernetes datastore, when another
		// allocator built on the block before the failed attempt's undo).
		for _, b := range p.blocks {
			if n := len(b.ordinalsOf(p.handleID)); n > 0 {
				h.Block[b.cidr.String()] = n
			}
		}
		t.put(hkey, mustJSON(h))
	}
	for _, key := range slices.Compact(slices.Sorted(slices.Values(p.affPut))) {
		t.put(key, confirmedAffinity)
	}
	for _, key := range slices.Compact(slices.Sorted(slices.Values(p.affDel))) {
		if !slices.Contains(p.affPut, key) {
			t.del(key)
		}
	}
	if !e.cfgExists {
		// Calico writes its defaults on first use; do the same, without
		// making the allocation depend on it.
		t.createIfAbsent(configKey, mustJSON(defaultConfigValue))
	}
	for _, key := range slices.Sorted(maps.Keys(p.blocks)) {
		data, err := p.blocks[key].encode()
		if err != nil {
			return nil, err
		}
		t.put(key, data)
	}
	return t, nil
}

// AssignIP allocates one specific address (the cni.projectcalico.org/ipAddrs
// annotation). The address must be in an enabled pool (ErrNotInPool,
// ErrPoolDisabled); if its block does not exist yet the node claims it.
// IPReservations do not apply: they only keep addresses out of automatic
// assignment, as in Calico. With strict affinity the block must be affine
// to the node. An address someone holds fails with ErrAddressInUse.
func (c *Client) AssignIP(ctx context.Context, args AssignIPArgs) error {
	node, err := ownerFor(args.Use, args.Node)
	if err != nil {
		return fmt.Errorf("assign %s: %w", args.IP, err)
	}
	args.Node = node
	if err := checkHolder(args.HandleID, node); err != nil {
		return fmt.Errorf("assign %s: %w", args.IP, err)
	}
	ip := args.IP.Unmap()
	if !ip.IsValid() {
		return errors.New("assign: no address given")
	}
	e, err := c.loadEnv(ctx, args.Node, false, args.HandleID)
	if err != nil {
		return fmt.Errorf("assign %s: %w", ip, err)
	}
	if args.Replace {
		if e, err = c.replaceHandle(ctx, e, args.Node, args.HandleID); err != nil {
			return fmt.Errorf("assign %s: %w", ip, err)
		}
	}
	q, ok := poolContaining(e.pools, ip)
	if !ok {
		return fmt.Errorf("assign %s: %w", ip, ErrNotInPool)
	}
	if q.Disabled {
		return fmt.Errorf("assign %s: pool %s (%s): %w", ip, q.Name, q.CIDR, ErrPoolDisabled)
	}
	// Calico's AssignIP does not look at the use; a LoadBalancer address
	// in a workload pool would then sit in a virtual block inside the
	// pool the nodes' pods use. Refused here (docs/decisions.md).
	if args.Use == api.IPPoolAllowedUseLoadBalancer && !q.Allows(args.Use) {
		return fmt.Errorf("assign %s: pool %s (%s) does not allow use %s: %w", ip, q.Name, q.CIDR, args.Use, ErrNotInPool)
	}
	cidr := blockFor(ip, q.BlockSize)
	key, akey := BlockKey(cidr), AffinityKey(args.Node, cidr)
	if err := c.read(ctx, e.snap, e.snap.missing([]string{key, akey})); err != nil {
		return fmt.Errorf("assign %s: %w", ip, err)
	}
	attrs := c.attrs(args.Attrs, args.Node)
	for attempt := 0; ; attempt++ {
		p := &plan{env: e, handleID: args.HandleID, attrs: attrs, seq: uint64(c.now().UnixNano())}
		b := p.block(c, key)
		switch {
		case b == nil && e.snap[key].rev != 0:
			return fmt.Errorf("assign %s: block %s is unreadable", ip, cidr)
		case b == nil:
			b = newBlock(cidr, args.Node, p.seq)
			p.affPut = append(p.affPut, akey)
		case e.cfg.StrictAffinity && b.owner() != node:
			return fmt.Errorf("assign %s: block %s is affine to %q and strict affinity is on", ip, cidr, b.affinity())
		}
		ord, _ := b.ordinal(ip)
		if err := b.assign(ord, args.HandleID, attrs); err != nil {
			return fmt.Errorf("assign %s: %w (held by %q)", ip, err, b.handleOf(ord))
		}
		p.blocks = map[string]*block{key: b}
		p.handleN = map[string]int{cidr.String(): 1}
		t, err := p.txn()
		if err != nil {
			return err
		}
		ok, _, err := c.commit(ctx, e.snap, t)
		if err != nil {
			return fmt.Errorf("assign %s: %w", ip, err)
		}
		if ok {
			return nil
		}
		if err := retryAfter(ctx, attempt); err != nil {
			return fmt.Errorf("assign %s: %w", ip, err)
		}
	}
}
