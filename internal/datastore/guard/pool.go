package guard

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// PoolRelease is what deleting a pool did to its blocks.
type PoolRelease struct {
	// Released are the blocks whose node affinity was released (an empty
	// one is deleted with it).
	Released []netip.Prefix
	// InUse are the blocks inside the pool that still hold addresses after
	// the pool is gone: the addresses stay allocated to their holders until
	// released (the pods deleted, or `calicoctl ipam release`).
	InUse []ipam.BlockInUse
}

// poolCIDR is the pool's network as every consumer reads it, or false
// when it does not parse (a pool written behind validation).
func poolCIDR(p *api.IPPool) (netip.Prefix, int, bool) {
	parsed, err := api.ParsePool(p)
	if err != nil {
		return netip.Prefix{}, 0, false
	}
	return parsed.CIDR, parsed.BlockSize, true
}

func poolErr(op, name string, fe ...api.FieldError) error {
	return &datastore.Error{Op: op, Kind: "IPPool", Name: name, Err: api.ValidationError(fe)}
}

// overlapping returns the pools among others, other than name itself, whose
// CIDR overlaps cidr.
func overlapping(name string, cidr netip.Prefix, others []api.Object) []*api.IPPool {
	var out []*api.IPPool
	for _, o := range others {
		q, ok := o.(*api.IPPool)
		if !ok || q.Name == name {
			continue
		}
		if qc, _, ok := poolCIDR(q); ok && qc.Overlaps(cidr) {
			out = append(out, q)
		}
	}
	return out
}

func overlapError(op string, p *api.IPPool, with []*api.IPPool, note string) error {
	fe := make([]api.FieldError, len(with))
	for i, q := range with {
		fe[i] = api.FieldError{Path: "spec.cidr",
			Msg: fmt.Sprintf("IPPool(%s) CIDR overlaps with IPPool(%s) CIDR %s%s", p.Name, q.Name, q.Spec.CIDR, note)}
	}
	return poolErr(op, p.Name, fe...)
}

// createPool is clientv3's IPPool Create: no overlap with another pool, no
// block of another size under it, then the write, then the check that no
// overlapping pool was created meanwhile (see the package doc).
func (g *Store) createPool(ctx context.Context, obj api.Object) (api.Object, error) {
	const op = "create"
	prepared, err := prepare(op, "IPPool", obj)
	if err != nil {
		return nil, err
	}
	p := prepared.(*api.IPPool)
	cidr, blockSize, ok := poolCIDR(p)
	if !ok {
		// Validate accepted it, so it parses; be safe anyway.
		return g.Store.Create(ctx, obj)
	}
	before, _, err := g.Store.List(ctx, "IPPool", "")
	if err != nil {
		return nil, err
	}
	if with := overlapping(p.Name, cidr, before); len(with) > 0 {
		return nil, overlapError(op, p, with, "")
	}
	blocks, err := g.ipam.Blocks(ctx, ipVersion(cidr))
	if err != nil {
		return nil, &datastore.Error{Op: op, Kind: "IPPool", Name: p.Name, Err: err}
	}
	for _, b := range blocks {
		if b.Bits() != blockSize && b.Overlaps(cidr) {
			return nil, poolErr(op, p.Name, api.FieldError{Path: "spec.blockSize", Value: blockSize,
				Msg: fmt.Sprintf("conflicts with existing allocations that use a different block size: block %s is /%d", b, b.Bits())})
		}
	}
	out, err := g.Store.Create(ctx, obj)
	if err != nil {
		return nil, err
	}
	if err := g.confirmCreate(ctx, p, cidr, out); err != nil {
		return nil, err
	}
	return out, nil
}

// confirmCreate re-reads the pools after out was created and, if an
// overlapping pool created before out now exists, deletes out again.
func (g *Store) confirmCreate(ctx context.Context, p *api.IPPool, cidr netip.Prefix, out api.Object) error {
	const op = "create"
	mine, mineOK := revision(out.Meta().ResourceVersion)
	after, _, err := g.Store.List(ctx, "IPPool", "")
	var older []*api.IPPool
	if err == nil {
		for _, q := range overlapping(p.Name, cidr, after) {
			theirs, ok := revision(q.ResourceVersion)
			if !mineOK || !ok || theirs < mine {
				older = append(older, q)
			}
		}
		if len(older) == 0 {
			return nil
		}
	}
	// Either another pool won, or nothing can be confirmed: take ours back.
	if _, derr := g.Store.Delete(ctx, "IPPool", "", p.Name, ""); derr != nil && !errors.Is(derr, datastore.ErrNotFound) {
		g.logger.Error("could not roll back an IP pool created concurrently with an overlapping one", "pool", p.Name, "err", derr)
		if err == nil {
			err = overlapError(op, p, older, " (created concurrently)")
		}
		return &datastore.Error{Op: op, Kind: "IPPool", Name: p.Name,
			Err: fmt.Errorf("%w; rolling back failed, delete IPPool(%s) by hand: %w", err, p.Name, derr)}
	}
	if err != nil {
		return &datastore.Error{Op: op, Kind: "IPPool", Name: p.Name,
			Err: fmt.Errorf("could not check for pools created concurrently, so the pool was not kept: %w", err)}
	}
	g.logger.Info("rolled back an IP pool created concurrently with an older overlapping one", "pool", p.Name, "cidr", cidr, "older", older[0].Name)
	return overlapError(op, p, older, " (created concurrently)")
}

func revision(rv string) (int64, bool) {
	n, err := strconv.ParseInt(rv, 10, 64)
	return n, err == nil && n > 0
}

