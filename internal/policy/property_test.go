package policy_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/sim"
)

var (
	hostV4 = netip.MustParseAddr("10.0.0.10")
	hostV6 = netip.MustParseAddr("fd00:10::10")
)

// gen builds random but valid clusters from small pools of labels,
// selectors, nets and ports, so that random policies often select the
// random endpoints and packets often hit the rules.
type gen struct{ r *rand.Rand }

func (g gen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }
func (g gen) chance(p float64) bool    { return g.r.Float64() < p }

var namespaces = map[string]map[string]string{
	"ns1": {"team": "blue", "env": "prod"},
	"ns2": {"team": "red", "env": "dev"},
	"ns3": {"team": "blue", "env": "dev"},
}

var endpointPorts = []api.WorkloadEndpointPort{
	{Name: "http", Protocol: api.ProtocolFromString("TCP"), Port: 80},
	{Name: "https", Protocol: api.ProtocolFromString("TCP"), Port: 443},
	{Name: "dns", Protocol: api.ProtocolFromString("UDP"), Port: 53},
	{Name: "metrics", Protocol: api.ProtocolFromString("TCP"), Port: 9090},
	{Name: "http", Protocol: api.ProtocolFromString("TCP"), Port: 8080},
	{Name: "dns", Protocol: api.ProtocolFromString("TCP"), Port: 53},
	{Name: "metrics", Port: 9091}, // no protocol: TCP
}

