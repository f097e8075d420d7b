package policy

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/selector"
)

// entity is anything a selector can match and that has addresses: a
// workload endpoint, a host endpoint, a NetworkSet or a GlobalNetworkSet.
type entity struct {
	kind   string // "wep", "hep", "netset", "gnetset"
	name   string // namespace/name for namespaced kinds
	labels map[string]string
	nets   []netip.Prefix
	ports  []namedPort
}

// namedPort is a port an endpoint publishes under a name.
type namedPort struct {
	name  string
	proto uint8
	port  uint16
}

// profileLabels maps profile names to their labelsToApply.
type profileLabels map[string]map[string]string

// mergeLabels returns own labels with each parent profile's labels added
// where own (and earlier parents) do not already set the key: felix's label
// inheritance.
func mergeLabels(own map[string]string, parents []string, profiles profileLabels) map[string]string {
	out := make(map[string]string, len(own)+4)
	for k, v := range own {
		out[k] = v
	}
	for _, p := range parents {
		for k, v := range profiles[p] {
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
	}
	return out
}

// workloadLabels are the labels felix sees for a workload endpoint:
// libcalico-go drops pcns.*/pcsa.* labels (so a pod cannot claim another
// namespace's labels) and adds the service account label from the spec.
func workloadLabels(w *api.WorkloadEndpoint, profiles profileLabels) map[string]string {
	own := make(map[string]string, len(w.Labels)+1)
	for k, v := range w.Labels {
		if strings.HasPrefix(k, nsLabelPrefix) || strings.HasPrefix(k, saLabelPrefix) {
			continue
		}
		own[k] = v
	}
	if w.Spec.ServiceAccountName != "" {
		own[api.LabelServiceAccount] = w.Spec.ServiceAccountName
	}
	return mergeLabels(own, w.Spec.Profiles, profiles)
}

// parsePrefix parses a CIDR or a bare address (as a host prefix) and
// masks it.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// hostPrefix parses an address or a CIDR and returns just the address as
// a host prefix: workloads are matched by their address only, as felix does.
func hostPrefix(s string) (netip.Prefix, error) {
	var a netip.Addr
	var err error
	if strings.Contains(s, "/") {
		var p netip.Prefix
		p, err = netip.ParsePrefix(s)
		a = p.Addr()
	} else {
		a, err = netip.ParseAddr(s)
	}
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// protoNumber returns the number of a protocol given by name or number.
func protoNumber(p api.Protocol) (uint8, bool) {
	if n, err := p.NumValue(); err == nil {
		return n, true
	}
	switch strings.ToLower(p.StrVal) {
	case "tcp":
		return 6, true
	case "udp":
		return 17, true
	case "icmp":
		return 1, true
	case "icmpv6":
		return 58, true
	case "sctp":
		return 132, true
	case "udplite":
		return 136, true
	}
	return 0, false
}

// endpointPorts converts published ports; a port without a protocol is
// TCP, as in felix's named port index.
func endpointPorts(name func(i int) (string, api.Protocol, uint16), n int) []namedPort {
	var out []namedPort
	for i := 0; i < n; i++ {
		pn, proto, port := name(i)
		if pn == "" {
			continue
		}
		num, ok := protoNumber(proto)
		if !ok || num == 0 {
			num = 6
		}
		out = append(out, namedPort{name: pn, proto: num, port: port})
	}
	return out
}

// tierInfo is a tier as the compiler orders it.
type tierInfo struct {
	name          string
	order         *float64
	valid         bool // a Tier resource exists (or it is "default")
	defaultAction api.Action
	policies      []*policyInfo
}

// tierLess orders tiers as felix does: existing tiers before missing ones,
// then by order (unset last), then by name.
func tierLess(a, b *tierInfo) int {
	if a.valid != b.valid {
		if a.valid {
			return -1
		}
		return 1
	}
	if (a.order == nil) != (b.order == nil) {
		if a.order == nil {
			return 1
		}
		return -1
	}
	if a.order != nil && *a.order != *b.order {
		return cmp.Compare(*a.order, *b.order)
	}
	return strings.Compare(a.name, b.name)
}

// policyInfo is a NetworkPolicy or GlobalNetworkPolicy prepared for
// compilation.
type policyInfo struct {
	// key is felix's policy name: "namespace/name" for a NetworkPolicy,
	// "name" for a GlobalNetworkPolicy. It breaks order ties and names the
	// policy's chains.
	key       string
	namespace string
	tier      string
	order     float64 // +Inf when unset
	ingress   bool
	egress    bool
	selector  selector.Selector
	// selectorText is the canonical selector; policies with equal
	// selectors that are adjacent in a tier share a policy group chain.
	selectorText string
	inRules      []api.Rule
	outRules     []api.Rule
	// untracked (doNotTrack) and preDNAT policies only apply to host
	// endpoints, in the raw and mangle tables; applyOnForward ones also
	// police traffic routed through a host endpoint.
	untracked, preDNAT, applyOnForward bool
}

// normal policies are enforced in the filter table.
func (p *policyInfo) normal() bool { return !p.untracked && !p.preDNAT }

func policyLess(a, b *policyInfo) int {
	if a.order != b.order {
		return cmp.Compare(a.order, b.order)
	}
	return strings.Compare(a.key, b.key)
}

func orderOf(o *float64) float64 {
	if o == nil {
		return math.Inf(1)
	}
	return *o
}

// policyTypes returns the directions a policy governs, defaulting as
// Calico does when types is empty.
func policyTypes(types []api.PolicyType, ingress, egress []api.Rule) (in, out bool) {
	if len(types) == 0 {
		switch {
		case len(egress) == 0:
			return true, false
		case len(ingress) == 0:
			return false, true
		default:
			return true, true
		}
	}
	for _, t := range types {
		switch {
		case strings.EqualFold(string(t), string(api.PolicyTypeIngress)):
			in = true
		case strings.EqualFold(string(t), string(api.PolicyTypeEgress)):
			out = true
		}
	}
	return in, out
}

// model is the resolved snapshot: labelled entities, ordered tiers and
// local endpoints.
type model struct {
	sels     *selectors
	problems []string

	entities []*entity
	profiles map[string]*api.Profile
	tiers    []*tierInfo

	workloads []*localEndpoint
	hosts     []*localEndpoint
	// wildcardHost is the host endpoint with interfaceName "*", if any.
	wildcardHost *localEndpoint

	// pools are the snapshot's IP pools that parse (api.ParsePool).
	pools []api.Pool
	// node is this node's name; nodes are the cluster's Nodes, whose
	// addresses are the overlay's peers.
	node  string
	nodes []api.Node
	// match, if set, keeps selector matches across compilations
	// (Compiler); ents the workload entities and the IP sets.
	match *matchCache
	ents  *entityCache
}

// localEndpoint is an endpoint of this node that gets its own chains.
type localEndpoint struct {
	name   string // resource name (namespace/name for workloads)
	iface  string
	labels map[string]string
	// labelsKey is labelsKey(labels) when already known ("" if not).
	labelsKey string
	profiles  []string
	// ingress and egress are the tiers with normal policies that select
	// the endpoint and govern that direction, in order.
	ingress, egress []epTier
	// Host endpoints only, as felix splits them: the tiers of the normal
	// policies with applyOnForward (for routed traffic), of doNotTrack
	// policies (raw table) and of preDNAT policies (mangle table, which
	// only polices ingress).
	fwdIngress, fwdEgress     []epTier
	untrackedIn, untrackedOut []epTier
	preDNATIn                 []epTier
	// spoofable are the source prefixes a workload may send from besides
	// its own addresses (allowSpoofedSourcePrefixes, when FelixConfiguration
	// allows it): they skip the reverse-path check.
	spoofable []netip.Prefix
}

// tierLists are all the tier lists of the endpoint, for finding the
// policies in use.
func (ep *localEndpoint) tierLists() [][]epTier {
	return [][]epTier{ep.ingress, ep.egress, ep.fwdIngress, ep.fwdEgress, ep.untrackedIn, ep.untrackedOut, ep.preDNATIn}
}

// epTier is the part of a tier that applies to one endpoint in one
// direction.
type epTier struct {
	name          string
	defaultAction api.Action
	policies      []*policyInfo
}

func (m *model) problem(format string, args ...any) {
	m.problems = append(m.problems, fmt.Sprintf(format, args...))
}

func buildModel(s *Snapshot, mc *matchCache, ec *entityCache) *model {
	m := &model{
		sels:     &selectors{cache: map[string]selectorResult{}},
		profiles: map[string]*api.Profile{},
		match:    mc,
		ents:     ec,
	}
	plabels := profileLabels{}
	for i := range s.Profiles {
		p := &s.Profiles[i]
		m.profiles[p.Name] = p
		plabels[p.Name] = p.Spec.LabelsToApply
	}
	m.buildEntities(s, plabels)
	if m.ents != nil {
		m.ents.diff(m.entities)
	}
	m.buildTiers(s)
	m.buildLocal(s, plabels)
	for i := range s.IPPools {
		p, err := api.ParsePool(&s.IPPools[i])
		if err != nil {
			m.problem("%v; ignored", err)
			continue
		}
		m.pools = append(m.pools, p)
	}
	m.node, m.nodes = s.Node, s.Nodes
	return m
}

func (m *model) buildEntities(s *Snapshot, plabels profileLabels) {
	for i := range s.WorkloadEndpoints {
		w := &s.WorkloadEndpoints[i]
		if m.ents != nil {
			m.entities = append(m.entities, m.ents.workload(m, w, plabels))
			continue
		}
		m.entities = append(m.entities, m.workloadEntity(w, plabels))
	}
	for i := range s.HostEndpoints {
		h := &s.HostEndpoints[i]
		e := &entity{kind: "hep", name: h.Name, labels: mergeLabels(h.Labels, h.Spec.Profiles, plabels)}
		e.nets = m.endpointNets("HostEndpoint "+h.Name+": expectedIPs", h.Spec.ExpectedIPs)
		ports := h.Spec.Ports
		e.ports = endpointPorts(func(i int) (string, api.Protocol, uint16) {
			return ports[i].Name, ports[i].Protocol, ports[i].Port
		}, len(ports))
		m.entities = append(m.entities, e)
	}
	for i := range s.NetworkSets {
		n := &s.NetworkSets[i]
		// A NetworkSet carries its namespace label and inherits the
		// namespace's profile labels, so namespaceSelectors match it.
		own := make(map[string]string, len(n.Labels)+1)
		for k, v := range n.Labels {
			own[k] = v
		}
		own[api.LabelNamespace] = n.Namespace
		e := &entity{kind: "netset", name: n.Namespace + "/" + n.Name,
			labels: mergeLabels(own, []string{"kns." + n.Namespace}, plabels)}
		e.nets = m.setNets("NetworkSet "+e.name, n.Spec.Nets)
		m.entities = append(m.entities, e)
	}
	for i := range s.GlobalNetworkSets {
		n := &s.GlobalNetworkSets[i]
		e := &entity{kind: "gnetset", name: n.Name, labels: mergeLabels(n.Labels, nil, nil)}
		e.nets = m.setNets("GlobalNetworkSet "+n.Name, n.Spec.Nets)
		m.entities = append(m.entities, e)
	}
}

// workloadEntity is the entity of a workload endpoint.
func (m *model) workloadEntity(w *api.WorkloadEndpoint, plabels profileLabels) *entity {
	e := &entity{kind: "wep", name: w.Namespace + "/" + w.Name, labels: workloadLabels(w, plabels)}
	e.nets = m.endpointNets("WorkloadEndpoint "+e.name+": ipNetworks", w.Spec.IPNetworks)
	ports := w.Spec.Ports
	e.ports = endpointPorts(func(i int) (string, api.Protocol, uint16) {
		return ports[i].Name, ports[i].Protocol, ports[i].Port
	}, len(ports))
	return e
}

// parsePrefixes parses each item with parse; an item it refuses is a
// problem ("<what>: <item> is not <kind>") and left out.
func (m *model) parsePrefixes(what, kind string, items []string, parse func(string) (netip.Prefix, error)) []netip.Prefix {
	var out []netip.Prefix
	for _, item := range items {
		p, err := parse(item)
		if err != nil {
			m.problem("%s: %q is not %s", what, item, kind)
			continue
		}
		out = append(out, p)
	}
	return out
}

// endpointNets parses an endpoint's addresses (what names the field),
// each as its host prefix.
func (m *model) endpointNets(what string, addrs []string) []netip.Prefix {
	return m.parsePrefixes(what, "an address", addrs, hostPrefix)
}

// setNets parses a network set's nets. A /0 cannot go into a hash:net IP
// set, so, as felix does, it becomes the two /1 halves.
func (m *model) setNets(what string, nets []string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range m.parsePrefixes(what+": nets", "a CIDR or address", nets, parsePrefix) {
		switch {
		case p.Bits() != 0:
			out = append(out, p)
		case p.Addr().Is4():
			out = append(out, netip.MustParsePrefix("0.0.0.0/1"), netip.MustParsePrefix("128.0.0.0/1"))
		default:
			out = append(out, netip.MustParsePrefix("::/1"), netip.MustParsePrefix("8000::/1"))
		}
	}
	return out
}

func (m *model) buildTiers(s *Snapshot) {
	byName := map[string]*tierInfo{}
	for i := range s.Tiers {
		t := &s.Tiers[i]
		ti := &tierInfo{name: t.Name, order: t.Spec.Order, valid: true, defaultAction: api.Deny}
		if t.Spec.DefaultAction != nil {
			ti.defaultAction = *t.Spec.DefaultAction
		}
		byName[t.Name] = ti
	}
	if _, ok := byName[api.DefaultTierName]; !ok {
		o := api.DefaultTierOrder
		byName[api.DefaultTierName] = &tierInfo{name: api.DefaultTierName, order: &o, valid: true, defaultAction: api.Deny}
	}
	tierFor := func(name string) *tierInfo {
		t := byName[name]
		if t == nil {
			// A policy in a tier that does not exist still applies, after
			// every existing tier, as in felix.
			t = &tierInfo{name: name, defaultAction: api.Deny}
			byName[name] = t
		}
		return t
	}
	for i := range s.NetworkPolicies {
		p := &s.NetworkPolicies[i]
		what := "NetworkPolicy " + p.Namespace + "/" + p.Name
		text, err := m.sels.networkPolicySelector(p)
		if err != nil {
			m.problem("%s: skipped: %v", what, err)
			continue
		}
		pi := m.newPolicy(what, p.Namespace+"/"+p.Name, p.Namespace, p.Spec.TierName(), p.Spec.Order,
			text, p.Spec.Types, p.Spec.Ingress, p.Spec.Egress)
		if pi != nil {
			t := tierFor(pi.tier)
			t.policies = append(t.policies, pi)
		}
	}
	for i := range s.GlobalNetworkPolicies {
		p := &s.GlobalNetworkPolicies[i]
		what := "GlobalNetworkPolicy " + p.Name
		text, err := m.sels.globalPolicySelector(p)
		if err != nil {
			m.problem("%s: skipped: %v", what, err)
			continue
		}
		pi := m.newPolicy(what, p.Name, "", p.Spec.TierName(), p.Spec.Order,
			text, p.Spec.Types, p.Spec.Ingress, p.Spec.Egress)
		if pi == nil {
			continue
		}
		m.hostPolicyFlags(what, pi, &p.Spec)
		t := tierFor(pi.tier)
		t.policies = append(t.policies, pi)
	}
	for _, t := range byName {
		slices.SortFunc(t.policies, policyLess)
		m.tiers = append(m.tiers, t)
	}
	slices.SortFunc(m.tiers, tierLess)
}

func (m *model) newPolicy(what, key, ns, tier string, order *float64, selText string,
	types []api.PolicyType, ingress, egress []api.Rule) *policyInfo {
	sel, err := m.sels.parse(selText)
	if err != nil {
		m.problem("%s: skipped: %v", what, err)
		return nil
	}
	in, out := policyTypes(types, ingress, egress)
	return &policyInfo{
		key: key, namespace: ns, tier: tier, order: orderOf(order),
		ingress: in, egress: out, selector: sel, selectorText: sel.String(),
		inRules: ingress, outRules: egress,
	}
}

// hostPolicyFlags sets doNotTrack, preDNAT and applyOnForward as felix
// reads them. Validation rejects the combinations reported here; a stored
// policy that has one anyway is enforced as felix would enforce it,
// rather than dropped, since dropping a policy can open what it closes.
func (m *model) hostPolicyFlags(what string, pi *policyInfo, s *api.GlobalNetworkPolicySpec) {
	pi.untracked, pi.preDNAT, pi.applyOnForward = s.DoNotTrack, s.PreDNAT, s.ApplyOnForward
	if pi.untracked && pi.preDNAT {
		// felix's calculation graph tests doNotTrack first.
		m.problem("%s: doNotTrack and preDNAT are both set; enforced as doNotTrack", what)
		pi.preDNAT = false
	}
	if (pi.untracked || pi.preDNAT) && !pi.applyOnForward {
		// The raw and mangle PREROUTING chains see routed packets whatever
		// the flag says.
		m.problem("%s: applyOnForward must be true for doNotTrack and preDNAT policies; enforced as if it were", what)
	}
	if pi.preDNAT && pi.egress {
		m.problem("%s: egress is ignored: preDNAT policies only police ingress", what)
	}
}

// allInterfaces names the chains of the host endpoint with
// interfaceName "*" (felix's name for it).
const allInterfaces = "any-interface-at-all"

func (m *model) buildLocal(s *Snapshot, plabels profileLabels) {
	seen := map[string]string{}
	for i := range s.WorkloadEndpoints {
		w := &s.WorkloadEndpoints[i]
		if w.Spec.Node != s.Node {
			continue
		}
		name := w.Namespace + "/" + w.Name
		if len(w.Spec.IPNetworks) == 0 {
			// libcalico-go never gives felix an endpoint without addresses;
			// its interface stays unknown and is dropped.
			continue
		}
		if w.Spec.InterfaceName == "" {
			m.problem("WorkloadEndpoint %s: skipped: no interfaceName", name)
			continue
		}
		if other, dup := seen[w.Spec.InterfaceName]; dup {
			m.problem("WorkloadEndpoint %s: skipped: interface %s is already used by %s", name, w.Spec.InterfaceName, other)
			continue
		}
		seen[w.Spec.InterfaceName] = name
		ep := &localEndpoint{
			name: name, iface: w.Spec.InterfaceName, profiles: w.Spec.Profiles,
			spoofable: m.spoofable(name, w.Spec.AllowSpoofedSourcePrefixes, s.Config.AllowSourceSpoofing),
		}
		if m.ents != nil {
			// The entity's labels (buildEntities made it from this very
			// endpoint), with their key.
			ep.labels, ep.labelsKey = m.ents.labels(w)
		}
		if ep.labels == nil {
			ep.labels = workloadLabels(w, plabels)
		}
		m.workloads = append(m.workloads, ep)
	}
	slices.SortFunc(m.workloads, func(a, b *localEndpoint) int { return strings.Compare(a.iface, b.iface) })
	m.placeHosts(s, plabels)
	// felix gives workloads only the normal policies: the others are
	// host endpoint policy. Workloads of one Deployment share their
	// labels, and so their tiers: each distinct label set is matched
	// against the policies once (with a matchCache, once per selector
	// across compilations).
	type tiers struct{ in, out []epTier }
	byLabels := map[string]tiers{}
	var resolved []*selMatches
	if m.match != nil {
		resolved = m.match.resolve(m.tiers)
	}
	for _, ep := range m.workloads {
		key := ep.labelsKey
		if key == "" {
			key = labelsKey(ep.labels)
		}
		t, ok := byLabels[key]
		if !ok {
			if m.match != nil {
				t.in, t.out = m.tiersForCached(resolved, m.match.labelsID(key), ep.labels)
			} else {
				t.in, t.out = m.tiersFor(ep.labels, (*policyInfo).normal)
			}
			byLabels[key] = t
		}
		ep.ingress, ep.egress = t.in, t.out
	}
	for _, ep := range m.hostEndpoints() {
		ep.ingress, ep.egress = m.tiersFor(ep.labels, (*policyInfo).normal)
		ep.fwdIngress, ep.fwdEgress = m.tiersFor(ep.labels, func(p *policyInfo) bool { return p.normal() && p.applyOnForward })
		ep.untrackedIn, ep.untrackedOut = m.tiersFor(ep.labels, func(p *policyInfo) bool { return p.untracked })
		ep.preDNATIn, _ = m.tiersFor(ep.labels, func(p *policyInfo) bool { return p.preDNAT })
	}
	if w := m.wildcardHost; w != nil && len(w.untrackedIn)+len(w.untrackedOut) > 0 {
		// felix ignores them too (with a warning): the raw table has no
		// catch-all host endpoint chain.
		m.problem("HostEndpoint %s: doNotTrack policies do not apply to a host endpoint with interfaceName \"*\"; ignored", w.name)
		w.untrackedIn, w.untrackedOut = nil, nil
	}
}

// spoofable parses a workload's allowSpoofedSourcePrefixes. felix's
// validation filter treats an endpoint that asks for them while
// workloadSourceSpoofing is not "Any" as missing, which cuts the pod off;
// here the endpoint keeps its policy and only the request is refused (the
// reverse-path check stays on), and reported: the spoofing stays blocked
// either way, without taking the pod down with it.
func (m *model) spoofable(name string, prefixes []string, allowed bool) []netip.Prefix {
	if len(prefixes) == 0 {
		return nil
	}
	if !allowed {
		m.problem("WorkloadEndpoint %s: allowSpoofedSourcePrefixes ignored: FelixConfiguration workloadSourceSpoofing is not \"Any\"", name)
		return nil
	}
	return m.parsePrefixes("WorkloadEndpoint "+name+": allowSpoofedSourcePrefixes", "a CIDR or address", prefixes, parsePrefix)
}

// placeHosts decides which local host endpoint owns each interface, as
// felix's endpoint manager does: an endpoint naming the interface, else one
// whose expectedIPs are on it; the alphabetically first endpoint wins a
// contested interface. The "*" endpoint (first by name) covers every
// interface no other endpoint owns.
func (m *model) placeHosts(s *Snapshot, plabels profileLabels) {
	var local []*api.HostEndpoint
	for i := range s.HostEndpoints {
		if s.HostEndpoints[i].Spec.Node == s.Node {
			local = append(local, &s.HostEndpoints[i])
		}
	}
	slices.SortFunc(local, func(a, b *api.HostEndpoint) int { return strings.Compare(a.Name, b.Name) })
	owner := map[string]*api.HostEndpoint{}
	var wildcard *api.HostEndpoint
	excluded := m.interfaceExcluder(s.Config.withDefaults().InterfaceExclude)
	for _, h := range local {
		switch name := h.Spec.InterfaceName; {
		case name == "*":
			if wildcard == nil {
				wildcard = h
			}
		case name != "" && excluded(name):
			m.problem("HostEndpoint %s: interface %s is excluded by interfaceExclude; the endpoint has no chains", h.Name, name)
		case name != "":
			if owner[name] == nil {
				owner[name] = h
			}
		default:
			for iface, addrs := range s.HostInterfaces {
				if excluded(iface) {
					continue
				}
				for _, want := range h.Spec.ExpectedIPs {
					a, err := netip.ParseAddr(want)
					if err == nil && slices.Contains(addrs, a) && owner[iface] == nil {
						owner[iface] = h
					}
				}
			}
		}
	}
	mk := func(h *api.HostEndpoint, iface string) *localEndpoint {
		return &localEndpoint{name: h.Name, iface: iface,
			labels: mergeLabels(h.Labels, h.Spec.Profiles, plabels), profiles: h.Spec.Profiles}
	}
	for iface, h := range owner {
		m.hosts = append(m.hosts, mk(h, iface))
	}
	slices.SortFunc(m.hosts, func(a, b *localEndpoint) int { return strings.Compare(a.iface, b.iface) })
	if wildcard != nil {
		m.wildcardHost = mk(wildcard, allInterfaces)
	}
}

// interfaceExcluder matches interfaceExclude's entries, Felix's way: a
// name, or a regular expression between slashes. A bad expression is
// reported and matches nothing.
func (m *model) interfaceExcluder(entries []string) func(iface string) bool {
	var names []string
	var res []*regexp.Regexp
	for _, e := range entries {
		if len(e) > 2 && strings.HasPrefix(e, "/") && strings.HasSuffix(e, "/") {
			re, err := regexp.Compile(e[1 : len(e)-1])
			if err != nil {
				m.problem("FelixConfiguration interfaceExclude: %q is not a regular expression: %v", e, err)
				continue
			}
			res = append(res, re)
			continue
		}
		names = append(names, e)
	}
	return func(iface string) bool {
		return slices.Contains(names, iface) || slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(iface) })
	}
}

