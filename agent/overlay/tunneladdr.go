package overlay

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Store is the part of the datastore tunnel address allocation uses;
// datastore.Store implements it.
type Store interface {
	Get(ctx context.Context, kind, namespace, name string) (api.Object, error)
	List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error)
	Update(ctx context.Context, obj api.Object) (api.Object, error)
}

// IPAM is the part of the IPAM client tunnel address allocation uses;
// *ipam.Client implements it.
type IPAM interface {
	AutoAssign(ctx context.Context, args ipam.AutoAssignArgs) (v4, v6 []netip.Prefix, err error)
	AssignIP(ctx context.Context, args ipam.AssignIPArgs) error
	ReleaseByHandle(ctx context.Context, handleID string) error
	Release(ctx context.Context, opts ...ipam.ReleaseOptions) ([]netip.Addr, error)
	IPsByHandle(ctx context.Context, handleID string) ([]netip.Addr, error)
	Lookup(ctx context.Context, ip netip.Addr) (ipam.Holder, error)
}

// Allocation "type" attributes of tunnel addresses, as Calico's
// allocateip records them (libcalico-go ipam.AttributeType*).
const (
	AttrTypeVXLAN   = "vxlanTunnelAddress"
	AttrTypeVXLANV6 = "vxlanV6TunnelAddress"
	AttrTypeIPIP    = "ipipTunnelAddress"
)

// tunnel is one kind of tunnel address a node may hold.
type tunnel struct {
	attrType string
	handle   string // printf format with the node name
	family   int
	wants    func(api.Pool) bool
	get      func(*api.Node) string
	set      func(*api.Node, string)
}

// tunnelKinds lists the tunnel addresses a node may hold, in Calico's
// order of reconciliation.
func tunnelKinds() []tunnel {
	return []tunnel{
		{
			attrType: AttrTypeIPIP, handle: "ipip-tunnel-addr-%s", family: 4,
			wants: api.Pool.IPIPOn,
			get:   ipipAddrOf,
			set: func(n *api.Node, s string) {
				if n.Spec.BGP == nil {
					if s == "" {
						return
					}
					n.Spec.BGP = &api.NodeBGPSpec{}
				}
				n.Spec.BGP.IPv4IPIPTunnelAddr = s
				// Calico refuses an empty spec.bgp.
				if *n.Spec.BGP == (api.NodeBGPSpec{}) {
					n.Spec.BGP = nil
				}
			},
		},
		{
			attrType: AttrTypeVXLAN, handle: "vxlan-tunnel-addr-%s", family: 4,
			wants: api.Pool.VXLANOn,
			get:   func(n *api.Node) string { return n.Spec.IPv4VXLANTunnelAddr },
			set:   func(n *api.Node, s string) { n.Spec.IPv4VXLANTunnelAddr = s },
		},
		{
			attrType: AttrTypeVXLANV6, handle: "vxlan-v6-tunnel-addr-%s", family: 6,
			wants: api.Pool.VXLANOn,
			get:   func(n *api.Node) string { return n.Spec.IPv6VXLANTunnelAddr },
			set:   func(n *api.Node, s string) { n.Spec.IPv6VXLANTunnelAddr = s },
		},
	}
}

// HandleID is the IPAM handle of a node's tunnel address of the given
// allocation type ("vxlan-tunnel-addr-node1").
func HandleID(attrType, node string) string {
	for _, t := range tunnelKinds() {
		if t.attrType == attrType {
			return fmt.Sprintf(t.handle, node)
		}
	}
	return ""
}

// tunnelPools are the pools a node's tunnel address of kind t may come
// from, in IPAM's preference order (by name): enabled pools of t's family
// with t's encapsulation on, that allow Tunnel use and select the node.
func tunnelPools(t tunnel, n *api.Node, pools []api.Pool) []api.Pool {
	var out []api.Pool
	for _, p := range pools {
		if p.Version() == t.family && t.wants(p) && active(p) && p.Allows(api.IPPoolAllowedUseTunnel) && selects(p, n) {
			out = append(out, p)
		}
	}
	return out
}

// maxNodeWrites bounds the retries of the Node update when other writers
// keep changing it.
const maxNodeWrites = 10

