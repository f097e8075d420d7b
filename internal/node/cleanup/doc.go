// Package cleanup is `calico-node cleanup`: it removes from a node exactly
// what calico-node made there, after the agent has been stopped or removed,
// and reports each object it removed.
//
// # What is calico-node's
//
// The rules are those of the parts that make the objects, taken from
// their packages, so that the agent and the cleanup cannot disagree:
//
//   - iptables (IPv4 and IPv6, nft and legacy backends, every table):
//     chains named cali-* and, in other chains, the rules carrying
//     calico-node's "cali:<hash>" comment: the one hook per built-in chain
//     (package xtables). A cali-* chain that a rule calico-node did not
//     write jumps to is kept, with every cali-* chain it reaches: deleting
//     it would fail and flushing it would change what that rule does.
//   - IP sets named cali40*, cali60* and the scratch sets cali4t*, cali6t*
//     (package xtables), except those a rule that stays still matches on.
//   - Routes with protocol 80 (package routeproto), in every table, both
//     families: pod routes, blackholes for this node's blocks, BGP-learned
//     and tunnel routes.
//   - The devices vxlan.calico and vxlan-v6.calico with their addresses,
//     neighbour and FDB entries (package overlay owns them outright), and
//     the IPv4 address on tunl0, which the overlay also owns; tunl0 itself
//     belongs to the ipip module and stays (`modprobe -r ipip` removes it).
//   - With Options.Workloads only: the pods' host veths (cali* with the MAC
//     ee:ee:ee:ee:ee:ee). By default they stay: each belongs to a pod that
//     still runs (a veth goes with its pod's namespace), and a reinstalled
//     Calico picks the pods up again; removing them cuts those pods off.
//   - Files, each only when it is recognisably calico-node's (see
//     planFiles): the plugins and configuration cniinstall wrote, the
//     agent's sockets, the CNI plugin's IPAM lock, the agent's lock, and
//     with Options.RemoveData the embedded etcd's data and the nodename
//     file, which are the datastore and identity of a `make run` node.
//
// Sysctls the agent or the plugin set (forwarding, proxy ARP, ...) are not
// reverted: their previous values are not recorded anywhere.
//
// # Design
//
// Run refuses while an agent runs on the node: `calico-node run` holds a
// shared lock on <data dir>/agent.lock (package agentlock) for its life, and
// its CNI socket answers; cleanup holds the lock exclusively while it works,
// so no agent starts meanwhile. Then:
//
//	read (host.go: iptables-save, ipset, netlink, lstat) ─► Observed
//	Make (pure: the rules above)                          ─► Plan
//	apply (host.go, in Plan order)                        ─► one line per object
//
// The order lets every removal succeed: hook rules and chains go in one
// iptables-restore per table (chains flushed first, so that no rule of ours
// still jumps to a chain being deleted), then the IP sets the rules used,
// then routes, devices, addresses, interfaces, and files before the
// directories that held them. A second run finds nothing and says so.
//
// # Thread safety
//
// Run is called once per process; Make is pure.
package cleanup
