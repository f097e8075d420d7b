package autodetect

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// Interface is one host interface and its addresses.
type Interface struct {
	Name  string
	Index int
	// Addrs are the interface's addresses with their prefix lengths
	// (10.0.0.5/24, not 10.0.0.0/24), both families, in kernel order.
	Addrs []netip.Prefix
}

// Source is the only access to the kernel Detect and Resolve need.
type Source interface {
	// Interfaces lists every interface with its addresses.
	Interfaces() ([]Interface, error)
	// RouteSrc returns the source address the kernel would use to send to
	// dst, without sending anything.
	RouteSrc(dst netip.Addr) (netip.Addr, error)
}

// DefaultExcludes returns Calico's regexes for interface names that
// first-found and skip-interface= never consider: container bridges, veths,
// Calico's own devices and tunnels, other CNIs' devices, kube-proxy's IPVS
// dummy, NodeLocal DNSCache's dummy and loopback. "^lo" is Calico's pattern;
// it also skips any other name starting with "lo".
func DefaultExcludes() []string {
	return []string{
		`^docker.*`, `^cbr.*`, `^dummy.*`, `^podman.*`,
		`^virbr.*`, `^lxcbr.*`, `^veth.*`, `^lo`,
		`^cali.*`, `^tunl.*`, `^flannel.*`, `^kube-ipvs.*`, `^cni.*`,
		`^vxlan\.calico.*`, `^vxlan-v6\.calico.*`, `^wireguard\.cali.*`, `^wg-v6\.cali.*`,
		`^nodelocaldns.*`,
	}
}

// Detect chooses this node's address of the given family (4 or 6) with
// method m, and returns it with its prefix length and its interface's name.
func Detect(m Method, family int, src Source) (netip.Prefix, string, error) {
	if family != 4 && family != 6 {
		return netip.Prefix{}, "", fmt.Errorf("autodetect address: IP family %d: want 4 or 6", family)
	}
	p, name, err := detect(m, family, src)
	if err != nil {
		return netip.Prefix{}, "", fmt.Errorf("autodetect IPv%d address (method %s): %w", family, m, err)
	}
	return p, name, nil
}

func detect(m Method, family int, src Source) (netip.Prefix, string, error) {
	switch m.Kind {
	case FirstFound:
		return firstMatching(src, family, nil, compileExcludes(nil), nil)
	case InterfaceMatch:
		return firstMatching(src, family, m.Interfaces, nil, nil)
	case SkipInterface:
		return firstMatching(src, family, nil, compileExcludes(m.Interfaces), nil)
	case CIDRMatch:
		return firstMatching(src, family, nil, nil, m.CIDRs)
	case CanReach:
		return reach(src, family, m.Dest)
	case KubernetesInternalIP:
		return netip.Prefix{}, "", ErrNeedsKubernetes
	}
	return netip.Prefix{}, "", fmt.Errorf("unknown method kind %d", int(m.Kind))
}

func compileExcludes(extra []*regexp.Regexp) []*regexp.Regexp {
	defs := DefaultExcludes()
	res := make([]*regexp.Regexp, 0, len(defs)+len(extra))
	for _, d := range defs {
		// The defaults are constants known to compile.
		res = append(res, regexp.MustCompile(d))
	}
	return append(res, extra...)
}