// EnsureTunnelAddrs makes the node's tunnel addresses follow the IP pools,
// as Calico's calico-node (allocateip) does: when a pool with vxlanMode
// (or ipipMode) Always or CrossSubnet that allows Tunnel use selects the
// node, the node holds one address from such a pool under the handle
// "vxlan-tunnel-addr-<node>" ("vxlan-v6-…", "ipip-…"), recorded in
// spec.ipv4VXLANTunnelAddr (spec.ipv6VXLANTunnelAddr,
// spec.bgp.ipv4IPIPTunnelAddr); when none does, the address is released
// and the field cleared. A VXLAN address comes with a MAC in
// spec.vxlanTunnelMACAddr (…V6): random, locally administered, and kept
// from then on, also across the address coming and going, so the
// device's identity never changes under its peers.
//
// The Node is written with a compare-and-swap update, re-read and retried
// when someone else wrote it meanwhile; an address allocated by an attempt
// that lost is found again through its handle, not leaked. It returns the
// Node as stored.
func EnsureTunnelAddrs(ctx context.Context, store Store, ipamc IPAM, nodeName string, logger *slog.Logger) (*api.Node, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	log := logger.With("node", nodeName)
	var fresh []string // handles given new addresses, released if we give up
	for attempt := 1; ; attempt++ {
		obj, err := store.Get(ctx, "Node", "", nodeName)
		if err != nil {
			return nil, fmt.Errorf("read node %s: %w", nodeName, err)
		}
		node := obj.(*api.Node)
		objs, _, err := store.List(ctx, "IPPool", "")
		if err != nil {
			return nil, fmt.Errorf("list IP pools: %w", err)
		}
		pools, errs := api.ParsePools(objs)
		for _, err := range errs {
			log.Warn("ignoring unusable IP pool", "err", err)
		}

		before := nodeTunnelState(node)
		for _, t := range tunnelKinds() {
			usable := tunnelPools(t, node, pools)
			if len(usable) == 0 {
				if err := removeTunnelAddr(ctx, ipamc, t, node, log); err != nil {
					return nil, err
				}
				continue
			}
			addr, isNew, err := ensureTunnelAddr(ctx, ipamc, t, node, usable, log)
			if err != nil {
				return nil, releaseFresh(ctx, ipamc, fresh, err, log)
			}
			if isNew {
				fresh = append(fresh, fmt.Sprintf(t.handle, node.Name))
			}
			t.set(node, addr.String())
		}
		if err := ensureMACs(node); err != nil {
			return nil, releaseFresh(ctx, ipamc, fresh, err, log)
		}
		if nodeTunnelState(node) == before {
			return node, nil
		}
		saved, err := store.Update(ctx, node)
		switch {
		case err == nil:
			n := saved.(*api.Node)
			log.Info("node tunnel addresses updated", "ipv4VXLANTunnelAddr", n.Spec.IPv4VXLANTunnelAddr,
				"vxlanTunnelMACAddr", n.Spec.VXLANTunnelMACAddr, "ipv6VXLANTunnelAddr", n.Spec.IPv6VXLANTunnelAddr,
				"ipv4IPIPTunnelAddr", ipipAddrOf(n))
			return n, nil
		case errors.Is(err, datastore.ErrConflict) && attempt < maxNodeWrites:
			log.Debug("node changed while updating its tunnel addresses; retrying", "attempt", attempt)
			continue
		default:
			return nil, releaseFresh(ctx, ipamc, fresh, fmt.Errorf("update node %s: %w", nodeName, err), log)
		}
	}
}

// releaseFresh undoes this call's new allocations after a failure, so an
// address recorded nowhere does not stay allocated, and returns err.
func releaseFresh(ctx context.Context, ipamc IPAM, handles []string, err error, log *slog.Logger) error {
	for _, h := range handles {
		if rerr := ipamc.ReleaseByHandle(ctx, h); rerr != nil {
			log.Warn("release tunnel address after failure", "handle", h, "err", rerr)
		}
	}
	return err
}

// tunnelState is the part of a Node EnsureTunnelAddrs writes.
type tunnelState struct {
	ipip, vxlan, vxlan6, mac, mac6 string
}

func nodeTunnelState(n *api.Node) tunnelState {
	return tunnelState{ipipAddrOf(n), n.Spec.IPv4VXLANTunnelAddr, n.Spec.IPv6VXLANTunnelAddr,
		n.Spec.VXLANTunnelMACAddr, n.Spec.VXLANTunnelMACAddrV6}
}

