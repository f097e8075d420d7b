package bgp

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/agent/routes"
)

// netlinkKernel reads the routes of the agent's own network namespace.
// It opens a netlink socket per call (the package-level functions), so
// that it shares nothing with the route table's handle, which its Run
// goroutine owns.
type netlinkKernel struct{}

func (netlinkKernel) routes(dst netip.Prefix) ([]kernelRoute, error) {
	filter := &netlink.Route{Table: unix.RT_TABLE_UNSPEC}
	mask := uint64(netlink.RT_FILTER_TABLE)
	fam := netlink.FAMILY_ALL
	if dst.IsValid() {
		fam = netlink.FAMILY_V4
		if dst.Addr().Is6() {
			fam = netlink.FAMILY_V6
		}
		if dst.Bits() > 0 {
			// The kernel's default route has no destination attribute;
			// filtering on a /0 would miss it.
			filter.Dst = &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())}
			mask |= netlink.RT_FILTER_DST
		}
	}
	rs, err := netlink.RouteListFiltered(fam, filter, mask)
	if err != nil {
		return nil, fmt.Errorf("list kernel routes: %w", err)
	}
	names := map[int]string{}
	var out []kernelRoute
	for _, r := range rs {
		k := kernelRoute{Proto: int(r.Protocol), Table: r.Table, Onlink: r.Flags&int(netlink.FLAG_ONLINK) != 0}
		if r.Dst == nil {
			if r.Family == netlink.FAMILY_V6 {
				k.Dst = netip.MustParsePrefix("::/0")
			} else {
				k.Dst = netip.MustParsePrefix("0.0.0.0/0")
			}
		} else {
			a, ok := netip.AddrFromSlice(r.Dst.IP)
			if !ok {
				continue
			}
			ones, _ := r.Dst.Mask.Size()
			k.Dst = netip.PrefixFrom(a.Unmap(), ones)
		}
		if dst.IsValid() && k.Dst != dst {
			continue
		}
		switch r.Type {
		case unix.RTN_BLACKHOLE:
			k.Type = routes.Blackhole
		case unix.RTN_UNREACHABLE:
			k.Type = routes.Unreachable
		case unix.RTN_UNICAST, 0:
			k.Unicast = true
		default:
			continue // local, broadcast, ...: not routes to a destination
		}
		if gw, ok := netip.AddrFromSlice(r.Gw); ok {
			k.Gw = gw.Unmap()
		}
		if r.LinkIndex > 0 {
			name, ok := names[r.LinkIndex]
			if !ok {
				if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
					name = l.Attrs().Name
				}
				names[r.LinkIndex] = name
			}
			k.Dev = name
		}
		out = append(out, k)
	}
	return out, nil
}

func (netlinkKernel) reach(a netip.Addr) (string, error) {
	rs, err := netlink.RouteGet(a.AsSlice())
	if err != nil {
		return "", fmt.Errorf("no kernel route to it: %w", err)
	}
	if len(rs) == 0 {
		return "", fmt.Errorf("no kernel route to it")
	}
	r := rs[0]
	s := a.String()
	if r.Gw != nil {
		s += " via " + r.Gw.String()
	}
	if r.LinkIndex > 0 {
		if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
			s += " dev " + l.Attrs().Name
		}
	}
	return s, nil
}