func ipVersion(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 4
	}
	return 6
}

// updatePool is clientv3's IPPool Update (op "update") or calicoctl's
// apply (op "apply": Create when the pool does not exist): the CIDR and
// block size cannot change, nor can a LoadBalancer pool's allowed uses.
func (g *Store) updatePool(ctx context.Context, op string, obj api.Object) (api.Object, error) {
	prepared, err := prepare(op, "IPPool", obj)
	if err != nil {
		return nil, err
	}
	p := prepared.(*api.IPPool)
	for range 3 {
		cur, err := g.Store.Get(ctx, "IPPool", "", p.Name)
		if errors.Is(err, datastore.ErrNotFound) && op == "apply" && p.ResourceVersion == "" {
			out, err := g.createPool(ctx, obj)
			if errors.Is(err, datastore.ErrAlreadyExists) {
				continue // created meanwhile: update it
			}
			return out, err
		}
		if err != nil {
			if errors.Is(err, datastore.ErrNotFound) {
				return nil, &datastore.Error{Op: op, Kind: "IPPool", Name: p.Name, Err: datastore.ErrNotFound}
			}
			return nil, err
		}
		if err := immutable(op, cur.(*api.IPPool), p); err != nil {
			return nil, err
		}
		out, err := g.Store.Update(ctx, obj)
		if errors.Is(err, datastore.ErrNotFound) && op == "apply" && p.ResourceVersion == "" {
			continue // deleted meanwhile: create it
		}
		if err != nil {
			return nil, withOp(err, op)
		}
		return out, nil
	}
	return nil, &datastore.Error{Op: op, Kind: "IPPool", Name: p.Name,
		Err: fmt.Errorf("%w: the pool kept being created and deleted by others", datastore.ErrConflict)}
}

// immutable compares the stored pool with its replacement.
func immutable(op string, old, p *api.IPPool) error {
	var fe []api.FieldError
	oldCIDR, oldBlock, oldOK := poolCIDR(old)
	newCIDR, newBlock, newOK := poolCIDR(p)
	if oldOK && newOK {
		if oldCIDR != newCIDR {
			fe = append(fe, api.FieldError{Path: "spec.cidr", Value: p.Spec.CIDR,
				Msg: fmt.Sprintf("cannot be changed (it is %s): blocks allocated from the pool would be orphaned; create a new pool and delete this one instead", old.Spec.CIDR)})
		}
		if oldBlock != newBlock {
			fe = append(fe, api.FieldError{Path: "spec.blockSize", Value: newBlock,
				Msg: fmt.Sprintf("cannot be changed (it is %d): blocks allocated from the pool would be orphaned", oldBlock)})
		}
	}
	if slices.Contains(old.Spec.AllowedUses, api.IPPoolAllowedUseLoadBalancer) {
		for _, u := range p.Spec.AllowedUses {
			if u != api.IPPoolAllowedUseLoadBalancer {
				fe = append(fe, api.FieldError{Path: "spec.allowedUses", Value: string(u),
					Msg: "cannot be added: a LoadBalancer pool cannot become a Workload or Tunnel pool"})
				break
			}
		}
	}
	if len(fe) > 0 {
		return poolErr(op, p.Name, fe...)
	}
	return nil
}

// DeletePool deletes an IP pool as libcalico-go does: disable it (so IPAM
// hands out no more addresses from it; with resourceVersion set, only at
// that version), wait for allocations in flight, release every node's
// affinity to its blocks (empty blocks go), then delete the pool. The
// report lists what was released and the blocks that still hold addresses.
func (g *Store) DeletePool(ctx context.Context, name, resourceVersion string) (api.Object, PoolRelease, error) {
	var rep PoolRelease
	obj, err := g.Store.Get(ctx, "IPPool", "", name)
	if err != nil {
		return nil, rep, withOp(err, "delete")
	}
	pool := obj.(*api.IPPool)
	if resourceVersion != "" && pool.ResourceVersion != resourceVersion {
		return nil, rep, &datastore.Error{Op: "delete", Kind: "IPPool", Name: name, Err: datastore.ErrConflict}
	}
	if !pool.Spec.Disabled {
		pool.Spec.Disabled = true
		if _, err := g.Store.Update(ctx, pool); err != nil {
			return nil, rep, fmt.Errorf("disable IPPool(%s) before deleting it: %w", name, err)
		}
		if g.settle > 0 {
			t := time.NewTimer(g.settle)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, rep, ctx.Err()
			case <-t.C:
			}
		}
	}
	cidr, _, parsed := poolCIDR(pool)
	if parsed {
		if rep.Released, err = g.ipam.ReleasePoolAffinities(ctx, cidr); err != nil {
			return nil, rep, &datastore.Error{Op: "delete", Kind: "IPPool", Name: name, Err: err}
		}
	}
	out, err := g.Store.Delete(ctx, "IPPool", "", name, "")
	if err != nil {
		return nil, rep, err
	}
	if parsed {
		// Best effort: the pool is gone either way.
		if rep.InUse, err = g.ipam.BlocksInUse(ctx, cidr); err != nil {
			g.logger.Warn("could not read the blocks of a deleted IP pool", "pool", name, "err", err)
		}
	}
	return out, rep, nil
}

// withOp relabels a Store error with the operation the caller asked for.
func withOp(err error, op string) error {
	var de *datastore.Error
	if errors.As(err, &de) {
		c := *de
		c.Op = op
		return &c
	}
	return err
}
