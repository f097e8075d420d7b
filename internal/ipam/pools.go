package ipam

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/selector"
)

// pool is the part of an IPPool IPAM uses, parsed once.
type pool struct {
	name         string
	cidr         netip.Prefix
	blockSize    int
	disabled     bool
	nodeSelector string
	nsSelector   string
	uses         []api.IPPoolAllowedUse
	manual       bool
}

// parsePools turns IPPool objects into pools sorted by name, as Calico
// orders them. Pools with unusable CIDRs or block sizes are skipped with a
// warning: validation keeps them out, but an old datastore may hold one.
func parsePools(objs []api.Object, logger *slog.Logger) []pool {
	var out []pool
	for _, o := range objs {
		ip, ok := o.(*api.IPPool)
		if !ok {
			continue
		}
		spec := ip.Spec
		cidr, err := netip.ParsePrefix(spec.CIDR)
		if err != nil || cidr.Addr().Is4In6() {
			logger.Warn("ignoring IP pool with unparsable CIDR", "pool", ip.Name, "cidr", spec.CIDR)
			continue
		}
		cidr = cidr.Masked()
		bs := spec.BlockSize
		lo, hi := minBlockSize4, maxBlockSize4
		if cidr.Addr().Is6() {
			lo, hi = minBlockSize6, maxBlockSize6
			if bs == 0 {
				bs = 122
			}
		} else if bs == 0 {
			bs = 26
		}
		if bs < lo || bs > hi || bs < cidr.Bits() {
			logger.Warn("ignoring IP pool with unusable block size", "pool", ip.Name, "cidr", cidr, "blockSize", bs)
			continue
		}
		uses := spec.AllowedUses
		if len(uses) == 0 {
			uses = []api.IPPoolAllowedUse{api.IPPoolAllowedUseWorkload, api.IPPoolAllowedUseTunnel}
		}
		out = append(out, pool{
			name:         ip.Name,
			cidr:         cidr,
			blockSize:    bs,
			disabled:     spec.Disabled,
			nodeSelector: spec.NodeSelector,
			nsSelector:   spec.NamespaceSelector,
			uses:         uses,
			manual:       spec.AssignmentMode != nil && *spec.AssignmentMode == api.AssignmentModeManual,
		})
	}
	slices.SortFunc(out, func(a, b pool) int { return cmp.Compare(a.name, b.name) })
	return out
}

func (p pool) version() int { return ipVersion(p.cidr.Addr()) }

func (p pool) allows(use api.IPPoolAllowedUse) bool { return slices.Contains(p.uses, use) }

// selects evaluates a pool selector; "" matches everything, as in Calico.
func selects(expr string, labels map[string]string) (bool, error) {
	if strings.TrimSpace(expr) == "" {
		return true, nil
	}
	sel, err := selector.Parse(expr)
	if err != nil {
		return false, err
	}
	return sel.Evaluate(labels), nil
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
func choosePools(all []pool, r poolRequest) ([]pool, error) {
	var cands []pool
	if len(r.requested) > 0 {
		for _, want := range r.requested {
			p, err := findPool(all, want)
			if err != nil {
				return nil, err
			}
			if p.version() != r.version {
				return nil, fmt.Errorf("requested IPv%d pool %s is an IPv%d pool", r.version, want, p.version())
			}
			if p.disabled {
				return nil, fmt.Errorf("requested pool %s (%s): %w", p.name, p.cidr, ErrPoolDisabled)
			}
			if !slices.ContainsFunc(cands, func(q pool) bool { return q.name == p.name }) {
				cands = append(cands, p)
			}
		}
	} else {
		for _, p := range all {
			if p.version() != r.version || p.disabled || p.manual {
				continue
			}
			ok, err := selects(p.nodeSelector, r.nodeLabels)
			if err != nil {
				return nil, fmt.Errorf("pool %s: nodeSelector: %w", p.name, err)
			}
			if !ok {
				continue
			}
			if ok, err = selects(p.nsSelector, r.nsLabels); err != nil {
				return nil, fmt.Errorf("pool %s: namespaceSelector: %w", p.name, err)
			} else if !ok {
				continue
			}
			cands = append(cands, p)
		}
		if len(cands) == 0 {
			return nil, fmt.Errorf("%w: no enabled IPv%d pool selects node %s", ErrNoPools, r.version, r.node)
		}
	}
	var out []pool
	for _, p := range cands {
		if p.allows(r.use) {
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
func findPool(all []pool, want string) (pool, error) {
	if pfx, err := netip.ParsePrefix(strings.TrimSpace(want)); err == nil {
		pfx = pfx.Masked()
		for _, p := range all {
			if p.cidr == pfx {
				return p, nil
			}
		}
		return pool{}, fmt.Errorf("requested pool %s: %w", want, ErrPoolNotFound)
	}
	for _, p := range all {
		if p.name == want {
			return p, nil
		}
	}
	return pool{}, fmt.Errorf("requested pool %q: %w", want, ErrPoolNotFound)
}

// poolContaining is the pool holding a, preferring an enabled one when
// (invalidly) several overlap.
func poolContaining(all []pool, a netip.Addr) (pool, bool) {
	var found pool
	ok := false
	for _, p := range all {
		if p.cidr.Contains(a) {
			if !p.disabled {
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
