// Package routetable owns this node's kernel routes: every route marked
// with routeproto.Calico, whoever wants it.
//
// API model: several producers (the workload-endpoint actor, the BGP
// speaker, the overlay code) each publish their complete set of wanted
// routes (routes.Route: plain values the producers share without
// importing this package) under their own source name with Table.Set.
// A producer that learns its routes a few at a time (BGP best paths)
// passes only what changed with Table.Update(source, set, del).
// The table's desired state is the union; its actual state is what the
// kernel holds with our protocol. Run reconciles the two in one batch whenever a source changes
// and on a periodic resync, so a route deleted by hand comes back and a
// route nobody wants any more goes away.
//
// Design:
//
//	source "workloads" ─┐
//	source "bgp"        ├─► desired (union, by table+dst) ─┐
//	source "blackholes" ┘                                  ├─► diff ─► RouteReplace / RouteDel
//	kernel routes with protocol 80 ─────────────────────────┘
//
// When two sources want the same destination, the one whose name sorts
// first wins: the Source constants carry a numeric prefix so that a local
// workload's /32 beats a tunnel or BGP route to the same address, and any
// real route beats a blackhole for the same block.
// Routes are compared on destination, table, type, gateway, device and
// scope; anything else we set is carried along unchanged.
//
// Cost: a change is applied as a diff against what the previous pass
// wrote, without reading the kernel: after a Set every source is merged
// and compared, after Updates only the destinations they touched (a
// burst of 10,000 BGP routes costs in proportion to each change, not to
// the table). Writes go to the kernel in batches (Netlink.WriteRoutes:
// 256 messages per sendmsg, an acknowledgement asked only of the last,
// each refusal still reported against its own route), about three times
// faster than one RouteReplace round trip per route. The periodic refresh (and any pass
// after an error) lists our routes and repairs drift. The refresh period
// is FelixConfiguration's routeRefreshInterval, changed at runtime with
// SetRefreshInterval; 0 disables it, as in Felix. Routes whose device does
// not exist yet are retried with backoff whether or not the refresh runs.
// Until every source named with Expect has published once, nothing is
// written, so an agent restart never deletes the routes of a producer
// still catching up.
//
// Inspect reports one destination from the table's own state (who wants
// it, what the last pass wrote, why it could not): `calicoctl node bgp
// why` shows it.
//
// Thread safety: Set, Update, Expect, Applied, Inspect and SetRefreshInterval may be called
// from any goroutine; the kernel is only touched by the Run goroutine
// (or by a direct Reconcile call when Run is not running).
package routetable
