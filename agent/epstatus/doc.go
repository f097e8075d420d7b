// Package epstatus knows which workload endpoints this node's dataplane
// has programmed, lets CNI ADD wait for it, and keeps each endpoint's
// timeline: felix's endpoint status reporter (statusrep) plus the stage
// timestamps behind `calicoctl node timeline` and the
// calico_node_endpoint_stage_seconds histograms.
//
// # API model
//
// The Tracker is fed views by the parts that program the kernel, each
// after a successful apply (complete ones, but for the route table's: what
// changed since its last report), and never reads the kernel itself:
//
//	policy actor ──PolicyApplied(every WorkloadEndpoint compiled)──┐
//	route table ───RoutesApplied(the routes installed, removed)────┤
//	BGP speaker ───Advertised(every prefix originated)─────────────┼─► Tracker ─► Wait (CNI ADD)
//	confwatch ─────WorkloadEndpoint, FelixConfiguration (Run)──────┤          ├─► status files
//	CNI server ────ADD received, addresses, veth, written, returned┘          ├─► Timeline (status socket)
//	                                                                           └─► histograms
//
// An endpoint is programmed at revision R when the policy actor has applied
// a snapshot holding the endpoint at revision R or later (so its ipsets
// and chains, and every policy known then, are in iptables) and the route
// table has installed that version's routes (a /32 or /128 per address via
// its host veth). Wait blocks CNI ADD until the endpoint it wrote (at the
// revision the datastore returned) is programmed.
//
// Status files: for every local endpoint programmed, Run keeps a file in
// <endpointStatusPathPrefix>/endpoint-status named as felix names it
// (url.PathEscape of orchestrator, "<namespace>/<workload>" and endpoint,
// joined by spaces), so Calico's own plugin, which waits for the file to
// exist, works against this agent; the content (JSON: the revision
// programmed) lets our plugin tell a fresh sandbox's endpoint from the
// previous one's. A marker file, ".agent", names the node the agent of
// this directory serves: the plugin process waits for status files only
// where an agent has run since boot (see internal/cni).
//
// Stages of a local endpoint, in the order they normally happen:
// add_received, ipam_done, veth_up, endpoint_written (the CNI server
// reports these when the agent serves the ADD), agent_seen (the agent's
// datastore view has it), policy_programmed, routes_programmed,
// route_advertised (a prefix covering its address is originated over BGP;
// absent without BGP), add_returned. On the other nodes, remote_programmed:
// that node's policy holds the endpoint and it has a route covering its
// address. Each stage's histogram observation is the time since
// add_received (since agent_seen when the ADD ran elsewhere: in the plugin
// process, or on another node for remote_programmed).
//
// # Design
//
// The views are kept as given (each call replaces the previous one), so a
// late or repeated report never confuses the state; stage times are taken
// when a view first shows the stage, which is when the kernel got it to
// within one apply. Timelines are bounded: the last MaxRecords endpoints
// (local and remote) are kept, the oldest dropped first; the readiness
// state is the policy view itself, one entry per endpoint in the cluster.
//
// # Thread safety
//
// Every method is safe from any goroutine (one mutex); Run owns the
// status directory.
package epstatus
