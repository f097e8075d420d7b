package agent

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// NetlinkHostInterfaces is the HostInterfaces of the network namespace
// the calling thread is in: every link's addresses, read with netlink.
func NetlinkHostInterfaces() (map[string][]netip.Addr, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := map[string][]netip.Addr{}
	for _, l := range links {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("list addresses of %s: %w", l.Attrs().Name, err)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				out[l.Attrs().Name] = append(out[l.Attrs().Name], ip.Unmap())
			}
		}
	}
	return out, nil
}
