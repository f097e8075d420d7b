package cleanup

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/agent/overlay"
	"github.com/projectcalico/calico-node/agent/routeproto"
	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/cniinstall"
	ourbuild "github.com/projectcalico/calico-node/internal/buildinfo"
	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/node/agentlock"
)

// host reads and changes the network namespace and the filesystem this
// process runs in: the I/O around the pure Make.
type host struct {
	run xtables.Runner
	nl  *netlink.Handle
}

func newHost() (*host, error) {
	nl, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	return &host{run: xtables.ExecRunner{}, nl: nl}, nil
}

func (h *host) close() { h.nl.Close() }

// read gathers everything Make decides on. A part that cannot be read is
// reported as an error and left out (so nothing of it is removed); the
// rest is still read.
func (h *host) read(ctx context.Context, cfg Config) (Observed, []error) {
	var obs Observed
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var tErrs []error
	obs.Tables, tErrs = h.readTables(ctx)
	errs = append(errs, tErrs...)
	var err error
	obs.Sets, err = h.readSets(ctx)
	note(err)
	obs.Routes, err = h.readRoutes()
	note(err)
	obs.Links, err = h.readLinks()
	note(err)
	obs.Files = readFiles(cfg)
	return obs, errs
}

// readTables saves every backend and family that has tables here. The
// legacy backend is read only when this namespace has legacy tables
// (/proc/net/ip_tables_names): running its tools would otherwise load the
// ip_tables module for nothing.
func (h *host) readTables(ctx context.Context) ([]Saved, []error) {
	var out []Saved
	var errs []error
	for _, fam := range []int{4, 6} {
		for _, mode := range xtables.Modes() {
			b := xtables.BackendFor(mode, fam)
			if _, err := exec.LookPath(b.Save); err != nil {
				continue // that flavour is not installed, so it holds nothing of ours
			}
			if mode == "legacy" && !legacyTables(fam) {
				continue
			}
			text, err := h.run.Run(ctx, b.Save, nil, "")
			if err != nil {
				errs = append(errs, fmt.Errorf("read %s %s tables: %w", familyName(fam), mode, err))
				continue
			}
			out = append(out, Saved{Mode: mode, Family: fam, Text: text})
		}
	}
	return out, errs
}

func legacyTables(family int) bool {
	name := "/proc/net/ip_tables_names"
	if family == 6 {
		name = "/proc/net/ip6_tables_names"
	}
	data, err := os.ReadFile(name)
	return err == nil && strings.TrimSpace(string(data)) != ""
}

func (h *host) readSets(ctx context.Context) ([]string, error) {
	if _, err := exec.LookPath("ipset"); err != nil {
		return nil, nil // no ipset tool: the agent cannot have made sets either
	}
	out, err := h.run.Run(ctx, "ipset", []string{"list", "-n"}, "")
	if err != nil {
		return nil, fmt.Errorf("list ip sets: %w", err)
	}
	return strings.Fields(out), nil
}

func (h *host) readRoutes() ([]Route, error) {
	names := map[int]string{}
	if links, err := h.nl.LinkList(); err == nil {
		for _, l := range links {
			names[l.Attrs().Index] = l.Attrs().Name
		}
	}
	var out []Route
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		// Only our protocol's routes are listed: a node with full BGP
		// tables from another daemon has a million others. Make checks the
		// protocol again; this only saves memory.
		rs, err := h.nl.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_UNSPEC, Protocol: routeproto.Calico},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		for i := range rs {
			r := &rs[i]
			out = append(out, Route{
				Table: r.Table, Protocol: int(r.Protocol), Type: routeType(r.Type),
				Dst: dstOf(r, fam), Via: addrOf(r.Gw), Dev: names[r.LinkIndex], Ref: r,
			})
		}
	}
	return out, nil
}

func routeType(t int) string {
	switch t {
	case unix.RTN_UNICAST:
		return "unicast"
	case unix.RTN_BLACKHOLE:
		return "blackhole"
	case unix.RTN_UNREACHABLE:
		return "unreachable"
	case unix.RTN_PROHIBIT:
		return "prohibit"
	case unix.RTN_LOCAL:
		return "local"
	case unix.RTN_BROADCAST:
		return "broadcast"
	case unix.RTN_MULTICAST:
		return "multicast"
	}
	return fmt.Sprintf("type-%d", t)
}

func dstOf(r *netlink.Route, fam int) netip.Prefix {
	if r.Dst == nil {
		if fam == netlink.FAMILY_V6 {
			return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	a := addrOf(r.Dst.IP)
	ones, _ := r.Dst.Mask.Size()
	return netip.PrefixFrom(a, ones)
}

func addrOf(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}
	}
	return a.Unmap()
}

func (h *host) readLinks() ([]Link, error) {
	links, err := h.nl.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var out []Link
	for _, l := range links {
		a := l.Attrs()
		link := Link{Name: a.Name, Type: l.Type(), MAC: a.HardwareAddr, Ref: l}
		// Only tunl0's addresses can be ours without the whole device.
		if a.Name == overlay.IPIPDevice {
			addrs, err := h.nl.AddrList(l, netlink.FAMILY_ALL)
			if err != nil {
				return nil, fmt.Errorf("list addresses of %s: %w", a.Name, err)
			}
			for i := range addrs {
				ad := &addrs[i]
				ones, _ := ad.Mask.Size()
				link.Addrs = append(link.Addrs, Addr{Prefix: netip.PrefixFrom(addrOf(ad.IP), ones), Ref: ad})
			}
		}
		out = append(out, link)
	}
	return out, nil
}

