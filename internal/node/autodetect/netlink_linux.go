package autodetect

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// dumpAttempts bounds retries of a netlink dump the kernel interrupted
// because the table changed under it (a link or address came or went).
const dumpAttempts = 5

// NetlinkSource is the Linux Source: it reads links, addresses and routes
// through a netlink handle, so it works on whatever network namespace the
// handle was opened in (netlink.NewHandleAt) without switching the calling
// thread's namespace. A nil Handle means the namespace the process runs in.
type NetlinkSource struct {
	Handle *netlink.Handle
}

func (s NetlinkSource) handle() *netlink.Handle {
	if s.Handle == nil {
		// The zero Handle uses per-call sockets in the current namespace,
		// like netlink's package-level functions.
		return &netlink.Handle{}
	}
	return s.Handle
}

// Interfaces lists every link with its addresses of both families.
func (s NetlinkSource) Interfaces() ([]Interface, error) {
	h := s.handle()
	links, err := retryDump(h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	byIndex := make(map[int][]netip.Prefix)
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		p, ok := prefixOf(a.IPNet)
		if !ok {
			continue
		}
		byIndex[a.LinkIndex] = append(byIndex[a.LinkIndex], p)
	}
	out := make([]Interface, 0, len(links))
	for _, l := range links {
		attrs := l.Attrs()
		out = append(out, Interface{Name: attrs.Name, Index: attrs.Index, Addrs: byIndex[attrs.Index]})
	}
	return out, nil
}

// RouteSrc asks the kernel which source address it would use for dst
// (RTM_GETROUTE); no packet is sent.
func (s NetlinkSource) RouteSrc(dst netip.Addr) (netip.Addr, error) {
	routes, err := s.handle().RouteGet(dst.AsSlice())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("route get %s: %w", dst, err)
	}
	for _, r := range routes {
		if a, ok := netip.AddrFromSlice(r.Src); ok {
			return a.Unmap(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("route get %s: kernel chose no source address", dst)
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, bits := n.Mask.Size()
	if bits == 0 {
		// Non-canonical mask; treat as a host address.
		ones = a.BitLen()
	} else if bits == 128 && a.Is4() {
		// A 16-byte mask on an IPv4 address.
		ones -= 96
	}
	return netip.PrefixFrom(a, ones), true
}

func retryDump[T any](dump func() ([]T, error)) ([]T, error) {
	var err error
	for range dumpAttempts {
		var res []T
		res, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return res, err
		}
	}
	return nil, err
}
