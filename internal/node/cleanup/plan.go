package cleanup

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/projectcalico/calico-node/agent/overlay"
	"github.com/projectcalico/calico-node/agent/routeproto"
	"github.com/projectcalico/calico-node/internal/cni"
)

// Observed is what the reader found on the node: everything that could be
// calico-node's, and more. Plan decides what of it is.
type Observed struct {
	// Tables holds one iptables-save of every backend and family that has
	// tables in this network namespace.
	Tables []Saved
	// Sets are the names of every IP set.
	Sets []string
	// Routes are routes of every table, both families (the reader may
	// leave out those of other protocols).
	Routes []Route
	// Links are every network interface.
	Links []Link
	// Files are the facts about the files calico-node may have written.
	Files Files
}

// Saved is the output of one `iptables-save` (all tables).
type Saved struct {
	Mode   string // "nft" or "legacy"
	Family int    // 4 or 6
	Text   string
}

// Route is one kernel route.
type Route struct {
	Table    int
	Protocol int
	Type     string // "unicast", "blackhole", "unreachable", ...
	Dst      netip.Prefix
	Via      netip.Addr
	Dev      string
	Ref      any // the reader's handle, for removal
}

func (r Route) String() string {
	var b strings.Builder
	if r.Type != "" && r.Type != "unicast" {
		b.WriteString(r.Type + " ")
	}
	b.WriteString(r.Dst.String())
	if r.Via.IsValid() {
		b.WriteString(" via " + r.Via.String())
	}
	if r.Dev != "" {
		b.WriteString(" dev " + r.Dev)
	}
	fmt.Fprintf(&b, " proto %d", r.Protocol)
	if r.Table != 0 && r.Table != mainTable {
		fmt.Fprintf(&b, " table %d", r.Table)
	}
	return b.String()
}

const mainTable = 254

// Link is one network interface.
type Link struct {
	Name  string
	Type  string // netlink's link type: "vxlan", "veth", "ipip", ...
	MAC   net.HardwareAddr
	Addrs []Addr // only read for the devices whose addresses may be ours
	Ref   any
}

// Addr is an address on a link.
type Addr struct {
	Prefix netip.Prefix
	Ref    any
}

// Options are the user's choices that widen what is removed.
type Options struct {
	// Workloads also removes the pods' host veths (the pods lose their
	// network interface).
	Workloads bool
	// RemoveData also removes the embedded etcd's data and the nodename
	// file.
	RemoveData bool
}

// Plan is what to remove, in the order it is removed, and what looked like
// calico-node's but is kept, with the reason.
type Plan struct {
	Tables    []TablePlan
	Sets      []string
	Routes    []Route
	Devices   []Link
	Addrs     []LinkAddr
	Workloads []Link
	Files     []Path
	Kept      []Kept
}

// LinkAddr is an address to take off a link we do not delete.
type LinkAddr struct {
	Link Link
	Addr Addr
}

// Path is a file, socket or directory to remove.
type Path struct {
	Kind string // "file", "socket", "symlink", "directory"
	Path string
	// All removes a directory with its contents (the etcd data dir);
	// otherwise a directory is removed only when empty.
	All bool
}

// Item is one removed (or removable) object as reported to the user.
type Item struct {
	Kind  string // "iptables chain", "ip set", "route", ...
	Name  string
	Where string // e.g. "IPv4 filter, nft"; may be empty
}

func (i Item) String() string {
	s := i.Kind + " " + i.Name
	if i.Where != "" {
		s += " (" + i.Where + ")"
	}
	return s
}

// Kept is something that looked like calico-node's and is left alone.
type Kept struct {
	Item Item
	Why  string
}

func (k Kept) String() string { return k.Item.String() + ": " + k.Why }