// ensureTunnelAddr returns the address the node should record for t, and
// whether it was allocated just now.
func ensureTunnelAddr(ctx context.Context, ipamc IPAM, t tunnel, node *api.Node, usable []api.Pool, log *slog.Logger) (netip.Addr, bool, error) {
	handle := fmt.Sprintf(t.handle, node.Name)
	log = log.With("type", t.attrType, "handle", handle)
	inUsable := func(a netip.Addr) bool {
		return slices.ContainsFunc(usable, func(p api.Pool) bool { return p.CIDR.Contains(a) })
	}
	held, err := ipamc.IPsByHandle(ctx, handle)
	if err != nil {
		return netip.Addr{}, false, fmt.Errorf("read tunnel address handle %s: %w", handle, err)
	}
	cur, hasCur := tunnelAddr(t.get(node), t.family)
	if hasCur && inUsable(cur) && slices.Contains(held, cur) {
		return cur, false, nil
	}
	// The handle holds a usable address the Node does not record: a
	// previous attempt lost its Node update, or someone edited the Node.
	for _, a := range held {
		if inUsable(a) {
			log.Info("recording tunnel address held by its handle", "addr", a)
			return a, false, nil
		}
	}
	if hasCur && inUsable(cur) && !slices.Contains(held, cur) {
		// An address from before Calico used handles for tunnel addresses
		// (no handle, no attributes) is re-tagged in place, as Calico does;
		// one that someone else holds is left to them.
		h, err := ipamc.Lookup(ctx, cur)
		if err == nil && h.Handle == "" && len(h.Attrs) == 0 {
			if _, err := ipamc.Release(ctx, ipam.ReleaseOptions{Addr: cur}); err != nil {
				return netip.Addr{}, false, fmt.Errorf("release untagged tunnel address %s: %w", cur, err)
			}
			err := ipamc.AssignIP(ctx, ipam.AssignIPArgs{IP: cur, HandleID: handle, Node: node.Name, Attrs: tunnelAttrs(t, node.Name)})
			if err == nil {
				log.Info("tagged existing tunnel address with its handle", "addr", cur)
				return cur, true, nil
			}
			log.Warn("could not re-tag tunnel address; allocating a new one", "addr", cur, "err", err)
		} else if err == nil {
			log.Warn("tunnel address recorded on the node is held by someone else; allocating a new one", "addr", cur, "holder", h.Handle)
		}
	}
	if len(held) > 0 {
		// Held addresses in pools that no longer qualify.
		if err := ipamc.ReleaseByHandle(ctx, handle); err != nil {
			return netip.Addr{}, false, fmt.Errorf("release tunnel address handle %s: %w", handle, err)
		}
	}
	args := ipam.AutoAssignArgs{HandleID: handle, Node: node.Name, Attrs: tunnelAttrs(t, node.Name), Use: api.IPPoolAllowedUseTunnel}
	for _, p := range usable {
		if t.family == 4 {
			args.IPv4Pools = append(args.IPv4Pools, p.CIDR.String())
		} else {
			args.IPv6Pools = append(args.IPv6Pools, p.CIDR.String())
		}
	}
	if t.family == 4 {
		args.Num4 = 1
	} else {
		args.Num6 = 1
	}
	v4, v6, err := ipamc.AutoAssign(ctx, args)
	if err != nil {
		return netip.Addr{}, false, fmt.Errorf("allocate %s for node %s: %w", t.attrType, node.Name, err)
	}
	got := append(v4, v6...)
	if len(got) != 1 {
		return netip.Addr{}, false, fmt.Errorf("allocate %s for node %s: got %d addresses", t.attrType, node.Name, len(got))
	}
	log.Info("allocated tunnel address", "addr", got[0].Addr())
	return got[0].Addr(), true, nil
}

// removeTunnelAddr releases the node's tunnel address of kind t and clears
// the field.
func removeTunnelAddr(ctx context.Context, ipamc IPAM, t tunnel, node *api.Node, log *slog.Logger) error {
	handle := fmt.Sprintf(t.handle, node.Name)
	cur, hasCur := tunnelAddr(t.get(node), t.family)
	held, err := ipamc.IPsByHandle(ctx, handle)
	if err != nil {
		return fmt.Errorf("read tunnel address handle %s: %w", handle, err)
	}
	if len(held) > 0 {
		if err := ipamc.ReleaseByHandle(ctx, handle); err != nil {
			return fmt.Errorf("release tunnel address handle %s: %w", handle, err)
		}
		log.Info("released tunnel address: no pool needs it", "type", t.attrType, "addrs", held)
	}
	if hasCur && !slices.Contains(held, cur) {
		// Recorded but not under the handle: release it only if it is
		// clearly ours (untagged, from before handles, or tagged with our
		// handle whose key went missing).
		h, err := ipamc.Lookup(ctx, cur)
		switch {
		case errors.Is(err, ipam.ErrNotAllocated):
		case err != nil:
			return fmt.Errorf("look up tunnel address %s: %w", cur, err)
		case h.Handle == "" && len(h.Attrs) == 0, h.Handle == handle:
			if _, err := ipamc.Release(ctx, ipam.ReleaseOptions{Addr: cur, Handle: h.Handle}); err != nil {
				return fmt.Errorf("release tunnel address %s: %w", cur, err)
			}
		default:
			log.Warn("tunnel address recorded on the node is held by someone else; leaving it", "addr", cur, "holder", h.Handle)
		}
	}
	t.set(node, "")
	return nil
}

func tunnelAttrs(t tunnel, node string) map[string]string {
	return map[string]string{ipam.AttrNode: node, ipam.AttrType: t.attrType}
}

// ensureMACs gives a node with a VXLAN tunnel address a MAC for its
// device, once.
func ensureMACs(n *api.Node) error {
	for _, f := range []struct {
		addr string
		mac  *string
	}{{n.Spec.IPv4VXLANTunnelAddr, &n.Spec.VXLANTunnelMACAddr}, {n.Spec.IPv6VXLANTunnelAddr, &n.Spec.VXLANTunnelMACAddrV6}} {
		if f.addr == "" {
			continue
		}
		if m, err := net.ParseMAC(*f.mac); err == nil && len(m) == 6 {
			continue
		}
		m, err := randomMAC()
		if err != nil {
			return err
		}
		*f.mac = m.String()
	}
	return nil
}

// randomMAC is a random locally administered unicast MAC.
func randomMAC() (net.HardwareAddr, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("generate MAC: %w", err)
	}
	b[0] = b[0]&^0x01 | 0x02
	return net.HardwareAddr(b), nil
}
