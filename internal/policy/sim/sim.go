// Package sim runs packets through the rules that package policy compiles,
// with iptables' semantics, so that compiled policy can be checked without
// a kernel.
//
// # Model
//
// A Packet (addresses, protocol, ports or ICMP type/code, conntrack state,
// incoming mark) enters a built-in chain of a Family's table (raw
// PREROUTING or OUTPUT, mangle PREROUTING or POSTROUTING, filter INPUT,
// FORWARD or OUTPUT, nat POSTROUTING) through interfaces given by name. The built-in chain
// holds only our hook rules and accepts by default, as on a host where no
// other software has rules. Traverse follows jumps, gotos and returns,
// evaluates every match type policy produces (IP set membership from the
// Family's IPSets, multiport, ICMP, marks, conntrack state, interface
// wildcards, the reverse-path check and the LOCAL address type against the
// host's Routes) and applies
// mark changes and NOTRACK, and returns the verdict with a trace of the
// rules that matched (Result.Hits: chain, position, depth and the rule,
// whose policy.Origin says what it enforces; package explain reads
// them).
//
// Walk strings the tables together the way netfilter does for a packet to
// the host, through it or from it: raw, then mangle PREROUTING (for
// packets that arrive), then (on the packet's way) a destination NAT the
// caller describes, then filter, then, for packets that leave, mangle
// POSTROUTING and nat POSTROUTING. The mark carries from table to table; a packet raw
// exempted from conntrack is UNTRACKED from then on and is not NAT-ed. An
// ACCEPT ends only its own table; DROP and REJECT end the walk.
//
// # What it does not model
//
// Connection tracking itself (the caller says what state the packet is in;
// only the raw table, which runs before conntrack, sees no state, as the
// kernel's conntrack match reports INVALID there), other software's rules,
// routing beyond the reverse-path check, and the kernel's own checks. Only
// the constructs package policy generates are understood.
//
// The reverse-path check (rpfilter) sees a simplified routing table,
// Routes: a host route to each local workload address through its
// interface (what the CNI plugin installs) and every other address through
// one uplink. The address type match only knows LOCAL: the host's own
// addresses, listed in Routes, and loopback. Host-local addresses in the
// reverse-path check, policy routing by mark (--validmark),
// blackhole and tunnel routes are not modelled: a workload interface's
// packet passes exactly when its source is one of that workload's own
// addresses, or is a source the kernel's match always lets through (the
// unspecified address, IPv6 link-local, 0.0.0.0 to a broadcast or local
// multicast address, anything on lo).
//
// # Thread safety
//
// Traverse and Walk only read their arguments; they may be called
// concurrently. A Sets index built by NewSets is immutable.
package sim

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/internal/policy"
)

// Packet is what the rules look at.
type Packet struct {
	Src, Dst netip.Addr
	// Proto is the IP protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6,
	// 132 SCTP, ...).
	Proto            uint8
	SrcPort, DstPort uint16
	ICMPType         uint8
	ICMPCode         uint8
	// State is the conntrack state: "NEW" (the default when empty),
	// "ESTABLISHED", "RELATED", "INVALID" or "UNTRACKED".
	State string
	// DNAT says conntrack has destination-NATed the connection.
	DNAT bool
	// Mark is the packet mark on entry.
	Mark uint32
}

// Verdict is the fate of a packet in a built-in chain.
type Verdict int

const (
	Accept Verdict = iota
	Drop
	Reject
)