func (m *model) allLocal() []*localEndpoint {
	all := append(append([]*localEndpoint{}, m.workloads...), m.hosts...)
	if m.wildcardHost != nil {
		all = append(all, m.wildcardHost)
	}
	return all
}

// tiersFor returns, per direction, the tiers whose policies of one kind
// (those for which keep is true) select an endpoint with these labels.
func (m *model) tiersFor(labels map[string]string, keep func(*policyInfo) bool) (in, out []epTier) {
	return m.tiersMatching(func(_ int, p *policyInfo) bool { return keep(p) && p.selector.Evaluate(labels) })
}

// tiersMatching returns, per direction, the tiers with the policies for
// which match is true; i counts every policy of every tier, in order.
func (m *model) tiersMatching(match func(i int, p *policyInfo) bool) (in, out []epTier) {
	i := 0
	for _, t := range m.tiers {
		var ti, to epTier
		for _, p := range t.policies {
			i++
			if !match(i-1, p) {
				continue
			}
			if p.ingress {
				ti.policies = append(ti.policies, p)
			}
			if p.egress {
				to.policies = append(to.policies, p)
			}
		}
		if len(ti.policies) > 0 {
			ti.name, ti.defaultAction = t.name, t.defaultAction
			in = append(in, ti)
		}
		if len(to.policies) > 0 {
			to.name, to.defaultAction = t.name, t.defaultAction
			out = append(out, to)
		}
	}
	return in, out
}