func matchAny(res []*regexp.Regexp, name string) bool {
	for _, re := range res {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// ordered returns the interfaces in Calico's order: highest index first.
// Names break ties so that sources without indexes are deterministic too.
func ordered(ifaces []Interface) []Interface {
	out := slices.Clone(ifaces)
	slices.SortStableFunc(out, func(a, b Interface) int {
		if c := cmp.Compare(b.Index, a.Index); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return out
}

// usable reports whether a is of the family and could be a node address.
func usable(a netip.Addr, family int) bool {
	a = a.Unmap()
	if (family == 4) != a.Is4() {
		return false
	}
	// Excludes loopback, link-local, multicast and unspecified.
	return a.IsGlobalUnicast()
}

// firstMatching returns the first usable address on an interface whose name
// matches one of include (nil: any) and none of exclude, and that lies in
// one of cidrs (nil: anywhere).
func firstMatching(src Source, family int, include, exclude []*regexp.Regexp, cidrs []netip.Prefix) (netip.Prefix, string, error) {
	ifaces, err := src.Interfaces()
	if err != nil {
		return netip.Prefix{}, "", fmt.Errorf("list interfaces: %w", err)
	}
	var considered []string
	for _, iface := range ordered(ifaces) {
		if include != nil && !matchAny(include, iface.Name) {
			continue
		}
		if matchAny(exclude, iface.Name) {
			continue
		}
		considered = append(considered, iface.Name)
		for _, p := range iface.Addrs {
			a := p.Addr().Unmap()
			if !usable(a, family) {
				continue
			}
			if cidrs != nil && !slices.ContainsFunc(cidrs, func(c netip.Prefix) bool { return c.Contains(a) }) {
				continue
			}
			return netip.PrefixFrom(a, p.Bits()), iface.Name, nil
		}
	}
	if len(considered) == 0 {
		return netip.Prefix{}, "", errors.New("no interface matches")
	}
	if cidrs != nil {
		return netip.Prefix{}, "", fmt.Errorf("no address in the CIDRs on interfaces %s", strings.Join(considered, ", "))
	}
	return netip.Prefix{}, "", fmt.Errorf("no usable IPv%d address on interfaces %s", family, strings.Join(considered, ", "))
}

func reach(src Source, family int, dest netip.Addr) (netip.Prefix, string, error) {
	if dest.Is4() != (family == 4) {
		return netip.Prefix{}, "", fmt.Errorf("destination %s is not an IPv%d address", dest, family)
	}
	a, err := src.RouteSrc(dest)
	if err != nil {
		return netip.Prefix{}, "", fmt.Errorf("look up route to %s: %w", dest, err)
	}
	p, name, found, err := onInterface(src, a.Unmap())
	if err != nil {
		return netip.Prefix{}, "", err
	}
	if !found {
		return netip.Prefix{}, "", fmt.Errorf("source address %s for %s is not on any interface", a, dest)
	}
	return p, name, nil
}

// onInterface finds a on any interface (no name filters) and returns it with
// the interface's prefix length for it.
func onInterface(src Source, a netip.Addr) (netip.Prefix, string, bool, error) {
	ifaces, err := src.Interfaces()
	if err != nil {
		return netip.Prefix{}, "", false, fmt.Errorf("list interfaces: %w", err)
	}
	for _, iface := range ordered(ifaces) {
		for _, p := range iface.Addrs {
			if p.Addr().Unmap() == a {
				return netip.PrefixFrom(a, p.Bits()), iface.Name, true, nil
			}
		}
	}
	return netip.Prefix{}, "", false, nil
}

// Validate checks an address from the IP or IP6 setting: "10.0.0.5/24" is
// returned as is; a bare "10.0.0.5" becomes 10.0.0.5/32 (IPv6: /128) — use
// Resolve to take the prefix length from the host's interface instead. The
// special values IPAutodetect and IPNone are the caller's to handle and are
// rejected here.
func Validate(addr string) (netip.Prefix, error) {
	s := strings.TrimSpace(addr)
	switch strings.ToLower(s) {
	case "":
		return netip.Prefix{}, errors.New("validate node address: empty")
	case IPAutodetect, IPNone:
		return netip.Prefix{}, fmt.Errorf("validate node address %q: %q must be handled before validation", addr, s)
	}
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, fmt.Errorf("validate node address %q: %w", addr, err)
		}
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return netip.Prefix{}, fmt.Errorf("validate node address %q: IPv4-mapped address with a prefix shorter than /96", addr)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("validate node address %q: %w", addr, err)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("validate node address %q: zones are not allowed", addr)
		}
		a = a.Unmap()
		p = netip.PrefixFrom(a, a.BitLen())
	}
	a := p.Addr()
	switch {
	case a.IsUnspecified():
		return netip.Prefix{}, fmt.Errorf("validate node address %q: unspecified address", addr)
	case a.IsLoopback():
		return netip.Prefix{}, fmt.Errorf("validate node address %q: loopback address", addr)
	case a.IsMulticast():
		return netip.Prefix{}, fmt.Errorf("validate node address %q: multicast address", addr)
	}
	return p, nil
}

// Resolve validates an IP or IP6 setting for the given family (4 or 6) and,
// for a bare address, takes the prefix length from the host interface that
// has it, as calico-node does. It also returns that interface's name, or ""
// when the address is on no interface (a bare address then stays /32 or
// /128; callers should warn, as Calico does, that the address could not be
// confirmed on this host).
func Resolve(addr string, family int, src Source) (netip.Prefix, string, error) {
	if family != 4 && family != 6 {
		return netip.Prefix{}, "", fmt.Errorf("validate node address %q: IP family %d: want 4 or 6", addr, family)
	}
	p, err := Validate(addr)
	if err != nil {
		return netip.Prefix{}, "", err
	}
	if p.Addr().Is4() != (family == 4) {
		return netip.Prefix{}, "", fmt.Errorf("validate node address %q: not an IPv%d address", addr, family)
	}
	local, name, found, err := onInterface(src, p.Addr())
	if err != nil {
		return netip.Prefix{}, "", fmt.Errorf("validate node address %q: %w", addr, err)
	}
	if !found {
		return p, "", nil
	}
	if !strings.Contains(addr, "/") {
		p = local
	}
	return p, name, nil
}