func (g gen) world() (*policy.Snapshot, []netip.Addr) {
	s := &policy.Snapshot{Node: node}
	s.Config.IPv6 = true
	s.Config.EndpointToHostAction = g.pick("DROP", "ACCEPT", "RETURN", "")
	if g.chance(0.3) {
		s.Config.FailsafeInbound = []api.ProtoPort{{Protocol: "TCP", Port: 22}, {Protocol: "TCP", Port: 80, Net: "10.65.1.0/24"}}
	}
	addrs := []netip.Addr{hostV4, hostV6,
		netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("198.51.100.3"), netip.MustParseAddr("8.8.8.8"),
		netip.MustParseAddr("10.0.0.11"), netip.MustParseAddr("2001:db8:bad::1"), netip.MustParseAddr("2001:4860::8888")}
	// A user profile whose labels compete with the endpoints' own.
	s.Profiles = append(s.Profiles, api.Profile{
		ObjectMeta: api.ObjectMeta{Name: "extra"},
		Spec: api.ProfileSpec{
			LabelsToApply: map[string]string{"app": "cache", "tier": "back"},
			Ingress:       []api.Rule{{Action: api.Log}, {Action: api.Deny, Protocol: proto("UDP")}},
			Egress:        []api.Rule{{Action: api.Pass, Protocol: proto("TCP")}, {Action: api.Allow}},
		},
	})
	for ns, labels := range namespaces {
		s.Profiles = append(s.Profiles, nsProfile(ns, labels))
		s.Profiles = append(s.Profiles, saProfile(ns, "web", map[string]string{"role": "frontend"}))
		s.Profiles = append(s.Profiles, saProfile(ns, "db", map[string]string{"role": "backend"}))
	}
	n := 4 + g.r.IntN(6)
	for i := 0; i < n; i++ {
		ns := g.pick("ns1", "ns2", "ns3")
		labels := map[string]string{}
		if app := g.pick("web", "db", "cache", ""); app != "" {
			labels["app"] = app
		}
		if t := g.pick("front", "back", ""); t != "" {
			labels["tier"] = t
		}
		v4 := netip.AddrFrom4([4]byte{10, 65, 0, byte(i + 1)})
		v6 := netip.MustParseAddr(fmt.Sprintf("fd00:65::%x", i+1))
		var opts []wepOpt
		if i >= 5 || g.chance(0.2) {
			opts = append(opts, onNode("node2"))
			v4 = netip.AddrFrom4([4]byte{10, 65, 1, byte(i + 1)})
		}
		if acct := g.pick("web", "db", ""); acct != "" {
			opts = append(opts, sa(acct))
		}
		var ps []api.WorkloadEndpointPort
		for _, p := range endpointPorts {
			if g.chance(0.35) {
				ps = append(ps, p)
			}
		}
		opts = append(opts, namedPorts(ps...))
		if g.chance(0.3) {
			opts = append(opts, func(w *api.WorkloadEndpoint) {
				// First or last: the first profile's labels win.
				if g.chance(0.5) {
					w.Spec.Profiles = append([]string{"extra"}, w.Spec.Profiles...)
				} else {
					w.Spec.Profiles = append(w.Spec.Profiles, "extra")
				}
			})
		}
		ips := []string{v4.String()}
		if g.chance(0.7) {
			ips = append(ips, v6.String())
			addrs = append(addrs, v6)
		}
		addrs = append(addrs, v4)
		s.WorkloadEndpoints = append(s.WorkloadEndpoints,
			wep(ns, fmt.Sprintf("pod%d", i), fmt.Sprintf("cali%011x", 0xabc000+i), labels, ips, opts...))
	}
	s.NetworkSets = append(s.NetworkSets, api.NetworkSet{
		ObjectMeta: api.ObjectMeta{Name: "partners", Namespace: "ns1", Labels: map[string]string{"role": "partner"}},
		Spec:       api.NetworkSetSpec{Nets: []string{"203.0.113.0/24"}},
	})
	s.GlobalNetworkSets = append(s.GlobalNetworkSets, api.GlobalNetworkSet{
		ObjectMeta: api.ObjectMeta{Name: "blocked", Labels: map[string]string{"role": "blocked"}},
		Spec:       api.GlobalNetworkSetSpec{Nets: []string{"198.51.100.0/24", "2001:db8:bad::/48"}},
	})
	if g.chance(0.5) {
		s.GlobalNetworkSets = append(s.GlobalNetworkSets, api.GlobalNetworkSet{
			ObjectMeta: api.ObjectMeta{Name: "internet", Labels: map[string]string{"role": "internet"}},
			Spec:       api.GlobalNetworkSetSpec{Nets: []string{"0.0.0.0/0", "::/0"}},
		})
	}
	s.HostEndpoints = append(s.HostEndpoints, api.HostEndpoint{
		ObjectMeta: api.ObjectMeta{Name: "node2-eth0", Labels: map[string]string{"role": "node"}},
		Spec:       api.HostEndpointSpec{Node: "node2", InterfaceName: "eth0", ExpectedIPs: []string{"10.0.0.11"}},
	})
	switch g.r.IntN(3) {
	case 0:
		s.HostEndpoints = append(s.HostEndpoints, hep("node1-eth0", "eth0",
			map[string]string{"role": "node", "host": "node1"}, []string{hostV4.String(), hostV6.String()}))
	case 1:
		s.HostEndpoints = append(s.HostEndpoints, hep("node1-all", "*", map[string]string{"host": "node1"}, nil, "kns.ns1"))
	}
	if g.chance(0.5) {
		s.Tiers = append(s.Tiers, tier("security", 100, api.Action(g.pick("Deny", "Pass"))))
	}
	hasSecurity := len(s.Tiers) > 0
	np := 1 + g.r.IntN(7)
	var last struct {
		selector, tier, ns, name string
		order                    *float64
	}
	for i := 0; i < np; i++ {
		name := fmt.Sprintf("p%d", i)
		tierName := ""
		if hasSecurity && g.chance(0.3) {
			tierName = "security"
			name = "security." + name
		}
		var order *float64
		switch g.r.IntN(4) {
		case 1:
			order = ptr(10.0)
		case 2:
			order = ptr(100.0)
		case 3:
			order = ptr(float64(g.r.IntN(3) * 50))
		}
		var types []api.PolicyType
		switch g.r.IntN(4) {
		case 1:
			types = []api.PolicyType{api.PolicyTypeIngress}
		case 2:
			types = []api.PolicyType{api.PolicyTypeEgress}
		case 3:
			types = []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress}
		}
		ns := g.pick("ns1", "ns2", "ns3", "")
		selector := g.pick("", "all()", "app == 'web'", "app == 'db'", "has(app)", "tier == 'back'",
			"app in {'web', 'cache'}", "!has(tier)", "role == 'node'", "host == 'node1'", "has(host)")
		if i > 0 && g.chance(0.3) {
			// Reuse the previous policy's selector, tier, order and kind,
			// making adjacent policies with one selector: a policy group.
			selector, order, tierName, ns = last.selector, last.order, last.tier, last.ns
			name = strings.TrimPrefix(last.name, "security.") + "x"
			if tierName != "" {
				name = tierName + "." + name
			}
		}
		last.selector, last.order, last.tier, last.ns, last.name = selector, order, tierName, ns, name
		var in, out []api.Rule
		for j := g.r.IntN(4); j > 0; j-- {
			in = append(in, g.rule(ns))
		}
		for j := g.r.IntN(4); j > 0; j-- {
			out = append(out, g.rule(ns))
		}
		saSel := ""
		if g.chance(0.15) {
			saSel = g.pick("role == 'frontend'", "all()", "role != 'backend'")
		}
		if ns != "" {
			s.NetworkPolicies = append(s.NetworkPolicies, np2(ns, name, api.NetworkPolicySpec{
				Tier: tierName, Order: order, Selector: selector, ServiceAccountSelector: saSel,
				Types: types, Ingress: in, Egress: out}))
			continue
		}
		nsSel := ""
		if g.chance(0.2) {
			nsSel = g.pick("team == 'blue'", "all()", "env != 'prod'")
		}
		s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, gnp(name, api.GlobalNetworkPolicySpec{
			Tier: tierName, Order: order, Selector: selector, NamespaceSelector: nsSel, ServiceAccountSelector: saSel,
			Types: types, Ingress: in, Egress: out}))
	}
	return s, addrs
}

