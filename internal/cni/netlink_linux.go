package cni

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/agent/routeproto"
)

// gatewayV4 is the pod's IPv4 gateway: a link-local address nobody owns,
// answered by proxy ARP on the host veth.
func gatewayV4() netip.Addr { return netip.AddrFrom4([4]byte{169, 254, 1, 1}) }

// gatewayV6 is the pod's IPv6 gateway: the host veth's own link-local
// address, fe80::ecee:eeff:feee:eeee. It is fixed because the host veth's
// MAC is fixed and its address generation mode is forced to EUI-64, so it
// need not be waited for.
func gatewayV6() netip.Addr {
	return netip.AddrFrom16([16]byte{0xfe, 0x80, 8: 0xec, 0xee, 0xee, 0xff, 0xfe, 0xee, 0xee, 0xee})
}

// defaultRoutes are the routes a pod gets when IPAM names none.
func defaultRoutes() []netip.Prefix {
	return []netip.Prefix{netip.PrefixFrom(netip.IPv4Unspecified(), 0), netip.PrefixFrom(netip.IPv6Unspecified(), 0)}
}

// procSys is where sysctls live; a path under it is resolved in the
// network namespace of the thread that opens it.
const procSys = "/proc/sys"

// HostVethMAC is the MAC of every host-side veth, as in Calico: the kernel
// then never has to generate (and persist) one, and the pod sees the same
// gateway MAC on every node.
func HostVethMAC() net.HardwareAddr { return net.HardwareAddr{0xee, 0xee, 0xee, 0xee, 0xee, 0xee} }

// vethConfig describes one pod interface.
type vethConfig struct {
	hostName string // cali...
	contName string // CNI_IFNAME
	netns    ns.NetNS
	mtu      int
	// want4 and want6 are the address families the pod is expected to get:
	// their sysctls are set while the addresses are still being allocated.
	want4, want6 bool
	allowFwd     bool // container_settings.allow_ip_forwarding
	logger       *slog.Logger
}

func hasFamily(addrs []netip.Prefix, v4 bool) bool {
	for _, a := range addrs {
		if a.Addr().Is4() == v4 {
			return true
		}
	}
	return false
}

// pendingVeth is a veth pair built up to the point where the pod's
// addresses are needed, so that the (etcd-bound) address allocation and
// the (kernel-bound) link work run at the same time.
//
// The pair is created from the host with its peer placed straight into the
// pod's namespace (no move, so the host end never bounces down); the host
// end is configured from here; the pod's end needs one namespace switch,
// for its sysctls, which also opens a netlink socket inside the pod's
// namespace that finish uses from any thread. Deleting the host end
// deletes the pair.
type pendingVeth struct {
	cfg        vethConfig
	host       *netlink.Veth
	cont       netlink.Link    // the pod's end, as seen in its namespace
	contNL     *netlink.Handle // netlink socket in the pod's namespace
	contMAC    net.HardwareAddr
	has4, has6 bool // sysctls done for
}