// Items lists every removal of p in order.
func (p *Plan) Items() []Item {
	var out []Item
	for _, t := range p.Tables {
		out = append(out, t.Items()...)
	}
	for _, s := range p.Sets {
		out = append(out, setItem(s))
	}
	for _, r := range p.Routes {
		out = append(out, routeItem(r))
	}
	for _, l := range p.Devices {
		out = append(out, deviceItem(l))
	}
	for _, a := range p.Addrs {
		out = append(out, addrItem(a))
	}
	for _, l := range p.Workloads {
		out = append(out, workloadItem(l))
	}
	for _, f := range p.Files {
		out = append(out, pathItem(f))
	}
	return out
}

func setItem(name string) Item { return Item{Kind: "ip set", Name: name} }
func routeItem(r Route) Item   { return Item{Kind: "route", Name: r.String()} }
func deviceItem(l Link) Item   { return Item{Kind: "device", Name: l.Name, Where: l.Type} }
func workloadItem(l Link) Item { return Item{Kind: "workload interface", Name: l.Name, Where: l.Type} }
func pathItem(p Path) Item     { return Item{Kind: p.Kind, Name: p.Path} }
func addrItem(a LinkAddr) Item {
	return Item{Kind: "address", Name: a.Addr.Prefix.String() + " on " + a.Link.Name}
}
func familyName(family int) string  { return fmt.Sprintf("IPv%d", family) }
func where(t TablePlan) string      { return familyName(t.Family) + " " + t.Table + ", " + t.Mode }
func keptSet(name, why string) Kept { return Kept{Item: setItem(name), Why: why} }

// Make computes the plan from what was read. It touches nothing.
func Make(obs Observed, opt Options) Plan {
	var p Plan
	// iptables first: rules that reference our chains and sets go before
	// the chains, and the chains before the sets.
	keepSets := map[string]string{}
	for _, s := range obs.Tables {
		tables, kept, sets := planSaved(s)
		p.Tables = append(p.Tables, tables...)
		p.Kept = append(p.Kept, kept...)
		for name, why := range sets {
			if _, ok := keepSets[name]; !ok {
				keepSets[name] = why
			}
		}
	}
	for _, name := range obs.Sets {
		if !ownsSet(name) {
			continue
		}
		if why, ok := keepSets[name]; ok {
			p.Kept = append(p.Kept, keptSet(name, why))
			continue
		}
		p.Sets = append(p.Sets, name)
	}
	// Routes before devices: every route is reported, including those a
	// device's removal would take with it.
	for _, r := range obs.Routes {
		if r.Protocol == routeproto.Calico {
			p.Routes = append(p.Routes, r)
		}
	}
	for _, l := range obs.Links {
		switch {
		case l.Name == overlay.VXLANDevice || l.Name == overlay.VXLANDeviceV6:
			// The overlay owns these outright, whatever their type.
			p.Devices = append(p.Devices, l)
		case l.Name == overlay.IPIPDevice:
			// tunl0 is the ipip module's own device (it cannot be
			// deleted); the overlay owns its IPv4 address.
			for _, a := range l.Addrs {
				if a.Prefix.Addr().Is4() && !a.Prefix.Addr().IsLinkLocalUnicast() {
					p.Addrs = append(p.Addrs, LinkAddr{Link: l, Addr: a})
				}
			}
		case isWorkload(l):
			if opt.Workloads {
				p.Workloads = append(p.Workloads, l)
			} else {
				p.Kept = append(p.Kept, Kept{Item: workloadItem(l), Why: "a pod's interface (its pod may still run); --workloads removes it"})
			}
		}
	}
	files, kept := planFiles(obs.Files, opt)
	p.Files = files
	p.Kept = append(p.Kept, kept...)
	return p
}

// isWorkload: a pod's host veth as the CNI plugin makes it: named cali...
// with Calico's fixed MAC.
func isWorkload(l Link) bool {
	return l.Type == "veth" && strings.HasPrefix(l.Name, cni.HostVethPrefix) && bytes.Equal(l.MAC, cni.HostVethMAC())
}
