// Package sim runs packets through the rules that package policy compiles,
// with iptables' semantics, so that compiled policy can be checked without
// a kernel.
//
// # Model
//
// A Packet (addresses, protocol, ports or ICMP type/code, conntrack state,
// incoming mark) enters a built-in chain of a Family's table (filter INPUT,
// FORWARD or OUTPUT, nat POSTROUTING) through interfaces given by name. The
// built-in chain holds only our hook rules and accepts by default, as on a
// host where no other software has rules. Traverse follows jumps, gotos and
// returns, evaluates every match type policy produces (IP set membership
// from the Family's IPSets, multiport, ICMP, marks, conntrack state,
// interface wildcards) and applies mark changes, and returns the verdict
// with a trace of the rules that matched.
//
// # What it does not model
//
// Connection tracking itself (the caller says what state the packet is
// in), other tables, routing, and the kernel's own checks. Only the
// constructs package policy generates are understood.
//
// # Thread safety
//
// Traverse only reads its arguments; it may be called concurrently. A Sets
// index built by NewSets is immutable.
package sim

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/policy"
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
	// "ESTABLISHED", "RELATED" or "INVALID".
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
	// Trace lists "chain#index" for each rule that matched, in order.
	Trace []string
}

// Sets indexes a family's IP sets for membership tests.
type Sets struct {
	nets   map[string][]netip.Prefix
	ipPort map[string]map[string]bool
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
// ("filter" or "nat") of f, entering on interface in and leaving on out
// (either may be empty). It returns an error for a rule it cannot evaluate
// (a missing chain or set), which means the compiled rules are broken.
func Traverse(f *policy.Family, sets *Sets, table, builtin string, p Packet, in, out string) (Result, error) {
	var t *policy.Table
	switch table {
	case policy.TableFilter:
		t = &f.Filter
	case policy.TableNAT:
		t = &f.NAT
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
	tr := &traversal{t: t, sets: sets, p: p, in: in, out: out, res: Result{Mark: p.Mark}}
	builtinChain := &policy.Chain{Name: builtin, Rules: hooks}
	v, err := tr.run(builtinChain)
	tr.res.Verdict = v
	tr.res.Mark = tr.p.Mark
	return tr.res, err
}

type traversal struct {
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
		switch a := r.Action.(type) {
		case nil:
		case policy.Accept:
			return Accept, nil
		case policy.Drop:
			return Drop, nil
		case policy.Reject:
			return Reject, nil
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
		n := 0
		for _, r := range m.Ports {
			n++
			if r.First != r.Last {
				n++
			}
		}
		if n > 15 {
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
