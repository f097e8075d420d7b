// Package agent is the felix replacement: the dataplane actors of
// `calico-node run`.
//
// API model: each actor subscribes to the confwatch cache, keeps the
// resources it needs, computes the desired kernel state with pure functions
// and hands it to the component that owns that kernel state
// (routetable.Table for routes, the iptables/ipset programmers for
// policy). Each actor declares the small interface it needs of that
// component (RouteSink, Applier, Subscriber) and passes plain values
// (routes.Route, policy.Family); internal/node wires the kernel parts in,
// so this package imports none of them. Nothing is applied before
// confwatch is in sync: the first batch of a subscription is the complete
// snapshot.
//
//	confwatch ──WorkloadEndpoints──► Endpoints ──routes──► routetable.Table (source "workloads")
//	                                          └──sysctls──► /proc/sys/net/.../cali*
//	confwatch ──FelixConfiguration──► FelixConfig ──logSeverityScreen──► slog.LevelVar
//	                                             ├──routeRefreshInterval──► routetable.Table, Endpoints
//	                                             ├──prometheusMetrics*──► MetricsServer (Felix's port, 9091)
//	                                             ├──goGCThreshold, ...──► GoRuntime
//	                                             └──fields not honoured──► log + "felixconfig" health detail
//
// DatastoreReady follows ClusterInformation's datastoreReady (the flag
// `calicoctl datastore migrate lock` clears) and is the Gate of the
// dataplane actors (Endpoints, Blackholes, Policy and agent/overlay):
// while it is closed they keep consuming updates but program nothing, so
// the kernel keeps what they last programmed, as under Felix, which waits
// for the flag before touching the dataplane; when it opens they program
// the current state in full.
//
// Policy reports every snapshot it has programmed in full (Programmed:
// the workload endpoints compiled into it), and the route table what each
// pass installed or removed (routetable.Table.OnApplied): agent/epstatus
// turns those into "this endpoint is programmed", which CNI ADD waits on,
// and into each endpoint's timeline.
//
// FelixConfiguration is merged in one place (FelixSpec: default, then
// node.<name>, then the FELIX_* environment, field by field); FelixConfig
// and Policy both read their settings from that merge. Which fields take
// effect is felixenv's table (felixenv.FieldStatuses); FelixConfig reports
// the others once each, by name.
//
// Metrics: the Policy actor keeps Felix's calculation-graph and dataplane
// metrics (felix_active_local_*, felix_cluster_num_*, felix_int_dataplane_*,
// felix_resync*, felix_calc_graph_*) beside calico-node's own, the
// iptables programmer and the route table Felix's iptables, ipset and
// route table ones; MetricsServer serves a registry on an address its
// configuration names, following it at runtime.
//
// Subpackages, the kernel parts internal/node wires into these actors and
// the pure pieces they share:
//
//	routes/      the route values a producer hands the route table
//	routetable/  the one owner of this node's kernel routes (diff and apply)
//	routeproto/  the route protocol number that marks the routes we own
//	xtables/     the iptables and ipset programmers (read back, diff, one
//	             iptables-restore)
//	overlay/     VXLAN and IP-in-IP: devices, tunnel addresses, block routes
//	epstatus/    which endpoints are programmed (what CNI ADD waits on)
//	felixenv/    the FELIX_* environment and which fields take effect
//	refresh/     the periodic full-resync tick whose period may change
//
// Thread safety: each actor's state is owned by its Run goroutine;
// SetRefreshInterval and SetMetricsConfig may be called from any
// goroutine.
package agent
