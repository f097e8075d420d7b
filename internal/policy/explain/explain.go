package explain

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/sim"
)

// Kinds of End.
const (
	KindWorkload = "WorkloadEndpoint"
	KindHost     = "HostEndpoint"
	// KindNode is a node's host itself, named by its name or address,
	// without a host endpoint.
	KindNode = "Node"
	// KindAddress is an address no endpoint or node has: outside the
	// cluster, or a network set's.
	KindAddress = "Address"
)

// Verdicts.
const (
	Allow = "Allow"
	Deny  = "Deny"
	// None is a section's verdict when its policy decided nothing:
	// doNotTrack and preDNAT policy leave what they do not decide to
	// normal policy.
	None = "None"
)

// End is one end of a packet.
type End struct {
	Kind string `json:"kind"`
	// Name is "namespace/pod" of a workload, the name of a host endpoint
	// or node, or the address.
	Name string `json:"name"`
	// Node is where the endpoint lives; empty for an Address.
	Node string `json:"node,omitempty"`
	// Interface is a workload's host-side interface, or a host endpoint's
	// interface (empty for interfaceName "*").
	Interface string `json:"interface,omitempty"`
	// Addrs are the end's addresses, IPv4 first.
	Addrs []netip.Addr `json:"-"`
	// Address is the one the packet uses (set by Explain).
	Address string `json:"address,omitempty"`
}

// Resolve finds what spec names in the cluster s describes (any node's
// snapshot: they all hold every endpoint and node): "namespace/pod" (a
// workload endpoint, by pod or endpoint name), "hostendpoint/NAME" (or
// "hep/NAME"), "node/NAME", or an IP address, which is the workload, host
// endpoint or node that has it, else an outside Address.
func Resolve(s *policy.Snapshot, spec string) (End, error) {
	if a, err := netip.ParseAddr(spec); err == nil {
		return resolveAddr(s, a.Unmap()), nil
	}
	kind, name, ok := strings.Cut(spec, "/")
	if !ok || kind == "" || name == "" {
		return End{}, fmt.Errorf("%q: want namespace/pod, hostendpoint/NAME, node/NAME or an IP address", spec)
	}
	switch strings.ToLower(kind) {
	case "hostendpoint", "hep", "hostendpoints":
		for i := range s.HostEndpoints {
			if h := &s.HostEndpoints[i]; h.Name == name {
				return hostEnd(s, h), nil
			}
		}
		return End{}, fmt.Errorf("HostEndpoint %s: not found", name)
	case "node", "nodes":
		for i := range s.Nodes {
			if n := &s.Nodes[i]; n.Name == name {
				return nodeEnd(n), nil
			}
		}
		return End{}, fmt.Errorf("Node %s: not found", name)
	}
	var found []*api.WorkloadEndpoint
	for i := range s.WorkloadEndpoints {
		w := &s.WorkloadEndpoints[i]
		if w.Namespace == kind && (w.Spec.Pod == name || w.Name == name || w.Spec.Workload == name) {
			found = append(found, w)
		}
	}
	switch len(found) {
	case 0:
		return End{}, fmt.Errorf("no WorkloadEndpoint for pod %s in namespace %s", name, kind)
	case 1:
		return workloadEnd(found[0]), nil
	}
	var names []string
	for _, w := range found {
		names = append(names, w.Name)
	}
	return End{}, fmt.Errorf("pod %s/%s has %d endpoints (%s): name one", kind, name, len(found), strings.Join(names, ", "))
}

func resolveAddr(s *policy.Snapshot, a netip.Addr) End {
	for i := range s.WorkloadEndpoints {
		w := &s.WorkloadEndpoints[i]
		if slices.Contains(addrsOf(w.Spec.IPNetworks), a) {
			e := workloadEnd(w)
			e.Addrs = []netip.Addr{a}
			return e
		}
	}
	for i := range s.HostEndpoints {
		h := &s.HostEndpoints[i]
		if slices.Contains(addrsOf(h.Spec.ExpectedIPs), a) {
			e := hostEnd(s, h)
			e.Addrs = []netip.Addr{a}
			return e
		}
	}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if slices.Contains(nodeAddrs(n), a) {
			e := nodeEnd(n)
			e.Addrs = []netip.Addr{a}
			return e
		}
	}
	return End{Kind: KindAddress, Name: a.String(), Addrs: []netip.Addr{a}}
}