// readFiles gathers the facts about every file calico-node may have
// written. It only reads.
func readFiles(cfg Config) Files {
	var f Files
	f.Plugin = fact(filepath.Join(cfg.CNIBinDir, cnientry.NetworkPlugin), binary)
	f.IPAM = fact(filepath.Join(cfg.CNIBinDir, cnientry.IPAMPlugin), binary)
	f.Conf = fact(filepath.Join(cfg.CNIConfDir, cfg.CNIConfName), content)
	f.Kubeconfig = fact(filepath.Join(cfg.CNIConfDir, cniinstall.KubeconfigName), content)
	tlsDir := filepath.Join(cfg.CNIConfDir, cniinstall.TLSDirName)
	for _, name := range cniinstall.TLSFileNames() {
		f.TLS = append(f.TLS, fact(filepath.Join(tlsDir, name), 0))
	}
	f.TLSDir = fact(tlsDir, 0)
	runDirs := map[string]bool{}
	for _, s := range []string{cfg.CNISocket, cfg.BGPSocket, cfg.StatusSocket} {
		if s == "" {
			continue
		}
		fs := fact(s, 0)
		if fs.socket() {
			fs.Busy = answers(s)
		}
		f.Sockets = append(f.Sockets, fs)
		runDirs[filepath.Dir(s)] = true
	}
	if cfg.IPAMLockFile != "" {
		f.IPAMLock = fact(cfg.IPAMLockFile, 0)
		if f.IPAMLock.regular() {
			f.IPAMLock.Busy, _ = agentlock.Held(cfg.IPAMLockFile)
		}
		runDirs[filepath.Dir(cfg.IPAMLockFile)] = true
	}
	if cfg.StatusDir != "" {
		f.StatusDir = fact(cfg.StatusDir, 0)
		runDirs[filepath.Dir(cfg.StatusDir)] = true
	}
	for d := range runDirs {
		f.RunDirs = append(f.RunDirs, fact(d, 0))
	}
	f.AgentLock = fact(agentlock.Path(cfg.DataDir), 0)
	if cfg.RemoveData {
		f.Etcd = fact(filepath.Join(cfg.DataDir, "etcd"), 0)
		f.Nodename = fact(filepath.Join(cfg.DataDir, "nodename"), 0)
		f.DataDir = fact(cfg.DataDir, 0)
	}
	return f
}

// What fact reads beyond lstat.
const (
	content = 1 << iota // a small regular file's content
	binary              // whether it is a calico-node executable
)

// maxContent bounds what is read of a configuration file.
const maxContent = 1 << 20

func fact(path string, want int) FileFact {
	f := FileFact{Path: path}
	st, err := os.Lstat(path)
	if err != nil {
		return f
	}
	f.Exists, f.Mode, f.Size = true, st.Mode(), st.Size()
	switch {
	case f.symlink():
		f.Target, _ = os.Readlink(path)
	case f.dir():
		if es, err := os.ReadDir(path); err == nil {
			for _, e := range es {
				f.Entries = append(f.Entries, e.Name())
			}
		}
	case f.regular() && want&content != 0:
		if file, err := os.Open(path); err == nil {
			f.Head, _ = io.ReadAll(io.LimitReader(file, maxContent))
			file.Close()
		}
	}
	if want&binary != 0 {
		// Follows a symlink, as the runtime would when executing it.
		if bi, err := buildinfo.ReadFile(path); err == nil && bi.Path == ourbuild.MainPackage {
			f.Binary = true
		}
	}
	return f
}

// answers reports whether something accepts connections on the unix socket
// at path (a running agent's CNI server).
func answers(path string) bool {
	c, err := net.DialTimeout("unix", path, 500*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Removal: each reports an object already gone as success, so that a
// second cleanup, or one racing the kernel's own removal (a device's
// routes), is quiet.

func (h *host) removeTable(ctx context.Context, t TablePlan) error {
	b := xtables.BackendFor(t.Mode, t.Family)
	if _, err := h.run.Run(ctx, b.Restore, []string{"--noflush", "--wait"}, t.Payload()); err != nil {
		return fmt.Errorf("iptables-restore: %w", err)
	}
	return nil
}

func (h *host) destroySet(ctx context.Context, name string) error {
	_, err := h.run.Run(ctx, "ipset", []string{"destroy", name}, "")
	if err != nil && strings.Contains(err.Error(), "does not exist") {
		return nil
	}
	return err
}

func (h *host) removeRoute(r Route) error {
	err := h.nl.RouteDel(r.Ref.(*netlink.Route))
	if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

func (h *host) removeLink(l Link) error {
	err := h.nl.LinkDel(l.Ref.(netlink.Link))
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

func (h *host) removeAddr(a LinkAddr) error {
	err := h.nl.AddrDel(a.Link.Ref.(netlink.Link), a.Addr.Ref.(*netlink.Addr))
	if errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

func removePath(p Path) error {
	var err error
	if p.All {
		err = os.RemoveAll(p.Path)
	} else {
		err = os.Remove(p.Path)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
