package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// BlockInUse is a block that still holds addresses.
type BlockInUse struct {
	CIDR  netip.Prefix
	InUse int
}

// Blocks lists the CIDRs of every IPv<version> block (keys only), sorted
// by address. The pool checks use it to find blocks of another size under
// a new pool.
func (c *Client) Blocks(ctx context.Context, version int) ([]netip.Prefix, error) {
	kvs, _, err := c.kv.List(ctx, ipamkv.BlockVersionPrefix(version), true)
	if err != nil {
		return nil, fmt.Errorf("list IPv%d blocks: %w", version, err)
	}
	out := make([]netip.Prefix, 0, len(kvs))
	for _, kv := range kvs {
		if p, ok := ipamkv.ParseBlockKey(kv.Key); ok {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out, nil
}

// ReleasePoolAffinities gives up every node's claim on the blocks inside
// pool, as Calico's ReleasePoolAffinities does when a pool is deleted: an
// empty block is deleted with its affinity; a block that still holds
// addresses loses its affinity and keeps them (they stay allocated until
// their holders release them). Each block changes in one transaction with
// its affinity, as in ReleaseHostAffinities, so an allocation racing with
// the release either lands first (the block is then kept) or finds the
// block gone. It returns the blocks whose affinity was released.
func (c *Client) ReleasePoolAffinities(ctx context.Context, pool netip.Prefix) ([]netip.Prefix, error) {
	kvs, _, err := c.kv.List(ctx, hostPrefix, true)
	if err != nil {
		return nil, fmt.Errorf("release affinities in pool %s: %w", pool, err)
	}
	// The virtual hosts' (LoadBalancer) too.
	vkvs, _, err := c.kv.List(ctx, virtualPrefix, true)
	if err != nil {
		return nil, fmt.Errorf("release affinities in pool %s: %w", pool, err)
	}
	kvs = append(kvs, vkvs...)
	var released []netip.Prefix
	var errs []error
	for _, kv := range kvs {
		node, cidr, ok := parseAffinityKey(kv.Key)
		if !ok || !pool.Overlaps(cidr) {
			continue
		}
		done, err := c.releaseAffinity(ctx, node, cidr, false)
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", node, err))
			continue
		}
		if done {
			released = append(released, cidr)
		}
	}
	slices.SortFunc(released, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	if err := errors.Join(errs...); err != nil {
		return released, fmt.Errorf("release affinities in pool %s: %w", pool, err)
	}
	return released, nil
}

// BlocksInUse lists the blocks inside pool that still hold addresses,
// sorted by address: what a deleted pool leaves behind.
func (c *Client) BlocksInUse(ctx context.Context, pool netip.Prefix) ([]BlockInUse, error) {
	kvs, _, err := c.kv.List(ctx, ipamkv.BlockVersionPrefix(ipVersion(pool.Addr())), false)
	if err != nil {
		return nil, fmt.Errorf("read blocks of pool %s: %w", pool, err)
	}
	var out []BlockInUse
	for _, kv := range kvs {
		cidr, ok := ipamkv.ParseBlockKey(kv.Key)
		if !ok || !pool.Overlaps(cidr) {
			continue
		}
		b, err := decodeBlock(kv.Value)
		if err != nil {
			c.logger.Warn("skipping unreadable IPAM block", "key", kv.Key, "err", err)
			continue
		}
		if n := b.inUse(); n > 0 {
			out = append(out, BlockInUse{CIDR: cidr, InUse: n})
		}
	}
	slices.SortFunc(out, func(a, b BlockInUse) int { return a.CIDR.Addr().Compare(b.CIDR.Addr()) })
	return out, nil
}
