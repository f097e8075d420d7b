// Package overlay is the VXLAN and IP-in-IP part of the dataplane: what
// felix's vxlan and ipip managers and calico-node's tunnel address
// allocator (allocateip) do in Calico.
//
// # Model
//
// An IPPool with vxlanMode (ipipMode) Always or CrossSubnet gives every
// node it selects a tunnel address from the pool, recorded on the Node
// (spec.ipv4VXLANTunnelAddr with spec.vxlanTunnelMACAddr,
// spec.ipv6VXLANTunnelAddr with spec.vxlanTunnelMACAddrV6,
// spec.bgp.ipv4IPIPTunnelAddr) under the IPAM handle
// "vxlan-tunnel-addr-<node>" ("vxlan-v6-…", "ipip-…"). A node with a VXLAN
// tunnel address has a device
//
//	vxlan.calico      VNI 4096, UDP 4789, local = node IP, no learning,
//	                  MTU FelixConfiguration vxlanMTU (1450), address = tunnel address/32
//	vxlan-v6.calico   the same for IPv6 (vxlanMTUV6, 1430)
//
// and, for every other node with a VTEP (tunnel address, node address and
// MAC), a permanent neighbour entry (its tunnel address -> its MAC) and an
// FDB entry (its MAC -> its node IP). Every block of a VXLAN pool affine to
// another node (and every address such a node borrowed from someone
// else's block) is routed "via <its tunnel address> dev vxlan.calico
// onlink"; in a CrossSubnet pool, when that node's address is inside this
// node's subnet (the prefix of spec.bgp.ipv4Address), natively "via <its
// node IP>" instead. No BGP is involved, as in Calico. IP-in-IP works the
// same with tunl0 and the remote node IP as the onlink next hop; a kernel
// without the ipip module is detected on the first attempt to create
// tunl0 and reported (log and readiness detail) naming the pool, while
// VXLAN and everything else carry on.
//
// Pools are read through api.ParsePool when they change; one that does
// not parse is logged with its name and left out, as every other consumer
// leaves it out. The FelixConfiguration settings (vxlanEnabled, ipipEnabled,
// the VNI, port and MTUs) come from the one merge every actor uses,
// felixenv.ForNode: "default", then "node.<name>", then the FELIX_*
// environment (Config.FelixEnv).
//
// # Design
//
//	confwatch (Node, IPPool, FelixConfiguration) ─┐
//	ipam.WatchBlocks (block -> node)  ────────────┤
//	                                              ▼
//	            EnsureTunnelAddrs (own Node: IPAM + CAS update, when pools or own labels change)
//	                                              ▼
//	            Compute(Input) Desired            (pure: devices, peers, routes)
//	                                              ▼
//	   kernel: devices, addresses, neighbours, FDB (netlink handle of the node's namespace)
//	   routetable.Table.Set(SourceTunnels, routes)  (the one owner of proto-80 routes)
//
// The kernel side reconciles desired against actual and touches only what
// it owns: the two vxlan devices entirely (a vxlan device that is not
// wanted is deleted, which takes its entries and routes with it), and on
// tunl0 (shared with anything else using IP-in-IP, never deleted) its MTU,
// up flag and address. An unchanged state changes nothing in the kernel.
// Routes go through routetable.Table so that they are diffed with everyone
// else's and survive hand edits; the overlay's source sorts before BGP's,
// so a block both would route goes through the tunnel.
//
// Nothing is applied before both the confwatch snapshot and the first
// block listing have arrived. Failures keep the work dirty and are retried
// with backoff; a periodic resync re-asserts the kernel state and
// re-checks the tunnel addresses.
//
// # Thread safety
//
// The Overlay's state is owned by its Run goroutine. EnsureTunnelAddrs
// and Compute share nothing and may be called from anywhere.
package overlay
