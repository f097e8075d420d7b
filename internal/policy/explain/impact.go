package explain

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// Change is a packet whose verdict a change of the cluster changes.
type Change struct {
	From, To End
	// Protocol and Port of the packet ("TCP", 443; "ICMP" echo requests
	// have no port).
	Protocol string `json:"protocol"`
	Port     uint16 `json:"port,omitempty"`
	// Before and After are the verdicts (of the packet and its replies).
	Before string `json:"before"`
	After  string `json:"after"`
	// Because names the endpoints' policy whose verdict changed:
	// "ingress of WorkloadEndpoint ns1/web", or "node1" for the node's own
	// rules.
	Because []string `json:"because"`
}

// ImpactReport is what Impact found.
type ImpactReport struct {
	Changes []Change `json:"changes"`
	// Endpoints, Peers and Ports say what was compared: every local
	// endpoint, every peer address, every protocol and port.
	Endpoints int `json:"endpoints"`
	Peers     int `json:"peers"`
	Ports     int `json:"ports"`
}

// probePort is a protocol and port to try.
type probePort struct {
	proto uint8
	port  uint16
}

// Impact compares the cluster before and after a change: for every pair
// of ends, where one is an endpoint on a node (a workload or host
// endpoint) and the other any endpoint, a node's host or a peer address
// (each network set's, each net the policies name, and one address
// nothing names), and
// for every protocol and port the policies of either state name (and one
// port none does), it explains the packet in both states and reports the
// ones whose verdict (with its replies) differs. The endpoints of both
// states count, so new and deleted endpoints are compared too (an
// endpoint that is not there gets nothing).
func Impact(before, after SnapshotFunc, uplink string) (*ImpactReport, error) {
	sb, err := before("")
	if err != nil {
		return nil, err
	}
	sa, err := after("")
	if err != nil {
		return nil, err
	}
	ends := mergeEnds(endpointEnds(sb), endpointEnds(sa))
	peers := append(slices.Clone(ends), mergeEnds(nodeEnds(sb), nodeEnds(sa))...)
	peers = append(peers, peerAddrs(sb, sa)...)
	ports := probePorts(sb, sa)
	rep := &ImpactReport{Endpoints: len(ends), Peers: len(peers), Ports: len(ports)}
	if uplink == "" {
		uplink = "eth0"
	}
	wb, wa := newWalker(before, uplink), newWalker(after, uplink)
	for _, e := range ends {
		for _, p := range peers {
			if p.Kind == e.Kind && p.Name == e.Name {
				continue
			}
			// Every endpoint is e in turn, so endpoint pairs are tried
			// from e only; hosts and addresses are tried both ways.
			pairs := [][2]End{{e, p}}
			if p.Kind == KindAddress || p.Kind == KindNode {
				pairs = append(pairs, [2]End{p, e})
			}
			for _, pair := range pairs {
				from, to := pair[0], pair[1]
				for _, pp := range ports {
					ch, err := compare(from, to, pp, wb, wa)
					if err != nil {
						return nil, err
					}
					if ch != nil {
						rep.Changes = append(rep.Changes, *ch)
					}
				}
			}
		}
	}
	slices.SortStableFunc(rep.Changes, func(a, b Change) int {
		return cmp.Or(strings.Compare(a.To.Name, b.To.Name), strings.Compare(a.From.Name, b.From.Name),
			strings.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
	})
	return rep, nil
}

// compare explains one packet in both states.
func compare(from, to End, pp probePort, before, after *walker) (*Change, error) {
	req := Request{From: from, To: to, Protocol: pp.proto, DstPort: pp.port}
	if pp.proto == 1 {
		req.ICMPType = 8
	}
	if pp.proto == 58 {
		req.ICMPType = 128
	}
	if _, _, err := pickAddrs(from, to); err != nil {
		return nil, nil // no common family: nothing to send
	}
	if (pp.proto == 1 || pp.proto == 58) && !familyFits(from, to, pp.proto == 58) {
		return nil, nil
	}
	b, err := before.explain(req)
	if err != nil {
		return nil, fmt.Errorf("%s -> %s: %w", from.Name, to.Name, err)
	}
	a, err := after.explain(req)
	if err != nil {
		return nil, fmt.Errorf("%s -> %s: %w", from.Name, to.Name, err)
	}
	vb, va := b.connection(), a.connection()
	if vb == va {
		return nil, nil
	}
	ch := &Change{From: b.From, To: b.To, Protocol: ProtocolName(pp.proto), Port: pp.port, Before: vb, After: va}
	ch.Because = changedSections(b, a)
	return ch, nil
}

// familyFits reports whether the ends' chosen addresses are of the ICMP
// version's family.
func familyFits(from, to End, v6 bool) bool {
	s, _, err := pickAddrs(from, to)
	return err == nil && s.Is6() == v6
}

// connection is the verdict of the packet and its replies.
func (e *Explanation) connection() string {
	if e.Verdict == Allow && e.Reply != nil && e.Reply.Verdict != Allow {
		return Deny + " (replies)"
	}
	return e.Verdict
}

// changedSections names the endpoint sections whose verdict differs, or,
// when none does, the nodes whose own rules decided differently (the
// final accept of a packet a policy now stops earlier is a consequence,
// not a cause).
func changedSections(b, a *Explanation) []string {
	if out := changed(b, a, true); len(out) > 0 {
		return out
	}
	return changed(b, a, false)
}

func changed(b, a *Explanation, endpoints bool) []string {
	verdicts := func(e *Explanation) map[string]string {
		out := map[string]string{}
		for _, hops := range [][]Hop{e.Hops, replyHops(e)} {
			for _, h := range hops {
				for _, s := range h.Sections {
					if (s.Endpoint != "") != endpoints {
						continue
					}
					key := h.Node
					if s.Endpoint != "" {
						key = fmt.Sprintf("%s of %s %s", s.Direction, s.EndpointKind, s.Endpoint)
						if s.PolicyKind != "normal" {
							key += " (" + s.PolicyKind + ")"
						}
					}
					if s.Verdict != None {
						out[key] = s.Verdict
					}
				}
			}
		}
		return out
	}
	vb, va := verdicts(b), verdicts(a)
	var out []string
	for k, v := range va {
		if vb[k] != v {
			out = append(out, k)
		}
	}
	for k := range vb {
		if _, ok := va[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func replyHops(e *Explanation) []Hop {
	if e.Reply == nil {
		return nil
	}
	return e.Reply.Hops
}

// endpointEnds are the workload and host endpoints that live on a node.
func endpointEnds(s *policy.Snapshot) []End {
	var out []End
	for i := range s.WorkloadEndpoints {
		w := &s.WorkloadEndpoints[i]
		if w.Spec.Node != "" && w.Spec.InterfaceName != "" && len(w.Spec.IPNetworks) > 0 {
			out = append(out, workloadEnd(w))
		}
	}
	for i := range s.HostEndpoints {
		h := &s.HostEndpoints[i]
		if e := hostEnd(s, h); h.Spec.Node != "" && len(e.Addrs) > 0 {
			out = append(out, e)
		}
	}
	return out
}

// nodeEnds are the nodes' hosts that have an address.
func nodeEnds(s *policy.Snapshot) []End {
	var out []End
	for i := range s.Nodes {
		if e := nodeEnd(&s.Nodes[i]); len(e.Addrs) > 0 {
			out = append(out, e)
		}
	}
	return out
}

// mergeEnds is a's ends and those of b not in a.
func mergeEnds(a, b []End) []End {
	out := slices.Clone(a)
	for _, e := range b {
		if !slices.ContainsFunc(out, func(o End) bool { return o.Kind == e.Kind && o.Name == e.Name }) {
			out = append(out, e)
		}
	}
	return out
}

// peerAddrs are addresses to try that are not endpoints': one in each
// net of every network set and every rule, and one outside all of them
// (per family in use).
func peerAddrs(ss ...*policy.Snapshot) []End {
	var nets []netip.Prefix
	add := func(raw []string) {
		for _, r := range raw {
			if p, err := parsePrefix(r); err == nil && !slices.Contains(nets, p) {
				nets = append(nets, p)
			}
		}
	}
	for _, s := range ss {
		for _, n := range s.NetworkSets {
			add(n.Spec.Nets)
		}
		for _, n := range s.GlobalNetworkSets {
			add(n.Spec.Nets)
		}
		for _, rules := range allRules(s) {
			for _, r := range rules {
				add(r.Source.Nets)
				add(r.Source.NotNets)
				add(r.Destination.Nets)
				add(r.Destination.NotNets)
			}
		}
	}
	var out []End
	seen := map[netip.Addr]bool{}
	v6 := false
	for _, n := range nets {
		a := inside(n)
		if a.Is6() {
			v6 = true
		}
		if seen[a] {
			continue
		}
		seen[a] = true
		// An address an endpoint or node has is tried as that.
		if e := resolveAddr(ss[len(ss)-1], a); e.Kind == KindAddress {
			out = append(out, e)
		}
	}
	candidates := []string{"203.0.113.254", "198.51.100.254", "192.0.2.254", "100.64.0.1", "8.8.8.8"}
	if v6 {
		candidates = append(candidates, "2001:db8:ffff::1", "2001:4860::8888")
	}
	found := map[bool]bool{}
	for _, c := range candidates {
		a := netip.MustParseAddr(c)
		if found[a.Is6()] || slices.ContainsFunc(nets, func(n netip.Prefix) bool { return n.Contains(a) }) {
			continue
		}
		found[a.Is6()] = true
		out = append(out, End{Kind: KindAddress, Name: a.String(), Addrs: []netip.Addr{a}})
	}
	return out
}

// inside is an address in n: its first host address for a network, the
// address itself for a host prefix.
func inside(n netip.Prefix) netip.Addr {
	a := n.Masked().Addr()
	if n.Bits() < a.BitLen() {
		a = a.Next()
	}
	return a
}

func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	return p.Masked(), err
}

// allRules are the rules of every policy and profile.
func allRules(s *policy.Snapshot) [][]api.Rule {
	var out [][]api.Rule
	for _, p := range s.NetworkPolicies {
		out = append(out, p.Spec.Ingress, p.Spec.Egress)
	}
	for _, p := range s.GlobalNetworkPolicies {
		out = append(out, p.Spec.Ingress, p.Spec.Egress)
	}
	for _, p := range s.Profiles {
		out = append(out, p.Spec.Ingress, p.Spec.Egress)
	}
	return out
}

// probePorts are the protocols and ports to try: every port (and each end
// of every range) the rules name, for the rule's protocol (TCP, UDP and
// SCTP when it names none), the ports of every endpoint's named ports,
// one port nothing names, and ICMP echo when a rule names ICMP.
func probePorts(ss ...*policy.Snapshot) []probePort {
	set := map[probePort]bool{}
	protos := map[uint8]bool{6: true, 17: true}
	named := map[string]bool{}
	for _, s := range ss {
		for _, rules := range allRules(s) {
			for _, r := range rules {
				var ps []uint8
				if r.Protocol != nil {
					if n, err := ProtocolNumber(protoString(*r.Protocol)); err == nil {
						ps = []uint8{n}
						protos[n] = true
					}
				} else {
					ps = []uint8{6, 17}
				}
				for _, e := range []api.EntityRule{r.Source, r.Destination} {
					for _, p := range append(slices.Clone(e.Ports), e.NotPorts...) {
						if p.PortName != "" {
							named[p.PortName] = true
							continue
						}
						for _, proto := range ps {
							set[probePort{proto, p.MinPort}] = true
							set[probePort{proto, p.MaxPort}] = true
						}
					}
				}
			}
		}
		for _, w := range s.WorkloadEndpoints {
			for _, p := range w.Spec.Ports {
				if named[p.Name] {
					n, err := ProtocolNumber(protoString(p.Protocol))
					if err != nil || n == 0 {
						n = 6
					}
					set[probePort{n, p.Port}] = true
				}
			}
		}
	}
	for proto := range protos {
		if hasPorts(proto) {
			for _, cand := range []uint16{80, 443, 8080, 12345, 40001} {
				if !set[probePort{proto, cand}] {
					set[probePort{proto, cand}] = true
					break
				}
			}
		} else {
			set[probePort{proto, 0}] = true
		}
	}
	out := make([]probePort, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b probePort) int { return cmp.Or(cmp.Compare(a.proto, b.proto), cmp.Compare(a.port, b.port)) })
	return out
}

func protoString(p api.Protocol) string {
	if n, err := p.NumValue(); err == nil {
		return strconv.Itoa(int(n))
	}
	return p.StrVal
}