// createVeth creates the pair and configures everything that does not
// depend on the pod's addresses. On error nothing is left behind.
func createVeth(cfg vethConfig) (_ *pendingVeth, err error) {
	// Kubernetes names the host veth after the pod, so a recreated sandbox
	// finds its predecessor's veth: replace it, as Calico does.
	if old, lerr := netlink.LinkByName(cfg.hostName); lerr == nil {
		cfg.logger.Info("deleting stale host veth", "interface", cfg.hostName)
		if derr := netlink.LinkDel(old); derr != nil && !isNotFound(derr) {
			return nil, fmt.Errorf("delete stale host veth %s: %w", cfg.hostName, derr)
		}
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name = cfg.hostName
	attrs.MTU = cfg.mtu
	attrs.HardwareAddr = HostVethMAC()
	v := &pendingVeth{cfg: cfg, host: &netlink.Veth{
		LinkAttrs:     attrs,
		PeerName:      cfg.contName,
		PeerNamespace: netlink.NsFd(int(cfg.netns.Fd())),
		PeerTxQLen:    -1,
	}}
	if err := netlink.LinkAdd(v.host); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create veth %s: interface %s already exists in %s", cfg.hostName, cfg.contName, cfg.netns.Path())
		}
		return nil, fmt.Errorf("create veth %s (peer %s in %s): %w", cfg.hostName, cfg.contName, cfg.netns.Path(), err)
	}
	defer func() {
		if err != nil {
			v.remove()
		}
	}()
	if err := configureHostSysctls(cfg.hostName, cfg.want4, cfg.want6, cfg.logger); err != nil {
		return nil, err
	}
	if err := netlink.LinkSetUp(v.host); err != nil {
		return nil, fmt.Errorf("set host veth %s up: %w", cfg.hostName, err)
	}
	err = cfg.netns.Do(func(ns.NetNS) error {
		if err := configureContainerSysctls(cfg, cfg.want4, cfg.want6); err != nil {
			return err
		}
		link, err := netlink.LinkByName(cfg.contName)
		if err != nil {
			return fmt.Errorf("find %s in %s: %w", cfg.contName, cfg.netns.Path(), err)
		}
		v.cont, v.contMAC = link, link.Attrs().HardwareAddr
		// A socket created on this thread belongs to the pod's namespace.
		v.contNL, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("open netlink in %s: %w", cfg.netns.Path(), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	v.has4, v.has6 = cfg.want4, cfg.want6
	return v, nil
}

// finish gives the pod its addresses, brings its end up and routes: the
// gateway and routes inside the pod, and a host route per address.
func (v *pendingVeth) finish(addrs, routes []netip.Prefix) error {
	cfg := v.cfg
	has4, has6 := hasFamily(addrs, true), hasFamily(addrs, false)
	if missing4, missing6 := has4 && !v.has4, has6 && !v.has6; missing4 || missing6 {
		// Addresses of a family nobody expected (a delegated IPAM plugin):
		// its sysctls now, still before the pod's end comes up.
		if err := configureHostSysctls(cfg.hostName, missing4, missing6, cfg.logger); err != nil {
			return err
		}
		if err := cfg.netns.Do(func(ns.NetNS) error { return configureContainerSysctls(cfg, missing4, missing6) }); err != nil {
			return err
		}
	}
	h := v.contNL
	for _, a := range addrs {
		addr := &netlink.Addr{IPNet: ipNet(a)}
		if !a.Addr().Is4() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(v.cont, addr); err != nil {
			return fmt.Errorf("add address %s to %s: %w", a, cfg.contName, err)
		}
	}
	if err := h.LinkSetUp(v.cont); err != nil {
		return fmt.Errorf("set %s up: %w", cfg.contName, err)
	}
	idx := v.cont.Attrs().Index
	if has4 {
		// An on-link route to the made-up gateway, so that routes can use
		// it as their next hop.
		if err := h.RouteAdd(&netlink.Route{LinkIndex: idx, Scope: netlink.SCOPE_LINK, Dst: ipNet(netip.PrefixFrom(gatewayV4(), 32))}); err != nil {
			return fmt.Errorf("add route %s dev %s: %w", gatewayV4(), cfg.contName, err)
		}
	}
	for _, r := range routes {
		gw := gatewayV4()
		if !r.Addr().Is4() {
			if !has6 {
				continue
			}
			gw = gatewayV6()
		} else if !has4 {
			continue
		}
		if err := h.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: ipNet(r), Gw: gw.AsSlice()}); err != nil {
			return fmt.Errorf("add route %s via %s dev %s: %w", r, gw, cfg.contName, err)
		}
	}
	for _, a := range addrs {
		if err := addHostRoute(v.host.Attrs().Index, cfg.hostName, a); err != nil {
			return err
		}
	}
	return nil
}

// close releases the netlink socket in the pod's namespace.
func (v *pendingVeth) close() {
	if v.contNL != nil {
		v.contNL.Close()
		v.contNL = nil
	}
}

// remove deletes the pair (undo).
func (v *pendingVeth) remove() {
	v.close()
	if err := netlink.LinkDel(v.host); err != nil && !isNotFound(err) {
		v.cfg.logger.Warn("undo: delete host veth", "interface", v.cfg.hostName, "err", err)
	}
}

// configureHostSysctls sets what Calico sets on the host end: proxy ARP
// and forwarding so the host answers for the pod's gateway and routes its
// traffic, route_localnet for NAT to the host, no proxy-ARP delay, and for
// IPv6 forwarding, proxy NDP, no DAD and a fixed link-local address.
func configureHostSysctls(ifName string, has4, has6 bool, logger *slog.Logger) error {
	type sysctl struct{ path, value string }
	var required []sysctl
	if has4 {
		required = append(required,
			sysctl{"net/ipv4/conf/" + ifName + "/route_localnet", "1"},
			sysctl{"net/ipv4/neigh/" + ifName + "/proxy_delay", "0"},
			sysctl{"net/ipv4/conf/" + ifName + "/proxy_arp", "1"},
			sysctl{"net/ipv4/conf/" + ifName + "/forwarding", "1"},
		)
	}
	if has6 {
		required = append(required,
			sysctl{"net/ipv6/conf/" + ifName + "/disable_ipv6", "0"},
			// Before the link comes up: the link-local address is then
			// usable at once and derived from the fixed MAC.
			sysctl{"net/ipv6/conf/" + ifName + "/accept_dad", "0"},
			sysctl{"net/ipv6/conf/" + ifName + "/addr_gen_mode", "0"},
			sysctl{"net/ipv6/conf/" + ifName + "/proxy_ndp", "1"},
			sysctl{"net/ipv6/conf/" + ifName + "/forwarding", "1"},
		)
	}
	for _, s := range required {
		if err := writeSysctl(s.path, s.value); err != nil {
			return err
		}
	}
	// The host end must never autoconfigure from router advertisements; a
	// host without IPv6 has no such file, which is fine.
	if err := writeSysctl("net/ipv6/conf/"+ifName+"/accept_ra", "0"); err != nil && !has6 {
		logger.Debug("host veth accept_ra not set", "err", err)
	} else if err != nil {
		return err
	}
	return nil
}

