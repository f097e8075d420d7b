package ipam

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// Report is the IPAM usage: every pool, every block and every handle.
type Report struct {
	Pools   []PoolUsage
	Blocks  []BlockUsage // sorted by address, IPv4 first
	Handles []HandleUsage
}

// PoolUsage is one IP pool's usage.
type PoolUsage struct {
	Name     string
	CIDR     netip.Prefix
	Disabled bool
	// Size is the number of addresses in the pool (a float: IPv6 pools
	// overflow integers).
	Size float64
	// InUse counts allocated addresses in the pool's blocks.
	InUse int
	// Blocks is the number of blocks carved from the pool so far.
	Blocks int
}

// BlockUsage is one allocation block's usage.
type BlockUsage struct {
	CIDR netip.Prefix
	// Pool is the name of the pool containing the block, "" if none does
	// (Calico's "orphaned allocation blocks").
	Pool string
	// Affinity is the block's raw affinity ("host:node1"), Node the node
	// it names; both "" for a block affine to no node.
	Affinity, Node string
	Size           int
	InUse          int
	Free           int
}

// HandleUsage is one handle and the number of addresses it holds per
// block CIDR.
type HandleUsage struct {
	ID     string
	Blocks map[string]int
}

// Usage reads every pool, block and handle.
func (c *Client) Usage(ctx context.Context) (Report, error) {
	var r Report
	objs, _, err := c.store.List(ctx, "IPPool", "")
	if err != nil {
		return r, fmt.Errorf("ipam usage: list IP pools: %w", err)
	}
	pools := parsePools(objs, c.logger)
	blocks, handles, err := c.readAll(ctx)
	if err != nil {
		return r, fmt.Errorf("ipam usage: %w", err)
	}
	for _, q := range pools {
		r.Pools = append(r.Pools, PoolUsage{Name: q.Name, CIDR: q.CIDR, Disabled: q.Disabled,
			Size: math.Exp2(float64(q.CIDR.Addr().BitLen() - q.CIDR.Bits()))})
	}
	for _, b := range blocks {
		u := BlockUsage{CIDR: b.cidr, Affinity: b.affinity(), Node: b.host(), Size: len(b.v.Allocations),
			InUse: b.inUse(), Free: len(b.v.Unallocated)}
		for i := range r.Pools {
			if r.Pools[i].CIDR.Overlaps(b.cidr) {
				u.Pool = r.Pools[i].Name
				r.Pools[i].InUse += u.InUse
				r.Pools[i].Blocks++
				break
			}
		}
		r.Blocks = append(r.Blocks, u)
	}
	for _, id := range slices.Sorted(maps.Keys(handles)) {
		r.Handles = append(r.Handles, HandleUsage{ID: id, Blocks: handles[id].value.Block})
	}
	return r, nil
}

// storedHandle is a handle as read, with its revision.
type storedHandle struct {
	value handleValue
	rev   int64
}

// readAll reads every block (sorted by address, IPv4 first) and handle in
// one consistent transaction. Unreadable values are logged and skipped.
func (c *Client) readAll(ctx context.Context) ([]*block, map[string]storedHandle, error) {
	lists, err := c.kv.Snapshot(ctx, blockPrefix, handlePrefix)
	if err != nil {
		return nil, nil, fmt.Errorf("read IPAM data: %w", err)
	}
	blocks := c.decodeBlocks(lists[0])
	handles := map[string]storedHandle{}
	for _, kv := range lists[1] {
		id, ok := ipamkv.ParseHandleKey(kv.Key)
		if !ok {
			continue
		}
		h, err := decodeHandle(entry{value: kv.Value, rev: kv.Rev})
		if err != nil {
			c.logger.Warn("skipping unreadable IPAM handle", "key", kv.Key, "err", err)
			continue
		}
		handles[id] = storedHandle{value: h, rev: kv.Rev}
	}
	return blocks, handles, nil
}

// decodeBlocks decodes the blocks among kvs, sorted by address (IPv4
// first); other keys are skipped and unreadable blocks logged and skipped.
func (c *Client) decodeBlocks(kvs []datastore.KeyValue) []*block {
	var blocks []*block
	for _, kv := range kvs {
		if _, ok := ipamkv.ParseBlockKey(kv.Key); !ok {
			continue
		}
		b, err := decodeBlock(kv.Value)
		if err != nil {
			c.logger.Warn("skipping unreadable IPAM block", "key", kv.Key, "err", err)
			continue
		}
		blocks = append(blocks, b)
	}
	slices.SortFunc(blocks, func(a, b *block) int { return a.cidr.Addr().Compare(b.cidr.Addr()) })
	return blocks
}