func (v Verdict) String() string {
	switch v {
	case Accept:
		return "ACCEPT"
	case Drop:
		return "DROP"
	case Reject:
		return "REJECT"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Result is the outcome of a traversal.
type Result struct {
	Verdict Verdict
	// Mark is the packet mark when traversal ended.
	Mark uint32
	// NAT is "MASQUERADE" or "SNAT <addr>" when a NAT rule fired.
	NAT string
	// Logged counts LOG rules that fired.
	Logged int
	// Untracked says a NOTRACK rule fired.
	Untracked bool
	// Trace lists "chain#index" for each rule that matched, in order.
	Trace []string
	// Hits are the same rules, structured: package explain maps them back
	// to the policy model through each rule's policy.Origin.
	Hits []Hit
}

// Hit is one rule that matched the packet.
type Hit struct {
	// Chain is the rule's chain: one of the table's, or the built-in
	// chain the traversal started in (whose rules are the table's hooks,
	// inserted ones first).
	Chain string
	// Index is the rule's position in the chain, from 0.
	Index int
	// Depth is how many chains deep the rule was: 0 in the built-in
	// chain, 1 in a chain it jumped to, and so on. A goto replaces the
	// chain at its depth, as the kernel's stack does.
	Depth int
	// Rule is the rule itself.
	Rule *policy.Rule
}

// Sets indexes what rules look up outside the packet: a family's IP sets
// for membership tests and, once WithRoutes has added them, the host's
// routes for the reverse-path check.
type Sets struct {
	nets   map[string][]netip.Prefix
	ipPort map[string]map[string]bool
	routes *Routes
}

// WithRoutes returns a copy of s that answers reverse-path checks from r.
// Without routes, a traversal that reaches an rpfilter match fails.
func (s *Sets) WithRoutes(r Routes) *Sets {
	c := *s
	c.routes = &r
	return &c
}

// Routes is the host's routing table as the reverse-path check and the
// address type match see it (see the package doc for what it leaves out).
type Routes struct {
	// Workloads maps each local workload address to its interface.
	Workloads map[netip.Addr]string
	// Uplink is the interface every other address is routed through.
	Uplink string
	// Local are the host's own addresses (the local routing table): an
	// addrtype LOCAL match holds for them and for loopback addresses.
	Local []netip.Addr
}

// RoutesFor returns the routes of the node that s describes: one to each
// address in the ipNetworks of s's local workload endpoints through their
// interfaceName, everything else through uplink. The host's own addresses
// are those of its Node (spec.bgp), of its host endpoints (expectedIPs)
// and of s.HostInterfaces.
func RoutesFor(s *policy.Snapshot, uplink string) Routes {
	r := Routes{Workloads: map[netip.Addr]string{}, Uplink: uplink}
	for _, w := range s.WorkloadEndpoints {
		if w.Spec.Node != s.Node || w.Spec.InterfaceName == "" {
			continue
		}
		for _, n := range w.Spec.IPNetworks {
			if a, ok := parseAddr(n); ok {
				r.Workloads[a] = w.Spec.InterfaceName
			}
		}
	}
	var local []string
	for _, n := range s.Nodes {
		if n.Name == s.Node && n.Spec.BGP != nil {
			local = append(local, n.Spec.BGP.IPv4Address, n.Spec.BGP.IPv6Address)
		}
	}
	for _, h := range s.HostEndpoints {
		if h.Spec.Node == s.Node {
			local = append(local, h.Spec.ExpectedIPs...)
		}
	}
	for _, as := range s.HostInterfaces {
		for _, a := range as {
			local = append(local, a.String())
		}
	}
	for _, l := range local {
		if a, ok := parseAddr(l); ok && !slices.Contains(r.Local, a) {
			r.Local = append(r.Local, a)
		}
	}
	return r
}

// parseAddr parses an address, or the address of a CIDR.
func parseAddr(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(strings.SplitN(s, "/", 2)[0])
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// isLocal reports whether a is one of the host's addresses.
func (r Routes) isLocal(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || slices.Contains(r.Local, a)
}

// Via returns the interface a packet to a leaves by.
func (r Routes) Via(a netip.Addr) string {
	if i, ok := r.Workloads[a.Unmap()]; ok {
		return i
	}
	return r.Uplink
}

// localMulticast4 is 224.0.0.0/24, the link-local multicast block DHCP and
// routing protocols use.
var localMulticast4 = netip.MustParsePrefix("224.0.0.0/24")

// reversePathOK is the kernel's strict rpfilter check of a packet that
// arrived on in.
func (r Routes) reversePathOK(p *Packet, in string) bool {
	switch {
	case in == "lo":
		return true
	case p.Src.Is4() && p.Src.IsUnspecified():
		// A DHCP client has no address yet.
		return p.Dst == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || localMulticast4.Contains(p.Dst)
	case p.Src.Is6() && p.Src.IsUnspecified():
		// Duplicate address detection: not routable, the match passes it.
		return true
	case p.Src.Is6() && p.Src.IsLinkLocalUnicast():
		// Looked up on the incoming interface itself, which has an
		// fe80::/64 route like every IPv6 interface.
		return true
	}
	return in != "" && r.Via(p.Src) == in
}

// NewSets indexes the sets of f.
func NewSets(f *policy.Family) (*Sets, error) {
	s := &Sets{nets: map[string][]netip.Prefix{}, ipPort: map[string]map[string]bool{}}
	for _, set := range f.IPSets {
		switch set.Type {
		case policy.SetTypeNet:
			var ps []netip.Prefix
			for _, m := range set.Members {
				var p netip.Prefix
				var err error
				if strings.Contains(m, "/") {
					p, err = netip.ParsePrefix(m)
				} else {
					var a netip.Addr
					a, err = netip.ParseAddr(m)
					p = netip.PrefixFrom(a, a.BitLen())
				}
				if err != nil {
					return nil, fmt.Errorf("parse member %q of %s: %w", m, set.Name, err)
				}
				ps = append(ps, p)
			}
			s.nets[set.Name] = ps
		case policy.SetTypeIPPort:
			ms := map[string]bool{}
			for _, m := range set.Members {
				ms[m] = true
			}
			s.ipPort[set.Name] = ms
		default:
			return nil, fmt.Errorf("set %s: unknown type %q", set.Name, set.Type)
		}
	}
	return s, nil
}

func (s *Sets) containsNet(set string, a netip.Addr) (bool, error) {
	ps, ok := s.nets[set]
	if !ok {
		if _, ok := s.ipPort[set]; ok {
			return false, fmt.Errorf("set %s is hash:ip,port, matched as hash:net", set)
		}
		return false, fmt.Errorf("rule uses set %s, which does not exist", set)
	}
	for _, p := range ps {
		if p.Contains(a) {
			return true, nil
		}
	}
	return false, nil
}

func (s *Sets) containsIPPort(set string, a netip.Addr, proto uint8, port uint16) (bool, error) {
	ms, ok := s.ipPort[set]
	if !ok {
		return false, fmt.Errorf("rule uses set %s as hash:ip,port, which does not exist", set)
	}
	name := map[uint8]string{6: "tcp", 17: "udp", 132: "sctp"}[proto]
	if name == "" {
		return false, nil
	}
	return ms[a.String()+","+name+":"+strconv.Itoa(int(port))], nil
}

var protoNumbers = map[string]uint8{
	"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58, "ipv6-icmp": 58, "sctp": 132, "udplite": 136,
}

func hasPorts(proto uint8) bool {
	return proto == 6 || proto == 17 || proto == 132 || proto == 136
}

// maxSteps bounds a traversal so that a rule loop is reported, not hung on.
const maxSteps = 1_000_000

// Traverse runs p through the built-in chain (e.g. "FORWARD") of table
// ("raw", "mangle", "nat" or "filter") of f, entering on interface in and
// leaving on out (either may be empty). It returns an error for a rule it
// cannot evaluate (a missing chain or set, an action the table does not
// allow), which means the compiled rules are broken.
func Traverse(f *policy.Family, sets *Sets, table, builtin string, p Packet, in, out string) (Result, error) {
	var t *policy.Table
	switch table {
	case policy.TableFilter:
		t = &f.Filter
	case policy.TableNAT:
		t = &f.NAT
	case policy.TableRaw:
		t = &f.Raw
		// raw runs before conntrack has looked at the packet.
		p.State, p.DNAT = "INVALID", false
	case policy.TableMangle:
		t = &f.Mangle
	default:
		return Result{}, fmt.Errorf("unknown table %q", table)
	}
	if p.State == "" {
		p.State = "NEW"
	}
	// The built-in chain holds our hooks: inserted ones first, appended
	// ones last.
	var hooks []policy.Rule
	for _, h := range t.Hooks {
		if h.Chain == builtin && !h.Append {
			hooks = append(hooks, h.Rule)
		}
	}
	for _, h := range t.Hooks {
		if h.Chain == builtin && h.Append {
			hooks = append(hooks, h.Rule)
		}
	}
	tr := &traversal{table: table, t: t, sets: sets, p: p, in: in, out: out, res: Result{Mark: p.Mark}}
	builtinChain := &policy.Chain{Name: builtin, Rules: hooks}
	v, err := tr.run(builtinChain)
	tr.res.Verdict = v
	tr.res.Mark = tr.p.Mark
	return tr.res, err
}

type traversal struct {
	table   string
	t       *policy.Table
	sets    *Sets
	p       Packet
	in, out string
	res     Result
	steps   int
}

type frame struct {
	chain *policy.Chain
	i     int
}

// run executes from the built-in chain; falling off its end accepts (the
// default policy).
func (tr *traversal) run(start *policy.Chain) (Verdict, error) {
	stack := []frame{{chain: start}}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.i >= len(top.chain.Rules) {
			stack = stack[:len(stack)-1]
			continue
		}
		tr.steps++
		if tr.steps > maxSteps {
			return Drop, fmt.Errorf("more than %d rules evaluated: loop?", maxSteps)
		}
		r := &top.chain.Rules[top.i]
		idx := top.i
		top.i++
		ok, err := tr.matches(r.Match)
		if err != nil {
			return Drop, fmt.Errorf("%s rule %d: %w", top.chain.Name, idx, err)
		}
		if !ok {
			continue
		}
		tr.res.Trace = append(tr.res.Trace, top.chain.Name+"#"+strconv.Itoa(idx))
		tr.res.Hits = append(tr.res.Hits, Hit{Chain: top.chain.Name, Index: idx, Depth: len(stack) - 1, Rule: r})
		switch a := r.Action.(type) {
		case nil:
		case policy.Accept:
			return Accept, nil
		case policy.Drop:
			return Drop, nil
		case policy.Reject:
			if tr.table != policy.TableFilter {
				return Drop, fmt.Errorf("%s rule %d: REJECT in the %s table", top.chain.Name, idx, tr.table)
			}
			return Reject, nil
		case policy.NoTrack:
			if tr.table != policy.TableRaw {
				return Drop, fmt.Errorf("%s rule %d: NOTRACK in the %s table", top.chain.Name, idx, tr.table)
			}
			// NOTRACK continues; later conntrack matches see the packet
			// as untracked.
			tr.res.Untracked = true
			tr.p.State = "UNTRACKED"
		case policy.Return:
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				// RETURN in a built-in chain applies its policy.
				return Accept, nil
			}
		case policy.Jump:
			c := tr.t.Chain(a.Chain)
			if c == nil {
				return Drop, fmt.Errorf("%s rule %d: jump to missing chain %s", top.chain.Name, idx, a.Chain)
			}
			stack = append(stack, frame{chain: c})
		case policy.Goto:
			c := tr.t.Chain(a.Chain)
			if c == nil {
				return Drop, fmt.Errorf("%s rule %d: goto missing chain %s", top.chain.Name, idx, a.Chain)
			}
			if len(stack) == 1 {
				return Drop, fmt.Errorf("goto from a built-in chain")
			}
			stack[len(stack)-1] = frame{chain: c}
		case policy.SetMark:
			tr.p.Mark = (tr.p.Mark &^ a.Mask) ^ a.Mark
		case policy.Log:
			tr.res.Logged++
		case policy.Masquerade:
			tr.res.NAT = "MASQUERADE"
			return Accept, nil
		case policy.SNAT:
			tr.res.NAT = "SNAT " + a.To
			return Accept, nil
		default:
			return Drop, fmt.Errorf("%s rule %d: unknown action %T", top.chain.Name, idx, a)
		}
	}
	return Accept, nil
}

func (tr *traversal) matches(m policy.Match) (bool, error) {
	if err := checkMatch(m); err != nil {
		return false, err
	}
	for _, c := range m {
		ok, err := tr.match(c)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// checkMatch rejects what iptables itself would reject: more than one
// protocol, source or destination option in a rule, and port or ICMP
// matches without the protocol they need.
func checkMatch(m policy.Match) error {
	var protos, srcNets, dstNets int
	var proto policy.MatchProtocol
	for _, c := range m {
		switch c := c.(type) {
		case policy.MatchProtocol:
			protos++
			proto = c
		case policy.MatchNet:
			if c.Dir == policy.Src {
				srcNets++
			} else {
				dstNets++
			}
		case policy.MatchPorts:
			n := proto.Num
			if proto.Name != "" {
				n = protoNumbers[proto.Name]
			}
			if protos == 0 || proto.Not || !hasPorts(n) {
				return fmt.Errorf("port match without a preceding tcp, udp, sctp or udplite protocol match")
			}
		case policy.MatchICMP:
			n := proto.Num
			if proto.Name != "" {
				n = protoNumbers[proto.Name]
			}
			if want := map[bool]uint8{false: 1, true: 58}[c.V6]; protos == 0 || proto.Not || n != want {
				return fmt.Errorf("icmp match without a preceding protocol %d match", want)
			}
		}
	}
	if protos > 1 || srcNets > 1 || dstNets > 1 {
		return fmt.Errorf("iptables allows one protocol, source and destination option per rule")
	}
	return nil
}

func (tr *traversal) match(c policy.Criterion) (bool, error) {
	p := &tr.p
	addr := func(d policy.Dir) netip.Addr {
		if d == policy.Src {
			return p.Src
		}
		return p.Dst
	}
	port := func(d policy.Dir) uint16 {
		if d == policy.Src {
			return p.SrcPort
		}
		return p.DstPort
	}
	switch m := c.(type) {
	case policy.MatchProtocol:
		want := m.Num
		if m.Name != "" {
			n, ok := protoNumbers[m.Name]
			if !ok {
				return false, fmt.Errorf("unknown protocol name %q", m.Name)
			}
			want = n
		}
		return (p.Proto == want) != m.Not, nil
	case policy.MatchNet:
		return m.Net.Contains(addr(m.Dir)) != m.Not, nil
	case policy.MatchSet:
		var in bool
		var err error
		if m.IPPort {
			in, err = tr.sets.containsIPPort(m.Set, addr(m.Dir), p.Proto, port(m.Dir))
		} else {
			in, err = tr.sets.containsNet(m.Set, addr(m.Dir))
		}
		return in != m.Not, err
	case policy.MatchPorts:
		if !hasPorts(p.Proto) {
			return false, fmt.Errorf("port match on protocol %d", p.Proto)
		}
		if n := m.Slots(); n > policy.MultiportSlots {
			return false, fmt.Errorf("multiport match with %d slots", n)
		}
		in := false
		for _, r := range m.Ports {
			if pt := port(m.Dir); pt >= r.First && pt <= r.Last {
				in = true
			}
		}
		return in != m.Not, nil
	case policy.MatchICMP:
		want := uint8(1)
		if m.V6 {
			want = 58
		}
		if p.Proto != want {
			return false, nil
		}
		in := p.ICMPType == m.Type && (!m.HasCode || p.ICMPCode == m.Code)
		return in != m.Not, nil
	case policy.MatchMark:
		return (p.Mark&m.Mask == m.Mark) != m.Not, nil
	case policy.MatchConntrack:
		in := false
		for _, s := range strings.Split(m.States, ",") {
			if s == p.State || (s == "DNAT" && p.DNAT) {
				in = true
			}
		}
		return in != m.Not, nil
	case policy.MatchRPFilter:
		if tr.sets.routes == nil {
			return false, fmt.Errorf("rpfilter match, but no routes were given (Sets.WithRoutes)")
		}
		return tr.sets.routes.reversePathOK(p, tr.in) != m.Not, nil
	case policy.MatchAddrType:
		if tr.sets.routes == nil {
			return false, fmt.Errorf("addrtype match, but no routes were given (Sets.WithRoutes)")
		}
		if m.Type != policy.AddrTypeLocal {
			return false, fmt.Errorf("addrtype %s is not modelled", m.Type)
		}
		return tr.sets.routes.isLocal(addr(m.Dir)) != m.Not, nil
	case policy.MatchIface:
		name := tr.in
		if m.Out {
			name = tr.out
		}
		if strings.HasSuffix(m.Name, "+") {
			return name != "" && strings.HasPrefix(name, strings.TrimSuffix(m.Name, "+")), nil
		}
		return name == m.Name, nil
	}
	return false, fmt.Errorf("unknown criterion %T", c)
}

// Path is the way a packet crosses the host.
type Path int

const (
	// Input: a packet for the host itself.
	Input Path = iota
	// Forward: a packet the host routes.
	Forward
	// Output: a packet the host sends.
	Output
)

func (p Path) String() string {
	switch p {
	case Input:
		return "input"
	case Forward:
		return "forward"
	case Output:
		return "output"
	}
	return "Path(" + strconv.Itoa(int(p)) + ")"
}

// Hop is one packet's way through the host.
type Hop struct {
	Path Path
	// In and Out are the interfaces the packet arrives on and leaves by
	// (In is empty on Output, Out on Input).
	In, Out string
	// DNAT, when valid, is where the nat table (kube-proxy's rules for a
	// NodePort, say) sends a tracked packet: it happens after mangle
	// PREROUTING (nat OUTPUT for Output), so the filter table and mangle
	// POSTROUTING see the new destination and conntrack state DNAT, while
	// raw and mangle PREROUTING see the original one. Out is the interface
	// the new destination is routed by; every table sees that one (the
	// kernel's filter OUTPUT would still see the interface of the original
	// destination, which is why policy leaves DNAT-ed packets to mangle
	// POSTROUTING).
	DNAT netip.AddrPort
}

// Step is what one built-in chain did with the packet.
type Step struct {
	Table, Chain string
	Result       Result
}

// WalkResult is the fate of a packet on its way through the host.
type WalkResult struct {
	// Verdict is Accept when every table let the packet through, else
	// the DROP or REJECT of the last step.
	Verdict Verdict
	// Steps are the built-in chains the packet went through, in order;
	// the last one decided a Drop or Reject.
	Steps []Step
	// Untracked says the raw table exempted the packet from conntrack.
	Untracked bool
	// Mark is the packet mark at the end.
	Mark uint32
	// NAT is set when nat POSTROUTING masqueraded or SNAT-ed the packet.
	NAT string
	// Logged counts LOG rules that fired in all tables.
	Logged int
}

// DecidedIn returns "table chain" of the last step, where a dropped
// packet was dropped.
func (w WalkResult) DecidedIn() string {
	if len(w.Steps) == 0 {
		return ""
	}
	s := w.Steps[len(w.Steps)-1]
	return s.Table + " " + s.Chain
}

// Trace lists "table:chain#index" for every rule that matched on the way.
func (w WalkResult) Trace() []string {
	var out []string
	for _, s := range w.Steps {
		for _, t := range s.Result.Trace {
			out = append(out, s.Table+":"+t)
		}
	}
	return out
}

// dnatStep marks where the destination NAT of a Hop happens.
const dnatStep = "dnat"

// walkSteps are netfilter's hooks in priority order for each path, less
// the ones we put nothing in (mangle INPUT, FORWARD and OUTPUT, nat
// INPUT). Mangle POSTROUTING (priority -150) comes before nat POSTROUTING
// (100), so it sees the packet before source NAT.
var walkSteps = map[Path][][2]string{
	Input: {
		{policy.TableRaw, "PREROUTING"}, {policy.TableMangle, "PREROUTING"}, {dnatStep, ""},
		{policy.TableFilter, "INPUT"},
	},
	Forward: {
		{policy.TableRaw, "PREROUTING"}, {policy.TableMangle, "PREROUTING"}, {dnatStep, ""},
		{policy.TableFilter, "FORWARD"}, {policy.TableMangle, "POSTROUTING"}, {policy.TableNAT, "POSTROUTING"},
	},
	Output: {
		{policy.TableRaw, "OUTPUT"}, {dnatStep, ""},
		{policy.TableFilter, "OUTPUT"}, {policy.TableMangle, "POSTROUTING"}, {policy.TableNAT, "POSTROUTING"},
	},
}

// Walk runs p through every table on its way through the host (see the
// package doc).
func Walk(f *policy.Family, sets *Sets, h Hop, p Packet) (WalkResult, error) {
	steps, ok := walkSteps[h.Path]
	if !ok {
		return WalkResult{}, fmt.Errorf("unknown path %v", h.Path)
	}
	if p.State == "" {
		p.State = "NEW"
	}
	var w WalkResult
	for _, st := range steps {
		table, chain := st[0], st[1]
		if w.Untracked && (table == dnatStep || table == policy.TableNAT) {
			// The nat table only sees tracked connections.
			continue
		}
		if table == dnatStep {
			if h.DNAT.IsValid() {
				p.Dst, p.DstPort, p.DNAT = h.DNAT.Addr(), h.DNAT.Port(), true
			}
			continue
		}
		r, err := Traverse(f, sets, table, chain, p, h.In, h.Out)
		w.Steps = append(w.Steps, Step{Table: table, Chain: chain, Result: r})
		w.Logged += r.Logged
		if err != nil {
			return w, fmt.Errorf("%s %s: %w", table, chain, err)
		}
		p.Mark = r.Mark
		w.Mark = r.Mark
		if r.Untracked {
			w.Untracked = true
			p.State = "UNTRACKED"
		}
		if r.NAT != "" {
			w.NAT = r.NAT
		}
		if r.Verdict != Accept {
			w.Verdict = r.Verdict
			return w, nil
		}
	}
	w.Verdict = Accept
	return w, nil
}
