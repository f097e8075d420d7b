package ipam

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// parsePools reads the IPPools among objs through api.ParsePools (sorted
// by name, as Calico orders them). A pool that does not parse, or whose
// blocks would be larger than the pool (Validate allows that on a
// disabled pool), is skipped with a warning: validation keeps them out,
// but an old datastore may hold one.
func parsePools(objs []api.Object, logger *slog.Logger) []api.Pool {
	pools, errs := api.ParsePools(objs)
	for _, err := range errs {
		logger.Warn("ignoring unusable IP pool", "err", err)
	}
	return slices.DeleteFunc(pools, func(p api.Pool) bool {
		if p.BlockSize < p.CIDR.Bits() {
			logger.Warn("ignoring IP pool with unusable block size", "pool", p.Name, "cidr", p.CIDR, "blockSize", p.BlockSize)
			return true
		}
		return false
	})
}

// poolRequest is what decides which pools one IP version may use.
type poolRequest struct {
	version    int
	requested  []string // CIDRs or names; empty = automatic choice
	use        api.IPPoolAllowedUse
	node       string
	nodeLabels map[string]string
	nsLabels   map[string]string
}

// choosePools returns the pools a request may allocate from, in preference
// order. Following Calico: requested pools are used as given (their node
// selectors are not consulted, and Manual pools qualify); otherwise every
// enabled Automatic pool whose node and namespace selectors match. Either
// way a pool must allow the use.
func choosePools(all []api.Pool, r poolRequest) ([]api.Pool, error) {
	var cands []api.Pool
	if len(r.requested) > 0 {
		for _, want := range r.requested {
			p, err := findPool(all, want)
			if err != nil {
				return nil, err
			}
			if p.Version() != r.version {
				return nil, fmt.Errorf("requested IPv%d pool %s is an IPv%d pool", r.version, want, p.Version())
			}
			if p.Disabled {
				return nil, fmt.Errorf("requested pool %s (%s): %w", p.Name, p.CIDR, ErrPoolDisabled)
			}
			if !slices.ContainsFunc(cands, func(q api.Pool) bool { return q.Name == p.Name }) {
				cands = append(cands, p)
			}
		}
	} else {
		for _, p := range all {
			if p.Version() != r.version || p.Disabled || p.AssignmentMode == api.AssignmentModeManual {
				continue
			}
			if !p.NodeSelector.Evaluate(r.nodeLabels) || !p.NamespaceSelector.Evaluate(r.nsLabels) {
				continue
			}
			cands = append(cands, p)
		}
		if len(cands) == 0 {
			return nil, fmt.Errorf("%w: no enabled IPv%d pool selects node %s", ErrNoPools, r.version, r.node)
		}
	}
	var out []api.Pool
	for _, p := range cands {
		if p.Allows(r.use) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no IPv%d pool for node %s allows use %s", ErrNoPools, r.version, r.node, r.use)
	}
	return out, nil
}

// findPool finds a pool by CIDR (host bits ignored, as Calico's CNI
// plugin does with "2001:db8::1/120") or by name.
func findPool(all []api.Pool, want string) (api.Pool, error) {
	if pfx, err := netip.ParsePrefix(strings.TrimSpace(want)); err == nil {
		pfx = pfx.Masked()
		for _, p := range all {
			if p.CIDR == pfx {
				return p, nil
			}
		}
		return api.Pool{}, fmt.Errorf("requested pool %s: %w", want, ErrPoolNotFound)
	}
	for _, p := range all {
		if p.Name == want {
			return p, nil
		}
	}
	return api.Pool{}, fmt.Errorf("requested pool %q: %w", want, ErrPoolNotFound)
}

// poolContaining is the pool holding a, preferring an enabled one when
// (invalidly) several overlap.
func poolContaining(all []api.Pool, a netip.Addr) (api.Pool, bool) {
	var found api.Pool
	ok := false
	for _, p := range all {
		if p.CIDR.Contains(a) {
			if !p.Disabled {
				return p, true
			}
			found, ok = p, true
		}
	}
	return found, ok
}

// parseReservations collects the CIDRs of all IPReservations; single
// addresses become host prefixes.
func parseReservations(objs []api.Object, logger *slog.Logger) reservations {
	var out reservations
	for _, o := range objs {
		r, ok := o.(*api.IPReservation)
		if !ok {
			continue
		}
		for _, s := range r.Spec.ReservedCIDRs {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p.Masked())
				continue
			}
			if a, err := netip.ParseAddr(s); err == nil {
				out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
				continue
			}
			logger.Warn("ignoring malformed reserved CIDR", "reservation", r.Name, "cidr", s)
		}
	}
	return out
}
