package policy_test

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/selector"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/sim"
)

// ref decides packets by walking Calico's policy semantics directly over
// the resources: which policies select an endpoint, their order, each
// rule's match, tiers, Pass and profiles. It shares no code with the
// compiler, so that the two can check each other: the compiled rules run
// through the simulator must agree with it on every packet.
type ref struct {
	// logs counts the Log rules that matched during the last decide.
	logs int
	// trail lists, for the last decide, each policy or profile rule that
	// matched ("key#index Action"), and each tier whose default action
	// applied ("end of tier NAME"), in order.
	trail    []string
	snap     *policy.Snapshot
	profiles map[string]*api.Profile
	ents     []*refEnt
	hostIP   map[netip.Addr]bool
	hostEP   *refEnt // the host endpoint owning eth0, if any
	tiers    []refTier
	e2hAct   string
	fsIn     []api.ProtoPort
	fsOut    []api.ProtoPort
}

type refEnt struct {
	kind      string
	namespace string
	labels    map[string]string
	sa        string
	nets      []netip.Prefix
	ports     []refPort
	local     bool
	iface     string
	profiles  []string
}

type refPort struct {
	name  string
	proto uint8
	port  uint16
}

type refTier struct {
	name   string
	order  *float64
	action api.Action
	pols   []refPol
}

