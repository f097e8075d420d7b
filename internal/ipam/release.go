package ipam

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// ReleaseOptions names one allocation to release. Handle and
// SequenceNumber, when set, must match the allocation (as recorded in a
// check report), so that an address released and handed out again since
// is left alone.
type ReleaseOptions struct {
	Addr           netip.Addr
	Handle         string
	SequenceNumber *uint64
}

// ReleaseByHandle releases every address held by handleID and deletes the
// handle, in one transaction. A handle that does not exist is not an
// error: CNI DEL must be idempotent.
func (c *Client) ReleaseByHandle(ctx context.Context, handleID string) error {
	handleID = sanitizeHandle(handleID)
	if handleID == "" {
		return fmt.Errorf("release by handle: handle ID must be set")
	}
	hkey := HandleKey(handleID)
	snap := snapshot{}
	// What the Cache holds (the handle its ADD created, the node's
	// blocks) is not read: the writes are conditional on its revisions,
	// and a lost race hands back current values.
	c.cache.fill(snap, []string{hkey})
	if err := c.read(ctx, snap, snap.missing([]string{hkey})); err != nil {
		return fmt.Errorf("release handle %s: %w", handleID, err)
	}
	for attempt := 0; ; attempt++ {
		he := snap[hkey]
		if he.rev == 0 {
			return nil
		}
		h, err := decodeHandle(he)
		if err != nil {
			return fmt.Errorf("release handle %s: %w", handleID, err)
		}
		keys := blockKeysOf(h)
		c.cache.fill(snap, snap.missing(keys))
		if err := c.read(ctx, snap, snap.missing(keys)); err != nil {
			return fmt.Errorf("release handle %s: %w", handleID, err)
		}
		t := &txn{}
		for _, key := range keys {
			b := c.snapBlock(snap, key)
			if b == nil {
				continue
			}
			ords := b.ordinalsOf(handleID)
			if len(ords) == 0 {
				continue
			}
			b.releaseByHandle(ords)
			if err := writeReleased(t, key, b); err != nil {
				return err
			}
		}
		// Every block the handle names has been cleared of it, so the handle
		// goes, even if its counts were off.
		t.del(hkey)
		ok, _, err := c.commit(ctx, snap, t)
		if err != nil {
			return fmt.Errorf("release handle %s: %w", handleID, err)
		}
		if ok {
			return nil
		}
		if err := retryAfter(ctx, attempt); err != nil {
			return fmt.Errorf("release handle %s: %w", handleID, err)
		}
	}
}

// blockKeysOf lists the block keys a handle refers to.
func blockKeysOf(h handleValue) []string {
	var keys []string
	for s := range h.Block {
		if p, err := netip.ParsePrefix(s); err == nil {
			keys = append(keys, BlockKey(p.Masked()))
		}
	}
	slices.Sort(keys)
	return keys
}

// snapBlock decodes the block at key from snap; nil if absent or
// unreadable (logged).
func (c *Client) snapBlock(snap snapshot, key string) *block {
	e := snap[key]
	if e.rev == 0 {
		return nil
	}
	b, err := decodeBlock(e.value)
	if err != nil {
		c.logger.Warn("skipping unreadable IPAM block", "key", key, "err", err)
		return nil
	}
	return b
}

// writeReleased stores a block after a release: a block that is empty and
// affine to nobody is deleted, as Calico does; anything else is rewritten.
func writeReleased(t *txn, key string, b *block) error {
	if b.empty() && b.affinity() == "" {
		t.del(key)
		return nil
	}
	data, err := b.encode()
	if err != nil {
		return err
	}
	t.put(key, data)
	return nil
}

// ReleaseIPs releases the given addresses, whoever holds them, and returns
// those that were not allocated. Handle counts are decremented (a handle
// left with no addresses is deleted) in the same transaction as the blocks.
func (c *Client) ReleaseIPs(ctx context.Context, ips ...netip.Addr) (unallocated []netip.Addr, err error) {
	opts := make([]ReleaseOptions, len(ips))
	for i, ip := range ips {
		opts[i] = ReleaseOptions{Addr: ip}
	}
	return c.Release(ctx, opts...)
}

