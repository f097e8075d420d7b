package bgp

import (
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strconv"

	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// excludeLBLabel keeps a node out of service address advertisement
// (Kubernetes' well-known label, honoured by Calico).
const excludeLBLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// LargeCommunity is an RFC 8092 community.
type LargeCommunity [3]uint32

// Advert is one route this node originates.
type Advert struct {
	Prefix      netip.Prefix
	NextHop     netip.Addr
	Communities []uint32 // RFC 1997 (high 16 bits : low 16 bits)
	Large       []LargeCommunity
	// Why says which rule originates it (for `bgp why`; not sent).
	Why string
}

func (a Advert) equal(b Advert) bool {
	return a.Prefix == b.Prefix && a.NextHop == b.NextHop &&
		slices.Equal(a.Communities, b.Communities) && slices.Equal(a.Large, b.Large)
}

// IPAMState is what IPAM says this node owns.
type IPAMState struct {
	// Blocks are the blocks affine to this node (affinity not pending).
	Blocks []netip.Prefix
	// Borrowed are addresses held by this node's workloads in blocks affine
	// to other nodes (or to none).
	Borrowed []netip.Addr
}

// RoutingInput is what export, import and the export filter are computed
// from.
type RoutingInput struct {
	Identity Identity
	// Pools are the IP pools, parsed (api.ParsePool).
	Pools []api.Pool
	// Global is BGPConfiguration "default", NodeConfig "node.<name>"; either
	// may be nil.
	Global, NodeConfig *api.BGPConfiguration
	IPAM               IPAMState
	// Services are the Kubernetes Services, for their per-service routes
	// (serviceRoutes); nil without a Kubernetes API.
	Services []Service
}

// pools are in.Pools longest prefix first, so that the most specific
// pool decides.
func (in RoutingInput) pools() []api.Pool {
	out := slices.Clone(in.Pools)
	slices.SortStableFunc(out, func(a, b api.Pool) int { return b.CIDR.Bits() - a.CIDR.Bits() })
	return out
}

func poolOf(pools []api.Pool, p netip.Prefix) (api.Pool, bool) {
	for _, pl := range pools {
		if pl.CIDR.Addr().Is4() == p.Addr().Is4() && pl.CIDR.Bits() <= p.Bits() && pl.CIDR.Contains(p.Addr()) {
			return pl, true
		}
	}
	return api.Pool{}, false
}

// serviceConf is BGPConfiguration default's service ranges, parsed (a
// bare address counts as a single-address range).
type serviceConf struct {
	cluster, external, lb []netip.Prefix
	// aggregate is serviceLoadBalancerAggregation (Enabled unless set
	// Disabled): the LoadBalancer ranges are advertised as ranges.
	aggregate bool
}

func (in RoutingInput) serviceConf() serviceConf {
	sc := serviceConf{aggregate: true}
	g := in.Global
	if g == nil {
		return sc
	}
	parse := func(s string) (netip.Prefix, bool) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, err2 := netip.ParseAddr(s)
			if err2 != nil {
				return netip.Prefix{}, false
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		return p.Masked(), true
	}
	for _, c := range g.Spec.ServiceClusterIPs {
		if p, ok := parse(c.CIDR); ok {
			sc.cluster = append(sc.cluster, p)
		}
	}
	for _, c := range g.Spec.ServiceExternalIPs {
		if p, ok := parse(c.CIDR); ok {
			sc.external = append(sc.external, p)
		}
	}
	for _, c := range g.Spec.ServiceLoadBalancerIPs {
		if p, ok := parse(c.CIDR); ok {
			sc.lb = append(sc.lb, p)
		}
	}
	if a := g.Spec.ServiceLoadBalancerAggregation; a != nil && *a == api.ServiceLoadBalancerAggregationDisabled {
		sc.aggregate = false
	}
	return sc
}

// serviceCIDRs are the service ranges every node advertises and never
// programs learned routes inside (confd's updateGlobalRoutes: its static
// and reject routes): every serviceClusterIPs entry, the serviceExternalIPs
// entries that are not single addresses, and, while
// serviceLoadBalancerAggregation is Enabled, the serviceLoadBalancerIPs
// entries that are not single addresses. Single addresses are advertised
// per service, by the nodes serviceRoutes picks.
func (in RoutingInput) serviceCIDRs() []netip.Prefix {
	sc := in.serviceConf()
	out := slices.Clone(sc.cluster)
	notSingle := func(p netip.Prefix) bool { return !p.IsSingleIP() }
	out = append(out, keepIf(sc.external, notSingle)...)
	if sc.aggregate {
		out = append(out, keepIf(sc.lb, notSingle)...)
	}
	return out
}

func keepIf[T any](in []T, keep func(T) bool) []T {
	var out []T
	for _, v := range in {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

func nextHopFor(id Identity, p netip.Prefix) netip.Addr {
	if p.Addr().Is4() {
		return id.IPv4
	}
	return id.IPv6
}

func containedIn(list []netip.Prefix, p netip.Prefix) bool {
	for _, q := range list {
		if q.Addr().Is4() == p.Addr().Is4() && q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// Adverts computes the routes this node originates, as Calico's BIRD
// configuration exports them: the confirmed blocks affine to the node
// (bird_aggr's static blackholes), the node's workload addresses in other
// nodes' blocks (the /32 kernel routes BIRD learns and exports because they
// lie in a pool), and the service ranges of BGPConfiguration; nothing in a
// pool with disableBGPExport. Communities come from prefixAdvertisements of
// the node's own BGPConfiguration, else the default one.
func Adverts(in RoutingInput) []Advert { return adverts(in, nil) }

// adverts is Adverts; skipped, when not nil, hears of every candidate left
// out and why (`bgp why` asks it rather than guessing).
func adverts(in RoutingInput, skipped func(p netip.Prefix, why string)) []Advert {
	if skipped == nil {
		skipped = func(netip.Prefix, string) {}
	}
	pools := in.pools()
	set := map[netip.Prefix]bool{}
	var out []Advert
	add := func(p netip.Prefix, why string) {
		nh := nextHopFor(in.Identity, p)
		if set[p] {
			return
		}
		if !nh.IsValid() {
			skipped(p, why+", but this node has no BGP address of its family")
			return
		}
		if pl, ok := poolOf(pools, p); ok && pl.DisableBGPExport {
			skipped(p, why+", but IP pool "+pl.Name+" has disableBGPExport")
			return
		}
		set[p] = true
		out = append(out, Advert{Prefix: p, NextHop: nh, Why: why})
	}
	for _, b := range in.IPAM.Blocks {
		// Single-address "blocks" are never routed as blocks (bird_aggr skips
		// /32 affinities).
		if b.IsSingleIP() {
			skipped(b, "a single-address block affinity, never routed as a block")
			continue
		}
		add(b.Masked(), "IPAM block affine to this node")
	}
	for _, a := range in.IPAM.Borrowed {
		p := netip.PrefixFrom(a, a.BitLen())
		if _, inPool := poolOf(pools, p); !inPool {
			skipped(p, "a local workload's address outside every IP pool")
			continue
		}
		if containedIn(in.IPAM.Blocks, p) {
			skipped(p, "a local workload's address inside this node's own block (the block is advertised)")
			continue
		}
		add(p, "address of a workload on this node, in a block affine to another node")
	}
	if !labelTrue(in.Identity.Labels, excludeLBLabel) {
		for _, p := range in.serviceCIDRs() {
			add(p, "service range of BGPConfiguration default")
		}
	}
	for _, p := range in.serviceRoutes() {
		add(p, "address of a Service this node advertises")
	}
	rules := in.communityRules()
	for i := range out {
		for _, r := range rules {
			if r.cidr.Addr().Is4() == out[i].Prefix.Addr().Is4() && r.cidr.Bits() <= out[i].Prefix.Bits() && r.cidr.Contains(out[i].Prefix.Addr()) {
				out[i].Communities = append(out[i].Communities, r.std...)
				out[i].Large = append(out[i].Large, r.large...)
			}
		}
		slices.Sort(out[i].Communities)
		out[i].Communities = slices.Compact(out[i].Communities)
		slices.SortFunc(out[i].Large, func(a, b LargeCommunity) int {
			for k := range a {
				if a[k] != b[k] {
					if a[k] < b[k] {
						return -1
					}
					return 1
				}
			}
			return 0
		})
		out[i].Large = slices.Compact(out[i].Large)
	}
	slices.SortFunc(out, func(a, b Advert) int { return comparePrefix(a.Prefix, b.Prefix) })
	return out
}

func labelTrue(labels map[string]string, key string) bool { return labels[key] == "true" }

type communityRule struct {
	cidr  netip.Prefix
	std   []uint32
	large []LargeCommunity
}

var (
	stdCommunity   = regexp.MustCompile(`^(\d+):(\d+)$`)
	largeCommunity = regexp.MustCompile(`^(\d+):(\d+):(\d+)$`)
)

// communityRules resolves prefixAdvertisements: a community is either a
// literal ("65001:100", "65001:100:7") or the name of an entry of the same
// resource's communities list. The node's own BGPConfiguration replaces the
// default one's list when it has one.
func (in RoutingInput) communityRules() []communityRule {
	cfg := in.Global
	if in.NodeConfig != nil && in.NodeConfig.Spec.PrefixAdvertisements != nil {
		cfg = in.NodeConfig
	}
	if cfg == nil {
		return nil
	}
	var out []communityRule
	for _, pa := range cfg.Spec.PrefixAdvertisements {
		cidr, err := netip.ParsePrefix(pa.CIDR)
		if err != nil {
			continue
		}
		r := communityRule{cidr: cidr.Masked()}
		for _, c := range pa.Communities {
			v := c
			if !stdCommunity.MatchString(v) && !largeCommunity.MatchString(v) {
				v = ""
				for _, def := range cfg.Spec.Communities {
					if def.Name == c {
						v = def.Value
						break
					}
				}
			}
			std, large, err := ParseCommunity(v)
			if err != nil {
				continue
			}
			if large != nil {
				r.large = append(r.large, *large)
			} else {
				r.std = append(r.std, std)
			}
		}
		out = append(out, r)
	}
	return out
}

// ParseCommunity reads "aa:nn" (standard, each part 16 bits) or "aa:nn:mm"
// (large, 32 bits each).
func ParseCommunity(s string) (uint32, *LargeCommunity, error) {
	if m := stdCommunity.FindStringSubmatch(s); m != nil {
		hi, err1 := strconv.ParseUint(m[1], 10, 16)
		lo, err2 := strconv.ParseUint(m[2], 10, 16)
		if err1 != nil || err2 != nil {
			return 0, nil, fmt.Errorf("community %q: parts must be 0-65535", s)
		}
		return uint32(hi)<<16 | uint32(lo), nil, nil
	}
	if m := largeCommunity.FindStringSubmatch(s); m != nil {
		var lc LargeCommunity
		for i := range 3 {
			v, err := strconv.ParseUint(m[i+1], 10, 32)
			if err != nil {
				return 0, nil, fmt.Errorf("large community %q: parts must be 0-4294967295", s)
			}
			lc[i] = uint32(v)
		}
		return 0, &lc, nil
	}
	return 0, nil, fmt.Errorf("community %q: want aa:nn or aa:nn:mm", s)
}

// Blackholes are the kernel routes for this node's own blocks: traffic to
// an unallocated address of a local block is dropped here instead of
// bouncing off the default route (BIRD's static blackhole routes, which it
// programs into the kernel). Blocks of VXLAN pools are left to the overlay
// code, as Calico leaves them to Felix.
func Blackholes(in RoutingInput) []routes.Route { return blackholes(in, nil) }

// blackholes is Blackholes; skipped hears of the blocks left out and why.
func blackholes(in RoutingInput, skipped func(p netip.Prefix, why string)) []routes.Route {
	pools := in.pools()
	var out []routes.Route
	for _, b := range in.IPAM.Blocks {
		if b.IsSingleIP() {
			continue
		}
		if pl, ok := poolOf(pools, b); ok && pl.VXLANOn() {
			if skipped != nil {
				skipped(b.Masked(), "its block is in VXLAN IP pool "+pl.Name+": the overlay's, no blackhole")
			}
			continue
		}
		out = append(out, routes.Route{Dst: b.Masked(), Type: routes.Blackhole})
	}
	return out
}

// Learned is the best path to a prefix learned from a peer.
type Learned struct {
	Prefix  netip.Prefix
	NextHop netip.Addr
	Peer    netip.Addr
}

// ImportDevice is the IP-in-IP device used for routes in IPIP pools.
const ImportDevice = "tunl0"

// KernelRoutes turns learned best paths into the kernel routes this node
// wants, with Calico's calico_kernel_programming filter: everything learned
// is installed (Calico's BIRD ends that filter with "accept"), except
// service ranges (never routed to one node), routes in VXLAN pools (the
// overlay programs those), prefixes this node originates itself, and the
// node's own subnet (the kernel's connected route must stay). Routes in
// IP-in-IP pools go through tunl0, unless the pool is CrossSubnet and the
// next hop is in the node's subnet. A next hop that is this node is
// dropped.
func KernelRoutes(learned []Learned, in RoutingInput, originated []Advert) []routes.Route {
	imp := newImporter(in, originated)
	var out []routes.Route
	for _, l := range learned {
		if r, why := imp.route(l); why == "" {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b routes.Route) int { return comparePrefix(a.Dst, b.Dst) })
	return out
}

// importer is KernelRoutes' filter, one learned path at a time.
type importer struct {
	in       RoutingInput
	pools    []api.Pool
	skip     map[netip.Prefix]string
	services []netip.Prefix
}

func newImporter(in RoutingInput, originated []Advert) importer {
	imp := importer{in: in, pools: in.pools(), skip: map[netip.Prefix]string{}, services: in.serviceCIDRs()}
	for _, a := range originated {
		imp.skip[a.Prefix] = "this node originates it itself (" + a.Why + ")"
	}
	for _, p := range in.Identity.subnets() {
		imp.skip[p] = "it is this node's own subnet: the kernel's connected route stays"
	}
	return imp
}

// route is the kernel route l asks for, or why it asks for none.
func (imp importer) route(l Learned) (routes.Route, string) {
	in := imp.in
	if why, ok := imp.skip[l.Prefix]; ok {
		return routes.Route{}, why
	}
	if !l.NextHop.IsValid() {
		return routes.Route{}, "the path has no usable next hop"
	}
	if l.NextHop == in.Identity.IPv4 || l.NextHop == in.Identity.IPv6 {
		return routes.Route{}, "its next hop " + l.NextHop.String() + " is this node"
	}
	if containedIn(imp.services, l.Prefix) {
		return routes.Route{}, "it is inside a service range, which is never routed to one node"
	}
	r := routes.Route{Dst: l.Prefix, Via: l.NextHop}
	if pl, ok := poolOf(imp.pools, l.Prefix); ok {
		if pl.VXLANOn() {
			return routes.Route{}, "it is in VXLAN IP pool " + pl.Name + ": the overlay routes it, not BGP"
		}
		switch pl.IPIPMode {
		case api.IPIPModeAlways:
			r.Dev, r.OnLink = ImportDevice, true
		case api.IPIPModeCrossSubnet:
			if !in.Identity.sameSubnet(l.NextHop) {
				r.Dev, r.OnLink = ImportDevice, true
			}
		}
	}
	return r, ""
}

func (id Identity) subnets() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []netip.Prefix{id.Net4, id.Net6} {
		if p.IsValid() && !p.IsSingleIP() {
			out = append(out, p)
		}
	}
	return out
}

func (id Identity) sameSubnet(a netip.Addr) bool {
	for _, p := range id.subnets() {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ExportFilter is the export policy for routes learned from peers, the
// equivalent of Calico's calico_export_to_bgp_peers: the node passes on
// (reflects, or re-advertises to external peers) only routes inside IP
// pools that allow BGP export and the service ranges; everything else it
// learned stays with it. Locally originated routes are always exported.
type ExportFilter struct {
	Reject []netip.Prefix // pools with disableBGPExport: nothing inside them
	Accept []netip.Prefix // the other pools: anything inside them
	// Services: anything inside these (BIRD's "net ~ cidr" on the static
	// routes): the service ranges and per-service routes this node
	// advertises, and on a route reflector the serviceLoadBalancerIPs
	// (IPv4, as confd's template), so that it reflects its clients'
	// per-service routes.
	Services []netip.Prefix
	// KeepNextHop are the peers to which routes go with their original
	// next hop (keepOriginalNextHop / nextHopMode Keep on eBGP sessions);
	// SelfNextHop those that get ours (nextHopMode Self).
	KeepNextHop, SelfNextHop []netip.Addr
	// PeerFilters are the sessions whose BGPPeers name BGPFilters, by
	// filter list; Specs the filters named that exist. They apply, in
	// order, before everything above, to export and import alike.
	PeerFilters []PeerFilterSet
	Specs       map[string]api.BGPFilterSpec
	// Problems are rules that cannot be applied (logged, not fatal).
	Problems []string
}

// Filter computes the export filter; peerFilters are Desired.PeerFilters,
// filters the BGPFilters by name.
func Filter(in RoutingInput, sessions []Session, peerFilters map[netip.Addr][]string, filters map[string]*api.BGPFilter) ExportFilter {
	var f ExportFilter
	f.PeerFilters = peerFilterSets(peerFilters)
	for _, set := range f.PeerFilters {
		for _, name := range set.Filters {
			if bf := filters[name]; bf != nil {
				if f.Specs == nil {
					f.Specs = map[string]api.BGPFilterSpec{}
				}
				f.Specs[name] = bf.Spec
			}
		}
	}
	f.Problems = buildFilterPolicy(f.PeerFilters, f.Specs).problems
	for _, pl := range in.pools() {
		if pl.DisableBGPExport {
			f.Reject = append(f.Reject, pl.CIDR)
		} else {
			f.Accept = append(f.Accept, pl.CIDR)
		}
	}
	if !labelTrue(in.Identity.Labels, excludeLBLabel) {
		f.Services = in.serviceCIDRs()
	}
	f.Services = append(f.Services, in.serviceRoutes()...)
	if in.Identity.ClusterID != "" {
		f.Services = append(f.Services, keepIf(in.serviceConf().lb, func(p netip.Prefix) bool { return p.Addr().Is4() })...)
	}
	for _, s := range sessions {
		switch {
		case s.NextHopKeep:
			f.KeepNextHop = append(f.KeepNextHop, s.Addr)
		case s.NextHopSelf:
			f.SelfNextHop = append(f.SelfNextHop, s.Addr)
		}
	}
	for _, l := range [][]netip.Prefix{f.Reject, f.Accept} {
		slices.SortFunc(l, comparePrefix)
	}
	slices.SortFunc(f.Services, comparePrefix)
	f.Services = slices.Compact(f.Services)
	return f
}

func (f ExportFilter) equal(g ExportFilter) bool {
	return slices.Equal(f.Reject, g.Reject) && slices.Equal(f.Accept, g.Accept) && slices.Equal(f.Services, g.Services) &&
		slices.Equal(f.KeepNextHop, g.KeepNextHop) && slices.Equal(f.SelfNextHop, g.SelfNextHop) &&
		reflect.DeepEqual(f.PeerFilters, g.PeerFilters) && reflect.DeepEqual(f.Specs, g.Specs)
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
