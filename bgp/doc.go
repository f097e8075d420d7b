// Package bgp is the BGP speaker of calico-node: what BIRD and confd do in
// Calico, on gobgp (v3) as a library.
//
// # API model
//
// Actor (New, Run) is the agent's BGP actor. It reads Nodes, BGPPeers,
// BGPConfigurations, IPPools and BGPFilters from a confwatch subscription and the IPAM
// keys from etcd, runs one gobgp server, and hands the routes it wants in
// the kernel (routes.Route values) to a RouteSink (the agent's
// routetable.Table, source "30-bgp"): it never writes kernel routes itself. It serves its status as JSON on a unix
// socket (QueryStatus, WriteStatus: `calicoctl node status`) and reports
// readiness the way calico-node -bird-ready does (Readiness). The same
// socket answers `calicoctl node routes` (QueryRoutes, WriteRoutes) and
// `calicoctl node bgp why PREFIX` (QueryWhy, WriteWhy): a request line
// names the query.
//
// The computations are pure and exported for tests and tools:
//
//	Compute(Snapshot)      -> Desired: identity (router ID, AS, port) and sessions
//	Adverts(RoutingInput)  -> routes this node originates
//	Filter(...)            -> export policy for routes learned from peers, and
//	                          the BGPFilters of the sessions naming them
//	KernelRoutes(...)      -> learned best paths -> kernel routes
//	Blackholes(...)        -> blackholes for this node's blocks
//
// # Design
//
//	confwatch (Node, BGPPeer, BGPConfiguration, IPPool) ─┐
//	etcd /calico/ipam/v2/ (affinities, blocks) ──────────┼─► Run: Compute, Adverts, Filter
//	                                                     │        │ diff
//	                                                     │        ▼
//	                                                     │   gobgp: peers, policy, paths ◄──► peers
//	                                                     │        │ best-path events
//	                                                     └──► KernelRoutes + Blackholes ──► RouteSink
//
// The route set goes to the sink whole after every configuration change;
// between them, a change of best paths goes as a change (Update with the
// prefixes whose route changed, when the sink has it), so that a burst of
// 10,000 learned routes is not recomputed, copied and compared whole for
// every few new ones.
//
// Sessions follow confd exactly (client.go updatePeersV1 and the bird.cfg
// template of Calico v3.31): full mesh over every node's address unless
// nodeToNodeMeshEnabled is false, never with route reflectors (nodes with
// routeReflectorClusterID) and not at all on them; BGPPeers global, by
// node or nodeSelector, to a peerIP or to the nodes of a peerSelector,
// mirrored on the selected Calico nodes unless reversePeering is Manual;
// route-reflector clients where this node has a cluster ID and the iBGP
// peer is outside it; a one-directional mesh (a node waits for peers whose
// address, compared as strings, is higher); passwords from secretKeyRef
// (SecretsDir reads a mounted Secret), sourceAddress, maxRestartTime,
// keepOriginalNextHop (eBGP only), nextHopMode, localASNumber. Sessions
// are added, replaced and removed one by one; only a change of router ID,
// AS or listen port restarts gobgp.
//
// Export is BIRD's: confirmed blocks affine to this node (not /32
// affinities), addresses this node's workloads hold in other nodes' blocks
// as /32s, the service ranges of BGPConfiguration, never anything in a
// pool with disableBGPExport; next hop the node's address of the family;
// prefixAdvertisements communities. Routes learned from peers are passed on
// (reflected, or re-advertised to external peers) only inside pools and
// service ranges. Import is BIRD's calico_kernel_programming: every learned
// best path goes to the kernel, except service ranges, VXLAN pools (the
// overlay's), prefixes this node originates and its own subnet; routes in
// IP-in-IP pools go through tunl0 (CrossSubnet: natively inside the
// subnet). As in Calico, routes outside every pool (a ToR's default route)
// are installed too. Pools are read through api.ParsePool when they
// change; one that does not parse is logged with its name and counts as
// absent for export, import and blackholes alike.
//
// Services (services.go): every node advertises the BGPConfiguration
// service ranges as confd's updateGlobalRoutes does (serviceCIDRs); a
// ServiceWatcher keeps the cluster's Services and EndpointSlices, and
// serviceRoutes adds the /32s (/128s) Calico's route generator would: for
// externalTrafficPolicy Local Services with a ready endpoint here, for
// Cluster ones with single-address LoadBalancer or external IPs, and with
// serviceLoadBalancerAggregation Disabled for any with a ready endpoint.
//
// BGPFilters named by a BGPPeer's filters run before that export policy
// and on import, as confd's BIRD functions do (bgpfilter.go): gobgp keeps
// per-peer policies for route-server clients only, so each rule is a
// statement of the one global policy conditioned on the neighbor set of
// the sessions naming its filter list. gobgp's SetPolicies ignores
// assignments: the speaker assigns the export and import policies once per
// gobgp start.
//
// Graceful restart is on for every session, with the restart time of
// maxRestartTime / nodeMeshMaxRestartTime (default 120 s). Sessions of the
// first configuration after start are "restarting" (RFC 4724 R and F bits,
// as Calico starts BIRD with -R); paths are originated before sessions are
// added. On stop the TCP connections are cut before gobgp is stopped
// (abortSessions), because gobgp's shutdown sends a Cease on which peers
// drop our routes at once; without the NOTIFICATION they keep them for the
// restart time. TCP MD5 is probed once per password session and a kernel
// that refuses it is reported in the session's status.
//
// gobgp reports connection failures and notifications only through its
// logger: the slog adapter (gobgpLogger) records them per peer for the
// status table and keeps gobgp's chatter at Debug.
//
// # Explanations
//
// `node routes` and `bgp why` are answered from what programs the
// speaker and the kernel, never from a second model (inspect.go gathers,
// why.go explains, purely): gobgp's tables (ListPath on the global RIB
// and on each peer's adj-in and adj-out with gobgp's filtered flags,
// ListPeer for session, graceful-restart and End-of-RIB state); the
// SetPoliciesRequest the speaker hands gobgp (policyDefs), which
// evalPolicy reads in gobgp's order to name the deciding statement, each
// labelled by the code that built it (a BGPFilter rule, or Calico's own
// export filter); adverts, importer.route and blackholes, the very
// functions behind Adverts, KernelRoutes and Blackholes, which also say
// why they leave something out; the route set last handed to the route
// table; the route table's own record (RouteInspector, routetable's
// Inspect); and the kernel's routes and route lookup. Where gobgp's
// verdict and the policy reading differ, the answer says so. Prefixes
// that lost their last path are remembered for a while (history), so
// that "withdrawn" can be told from "never seen".
//
// # Thread safety
//
// Run owns the datastore state and the gobgp configuration. gobgp's event
// goroutine writes learned paths and session states, the IPAM watch its
// state and the logger adapter errors, each under its own lock, and wake
// Run through 1-slot channels. Status and the status socket read the
// status book under its lock. Compute, Adverts, Filter, KernelRoutes and
// Blackholes are pure. Run publishes what it computed (an immutable
// explainView) through an atomic pointer; the status socket's
// goroutines read it, query gobgp (whose API is safe for concurrent use)
// and the kernel through sockets of their own.
package bgp