// np2 is np without defaulting the types, so that the compiler's own
// defaulting is exercised too.
func np2(ns, name string, spec api.NetworkPolicySpec) api.NetworkPolicy {
	return api.NetworkPolicy{ObjectMeta: api.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
}

func (g gen) rule(ns string) api.Rule {
	r := api.Rule{Action: api.Action(g.pick("Allow", "Allow", "Allow", "Deny", "Deny", "Pass", "Log"))}
	switch g.r.IntN(9) {
	case 1, 2:
		r.Protocol = proto("TCP")
	case 3:
		r.Protocol = proto("UDP")
	case 4:
		r.Protocol = protoNum(6)
	case 5:
		r.Protocol = protoNum(17)
	case 6:
		r.Protocol = proto("ICMP")
		if g.chance(0.6) {
			r.ICMP = &api.ICMPFields{Type: ptr(8)}
			if g.chance(0.3) {
				r.ICMP.Code = ptr(g.r.IntN(2))
			}
		} else if g.chance(0.3) {
			r.NotICMP = &api.ICMPFields{Type: ptr(0)}
		}
	case 7:
		r.Protocol = proto("ICMPv6")
		if g.chance(0.5) {
			r.ICMP = &api.ICMPFields{Type: ptr(128)}
		}
	case 8:
		r.Protocol = proto("SCTP")
	}
	if r.Protocol == nil && g.chance(0.1) {
		r.NotProtocol = proto("UDP")
	}
	if g.chance(0.05) {
		r.IPVersion = ptr(g.r.IntN(2)*2 + 4)
		if r.Protocol != nil && (r.Protocol.StrVal == "ICMP" || r.Protocol.StrVal == "ICMPv6") {
			r.IPVersion = nil
		}
	}
	portsOK := r.Protocol != nil && r.Protocol.SupportsPorts()
	r.Source = g.entity(ns, portsOK && g.chance(0.15))
	r.Destination = g.entity(ns, portsOK && g.chance(0.6))
	return r
}

func (g gen) entity(ns string, withPorts bool) api.EntityRule {
	var e api.EntityRule
	if g.chance(0.3) {
		e.Selector = g.pick("app == 'web'", "app == 'db'", "has(app)", "role == 'partner'", "role == 'blocked'",
			"role == 'internet'", "role == 'node'", "tier != 'front'", "all()")
	}
	if g.chance(0.12) {
		e.NotSelector = g.pick("app == 'db'", "role == 'blocked'", "has(tier)")
	}
	if g.chance(0.2) {
		e.NamespaceSelector = g.pick("team == 'blue'", "all()", "global()", "env == 'dev'")
	}
	if g.chance(0.1) {
		if g.chance(0.5) {
			e.ServiceAccounts = &api.ServiceAccountMatch{Names: []string{g.pick("web", "db")}}
		} else {
			e.ServiceAccounts = &api.ServiceAccountMatch{Selector: g.pick("role == 'backend'", "all()")}
		}
	}
	nets := []string{"10.65.0.0/24", "10.65.0.1/32", "203.0.113.0/24", "0.0.0.0/0", "fd00:65::/64", "10.0.0.0/8", "fd00:65::2/128"}
	if g.chance(0.15) {
		e.Nets = append(e.Nets, g.pick(nets...))
		if g.chance(0.4) {
			e.Nets = append(e.Nets, g.pick(nets...))
		}
	}
	if g.chance(0.1) {
		e.NotNets = append(e.NotNets, g.pick("10.65.0.2/32", "10.65.1.0/24", "fd00:65::3/128", "10.0.0.0/30"))
		if g.chance(0.3) {
			e.NotNets = append(e.NotNets, g.pick("10.65.0.3/32", "203.0.113.8/29"))
		}
	}
	if withPorts {
		for i := 1 + g.r.IntN(3); i > 0; i-- {
			e.Ports = append(e.Ports, ports(g.pick("80", "443", "8000:9000", "http", "dns", "metrics", "53", "22"))...)
		}
		if g.chance(0.15) {
			e.NotPorts = ports(g.pick("8080", "http", "9090"))
		}
	}
	return e
}

func (g gen) packet(addrs []netip.Addr) refPacket {
	for {
		src, dst := addrs[g.r.IntN(len(addrs))], addrs[g.r.IntN(len(addrs))]
		if src == dst || src.Is6() != dst.Is6() {
			continue
		}
		p := refPacket{v6: src.Is6(), src: src, dst: dst}
		switch g.r.IntN(5) {
		case 0, 1:
			p.proto = 6
		case 2:
			p.proto = 17
		case 3:
			p.proto = 132
		case 4:
			p.proto = 1
			if p.v6 {
				p.proto = 58
			}
			p.icmpType = []uint8{8, 0, 3, 128, 129}[g.r.IntN(5)]
			p.icmpCode = uint8(g.r.IntN(2))
			return p
		}
		p.sport = []uint16{40000, 53, 80}[g.r.IntN(3)]
		p.dport = []uint16{80, 443, 53, 9090, 9091, 8080, 8500, 22, 179, 5000}[g.r.IntN(10)]
		return p
	}
}

// TestCompiledRulesAgreeWithReference checks, for many random clusters and
// packets, that the compiled rules (run through the simulator) decide every
// new connection exactly as Calico's semantics do.
func TestCompiledRulesAgreeWithReference(t *testing.T) {
	worlds, packets := 500, 300
	if testing.Short() {
		worlds = 40
	}
	checked, allowed := 0, 0
	for w := 0; w < worlds; w++ {
		seed := uint64(w)
		g := gen{rand.New(rand.NewPCG(seed, 42))}
		s, addrs := g.world()
		res := policy.Compile(s)
		if len(res.Problems) > 0 {
			t.Fatalf("world %d: problems: %v", w, res.Problems)
		}
		checkConsistent(t, res)
		sets := map[int]*sim.Sets{}
		for _, f := range []*policy.Family{res.V4, res.V6} {
			ss, err := sim.NewSets(f)
			if err != nil {
				t.Fatal(err)
			}
			sets[f.Version] = ss
		}
		r := newRef(s, hostV4, hostV6)
		for i := 0; i < packets; i++ {
			p := g.packet(addrs)
			pt, ok := r.route(p)
			if !ok {
				continue
			}
			want := r.decide(p)
			got, err := simulate(res, sets, pt, p)
			if err != nil {
				t.Fatalf("world %d packet %+v: %v", w, p, err)
			}
			checked++
			if want {
				allowed++
			}
			if (got.Verdict == sim.Accept) != want || got.Logged != r.logs {
				js, _ := json.MarshalIndent(struct {
					NP  []api.NetworkPolicy
					GNP []api.GlobalNetworkPolicy
					HEP []api.HostEndpoint
					T   []api.Tier
				}{s.NetworkPolicies, s.GlobalNetworkPolicies, s.HostEndpoints, s.Tiers}, "", " ")
				t.Fatalf("world %d: packet %s %v:%d -> %v:%d proto %d icmp %d/%d via %+v: reference allows=%v (logs %d), compiled %v (logs %d)\ntrace: %s\n%s",
					w, map[bool]string{true: "v6", false: "v4"}[p.v6], p.src, p.sport, p.dst, p.dport, p.proto, p.icmpType, p.icmpCode,
					pt, want, r.logs, got.Verdict, got.Logged, strings.Join(got.Trace, " "), js)
			}
		}
	}
	// Guard against a generator that only produces trivial cases.
	if checked < worlds*packets/4 || allowed < checked/10 || allowed > checked*9/10 {
		t.Errorf("weak test: %d packets checked, %d allowed", checked, allowed)
	}
	t.Logf("%d packets checked, %d allowed", checked, allowed)
}
