package api

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/projectcalico/calico-node/internal/model/selector"
)

// Pool is an IPPool as its consumers (IPAM, the policy compiler, the
// overlay, BGP export, start-up) read it: parsed once, defaults applied,
// every field checked. Build it with ParsePool or ParsePools; nothing else
// in calico-node parses an IPPool's CIDR or selectors.
//
// A Pool is a value: consumers may copy it freely and must not modify the
// slices or selectors it holds.
type Pool struct {
	Name string
	// CIDR is the pool's network, masked: a CIDR with host bits set
	// ("10.244.0.1/16") is read as its network (10.244.0.0/16), as
	// Calico's consumers read it. Validate refuses such a CIDR; only a pool
	// written behind validation can have one. Never an IPv4-mapped IPv6
	// prefix.
	CIDR netip.Prefix
	// BlockSize is the prefix length of the pool's blocks: the spec's, or
	// Calico's default (26 for IPv4, 122 for IPv6) when unset. Always in
	// range for the family (20-32, 116-128); it may still be shorter than
	// CIDR's prefix on a disabled pool, which Validate allows.
	BlockSize int
	// IPIPMode and VXLANMode are Never, Always or CrossSubnet; an empty
	// spec field is Never.
	IPIPMode  IPIPMode
	VXLANMode VXLANMode
	// NATOutgoing, Disabled and DisableBGPExport are the spec's flags.
	NATOutgoing      bool
	Disabled         bool
	DisableBGPExport bool
	// Deleting says metadata.deletionTimestamp is set: the pool is being
	// finalised and should take no new work.
	Deleting bool
	// NodeSelector and NamespaceSelector are never nil; an empty spec
	// selector is all(), as in Calico.
	NodeSelector      selector.Selector
	NamespaceSelector selector.Selector
	// AllowedUses is the spec's list, or Calico's default (Workload and
	// Tunnel) when empty.
	AllowedUses []IPPoolAllowedUse
	// AssignmentMode is Automatic (the default) or Manual.
	AssignmentMode AssignmentMode
}

// Version is the pool's IP version, 4 or 6.
func (p Pool) Version() int {
	if p.CIDR.Addr().Is4() {
		return 4
	}
	return 6
}

// IPIPOn reports whether the pool wants IP-in-IP (Always or CrossSubnet).
func (p Pool) IPIPOn() bool { return p.IPIPMode != IPIPModeNever }

// VXLANOn reports whether the pool wants VXLAN (Always or CrossSubnet).
func (p Pool) VXLANOn() bool { return p.VXLANMode != VXLANModeNever }

// Allows reports whether addresses from the pool may be used for use.
func (p Pool) Allows(use IPPoolAllowedUse) bool { return slices.Contains(p.AllowedUses, use) }

// PoolError says why an IPPool could not be read.
type PoolError struct {
	// Name is the pool's name.
	Name string
	// CIDR is the pool's network when its cidr did parse (the problem is
	// in another field), the zero Prefix when it did not. Start-up uses it
	// to count a broken pool's family as present.
	CIDR netip.Prefix
	Err  error
}

func (e *PoolError) Error() string { return fmt.Sprintf("IPPool %s: %v", e.Name, e.Err) }

func (e *PoolError) Unwrap() error { return e.Err }

