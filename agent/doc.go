// Package agent is the felix replacement: the dataplane actors of
// `calico-node run`.
//
// API model: each actor subscribes to the confwatch cache, keeps the
// resources it needs, computes the desired kernel state with pure functions
// and hands it to the component that owns that kernel state (routes.Table
// for routes, the iptables/ipset programmers for policy). Nothing is applied
// before confwatch is in sync: the first batch of a subscription is the
// complete snapshot.
//
//	confwatch ──WorkloadEndpoints──► Endpoints ──routes──► routes.Table (source "workloads")
//	                                          └──sysctls──► /proc/sys/net/.../cali*
//
// Thread safety: each actor's state is owned by its Run goroutine.
package agent
