// Package routeproto holds the kernel route protocol number that marks the
// routes this project owns.
//
// Model: every route calico-node installs (the CNI plugin's /32 and /128
// host routes to pods, the agent's block and blackhole routes, routes
// learned over BGP) carries Calico as its rtm_protocol. A reconciler reads
// back only routes with this protocol, so it can delete what it no longer
// wants without ever touching routes of the kernel, DHCP, BIRD (12) or an
// operator (boot/static).
//
// Design: 80 is the number Calico's felix uses for the routes it programs
// itself (shown as "proto 80" by `ip route`); it is not assigned in
// iproute2's rt_protos table, and no other common routing software uses
// it. One constant in one tiny package keeps the CNI plugin and the agent
// from drifting apart.
//
// Thread safety: constants only.
package routeproto

// Calico is the rtm_protocol of every route calico-node owns.
const Calico = 80