// ParsePool reads an IPPool into a Pool. A pool that Validate accepts
// always parses; an error (a *PoolError naming the pool) means the pool
// was written behind validation (an older version, etcdctl, a CRD without
// its schema).
//
// ParsePool checks only what a consumer needs to read the pool: the CIDR
// (host bits are masked, see Pool.CIDR), the block size's range for the
// family, the modes, selectors, allowed uses and assignment mode. Rules
// that relate fields (IP-in-IP and VXLAN on one pool, what a LoadBalancer
// pool may be, link-local ranges) are Validate's alone.
//
// How consumers treat an error, all alike: the pool is skipped, as if it
// did not exist, and the error is logged (or, in the policy compiler,
// reported as a compile problem) once per change of the pool, with its
// name. Nothing uses part of a broken pool, so that IPAM, policy, the
// overlay and BGP never disagree about which pools exist.
func ParsePool(p *IPPool) (Pool, error) {
	fail := func(cidr netip.Prefix, format string, args ...any) (Pool, error) {
		return Pool{}, &PoolError{Name: p.Name, CIDR: cidr, Err: fmt.Errorf(format, args...)}
	}
	s := &p.Spec
	cidr, err := parsePoolCIDR(s.CIDR)
	if err != nil {
		return fail(netip.Prefix{}, "cidr %q %w", s.CIDR, err)
	}
	cidr = cidr.Masked()
	out := Pool{
		Name: p.Name, CIDR: cidr,
		NATOutgoing: s.NATOutgoing, Disabled: s.Disabled, DisableBGPExport: s.DisableBGPExport,
		Deleting:    p.DeletionTimestamp != "",
		AllowedUses: s.AllowedUses, AssignmentMode: AssignmentModeAutomatic,
	}

	v6 := cidr.Addr().Is6()
	out.BlockSize = s.BlockSize
	if out.BlockSize == 0 {
		out.BlockSize = defaultBlockSize(v6)
	}
	if lo, hi := blockSizeRange(v6); out.BlockSize < lo || out.BlockSize > hi {
		return fail(cidr, "blockSize %d is out of range: IPv%d block sizes are %d-%d", out.BlockSize, out.Version(), lo, hi)
	}

	if out.IPIPMode, err = parseEnum(s.IPIPMode, IPIPModeNever, IPIPModeAlways, IPIPModeCrossSubnet); err != nil {
		return fail(cidr, "ipipMode %w", err)
	}
	if out.VXLANMode, err = parseEnum(s.VXLANMode, VXLANModeNever, VXLANModeAlways, VXLANModeCrossSubnet); err != nil {
		return fail(cidr, "vxlanMode %w", err)
	}

	if out.NodeSelector, err = selector.Parse(s.NodeSelector); err != nil {
		return fail(cidr, "nodeSelector: %w", err)
	}
	if out.NamespaceSelector, err = selector.Parse(s.NamespaceSelector); err != nil {
		return fail(cidr, "namespaceSelector: %w", err)
	}

	if len(out.AllowedUses) == 0 {
		out.AllowedUses = []IPPoolAllowedUse{IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel}
	}
	for _, u := range out.AllowedUses {
		switch u {
		case IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel, IPPoolAllowedUseLoadBalancer:
		default:
			return fail(cidr, "allowedUses: %q must be one of Workload, Tunnel, LoadBalancer", u)
		}
	}
	if m := s.AssignmentMode; m != nil {
		// Set but empty is an error, as Validate has it.
		if *m != AssignmentModeAutomatic && *m != AssignmentModeManual {
			return fail(cidr, "assignmentMode %q must be one of Automatic, Manual", *m)
		}
		out.AssignmentMode = *m
	}
	return out, nil
}

// ParsePools parses the IPPools among objs (other kinds are ignored) and
// returns them sorted by name, as Calico orders pools, with one
// *PoolError for each pool left out (see ParsePool for what a consumer
// does with it).
func ParsePools(objs []Object) ([]Pool, []error) {
	var (
		out  []Pool
		errs []error
	)
	for _, o := range objs {
		ip, ok := o.(*IPPool)
		if !ok {
			continue
		}
		p, err := ParsePool(ip)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Pool) int { return cmp.Compare(a.Name, b.Name) })
	return out, errs
}

// errNotCIDR and errMappedCIDR complete "cidr X ..." and "spec.cidr: X
// ..." messages.
var (
	errNotCIDR    = errors.New("is not a valid CIDR")
	errMappedCIDR = errors.New("is an IPv4-mapped IPv6 CIDR: write an IPv4 pool in IPv4 form")
)

// parsePoolCIDR is the one parse of an IPPool's cidr, shared by ParsePool,
// Validate and Default. It does not mask: Validate must see host bits.
func parsePoolCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, errNotCIDR
	}
	// IPAM cannot carve IPv4 blocks out of "::ffff:10.0.0.0/104", and the
	// other consumers would take it for IPv6.
	if p.Addr().Is4In6() {
		return netip.Prefix{}, errMappedCIDR
	}
	return p, nil
}

// blockSizeRange is the block sizes Calico IPAM supports for a family.
func blockSizeRange(v6 bool) (lo, hi int) {
	if v6 {
		return 116, 128
	}
	return 20, 32
}

// parseEnum reads an enumerated pool field: allowed[0] when empty.
func parseEnum[T ~string](v T, allowed ...T) (T, error) {
	if v == "" {
		return allowed[0], nil
	}
	if slices.Contains(allowed, v) {
		return v, nil
	}
	return "", fmt.Errorf("%q must be one of %s", v, joinStrings(allowed))
}
