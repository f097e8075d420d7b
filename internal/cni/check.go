package cni

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/projectcalico/calico-node/internal/model/api"
)

func cmdCheck(args *skel.CmdArgs) error {
	return run(&host{}, NetworkPlugin, "CHECK", args, (*invocation).check)
}

// prevResult decodes the result the runtime cached from ADD.
func (inv *invocation) prevResult() (*types100.Result, error) {
	if inv.conf.RawPrevResult == nil {
		return nil, configError("prevResult", "is required for CHECK")
	}
	if err := version.ParsePrevResult(&inv.conf.PluginConf); err != nil {
		return nil, configError("prevResult", "%v", err)
	}
	prev, err := types100.NewResultFromResult(inv.conf.PrevResult)
	if err != nil {
		return nil, configError("prevResult", "%v", err)
	}
	return prev, nil
}

// check is the network plugin's CHECK: the pod interface, its addresses
// and routes, the host veth and its routes, and the WorkloadEndpoint must
// all still be as ADD left them (as prevResult describes). The error names
// the first thing that differs.
func (inv *invocation) check(ctx context.Context) error {
	prev, err := inv.prevResult()
	if err != nil {
		return err
	}
	if inv.conf.IPAMConf.Type != calicoIPAMType {
		if err := invoke.DelegateCheck(ctx, inv.conf.IPAMConf.Type, inv.args.StdinData, nil); err != nil {
			return fmt.Errorf("IPAM plugin %s: %w", inv.conf.IPAMConf.Type, err)
		}
	}

	// The addresses prevResult gives the pod interface.
	contIdx := -1
	for i, intf := range prev.Interfaces {
		if intf.Name == inv.args.IfName && intf.Sandbox != "" {
			contIdx = i
		}
	}
	if contIdx < 0 {
		return checkError("prevResult has no interface %s in a sandbox", inv.args.IfName)
	}
	var addrs []netip.Prefix
	for _, ip := range prev.IPs {
		if ip.Interface == nil || *ip.Interface == contIdx {
			if p, ok := prefixFromIPNet(ip.Address); ok {
				addrs = append(addrs, netip.PrefixFrom(p.Addr(), p.Addr().BitLen()))
			}
		}
	}
	if len(addrs) == 0 {
		return checkError("prevResult gives %s no address", inv.args.IfName)
	}
	var routes []netip.Prefix
	for _, r := range prev.Routes {
		if p, ok := prefixFromIPNet(r.Dst); ok {
			routes = append(routes, p.Masked())
		}
	}
	wantMAC := prev.Interfaces[contIdx].Mac

	netns, err := openNetNS(inv.args.Netns)
	if err != nil {
		return err
	}
	defer netns.Close()
	if err := netns.Do(func(ns.NetNS) error {
		return checkContainer(inv.args.IfName, wantMAC, addrs, routes)
	}); err != nil {
		return err
	}

	ids := newWorkloadIDs(inv)
	store, err := inv.datastore(ctx)
	if err != nil {
		return err
	}
	existing, err := findEndpoint(ctx, store, ids)
	if err != nil {
		return err
	}
	if existing == nil {
		return checkError("workload endpoint for container %s does not exist", inv.args.ContainerID)
	}
	hostName := ids.hostVethName()
	if err := checkHost(hostName, addrs); err != nil {
		return err
	}
	return checkEndpoint(existing, hostName, addrs)
}

func checkError(format string, args ...any) error {
	return types.NewError(types.ErrInternal, "CHECK: "+fmt.Sprintf(format, args...), "")
}

// checkContainer runs inside the pod's namespace.
func checkContainer(ifName, wantMAC string, addrs, routes []netip.Prefix) error {
	link, err := netlink.LinkByName(ifName)
	if err != nil {
		return checkError("interface %s: %v", ifName, err)
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		return checkError("interface %s is down", ifName)
	}
	if wantMAC != "" && !strings.EqualFold(link.Attrs().HardwareAddr.String(), wantMAC) {
		return checkError("interface %s has MAC %s, prevResult says %s", ifName, link.Attrs().HardwareAddr, wantMAC)
	}
	have, err := netlinksafe.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return checkError("list addresses of %s: %v", ifName, err)
	}
	for _, want := range addrs {
		found := slices.ContainsFunc(have, func(a netlink.Addr) bool {
			p, ok := prefixFromIPNet(*a.IPNet)
			return ok && p.Addr() == want.Addr()
		})
		if !found {
			return checkError("interface %s lacks address %s", ifName, want)
		}
	}
	rs, err := netlinksafe.RouteList(link, netlink.FAMILY_ALL)
	if err != nil {
		return checkError("list routes of %s: %v", ifName, err)
	}
	hasRoute := func(dst netip.Prefix, gw netip.Addr) bool {
		return slices.ContainsFunc(rs, func(r netlink.Route) bool {
			d := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			if !dst.Addr().Is4() {
				d = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			}
			if r.Dst != nil {
				var ok bool
				if d, ok = prefixFromIPNet(*r.Dst); !ok {
					return false
				}
			}
			if d != dst {
				return false
			}
			g, _ := netip.AddrFromSlice(r.Gw)
			return g.Unmap() == gw
		})
	}
	has4, has6 := hasFamily(addrs, true), hasFamily(addrs, false)
	if has4 && !hasRoute(netip.PrefixFrom(gatewayV4(), 32), netip.Addr{}) {
		return checkError("route %s dev %s is missing", gatewayV4(), ifName)
	}
	for _, dst := range routes {
		gw := gatewayV4()
		if !dst.Addr().Is4() {
			if !has6 {
				continue
			}
			gw = gatewayV6()
		} else if !has4 {
			continue
		}
		if !hasRoute(dst, gw) {
			return checkError("route %s via %s dev %s is missing", dst, gw, ifName)
		}
	}
	return nil
}

// checkHost verifies the host veth and its routes.
func checkHost(hostName string, addrs []netip.Prefix) error {
	link, err := netlink.LinkByName(hostName)
	if err != nil {
		return checkError("host veth %s: %v", hostName, err)
	}
	if _, ok := link.(*netlink.Veth); !ok {
		return checkError("host interface %s is a %s, not a veth", hostName, link.Type())
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		return checkError("host veth %s is down", hostName)
	}
	rs, err := netlinksafe.RouteList(link, netlink.FAMILY_ALL)
	if err != nil {
		return checkError("list routes of %s: %v", hostName, err)
	}
	for _, a := range addrs {
		found := slices.ContainsFunc(rs, func(r netlink.Route) bool {
			if r.Dst == nil {
				return false
			}
			p, ok := prefixFromIPNet(*r.Dst)
			return ok && p == a
		})
		if !found {
			return checkError("host route %s dev %s is missing", a, hostName)
		}
	}
	return nil
}

// checkEndpoint verifies the stored endpoint against the dataplane.
func checkEndpoint(ep *api.WorkloadEndpoint, hostName string, addrs []netip.Prefix) error {
	if ep.Spec.InterfaceName != hostName {
		return checkError("workload endpoint %s names interface %s, want %s", ep.Name, ep.Spec.InterfaceName, hostName)
	}
	for _, a := range addrs {
		if !slices.Contains(ep.Spec.IPNetworks, a.String()) {
			return checkError("workload endpoint %s lacks %s (has %v)", ep.Name, a, ep.Spec.IPNetworks)
		}
	}
	return nil
}
