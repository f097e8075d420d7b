// Package routes is what a producer of kernel routes hands the route
// table (package routetable): the Route values it wants, under a Source
// name that ranks it against the other producers.
//
// Design: plain values, no kernel access, so that the producers' pure
// parts (BGP export and import, the overlay's computation, workload and
// blackhole routes) depend on the vocabulary only, not on netlink. Each
// producer declares its own one-method sink for these values; the route
// table implements them all.
//
// Thread safety: values only.
package routes

import (
	"net/netip"
	"strconv"
)

// Source names, in priority order (lower sorts first and wins).
const (
	SourceWorkloads = "10-workloads"
	SourceTunnels   = "20-tunnels"
	SourceBGP       = "30-bgp"
	SourceBlackhole = "40-blackholes"
)

// Type says how the kernel treats a route.
type Type int

const (
	Unicast Type = iota
	Blackhole
	Unreachable
)

// Route is one wanted route. Dev is an interface name ("" for blackholes
// and gateway-only routes); Via is the next hop (invalid = on-link).
type Route struct {
	Dst    netip.Prefix
	Type   Type
	Dev    string
	Via    netip.Addr
	OnLink bool  // gateway is reachable on Dev without a covering route (VXLAN)
	Scope  uint8 // rtm_scope; 0 (universe): link scope for a device route without gateway
	Table  int   // 0 = main
	Metric int
	Src    netip.Addr
}

// String shows the route as logs and tests do: destination, type when not
// unicast, then next hop, device, onlink, table, metric and source where
// set ("10.244.1.0/26 via 192.0.2.2 dev tunl0 onlink").
func (r Route) String() string {
	s := r.Dst.String()
	switch r.Type {
	case Blackhole:
		s += " blackhole"
	case Unreachable:
		s += " unreachable"
	}
	if r.Via.IsValid() {
		s += " via " + r.Via.String()
	}
	if r.Dev != "" {
		s += " dev " + r.Dev
	}
	if r.OnLink {
		s += " onlink"
	}
	if r.Table != 0 {
		s += " table " + strconv.Itoa(r.Table)
	}
	if r.Metric != 0 {
		s += " metric " + strconv.Itoa(r.Metric)
	}
	if r.Src.IsValid() {
		s += " src " + r.Src.String()
	}
	return s
}