func workloadEnd(w *api.WorkloadEndpoint) End {
	name := w.Spec.Pod
	if name == "" {
		name = w.Name
	}
	return End{Kind: KindWorkload, Name: w.Namespace + "/" + name, Node: w.Spec.Node,
		Interface: w.Spec.InterfaceName, Addrs: v4First(addrsOf(w.Spec.IPNetworks))}
}

// hostEnd is a host endpoint: its expected addresses, else its node's.
func hostEnd(s *policy.Snapshot, h *api.HostEndpoint) End {
	e := End{Kind: KindHost, Name: h.Name, Node: h.Spec.Node, Addrs: v4First(addrsOf(h.Spec.ExpectedIPs))}
	if h.Spec.InterfaceName != "*" {
		e.Interface = h.Spec.InterfaceName
	}
	if len(e.Addrs) == 0 {
		for i := range s.Nodes {
			if s.Nodes[i].Name == h.Spec.Node {
				e.Addrs = nodeAddrs(&s.Nodes[i])
			}
		}
	}
	return e
}

func nodeEnd(n *api.Node) End {
	return End{Kind: KindNode, Name: n.Name, Node: n.Name, Addrs: nodeAddrs(n)}
}

// nodeAddrs are a node's BGP addresses, then its tunnel addresses.
func nodeAddrs(n *api.Node) []netip.Addr {
	var raw []string
	if b := n.Spec.BGP; b != nil {
		raw = append(raw, b.IPv4Address, b.IPv6Address, b.IPv4IPIPTunnelAddr)
	}
	raw = append(raw, n.Spec.IPv4VXLANTunnelAddr, n.Spec.IPv6VXLANTunnelAddr)
	return v4First(addrsOf(raw))
}