// Release releases the described allocations. An address that is free, or
// whose allocation does not match the given handle or sequence number, is
// returned in unallocated and left as it is.
func (c *Client) Release(ctx context.Context, opts ...ReleaseOptions) (unallocated []netip.Addr, err error) {
	if len(opts) == 0 {
		return nil, nil
	}
	byAddr := map[netip.Addr]ReleaseOptions{}
	for _, o := range opts {
		o.Addr = o.Addr.Unmap()
		if !o.Addr.IsValid() {
			return nil, fmt.Errorf("release: invalid address in %+v", o)
		}
		o.Handle = sanitizeHandle(o.Handle)
		byAddr[o.Addr] = o
	}
	snap := snapshot{}
	blockOf, err := c.locateBlocks(ctx, snap, slices.Collect(maps.Keys(byAddr)))
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	for attempt := 0; ; attempt++ {
		unallocated = unallocated[:0]
		t := &txn{}
		handleDelta := map[string]map[string]int{} // handle -> block CIDR -> released
		blocks := map[string]*block{}
		dirty := map[string]bool{}
		for _, a := range slices.SortedFunc(maps.Keys(byAddr), netip.Addr.Compare) {
			o := byAddr[a]
			key, ok := blockOf[a]
			if !ok {
				unallocated = append(unallocated, a)
				continue
			}
			b, ok := blocks[key]
			if !ok {
				if b = c.snapBlock(snap, key); b == nil {
					unallocated = append(unallocated, a)
					continue
				}
				blocks[key] = b
			}
			ord, _ := b.ordinal(a)
			h := b.handleOf(ord)
			if b.v.Allocations[ord] == nil ||
				(o.Handle != "" && o.Handle != h) ||
				(o.SequenceNumber != nil && *o.SequenceNumber != b.seqOf(ord)) {
				unallocated = append(unallocated, a)
				continue
			}
			dirty[key] = true
			for hid, n := range b.release([]int{ord}) {
				if handleDelta[hid] == nil {
					handleDelta[hid] = map[string]int{}
				}
				handleDelta[hid][b.cidr.String()] += n
			}
		}
		if len(dirty) == 0 {
			return unallocated, nil
		}
		for _, key := range slices.Sorted(maps.Keys(dirty)) {
			if err := writeReleased(t, key, blocks[key]); err != nil {
				return nil, err
			}
		}
		hkeys := make([]string, 0, len(handleDelta))
		for hid := range handleDelta {
			hkeys = append(hkeys, HandleKey(hid))
		}
		if err := c.read(ctx, snap, snap.missing(hkeys)); err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		for _, hid := range slices.Sorted(maps.Keys(handleDelta)) {
			hkey := HandleKey(hid)
			if snap[hkey].rev == 0 {
				continue // a handle Calico lost track of; nothing to count down
			}
			h, err := decodeHandle(snap[hkey])
			if err != nil {
				return nil, fmt.Errorf("release: handle %s: %w", hid, err)
			}
			for cidr, n := range handleDelta[hid] {
				if h.Block[cidr] -= n; h.Block[cidr] <= 0 {
					delete(h.Block, cidr)
				}
			}
			if len(h.Block) == 0 {
				t.del(hkey)
			} else {
				t.put(hkey, mustJSON(h))
			}
		}
		ok, _, err := c.commit(ctx, snap, t)
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		if ok {
			return unallocated, nil
		}
		if err := retryAfter(ctx, attempt); err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
	}
}

// locateBlocks finds the block key holding each address, reading the
// blocks into snap. A block's size is not known without its pool, and the
// pool may be gone, so for a few addresses every possible block size is
// tried in one read; for many, the block keys are listed once.
func (c *Client) locateBlocks(ctx context.Context, snap snapshot, addrs []netip.Addr) (map[netip.Addr]string, error) {
	out := map[netip.Addr]string{}
	if len(addrs) <= 4 {
		var keys []string
		for _, a := range addrs {
			keys = append(keys, candidateBlockKeys(a)...)
		}
		if err := c.read(ctx, snap, keys); err != nil {
			return nil, err
		}
		for _, a := range addrs {
			for _, k := range candidateBlockKeys(a) {
				if snap[k].rev != 0 {
					out[a] = k
					break
				}
			}
		}
		return out, nil
	}
	var existing []netip.Prefix
	for _, v := range []int{4, 6} {
		kvs, _, err := c.kv.List(ctx, ipamkv.BlockVersionPrefix(v), true)
		if err != nil {
			return nil, fmt.Errorf("list IPv%d blocks: %w", v, err)
		}
		for _, kv := range kvs {
			if p, ok := ipamkv.ParseBlockKey(kv.Key); ok {
				existing = append(existing, p)
			}
		}
	}
	var keys []string
	for _, a := range addrs {
		for _, p := range existing {
			if p.Contains(a) {
				out[a] = BlockKey(p)
				keys = append(keys, out[a])
				break
			}
		}
	}
	if err := c.read(ctx, snap, keys); err != nil {
		return nil, err
	}
	return out, nil
}

// candidateBlockKeys are the keys of every block size that could hold a.
func candidateBlockKeys(a netip.Addr) []string {
	lo, hi := minBlockSize4, maxBlockSize4
	if a.Is6() {
		lo, hi = minBlockSize6, maxBlockSize6
	}
	keys := make([]string, 0, hi-lo+1)
	for bits := lo; bits <= hi; bits++ {
		keys = append(keys, BlockKey(blockFor(a, bits)))
	}
	return keys
}

// IPsByHandle lists the addresses handleID holds, ascending. A handle that
// does not exist holds nothing.
func (c *Client) IPsByHandle(ctx context.Context, handleID string) ([]netip.Addr, error) {
	handleID = sanitizeHandle(handleID)
	hkey := HandleKey(handleID)
	snap := snapshot{}
	if err := c.read(ctx, snap, []string{hkey}); err != nil {
		return nil, fmt.Errorf("addresses of handle %s: %w", handleID, err)
	}
	if snap[hkey].rev == 0 {
		return nil, nil
	}
	h, err := decodeHandle(snap[hkey])
	if err != nil {
		return nil, fmt.Errorf("addresses of handle %s: %w", handleID, err)
	}
	keys := blockKeysOf(h)
	if err := c.read(ctx, snap, keys); err != nil {
		return nil, fmt.Errorf("addresses of handle %s: %w", handleID, err)
	}
	var out []netip.Addr
	for _, key := range keys {
		if b := c.snapBlock(snap, key); b != nil {
			for _, ord := range b.ordinalsOf(handleID) {
				out = append(out, b.addr(ord))
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}