type refPol struct {
	key     string
	order   *float64
	ns      string // "" for global
	np      *api.NetworkPolicy
	gnp     *api.GlobalNetworkPolicy
	in, out []api.Rule
	ingress bool
	egress  bool
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func sel(s string) selector.Selector { return must(selector.Parse(s)) }

func protoNum8(p api.Protocol) uint8 {
	if n, err := p.NumValue(); err == nil {
		return n
	}
	return map[string]uint8{"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58, "sctp": 132, "udplite": 136}[strings.ToLower(p.StrVal)]
}

func newRef(s *policy.Snapshot, hostIPs ...netip.Addr) *ref {
	r := &ref{snap: s, profiles: map[string]*api.Profile{}, hostIP: map[netip.Addr]bool{}}
	for _, a := range hostIPs {
		r.hostIP[a] = true
	}
	for i := range s.Profiles {
		r.profiles[s.Profiles[i].Name] = &s.Profiles[i]
	}
	inherit := func(own map[string]string, profs []string) map[string]string {
		l := map[string]string{}
		for _, p := range slices.Backward(profs) {
			if pr := r.profiles[p]; pr != nil {
				for k, v := range pr.Spec.LabelsToApply {
					l[k] = v
				}
			}
		}
		for k, v := range own {
			l[k] = v
		}
		return l
	}
	pfx := func(s string) netip.Prefix {
		if !strings.Contains(s, "/") {
			a := netip.MustParseAddr(s)
			return netip.PrefixFrom(a, a.BitLen())
		}
		return netip.MustParsePrefix(s).Masked()
	}
	for i := range s.WorkloadEndpoints {
		w := &s.WorkloadEndpoints[i]
		if len(w.Spec.IPNetworks) == 0 {
			continue
		}
		own := map[string]string{}
		for k, v := range w.Labels {
			if !strings.HasPrefix(k, "pcns.") && !strings.HasPrefix(k, "pcsa.") {
				own[k] = v
			}
		}
		if w.Spec.ServiceAccountName != "" {
			own["projectcalico.org/serviceaccount"] = w.Spec.ServiceAccountName
		}
		e := &refEnt{kind: "wep", namespace: w.Namespace, labels: inherit(own, w.Spec.Profiles), sa: w.Spec.ServiceAccountName,
			local: w.Spec.Node == s.Node, iface: w.Spec.InterfaceName, profiles: w.Spec.Profiles}
		for _, n := range w.Spec.IPNetworks {
			a := pfx(n).Addr()
			e.nets = append(e.nets, netip.PrefixFrom(a, a.BitLen()))
		}
		for _, p := range w.Spec.Ports {
			pr := protoNum8(p.Protocol)
			if pr == 0 {
				pr = 6
			}
			e.ports = append(e.ports, refPort{p.Name, pr, p.Port})
		}
		r.ents = append(r.ents, e)
	}
	var heps []*api.HostEndpoint
	hepEnt := map[*api.HostEndpoint]*refEnt{}
	for i := range s.HostEndpoints {
		h := &s.HostEndpoints[i]
		e := &refEnt{kind: "hep", labels: inherit(h.Labels, h.Spec.Profiles), local: h.Spec.Node == s.Node,
			iface: h.Spec.InterfaceName, profiles: h.Spec.Profiles}
		for _, ip := range h.Spec.ExpectedIPs {
			e.nets = append(e.nets, pfx(ip))
		}
		r.ents = append(r.ents, e)
		hepEnt[h] = e
		if e.local {
			heps = append(heps, h)
		}
	}
	// The endpoint on eth0: one naming it wins over "*"; the first name
	// wins among several.
	slices.SortFunc(heps, func(a, b *api.HostEndpoint) int { return strings.Compare(a.Name, b.Name) })
	for _, want := range []string{"eth0", "*"} {
		for _, h := range heps {
			if h.Spec.InterfaceName == want && r.hostEP == nil {
				r.hostEP = hepEnt[h]
			}
		}
	}
	for i := range s.NetworkSets {
		n := &s.NetworkSets[i]
		own := map[string]string{"projectcalico.org/namespace": n.Namespace}
		for k, v := range n.Labels {
			own[k] = v
		}
		e := &refEnt{kind: "netset", namespace: n.Namespace, labels: inherit(own, []string{"kns." + n.Namespace})}
		for _, c := range n.Spec.Nets {
			e.nets = append(e.nets, pfx(c))
		}
		r.ents = append(r.ents, e)
	}
	for i := range s.GlobalNetworkSets {
		n := &s.GlobalNetworkSets[i]
		e := &refEnt{kind: "gnetset", labels: n.Labels}
		for _, c := range n.Spec.Nets {
			e.nets = append(e.nets, pfx(c))
		}
		r.ents = append(r.ents, e)
	}

	tiers := map[string]*refTier{}
	for i := range s.Tiers {
		t := &s.Tiers[i]
		tiers[t.Name] = &refTier{name: t.Name, order: t.Spec.Order, action: *t.Spec.DefaultAction}
	}
	if tiers["default"] == nil {
		o := 1e6
		tiers["default"] = &refTier{name: "default", order: &o, action: api.Deny}
	}
	types := func(ts []api.PolicyType, in, out []api.Rule) (bool, bool) {
		if len(ts) == 0 {
			return len(out) == 0 || len(in) > 0, len(out) > 0
		}
		return slices.Contains(ts, api.PolicyTypeIngress), slices.Contains(ts, api.PolicyTypeEgress)
	}
	for i := range s.NetworkPolicies {
		p := &s.NetworkPolicies[i]
		rp := refPol{key: p.Namespace + "/" + p.Name, order: p.Spec.Order, ns: p.Namespace, np: p, in: p.Spec.Ingress, out: p.Spec.Egress}
		rp.ingress, rp.egress = types(p.Spec.Types, p.Spec.Ingress, p.Spec.Egress)
		t := tiers[p.Spec.TierName()]
		t.pols = append(t.pols, rp)
	}
	for i := range s.GlobalNetworkPolicies {
		p := &s.GlobalNetworkPolicies[i]
		rp := refPol{key: p.Name, order: p.Spec.Order, gnp: p, in: p.Spec.Ingress, out: p.Spec.Egress}
		rp.ingress, rp.egress = types(p.Spec.Types, p.Spec.Ingress, p.Spec.Egress)
		t := tiers[p.Spec.TierName()]
		t.pols = append(t.pols, rp)
	}
	inf := func(o *float64) float64 {
		if o == nil {
			return 1e300
		}
		return *o
	}
	for _, t := range tiers {
		slices.SortFunc(t.pols, func(a, b refPol) int {
			if c := cmp.Compare(inf(a.order), inf(b.order)); c != 0 {
				return c
			}
			return strings.Compare(a.key, b.key)
		})
		r.tiers = append(r.tiers, *t)
	}
	slices.SortFunc(r.tiers, func(a, b refTier) int {
		if c := cmp.Compare(inf(a.order), inf(b.order)); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	cfg := s.Config
	r.e2hAct = cfg.EndpointToHostAction
	r.fsIn, r.fsOut = cfg.FailsafeInbound, cfg.FailsafeOutbound
	if r.fsIn == nil {
		r.fsIn = policy.DefaultFailsafeInbound()
	}
	if r.fsOut == nil {
		r.fsOut = policy.DefaultFailsafeOutbound()
	}
	return r
}

// prefixed returns the labels under prefix, with the prefix removed: the
// namespace's labels (pcns.) or the service account's (pcsa.).
func prefixed(l map[string]string, prefix string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if s, ok := strings.CutPrefix(k, prefix); ok {
			out[s] = v
		}
	}
	return out
}

// selects says whether a policy applies to an endpoint.
func (r *ref) selects(p *refPol, e *refEnt) bool {
	if p.np != nil {
		spec := p.np.Spec
		if e.namespace != p.ns || !sel(spec.Selector).Evaluate(e.labels) {
			return false
		}
		// No all() rewriting for namespaced policies.
		return spec.ServiceAccountSelector == "" || sel(spec.ServiceAccountSelector).Evaluate(prefixed(e.labels, "pcsa."))
	}
	spec := p.gnp.Spec
	if !sel(spec.Selector).Evaluate(e.labels) {
		return false
	}
	if ns := spec.NamespaceSelector; ns != "" {
		// libcalico-go rewrites all() in the whole selector text once a
		// namespaceSelector is set, so "all()" there means "namespaced".
		if strings.Contains(spec.Selector, "all()") && e.namespace == "" {
			return false
		}
		if !selector.EvaluateWith(sel(ns), prefixed(e.labels, "pcns."), selector.EvaluateOpts{NamespaceSelector: true, Global: e.namespace == ""}) {
			return false
		}
	}
	if sa := spec.ServiceAccountSelector; sa != "" {
		needSA := strings.Contains(sa, "all()") || spec.NamespaceSelector == "" && strings.Contains(spec.Selector, "all()")
		if needSA && e.sa == "" {
			return false
		}
		if !sel(sa).Evaluate(prefixed(e.labels, "pcsa.")) {
			return false
		}
	}
	return true
}

type refPacket struct {
	v6       bool
	src, dst netip.Addr
	proto    uint8
	sport    uint16
	dport    uint16
	icmpType uint8
	icmpCode uint8
}

// ruleMatches says whether rule (of a policy in namespace ns; "" for
// global policies and profiles) matches the packet.
func (r *ref) ruleMatches(rule *api.Rule, ns string, p refPacket) bool {
	version := 4
	if p.v6 {
		version = 6
	}
	if rule.IPVersion != nil && *rule.IPVersion != version {
		return false
	}
	if rule.IPVersion == nil && rule.Protocol != nil {
		switch protoNum8(*rule.Protocol) {
		case 1:
			if p.v6 {
				return false
			}
		case 58:
			if !p.v6 {
				return false
			}
		}
	}
	// A list of nets with none of this family makes the rule not apply to
	// this family at all, as does a negated catch-all.
	for _, l := range [][]string{rule.Source.Nets, rule.Source.NotNets, rule.Destination.Nets, rule.Destination.NotNets} {
		if len(l) == 0 {
			continue
		}
		any := false
		for _, n := range l {
			if strings.Contains(n, ":") == p.v6 {
				any = true
			}
		}
		if !any {
			return false
		}
	}
	for _, l := range [][]string{rule.Source.NotNets, rule.Destination.NotNets} {
		for _, n := range l {
			if n == "0.0.0.0/0" && !p.v6 || n == "::/0" && p.v6 {
				return false
			}
		}
	}
	if rule.Protocol != nil && protoNum8(*rule.Protocol) != p.proto {
		return false
	}
	if rule.NotProtocol != nil && protoNum8(*rule.NotProtocol) == p.proto {
		return false
	}
	icmpProto := uint8(1)
	if p.v6 {
		icmpProto = 58
	}
	icmpIs := func(f *api.ICMPFields) bool {
		return p.icmpType == uint8(*f.Type) && (f.Code == nil || p.icmpCode == uint8(*f.Code))
	}
	if f := rule.ICMP; f != nil && f.Type != nil && (p.proto != icmpProto || !icmpIs(f)) {
		return false
	}
	if f := rule.NotICMP; f != nil && f.Type != nil && (p.proto != icmpProto || icmpIs(f)) {
		return false
	}
	namedProto := uint8(6)
	if rule.Protocol != nil {
		if n := protoNum8(*rule.Protocol); n == 17 || n == 132 {
			namedProto = n
		}
	}
	return r.sideMatches(&rule.Source, ns, p.src, p.sport, p.proto, namedProto, p.v6) &&
		r.sideMatches(&rule.Destination, ns, p.dst, p.dport, p.proto, namedProto, p.v6)
}

func (r *ref) sideMatches(er *api.EntityRule, ns string, ip netip.Addr, port uint16, proto, namedProto uint8, v6 bool) bool {
	inNets := func(nets []string) bool {
		for _, n := range nets {
			pf, err := netip.ParsePrefix(n)
			if err != nil {
				a := netip.MustParseAddr(n)
				pf = netip.PrefixFrom(a, a.BitLen())
			}
			if pf.Masked().Contains(ip) {
				return true
			}
		}
		return false
	}
	if len(er.Nets) > 0 && !inNets(er.Nets) {
		return false
	}
	if inNets(er.NotNets) {
		return false
	}
	hasSA := er.ServiceAccounts != nil && (len(er.ServiceAccounts.Names) > 0 || er.ServiceAccounts.Selector != "")
	positive := er.Selector != "" || hasSA || er.NamespaceSelector != "" || ns != "" && er.NotSelector != ""
	pos := func(e *refEnt) bool {
		if er.Selector != "" && !sel(er.Selector).Evaluate(e.labels) {
			return false
		}
		if hasSA {
			sam := er.ServiceAccounts
			if len(sam.Names) > 0 && (e.sa == "" || !slices.Contains(sam.Names, e.sa)) {
				return false
			}
			if sam.Selector != "" && !sel(sam.Selector).Evaluate(prefixed(e.labels, "pcsa.")) {
				return false
			}
		}
		if er.NamespaceSelector != "" {
			if !selector.EvaluateWith(sel(er.NamespaceSelector), prefixed(e.labels, "pcns."),
				selector.EvaluateOpts{NamespaceSelector: true, Global: e.namespace == ""}) {
				return false
			}
		} else if ns != "" && e.namespace != ns {
			return false
		}
		if er.NotSelector != "" && sel(er.NotSelector).Evaluate(e.labels) {
			return false
		}
		return true
	}
	holding := func(pred func(*refEnt) bool) bool {
		for _, e := range r.ents {
			for _, n := range e.nets {
				if n.Contains(ip) && pred(e) {
					return true
				}
			}
		}
		return false
	}
	var numeric, named, notNumeric, notNamed []api.Port
	for _, p := range er.Ports {
		if p.PortName != "" {
			named = append(named, p)
		} else {
			numeric = append(numeric, p)
		}
	}
	for _, p := range er.NotPorts {
		if p.PortName != "" {
			notNamed = append(notNamed, p)
		} else {
			notNumeric = append(notNumeric, p)
		}
	}
	if positive && (len(numeric) > 0 || len(named) == 0) && !holding(pos) {
		return false
	}
	if !positive && er.NotSelector != "" && holding(func(e *refEnt) bool { return sel(er.NotSelector).Evaluate(e.labels) }) {
		return false
	}
	inRange := func(ps []api.Port) bool {
		for _, p := range ps {
			if port >= p.MinPort && port <= p.MaxPort {
				return true
			}
		}
		return false
	}
	hasNamed := func(ps []api.Port) bool {
		return holding(func(e *refEnt) bool {
			if e.kind != "wep" && e.kind != "hep" || positive && !pos(e) {
				return false
			}
			for _, want := range ps {
				for _, ep := range e.ports {
					if ep.name == want.PortName && ep.proto == namedProto && ep.port == port && proto == namedProto {
						return true
					}
				}
			}
			return false
		})
	}
	if len(er.Ports) > 0 && !inRange(numeric) && !hasNamed(named) {
		return false
	}
	if inRange(notNumeric) || hasNamed(notNamed) {
		return false
	}
	return true
}

// verdict decides one direction of one endpoint.
func (r *ref) verdict(e *refEnt, ingress bool, p refPacket) bool {
	rulesOf := func(pol *refPol) []api.Rule {
		if ingress {
			return pol.in
		}
		return pol.out
	}
	// passBit is the pass mark as the profiles see it: felix clears it at
	// the start of each tier, not before the profiles.
	passBit := false
	for _, t := range r.tiers {
		var pols []*refPol
		for i := range t.pols {
			pol := &t.pols[i]
			if (ingress && pol.ingress || !ingress && pol.egress) && r.selects(pol, e) {
				pols = append(pols, pol)
			}
		}
		if len(pols) == 0 {
			continue
		}
		passed := false
		passBit = false
	tier:
		for _, pol := range pols {
			rules := rulesOf(pol)
			for i := range rules {
				if !r.ruleMatches(&rules[i], pol.ns, p) {
					continue
				}
				r.trail = append(r.trail, fmt.Sprintf("%s#%d %s", pol.key, i, rules[i].Action))
				switch rules[i].Action {
				case api.Allow:
					return true
				case api.Deny:
					return false
				case api.Pass:
					passed, passBit = true, true
					break tier
				case api.Log:
					r.logs++
				}
			}
		}
		if !passed && t.action != api.Pass {
			r.trail = append(r.trail, "end of tier "+t.name)
			return false
		}
	}
	for _, name := range e.profiles {
		prof := r.profiles[name]
		if prof == nil {
			continue
		}
		rules := prof.Spec.Egress
		if ingress {
			rules = prof.Spec.Ingress
		}
	profile:
		for i := range rules {
			if !r.ruleMatches(&rules[i], "", p) {
				if rules[i].Action == api.Pass && passBit {
					// A Pass rule returns when it sees the pass mark, and a
					// tier's Pass left it set: the profile's rules from here
					// on are skipped (felix's quirk, kept by the compiler).
					break profile
				}
				continue
			}
			r.trail = append(r.trail, fmt.Sprintf("profile %s#%d %s", name, i, rules[i].Action))
			switch rules[i].Action {
			case api.Allow:
				return true
			case api.Deny:
				return false
			case api.Pass:
				break profile
			case api.Log:
				r.logs++
			}
		}
	}
	return false
}

func (r *ref) failsafe(ports []api.ProtoPort, p refPacket, inbound bool) bool {
	for _, fp := range ports {
		pr := strings.ToLower(fp.Protocol)
		if pr == "" {
			pr = "tcp"
		}
		if map[string]uint8{"tcp": 6, "udp": 17}[pr] != p.proto || p.dport != fp.Port {
			continue
		}
		if fp.Net != "" {
			n := netip.MustParsePrefix(fp.Net)
			if n.Addr().Is6() != p.v6 {
				continue
			}
			peer := p.dst
			if inbound {
				peer = p.src
			}
			if !n.Contains(peer) {
				continue
			}
		}
		return true
	}
	return false
}

func (r *ref) localWEP(a netip.Addr) *refEnt {
	for _, e := range r.ents {
		if e.kind == "wep" && e.local {
			for _, n := range e.nets {
				if n.Addr() == a {
					return e
				}
			}
		}
	}
	return nil
}

// path says where a packet enters our rules: the built-in chain and the
// interfaces, as the kernel would route it on this node.
type path struct {
	chain   string
	in, out string
}

func (r *ref) route(p refPacket) (path, bool) {
	src, dst := r.localWEP(p.src), r.localWEP(p.dst)
	switch {
	case src != nil && dst != nil:
		return path{"FORWARD", src.iface, dst.iface}, true
	case src != nil && r.hostIP[p.dst]:
		return path{"INPUT", src.iface, ""}, true
	case src != nil:
		return path{"FORWARD", src.iface, "eth0"}, true
	case dst != nil && r.hostIP[p.src]:
		return path{"OUTPUT", "", dst.iface}, true
	case dst != nil:
		return path{"FORWARD", "eth0", dst.iface}, true
	case r.hostIP[p.dst]:
		return path{"INPUT", "eth0", ""}, true
	case r.hostIP[p.src]:
		return path{"OUTPUT", "", "eth0"}, true
	}
	return path{}, false
}

// decide is the reference verdict for a new connection's first packet;
// r.logs says how many Log rules it passed on the way.
func (r *ref) decide(p refPacket) bool {
	r.logs, r.trail = 0, nil
	src, dst := r.localWEP(p.src), r.localWEP(p.dst)
	switch {
	case src != nil && dst != nil:
		return r.verdict(src, false, p) && r.verdict(dst, true, p)
	case src != nil && r.hostIP[p.dst]:
		return r.verdict(src, false, p) && r.e2hAct != "DROP" && r.e2hAct != ""
	case src != nil:
		return r.verdict(src, false, p)
	case dst != nil && r.hostIP[p.src]:
		return true // the host may always reach its workloads
	case dst != nil:
		return r.verdict(dst, true, p)
	case r.hostIP[p.dst]:
		return r.hostEP == nil || r.failsafe(r.fsIn, p, true) || r.verdict(r.hostEP, true, p)
	case r.hostIP[p.src]:
		return r.hostEP == nil || r.failsafe(r.fsOut, p, false) || r.verdict(r.hostEP, false, p)
	}
	return true
}

// simulate runs the packet through the compiled rules.
func simulate(res *policy.Result, sets map[int]*sim.Sets, pt path, p refPacket) (sim.Result, error) {
	f, v := res.V4, 4
	if p.v6 {
		f, v = res.V6, 6
	}
	return sim.Traverse(f, sets[v], policy.TableFilter, pt.chain, sim.Packet{
		Src: p.src, Dst: p.dst, Proto: p.proto, SrcPort: p.sport, DstPort: p.dport,
		ICMPType: p.icmpType, ICMPCode: p.icmpCode,
	}, pt.in, pt.out)
}