// addrsOf parses addresses and CIDRs ("10.0.0.1/24" is 10.0.0.1),
// skipping what does not parse.
func addrsOf(raw []string) []netip.Addr {
	var out []netip.Addr
	for _, r := range raw {
		if r == "" {
			continue
		}
		a, err := netip.ParseAddr(strings.SplitN(r, "/", 2)[0])
		if err == nil && !slices.Contains(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func v4First(as []netip.Addr) []netip.Addr {
	slices.SortStableFunc(as, func(a, b netip.Addr) int {
		switch {
		case a.Is4() == b.Is4():
			return 0
		case a.Is4():
			return -1
		}
		return 1
	})
	return as
}

// Request is a packet to explain.
type Request struct {
	From, To End
	// Protocol is the IP protocol number (6 TCP, 17 UDP, 1 ICMP, ...).
	Protocol uint8
	// SrcPort defaults to 40000 for protocols with ports.
	SrcPort, DstPort   uint16
	ICMPType, ICMPCode uint8
	// Node, when set, limits the explanation to what that node does to
	// the packet; for a packet between two Addresses it is the node that
	// routes it (required then).
	Node string
	// Uplink is the interface a node sends traffic for other nodes and
	// the outside by, and receives it on ("eth0" when empty).
	Uplink string
}

// Explanation is what happens to a packet and why.
type Explanation struct {
	// Verdict is Allow when every node on the way lets the packet
	// through, else Deny.
	Verdict string `json:"verdict"`
	Packet  Packet `json:"packet"`
	From    End    `json:"from"`
	To      End    `json:"to"`
	// Hops are the nodes the packet crosses, in order, up to the one
	// that dropped it.
	Hops []Hop `json:"hops"`
	// Reply is the fate of the packets that answer an allowed packet, on
	// their way back: established, they pass tracked policy, but
	// doNotTrack policy judges every packet (and an untracked connection
	// has no conntrack entry for its replies to match).
	Reply *Reply `json:"reply,omitempty"`
	// Problems are what the compiler had to leave out or enforce
	// differently on those nodes (a bad selector, an unsupported match).
	Problems []string `json:"problems,omitempty"`
}

// Reply is what happens to the answers of an allowed packet.
type Reply struct {
	Verdict string `json:"verdict"`
	Packet  Packet `json:"packet"`
	// State is the conntrack state the replies have on the first node
	// they cross: "ESTABLISHED", or "NEW" when doNotTrack policy let the
	// packet through untracked.
	State string `json:"state"`
	Hops  []Hop  `json:"hops"`
}

// Packet is the packet explained.
type Packet struct {
	Protocol        string `json:"protocol"`
	Source          string `json:"source"`
	SourcePort      uint16 `json:"sourcePort,omitempty"`
	Destination     string `json:"destination"`
	DestinationPort uint16 `json:"destinationPort,omitempty"`
	ICMPType        *uint8 `json:"icmpType,omitempty"`
	ICMPCode        *uint8 `json:"icmpCode,omitempty"`
}

// Hop is what one node does to the packet.
type Hop struct {
	Node string `json:"node"`
	// Path is "forward" (routed through the node), "input" (for the
	// host) or "output" (from the host).
	Path string `json:"path"`
	In   string `json:"in,omitempty"`
	Out  string `json:"out,omitempty"`
	// Verdict is Allow or Deny; DecidedIn is the built-in chain that
	// dropped a denied packet ("filter FORWARD").
	Verdict   string `json:"verdict"`
	DecidedIn string `json:"decidedIn,omitempty"`
	// Untracked says doNotTrack policy exempted the packet from
	// connection tracking on this node.
	Untracked bool `json:"untracked,omitempty"`
	// Sections are the policies met on the way: one per endpoint chain
	// the packet went through, and the node's own rules between them.
	Sections []Section `json:"sections"`
}

// Section is one endpoint's policy applied to the packet, or (with no
// Endpoint) the node's own rules.
type Section struct {
	// Endpoint names the endpoint whose policy this is; EndpointKind is
	// KindWorkload or KindHost.
	Endpoint     string `json:"endpoint,omitempty"`
	EndpointKind string `json:"endpointKind,omitempty"`
	// Direction is "ingress" or "egress" (of the endpoint).
	Direction string `json:"direction,omitempty"`
	// PolicyKind is "normal", "applyOnForward", "doNotTrack" or
	// "preDNAT".
	PolicyKind string `json:"policyKind,omitempty"`
	Table      string `json:"table"`
	Chain      string `json:"chain,omitempty"`
	// Verdict is Allow, Deny or None (nothing decided here).
	Verdict string `json:"verdict"`
	Steps   []Step `json:"steps"`
}

// Kinds of Step.
const (
	StepTier        = "tier"
	StepPolicy      = "policy"
	StepRule        = "rule"
	StepNoRule      = "no-rule-matched"
	StepTierDefault = "tier-default-action"
	StepProfile     = "profile"
	StepNoPolicy    = "no-policy"
	StepNoProfile   = "no-profile-allowed"
	StepNode        = "node"
)

// Step is one thing that happened to the packet.
type Step struct {
	Kind    string `json:"kind"`
	Tier    string `json:"tier,omitempty"`
	Policy  string `json:"policy,omitempty"`
	Profile string `json:"profile,omitempty"`
	// Rule is the index of the policy's or profile's rule that matched.
	Rule *int `json:"rule,omitempty"`
	// Action is what the step did: the rule's action, a tier's default.
	Action string `json:"action,omitempty"`
	// Text says it in words.
	Text string `json:"text"`
	// Rules are the iptables rules the packet matched for this step.
	Rules []IptablesRule `json:"rules,omitempty"`
}

// IptablesRule is one rule in the kernel.
type IptablesRule struct {
	Table string `json:"table"`
	Chain string `json:"chain"`
	// Number is the rule's position in its chain, from 1, as
	// `iptables -L --line-numbers` counts.
	Number int `json:"number"`
	// Hash is the rule's comment, "cali:<hash>".
	Hash string `json:"hash"`
	// Text is the rule as iptables-save prints it (without counters).
	Text string `json:"text"`
	// Packets and Bytes are the kernel's counters (explain --live).
	Packets *uint64 `json:"packets,omitempty"`
	Bytes   *uint64 `json:"bytes,omitempty"`
}

// Rules returns every iptables rule of the explanation, in order.
func (e *Explanation) Rules() []*IptablesRule {
	var out []*IptablesRule
	for h := range e.Hops {
		for s := range e.Hops[h].Sections {
			for st := range e.Hops[h].Sections[s].Steps {
				for r := range e.Hops[h].Sections[s].Steps[st].Rules {
					out = append(out, &e.Hops[h].Sections[s].Steps[st].Rules[r])
				}
			}
		}
	}
	return out
}

// SnapshotFunc returns the compiler input of the agent on node.
type SnapshotFunc func(node string) (*policy.Snapshot, error)

// ErrNoNode is returned for a packet between two addresses no node has
// when the Request names no node to route it.
var ErrNoNode = errors.New("neither end is on a node: give the node that routes the packet")

// Explain explains req with the compiled policy of each node on the way.
func Explain(req Request, snapshot SnapshotFunc) (*Explanation, error) {
	if req.Uplink == "" {
		req.Uplink = "eth0"
	}
	return newWalker(snapshot, req.Uplink).explain(req)
}

func (w *walker) explain(req Request) (*Explanation, error) {
	if req.Uplink == "" {
		req.Uplink = w.uplink
	}
	src, dst, err := pickAddrs(req.From, req.To)
	if err != nil {
		return nil, err
	}
	from, to := req.From, req.To
	from.Address, to.Address = src.String(), dst.String()
	pkt := sim.Packet{Src: src, Dst: dst, Proto: req.Protocol, DstPort: req.DstPort, ICMPType: req.ICMPType, ICMPCode: req.ICMPCode}
	if hasPorts(req.Protocol) {
		pkt.SrcPort = req.SrcPort
		if pkt.SrcPort == 0 {
			pkt.SrcPort = 40000
		}
	}
	ex := &Explanation{Packet: describePacket(pkt), From: from, To: to}
	hops, err := plan(from, to, req.Node, req.Uplink)
	if err != nil {
		return nil, err
	}
	ex.Verdict, ex.Hops, err = w.walk(hops, pkt, nil)
	if err != nil {
		return nil, err
	}
	if ex.Verdict == Allow {
		// The answers go back the other way, through the same nodes.
		rhops, err := plan(to, from, req.Node, req.Uplink)
		if err != nil {
			return nil, err
		}
		untracked := map[string]bool{}
		for _, h := range ex.Hops {
			untracked[h.Node] = h.Untracked
		}
		rpkt := reply(pkt)
		r := &Reply{Packet: describePacket(rpkt), State: "ESTABLISHED"}
		if len(rhops) > 0 && untracked[rhops[0].node] {
			r.State = "NEW"
		}
		r.Verdict, r.Hops, err = w.walk(rhops, rpkt, untracked)
		if err != nil {
			return nil, err
		}
		ex.Reply = r
	}
	seen := map[string]bool{}
	for _, hops := range [][]Hop{ex.Hops, replyHops(ex)} {
		for _, h := range hops {
			if seen[h.Node] {
				continue
			}
			seen[h.Node] = true
			for _, p := range w.compiled[h.Node].res.Problems {
				if !slices.Contains(ex.Problems, p) {
					ex.Problems = append(ex.Problems, p)
				}
			}
		}
	}
	return ex, nil
}

// compiled is one node's compiler input and output, and what explaining
// packets there needs of it, made once.
type compiled struct {
	s     *policy.Snapshot
	res   *policy.Result
	sets  map[int]*sim.Sets // by IP version, with the node's routes
	lines lineCache
}

func newCompiled(s *policy.Snapshot, res *policy.Result, uplink string) (*compiled, error) {
	c := &compiled{s: s, res: res, sets: map[int]*sim.Sets{}, lines: lineCache{}}
	routes := sim.RoutesFor(s, uplink)
	for _, f := range []*policy.Family{res.V4, res.V6} {
		if f == nil {
			continue
		}
		sets, err := sim.NewSets(f)
		if err != nil {
			return nil, err
		}
		c.sets[f.Version] = sets.WithRoutes(routes)
	}
	return c, nil
}

// walker explains packets, compiling each node once.
type walker struct {
	snapshot SnapshotFunc
	uplink   string
	compiled map[string]*compiled
}

func newWalker(snapshot SnapshotFunc, uplink string) *walker {
	return &walker{snapshot: snapshot, uplink: uplink, compiled: map[string]*compiled{}}
}

// walk explains pkt along hops up to the first that drops it. untracked,
// for replies, says on which nodes the connection is untracked: there
// the replies are NEW, elsewhere ESTABLISHED.
func (w *walker) walk(hops []plannedHop, pkt sim.Packet, untracked map[string]bool) (string, []Hop, error) {
	var out []Hop
	for _, h := range hops {
		c := w.compiled[h.node]
		if c == nil {
			s, err := w.snapshot(h.node)
			if err != nil {
				return "", nil, fmt.Errorf("node %s: %w", h.node, err)
			}
			if c, err = newCompiled(s, policy.Compile(s), w.uplink); err != nil {
				return "", nil, fmt.Errorf("node %s: %w", h.node, err)
			}
			w.compiled[h.node] = c
		}
		if untracked != nil {
			pkt.State = "ESTABLISHED"
			if untracked[h.node] {
				pkt.State = "NEW"
			}
		}
		hop, err := c.explainHop(h.hop, pkt)
		if err != nil {
			return "", nil, fmt.Errorf("node %s: %w", h.node, err)
		}
		out = append(out, hop)
		if hop.Verdict != Allow {
			return Deny, out, nil
		}
	}
	return Allow, out, nil
}

// reply is the answer to p: the addresses and ports swapped, an echo
// request's echo reply.
func reply(p sim.Packet) sim.Packet {
	r := p
	r.Src, r.Dst = p.Dst, p.Src
	r.SrcPort, r.DstPort = p.DstPort, p.SrcPort
	switch {
	case p.Proto == 1 && p.ICMPType == 8:
		r.ICMPType = 0
	case p.Proto == 58 && p.ICMPType == 128:
		r.ICMPType = 129
	}
	return r
}

// pickAddrs chooses the addresses of one family both ends have, IPv4
// first.
func pickAddrs(from, to End) (netip.Addr, netip.Addr, error) {
	for _, v6 := range []bool{false, true} {
		var s, d netip.Addr
		for _, a := range from.Addrs {
			if a.Is6() == v6 {
				s = a
				break
			}
		}
		for _, a := range to.Addrs {
			if a.Is6() == v6 {
				d = a
				break
			}
		}
		if s.IsValid() && d.IsValid() {
			if s == d {
				return s, d, fmt.Errorf("%s and %s are the same address %s", from.Name, to.Name, s)
			}
			return s, d, nil
		}
	}
	return netip.Addr{}, netip.Addr{}, fmt.Errorf("%s (%v) and %s (%v) have no address family in common", from.Name, from.Addrs, to.Name, to.Addrs)
}

type plannedHop struct {
	node string
	hop  sim.Hop
}

// plan lays out the nodes the packet crosses and its way through each:
// the source's node (egress of a workload, or the host sending), then the
// destination's when it is another node (ingress of a workload, or the
// host receiving). only, when set, keeps the hops on that node.
func plan(from, to End, only, uplink string) ([]plannedHop, error) {
	isHost := func(e End) bool { return e.Kind == KindHost || e.Kind == KindNode }
	hostIface := func(e End) string {
		if e.Interface != "" {
			return e.Interface
		}
		return uplink
	}
	var hops []plannedHop
	if from.Node != "" {
		h := sim.Hop{}
		sameNode := to.Node == from.Node
		switch {
		case isHost(from):
			h.Path = sim.Output
			h.Out = hostIface(from)
			if sameNode && to.Kind == KindWorkload {
				h.Out = to.Interface
			} else if sameNode {
				return nil, fmt.Errorf("%s and %s are the same host", from.Name, to.Name)
			}
		case sameNode && isHost(to):
			h.Path, h.In = sim.Input, from.Interface
		case sameNode:
			h.Path, h.In, h.Out = sim.Forward, from.Interface, to.Interface
		default:
			h.Path, h.In, h.Out = sim.Forward, from.Interface, uplink
		}
		hops = append(hops, plannedHop{node: from.Node, hop: h})
	}
	if to.Node != "" && to.Node != from.Node {
		h := sim.Hop{Path: sim.Forward, In: uplink, Out: to.Interface}
		if isHost(to) {
			h = sim.Hop{Path: sim.Input, In: hostIface(to)}
		}
		hops = append(hops, plannedHop{node: to.Node, hop: h})
	}
	if len(hops) == 0 {
		if only == "" {
			return nil, ErrNoNode
		}
		return []plannedHop{{node: only, hop: sim.Hop{Path: sim.Forward, In: uplink, Out: uplink}}}, nil
	}
	if only != "" {
		var kept []plannedHop
		for _, h := range hops {
			if h.node == only {
				kept = append(kept, h)
			}
		}
		if len(kept) == 0 {
			return nil, fmt.Errorf("the packet from %s to %s does not cross node %s", from.Name, to.Name, only)
		}
		hops = kept
	}
	return hops, nil
}

// ExplainHop walks pkt through node's compiled policy res (of snapshot
// s) along h, and explains what happened. uplink is the interface of
// every address that is not a local workload's, for the reverse-path
// check.
func ExplainHop(s *policy.Snapshot, res *policy.Result, h sim.Hop, pkt sim.Packet, uplink string) (Hop, error) {
	c, err := newCompiled(s, res, uplink)
	if err != nil {
		return Hop{}, err
	}
	return c.explainHop(h, pkt)
}

func (c *compiled) explainHop(h sim.Hop, pkt sim.Packet) (Hop, error) {
	f, version := c.res.V4, 4
	if pkt.Src.Is6() {
		f, version = c.res.V6, 6
	}
	out := Hop{Node: c.s.Node, Path: h.Path.String(), In: h.In, Out: h.Out}
	if f == nil {
		return out, fmt.Errorf("no IPv6 policy is compiled on node %s (ipv6Support is false)", c.s.Node)
	}
	w, err := sim.Walk(f, c.sets[version], h, pkt)
	if err != nil {
		return out, err
	}
	out.Verdict, out.Untracked = Allow, w.Untracked
	if w.Verdict != sim.Accept {
		out.Verdict = Deny
		out.DecidedIn = w.DecidedIn()
	}
	for _, st := range w.Steps {
		out.Sections = append(out.Sections, translate(tableOf(f, st.Table), st.Result.Hits, c.lines)...)
	}
	return out, nil
}

func tableOf(f *policy.Family, name string) *policy.Table {
	for _, t := range f.Tables() {
		if t.Name == name {
			return t
		}
	}
	return &policy.Table{Name: name}
}

func hasPorts(proto uint8) bool { return proto == 6 || proto == 17 || proto == 132 || proto == 136 }

// ProtocolNumber parses a protocol name (TCP, UDP, ICMP, ICMPv6, SCTP,
// UDPLite) or number.
func ProtocolNumber(s string) (uint8, error) {
	if n, err := strconv.ParseUint(s, 10, 8); err == nil {
		return uint8(n), nil
	}
	switch strings.ToLower(s) {
	case "tcp":
		return 6, nil
	case "udp":
		return 17, nil
	case "icmp":
		return 1, nil
	case "icmpv6":
		return 58, nil
	case "sctp":
		return 132, nil
	case "udplite":
		return 136, nil
	}
	return 0, fmt.Errorf("protocol %q: want TCP, UDP, SCTP, UDPLite, ICMP, ICMPv6 or a number", s)
}

// ProtocolName is Calico's name of a protocol number, or the number.
func ProtocolName(n uint8) string {
	switch n {
	case 6:
		return "TCP"
	case 17:
		return "UDP"
	case 1:
		return "ICMP"
	case 58:
		return "ICMPv6"
	case 132:
		return "SCTP"
	case 136:
		return "UDPLite"
	}
	return strconv.Itoa(int(n))
}

func describePacket(p sim.Packet) Packet {
	out := Packet{Protocol: ProtocolName(p.Proto), Source: p.Src.String(), Destination: p.Dst.String()}
	if hasPorts(p.Proto) {
		out.SourcePort, out.DestinationPort = p.SrcPort, p.DstPort
	}
	if p.Proto == 1 || p.Proto == 58 {
		t, c := p.ICMPType, p.ICMPCode
		out.ICMPType, out.ICMPCode = &t, &c
	}
	return out
}