// configureContainerSysctls runs inside the pod's namespace: IPv4
// forwarding off (unless allowed), and for IPv6 the protocol enabled and
// no DAD delay on the point-to-point link. Before the pod's end comes up.
func configureContainerSysctls(cfg vethConfig, has4, has6 bool) error {
	fwd := "0"
	if cfg.allowFwd {
		fwd = "1"
	}
	if has4 {
		if err := writeSysctl("net/ipv4/ip_forward", fwd); err != nil {
			return err
		}
	}
	if has6 {
		// A namespace may start with IPv6 disabled.
		for _, s := range [][2]string{
			{"net/ipv6/conf/all/disable_ipv6", "0"},
			{"net/ipv6/conf/default/disable_ipv6", "0"},
			{"net/ipv6/conf/lo/disable_ipv6", "0"},
			{"net/ipv6/conf/all/forwarding", fwd},
			{"net/ipv6/conf/" + cfg.contName + "/accept_dad", "0"},
		} {
			if err := writeSysctl(s[0], s[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// addHostRoute routes one pod address to its host veth, marked with our
// route protocol. A route that already points at this veth (the agent may
// have been quicker) is fine; one pointing elsewhere is a conflict.
func addHostRoute(hostIndex int, hostName string, a netip.Prefix) error {
	route := &netlink.Route{
		LinkIndex: hostIndex,
		Scope:     netlink.SCOPE_LINK,
		Dst:       ipNet(a),
		Protocol:  routeproto.Calico,
	}
	err := netlink.RouteAdd(route)
	if err == nil || !errors.Is(err, unix.EEXIST) {
		if err != nil {
			return fmt.Errorf("add host route %s dev %s: %w", a, hostName, err)
		}
		return nil
	}
	family := netlink.FAMILY_V4
	if !a.Addr().Is4() {
		family = netlink.FAMILY_V6
	}
	existing, lerr := netlinksafe.RouteListFiltered(family, &netlink.Route{Dst: ipNet(a)}, netlink.RT_FILTER_DST)
	if lerr != nil {
		return fmt.Errorf("add host route %s dev %s: %w (and listing the existing one failed: %v)", a, hostName, err, lerr)
	}
	for _, r := range existing {
		if r.LinkIndex == hostIndex {
			return nil
		}
	}
	owner := "another interface"
	if len(existing) > 0 {
		if l, lerr := netlink.LinkByIndex(existing[0].LinkIndex); lerr == nil {
			owner = l.Attrs().Name
		}
	}
	return fmt.Errorf("add host route %s dev %s: a route to %s via %s already exists", a, hostName, a, owner)
}

// deleteContainerLink removes the pod's interface (which takes the host
// end with it). A missing namespace or interface is not an error: DEL must
// be idempotent. netnsGone reports that there was no namespace to look in
// (none given, or its path no longer a namespace).
func deleteContainerLink(netnsPath, ifName string) (netnsGone bool, err error) {
	if netnsPath == "" {
		return true, nil
	}
	target, err := ns.GetNS(netnsPath)
	if err != nil {
		var notExist ns.NSPathNotExistErr
		var notNS ns.NSPathNotNSErr
		if errors.As(err, &notExist) || errors.As(err, &notNS) {
			return true, nil
		}
		return false, fmt.Errorf("open netns %s: %w", netnsPath, err)
	}
	defer target.Close()
	return false, target.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(ifName)
		if err != nil {
			if isNotFound(err) {
				return nil
			}
			return fmt.Errorf("find %s in %s: %w", ifName, netnsPath, err)
		}
		if err := netlink.LinkDel(link); err != nil && !isNotFound(err) {
			return fmt.Errorf("delete %s in %s: %w", ifName, netnsPath, err)
		}
		return nil
	})
}

// deleteHostVeth removes the host end of a pod's veth pair by name (with
// its peer and its routes), for a DEL whose namespace is gone. Only a veth
// is removed: a link of another kind with that name is not the plugin's.
// A missing link is success.
func deleteHostVeth(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("find host veth %s: %w", name, err)
	}
	if link.Type() != "veth" {
		return nil
	}
	if err := netlink.LinkDel(link); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete host veth %s: %w", name, err)
	}
	return nil
}

func isNotFound(err error) bool {
	var lnf netlink.LinkNotFoundError
	return errors.As(err, &lnf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// writeSysctl writes one value under /proc/sys. The file is opened
// write-only without truncation, as procfs expects.
func writeSysctl(path, value string) error {
	full := filepath.Join(procSys, path)
	f, err := os.OpenFile(full, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("set sysctl %s=%s: %w", path, value, err)
	}
	n, err := f.WriteString(value)
	if err == nil && n < len(value) {
		err = io.ErrShortWrite
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("set sysctl %s=%s: %w", path, value, err)
	}
	return nil
}
