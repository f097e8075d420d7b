package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// ErrBlockNotEmpty: ReleaseHostAffinities was asked to release only empty
// blocks and a block of the node still holds addresses.
var ErrBlockNotEmpty = errors.New("block still has allocations")

// ReleaseHostAffinities gives up every block claimed by node, as Calico's
// ReleaseHostAffinities does when a node is removed: an empty block is
// deleted; a block that still holds addresses loses its affinity but keeps
// them (only when mustBeEmpty is false; with mustBeEmpty it is left alone
// and reported with ErrBlockNotEmpty); the node's affinity keys are
// deleted. Each block changes in one transaction with its affinity key,
// conditional on both, so an allocation racing with the release either
// lands before it (the block is then not empty) or finds the block gone.
// It returns the blocks released.
func (c *Client) ReleaseHostAffinities(ctx context.Context, node string, mustBeEmpty bool) ([]netip.Prefix, error) {
	if node == "" {
		return nil, errors.New("release host affinities: node must be set")
	}
	kvs, _, err := c.kv.List(ctx, nodeAffinityPrefix(node), true)
	if err != nil {
		return nil, fmt.Errorf("release affinities of %s: %w", node, err)
	}
	var released []netip.Prefix
	var errs []error
	for _, kv := range kvs {
		n, cidr, ok := parseAffinityKey(kv.Key)
		if !ok || n != node {
			continue
		}
		done, err := c.releaseAffinity(ctx, node, cidr, mustBeEmpty)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if done {
			released = append(released, cidr)
		}
	}
	slices.SortFunc(released, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	if err := errors.Join(errs...); err != nil {
		return released, fmt.Errorf("release affinities of %s: %w", node, err)
	}
	return released, nil
}

// releaseAffinity releases one block of node. It reports false when the
// affinity was already gone.
func (c *Client) releaseAffinity(ctx context.Context, node string, cidr netip.Prefix, mustBeEmpty bool) (bool, error) {
	akey, bkey := AffinityKey(node, cidr), BlockKey(cidr)
	snap := snapshot{}
	if err := c.read(ctx, snap, []string{akey, bkey}); err != nil {
		return false, fmt.Errorf("block %s: %w", cidr, err)
	}
	for attempt := 0; ; attempt++ {
		if snap[akey].rev == 0 {
			return false, nil
		}
		// The block first, then its affinity (see txn on the order).
		t := &txn{}
		if b := c.snapBlock(snap, bkey); b != nil && b.owner() == node {
			switch {
			case b.empty():
				t.del(bkey)
			case mustBeEmpty:
				return false, fmt.Errorf("block %s: %w", cidr, ErrBlockNotEmpty)
			default:
				b.v.Affinity = nil
				data, err := b.encode()
				if err != nil {
					return false, err
				}
				t.put(bkey, data)
			}
		} else {
			// The block is gone or belongs to someone else: only the
			// stale affinity key goes, and only if the block stays so.
			t.keys = append(t.keys, bkey)
		}
		t.del(akey)
		ok, _, err := c.commit(ctx, snap, t)
		if err != nil {
			return false, fmt.Errorf("block %s: %w", cidr, err)
		}
		if ok {
			return true, nil
		}
		if err := retryAfter(ctx, attempt); err != nil {
			return false, fmt.Errorf("block %s: %w", cidr, err)
		}
	}
}