// AffineBlocks lists the blocks node has claimed (its affinity keys, in any
// state, as Calico's BGP export reads them), sorted by address, IPv4
// first.
func (c *Client) AffineBlocks(ctx context.Context, node string) ([]netip.Prefix, error) {
	if node == "" {
		return nil, errors.New("affine blocks: node must be set")
	}
	kvs, _, err := c.kv.List(ctx, nodeAffinityPrefix(node), true)
	if err != nil {
		return nil, fmt.Errorf("affine blocks of %s: %w", node, err)
	}
	var out []netip.Prefix
	for _, kv := range kvs {
		if n, cidr, ok := parseAffinityKey(kv.Key); ok && n == node {
			out = append(out, cidr)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out, nil
}

// Holder describes who holds an address.
type Holder struct {
	Addr  netip.Addr
	Block netip.Prefix
	// Affinity is the block's affinity ("host:node1"), "" if none.
	Affinity string
	// Handle is "" for an allocation without one (Calico allows that).
	Handle         string
	Attrs          map[string]string
	SequenceNumber uint64
}

// Lookup reports who holds ip; ErrNotAllocated if nobody does.
func (c *Client) Lookup(ctx context.Context, ip netip.Addr) (Holder, error) {
	ip = ip.Unmap()
	if !ip.IsValid() {
		return Holder{}, errors.New("lookup: invalid address")
	}
	snap := snapshot{}
	if err := c.read(ctx, snap, candidateBlockKeys(ip)); err != nil {
		return Holder{}, fmt.Errorf("lookup %s: %w", ip, err)
	}
	for _, key := range candidateBlockKeys(ip) {
		b := c.snapBlock(snap, key)
		if b == nil {
			continue
		}
		ord, _ := b.ordinal(ip)
		at, ok := b.attrsOf(ord)
		if !ok {
			break
		}
		return Holder{Addr: ip, Block: b.cidr, Affinity: b.affinity(), Handle: b.handleOf(ord),
			Attrs: maps.Clone(at.Secondary), SequenceNumber: b.seqOf(ord)}, nil
	}
	return Holder{}, fmt.Errorf("lookup %s: %w", ip, ErrNotAllocated)
}

// Config returns the global IPAM config; Calico's defaults when none is
// stored.
func (c *Client) Config(ctx context.Context) (Config, error) {
	kvs, err := c.kv.Get(ctx, configKey)
	if err != nil {
		return Config{}, fmt.Errorf("read IPAM config: %w", err)
	}
	if kvs[0].Rev == 0 {
		return Config{AutoAllocateBlocks: true}, nil
	}
	return decodeConfig(kvs[0].Value)
}

// SetConfig stores the global IPAM config, refusing the combinations
// Calico refuses.
func (c *Client) SetConfig(ctx context.Context, cfg Config) error {
	switch {
	case !cfg.StrictAffinity && !cfg.AutoAllocateBlocks:
		return errors.New("set IPAM config: strict affinity and automatic block allocation cannot both be off")
	case cfg.MaxBlocksPerHost < 0:
		return errors.New("set IPAM config: maxBlocksPerHost must not be negative")
	case cfg.MaxBlocksPerHost > 0 && !cfg.StrictAffinity:
		return errors.New("set IPAM config: maxBlocksPerHost requires strict affinity")
	}
	data, err := json.Marshal(configValue{StrictAffinity: cfg.StrictAffinity,
		AutoAllocateBlocks: cfg.AutoAllocateBlocks, MaxBlocksPerHost: cfg.MaxBlocksPerHost})
	if err != nil {
		return err
	}
	// An unconditional write: the last SetConfig wins, as with calicoctl.
	if _, err := c.kv.Txn(ctx, datastore.Txn{Ops: []datastore.Op{{Type: datastore.OpPut, Key: configKey, Value: data}}}); err != nil {
		return fmt.Errorf("set IPAM config: %w", err)
	}
	return nil
}

// sortAddrs sorts address strings numerically.
func sortAddrs(ips []string) {
	slices.SortFunc(ips, func(a, b string) int {
		pa, ea := netip.ParseAddr(a)
		pb, eb := netip.ParseAddr(b)
		if ea != nil || eb != nil {
			return cmp.Compare(a, b)
		}
		return pa.Compare(pb)
	})
}

func revString(rev int64) string { return strconv.FormatInt(rev, 10) }

// VirtualAllocation is an address allocated in a block of a virtual host.
type VirtualAllocation struct {
	Addr   netip.Addr
	Block  netip.Prefix
	Handle string
	// Attrs are the allocation's "secondary" attributes (Calico's
	// LoadBalancer controller writes service, namespace, type and
	// timestamp).
	Attrs map[string]string
}

// LoadBalancerAllocations lists every address allocated in the blocks of
// the virtual host LoadBalancerHost (affinity "virtual:load-balancer"),
// sorted by address, IPv4 first: what Calico's LoadBalancer controller
// tracks from its block syncer, read here in one listing of the blocks.
func (c *Client) LoadBalancerAllocations(ctx context.Context) ([]VirtualAllocation, error) {
	kvs, _, err := c.kv.List(ctx, blockPrefix, false)
	if err != nil {
		return nil, fmt.Errorf("list LoadBalancer allocations: %w", err)
	}
	var out []VirtualAllocation
	for _, b := range c.decodeBlocks(kvs) {
		if b.owner() != lbOwner {
			continue
		}
		for ord := range b.v.Allocations {
			at, ok := b.attrsOf(ord)
			if !ok {
				continue
			}
			out = append(out, VirtualAllocation{Addr: b.addr(ord), Block: b.cidr, Handle: b.handleOf(ord), Attrs: maps.Clone(at.Secondary)})
		}
	}
	slices.SortFunc(out, func(a, b VirtualAllocation) int { return a.Addr.Compare(b.Addr) })
	return out, nil
}
