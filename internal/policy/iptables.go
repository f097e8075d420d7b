package policy

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Table names this package writes to.
const (
	TableFilter = "filter"
	TableNAT    = "nat"
	TableRaw    = "raw"
	TableMangle = "mangle"
)

// Dir says which end of a packet a match looks at.
type Dir uint8

const (
	Src Dir = iota
	Dst
)

// PortRange is an inclusive range of ports; First == Last for one port.
type PortRange struct {
	First, Last uint16
}

func (p PortRange) String() string {
	if p.First == p.Last {
		return strconv.Itoa(int(p.First))
	}
	return strconv.Itoa(int(p.First)) + ":" + strconv.Itoa(int(p.Last))
}

// Criterion is one term of a rule's match. The concrete types below are
// the only implementations; a consumer that needs to interpret rules (a
// simulator, a diff tool) type-switches over them.
type Criterion interface {
	write(b *strings.Builder)
}

// Match is a conjunction of criteria, rendered in order.
type Match []Criterion

// MatchProtocol matches the IP protocol by name ("tcp") or, when Name is
// empty, by number.
type MatchProtocol struct {
	Not  bool
	Name string
	Num  uint8
}

// MatchNet matches the source or destination address against a CIDR.
type MatchNet struct {
	Not bool
	Dir Dir
	Net netip.Prefix
}

// MatchSet matches the source or destination address (and, with IPPort,
// the protocol and port) against an ipset.
type MatchSet struct {
	Not    bool
	Dir    Dir
	Set    string
	IPPort bool
}

// MatchPorts matches the source or destination port against up to
// MultiportSlots multiport slots (a range takes two). It requires a
// preceding protocol match for tcp, udp, sctp or udplite.
type MatchPorts struct {
	Not   bool
	Dir   Dir
	Ports []PortRange
}

// MultiportSlots is iptables' limit on the slots of one multiport match.
const MultiportSlots = 15

// Slots is how many multiport slots the match's ports take.
func (m MatchPorts) Slots() int {
	n := 0
	for _, p := range m.Ports {
		n += p.slots()
	}
	return n
}

// slots is 1 for a single port, 2 for a range.
func (p PortRange) slots() int {
	if p.First == p.Last {
		return 1
	}
	return 2
}

// MatchICMP matches the ICMP (V6: ICMPv6) type and optionally the code.
type MatchICMP struct {
	Not     bool
	V6      bool
	Type    uint8
	HasCode bool
	Code    uint8
}

// MatchMark matches packets whose mark, masked with Mask, equals Mark.
type MatchMark struct {
	Not  bool
	Mark uint32
	Mask uint32
}

// MatchConntrack matches the conntrack state list, e.g.
// "RELATED,ESTABLISHED", "INVALID" or "DNAT".
type MatchConntrack struct {
	Not    bool
	States string
}

// MatchIface matches the input (or, with Out, output) interface; a
// trailing "+" is iptables' prefix wildcard.
type MatchIface struct {
	Out  bool
	Name string
}

// MatchRPFilter is the strict reverse-path check (the rpfilter match):
// it matches packets whose source address the host routes back out of the
// interface they arrived on, or, with Not, those it does not (spoofed
// sources). ValidMark makes the route lookup use the packet's mark, so
// that policy routing by mark is honoured. It renders as iptables-save
// prints it: options, then --invert (not a leading "!").
type MatchRPFilter struct {
	Not       bool
	ValidMark bool
}

// MatchAddrType matches the kind of the source or destination address as
// the host's routing tables see it (the addrtype match); Type is one of
// the kernel's route types, e.g. "LOCAL" for the host's own addresses.
type MatchAddrType struct {
	Not  bool
	Dir  Dir
	Type string
}

// AddrTypeLocal is MatchAddrType's type of the host's own addresses.
const AddrTypeLocal = "LOCAL"

func not(b *strings.Builder, n bool) {
	if n {
		b.WriteString("! ")
	}
}

func (m MatchProtocol) write(b *strings.Builder) {
	not(b, m.Not)
	b.WriteString("-p ")
	if m.Name != "" {
		b.WriteString(m.Name)
	} else {
		b.WriteString(strconv.Itoa(int(m.Num)))
	}
}

func (m MatchNet) write(b *strings.Builder) {
	not(b, m.Not)
	if m.Dir == Src {
		b.WriteString("--source ")
	} else {
		b.WriteString("--destination ")
	}
	b.WriteString(m.Net.String())
}

func (m MatchSet) write(b *strings.Builder) {
	b.WriteString("-m set ")
	not(b, m.Not)
	b.WriteString("--match-set ")
	b.WriteString(m.Set)
	d := "src"
	if m.Dir == Dst {
		d = "dst"
	}
	b.WriteString(" " + d)
	if m.IPPort {
		b.WriteString("," + d)
	}
}

func (m MatchPorts) write(b *strings.Builder) {
	b.WriteString("-m multiport ")
	not(b, m.Not)
	if m.Dir == Src {
		b.WriteString("--source-ports ")
	} else {
		b.WriteString("--destination-ports ")
	}
	for i, p := range m.Ports {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.String())
	}
}

func (m MatchICMP) write(b *strings.Builder) {
	if m.V6 {
		b.WriteString("-m icmp6 ")
		not(b, m.Not)
		b.WriteString("--icmpv6-type ")
	} else {
		b.WriteString("-m icmp ")
		not(b, m.Not)
		b.WriteString("--icmp-type ")
	}
	b.WriteString(strconv.Itoa(int(m.Type)))
	if m.HasCode {
		b.WriteString("/" + strconv.Itoa(int(m.Code)))
	}
}

func (m MatchMark) write(b *strings.Builder) {
	b.WriteString("-m mark ")
	not(b, m.Not)
	b.WriteString("--mark " + markString(m.Mark) + "/" + markString(m.Mask))
}

// markString prints a mark as iptables-save does: 0 as "0", anything else
// in hex.
func markString(m uint32) string {
	if m == 0 {
		return "0"
	}
	return fmt.Sprintf("%#x", m)
}

func (m MatchAddrType) write(b *strings.Builder) {
	b.WriteString("-m addrtype ")
	not(b, m.Not)
	if m.Dir == Src {
		b.WriteString("--src-type ")
	} else {
		b.WriteString("--dst-type ")
	}
	b.WriteString(m.Type)
}

func (m MatchConntrack) write(b *strings.Builder) {
	b.WriteString("-m conntrack ")
	not(b, m.Not)
	b.WriteString("--ctstate " + m.States)
}

func (m MatchRPFilter) write(b *strings.Builder) {
	b.WriteString("-m rpfilter")
	if m.ValidMark {
		b.WriteString(" --validmark")
	}
	if m.Not {
		b.WriteString(" --invert")
	}
}

func (m MatchIface) write(b *strings.Builder) {
	if m.Out {
		b.WriteString("--out-interface ")
	} else {
		b.WriteString("--in-interface ")
	}
	b.WriteString(m.Name)
}

// Action is what a rule does with a matching packet. A nil Action only
// counts the packet (iptables' rule without a target).
type Action interface {
	write(b *strings.Builder)
}

type (
	// Accept ends traversal and lets the packet through.
	Accept struct{}
	// Drop discards the packet.
	Drop struct{}
	// Reject discards the packet and tells the sender.
	Reject struct{}
	// Return goes back to the calling chain.
	Return struct{}
	// Jump calls Chain; a Return there comes back here.
	Jump struct{ Chain string }
	// Goto continues in Chain; a Return there goes to this chain's caller.
	Goto struct{ Chain string }
	// SetMark sets the bits of Mark selected by Mask (Mark 0 clears them)
	// and continues.
	SetMark struct{ Mark, Mask uint32 }
	// Log writes the packet to the kernel log and continues.
	Log struct{ Prefix string }
	// Masquerade source-NATs to the outgoing interface's address, with
	// source ports from ToPorts ("1024-65535") when set. RandomFully
	// picks each port at random (--random-fully), as felix does wherever
	// iptables and the kernel support it.
	Masquerade struct {
		ToPorts     string
		RandomFully bool
	}
	// SNAT source-NATs to the given address (To may end in ":ports").
	SNAT struct {
		To          string
		RandomFully bool
	}
	// NoTrack exempts the packet from connection tracking and continues;
	// only valid in the raw table.
	NoTrack struct{}
)

func (Accept) write(b *strings.Builder) { b.WriteString("--jump ACCEPT") }
func (Drop) write(b *strings.Builder)   { b.WriteString("--jump DROP") }
func (Reject) write(b *strings.Builder) { b.WriteString("--jump REJECT") }
func (Return) write(b *strings.Builder) { b.WriteString("--jump RETURN") }
func (a Jump) write(b *strings.Builder) { b.WriteString("--jump " + a.Chain) }
func (a Goto) write(b *strings.Builder) { b.WriteString("--goto " + a.Chain) }
func (a SetMark) write(b *strings.Builder) {
	b.WriteString("--jump MARK --set-mark " + markString(a.Mark) + "/" + markString(a.Mask))
}
func (a Log) write(b *strings.Builder) {
	fmt.Fprintf(b, `--jump LOG --log-prefix "%s: " --log-level 5`, a.Prefix)
}
func (a Masquerade) write(b *strings.Builder) {
	b.WriteString("--jump MASQUERADE")
	if a.ToPorts != "" {
		b.WriteString(" --to-ports " + a.ToPorts)
	}
	if a.RandomFully {
		b.WriteString(" --random-fully")
	}
}
func (a SNAT) write(b *strings.Builder) {
	b.WriteString("--jump SNAT --to-source " + a.To)
	if a.RandomFully {
		b.WriteString(" --random-fully")
	}
}
func (NoTrack) write(b *strings.Builder) { b.WriteString("--jump NOTRACK") }

// Rule is one iptables rule of a chain.
type Rule struct {
	Match   Match
	Action  Action
	Comment []string
	// Origin says what the rule enforces in the policy model; nil for
	// a rule with no place of its own (see Origin). It is not rendered.
	Origin *Origin
}

// Chain is one of our (cali-*) chains with its complete contents.
type Chain struct {
	Name  string
	Rules []Rule
	// Endpoint is set on the chains that apply an endpoint's policy.
	Endpoint *ChainEndpoint
}

// Hook is the one rule that sends packets from a built-in chain
// (PREROUTING, INPUT, FORWARD, OUTPUT, POSTROUTING) into ours. Insert hooks
// go first in the built-in chain, Append hooks last.
type Hook struct {
	Chain  string
	Rule   Rule
	Append bool
}

// HashPrefix starts the hash comment of every rule we write, so that our
// rules can be told apart from everyone else's when reading the kernel's
// tables back.
const HashPrefix = "cali:"

const hashLen = 16

// maxCommentLen is iptables' limit on a comment's length.
const maxCommentLen = 256

// safeComment replaces what cannot be quoted reliably for iptables-restore
// (anything but letters, digits and " _@%+=:,./-") with "_", as felix does,
// and cuts the comment to iptables' limit.
func safeComment(c string) string {
	b := []byte(c)
	for i, ch := range b {
		ok := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' ||
			strings.IndexByte(" _@%+=:,./-", ch) >= 0
		if !ok {
			b[i] = '_'
		}
	}
	if len(b) > maxCommentLen {
		b = b[:maxCommentLen]
	}
	return string(b)
}

// tail renders the comments, the match and the action: everything after
// the hash comment.
func (r *Rule) tail() string {
	var b strings.Builder
	for _, c := range r.Comment {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(`-m comment --comment "` + safeComment(c) + `"`)
	}
	for _, m := range r.Match {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		m.write(&b)
	}
	if r.Action != nil {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		r.Action.write(&b)
	}
	return b.String()
}

// body renders everything after "-A <chain>": the given hash fragment and
// the tail.
func (r *Rule) body(hashFrag string) string {
	return joinFrag(hashFrag, r.tail())
}

func joinFrag(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + " " + b
}

// MatchString renders only the match criteria, for logs and tests.
func (r *Rule) MatchString() string {
	var b strings.Builder
	for i, m := range r.Match {
		if i > 0 {
			b.WriteByte(' ')
		}
		m.write(&b)
	}
	return b.String()
}

// Hashes returns the hash of each rule: a SHA-224 of the chain name, the
// rule's text (with the literal "HASH" where the hash comment goes) and how
// many rules with the same text come before it in the chain, 16 characters
// of base64. A rule's hash names the rule and its place among its equals,
// never what precedes it, so that inserting a rule changes no other rule's
// hash: the programmer can then insert into a chain in the kernel instead
// of rewriting it (felix chains each hash over the previous one, which
// makes every change below the first changed rule a rewrite). The hashes of
// a chain are unique, so the list of them read back from the kernel still
// shows a changed, missing, moved or foreign rule.
func (c *Chain) Hashes() []string {
	return ruleHashes(c.Name, c.Rules)
}

func ruleHashes(chain string, rules []Rule) []string {
	tails := make([]string, len(rules))
	for i := range rules {
		tails[i] = rules[i].tail()
	}
	return hashTails(chain, tails)
}

func hashTails(chain string, tails []string) []string {
	hashes := make([]string, len(tails))
	h := sha256.New224()
	prefix := []byte("-A " + chain + " HASH")
	// seen counts the rules of each text so far; a short chain counts by
	// looking back instead.
	var seen map[string]int
	if len(tails) > 8 {
		seen = make(map[string]int, len(tails))
	}
	var sum []byte
	var num [20]byte
	for i, t := range tails {
		n := 0
		if seen != nil {
			n = seen[t]
			seen[t]++
		} else {
			for _, u := range tails[:i] {
				if u == t {
					n++
				}
			}
		}
		h.Reset()
		h.Write(prefix)
		if t != "" {
			h.Write([]byte{' '})
			h.Write([]byte(t))
		}
		// The occurrence after a NUL, which no rule's text holds.
		h.Write([]byte{0})
		h.Write(strconv.AppendInt(num[:0], int64(n), 10))
		sum = h.Sum(sum[:0])
		hashes[i] = base64.RawURLEncoding.EncodeToString(sum)[:hashLen]
	}
	return hashes
}

func hashFragment(hash string) string {
	return `-m comment --comment "` + HashPrefix + hash + `"`
}

// Hash returns the hash comment value of the hook rule (without
// HashPrefix), computed like a chain of one rule named after the built-in
// chain.
func (h Hook) Hash() string {
	return ruleHashes(h.Chain, []Rule{h.Rule})[0]
}

// Line renders the hook as an iptables-restore line: "-I <chain> 1 ..." or,
// for an Append hook, "-A <chain> ...".
func (h Hook) Line() string {
	verb := "-I " + h.Chain + " 1 "
	if h.Append {
		verb = "-A " + h.Chain + " "
	}
	return verb + h.Rule.body(hashFragment(h.Hash()))
}

// Lines renders the chain's rules as iptables-restore "-A" lines, each
// tagged with its hash comment.
func (c *Chain) Lines() []string {
	tails := make([]string, len(c.Rules))
	for i := range c.Rules {
		tails[i] = c.Rules[i].tail()
	}
	return c.lines(tails, hashTails(c.Name, tails))
}

// LinesHashed is Lines for a caller that has the chain's Hashes already
// (a programmer hashes every chain to diff it): they are not computed
// again.
func (c *Chain) LinesHashed(hashes []string) []string {
	tails := make([]string, len(c.Rules))
	for i := range c.Rules {
		tails[i] = c.Rules[i].tail()
	}
	return c.lines(tails, hashes)
}

// LineHashed is line i of LinesHashed alone, for a caller that writes
// one rule of a long chain.
func (c *Chain) LineHashed(i int, hash string) string {
	return "-A " + c.Name + " " + joinFrag(hashFragment(hash), c.Rules[i].tail())
}

func (c *Chain) lines(tails, hashes []string) []string {
	lines := make([]string, len(c.Rules))
	for i := range c.Rules {
		lines[i] = "-A " + c.Name + " " + joinFrag(hashFragment(hashes[i]), tails[i])
	}
	return lines
}

// Render returns the iptables-restore input (for use with --noflush) that
// makes each given chain of table exactly as desired: the ":chain" header
// flushes (or creates) it, then its rules are appended. Chains not listed
// are left alone, so other software's chains and our own stale ones
// survive; the caller deletes stale cali-* chains itself. The given hooks
// are written after the chains, so the caller passes only those missing
// from the kernel.
func Render(table string, chains []Chain, hooks ...Hook) string {
	var b strings.Builder
	b.WriteString("*" + table + "\n")
	for i := range chains {
		b.WriteString(":" + chains[i].Name + " - [0:0]\n")
	}
	for i := range chains {
		c := &chains[i]
		tails := make([]string, len(c.Rules))
		size := 0
		for j := range c.Rules {
			tails[j] = c.Rules[j].tail()
			size += len(tails[j]) + len(c.Name) + 48
		}
		b.Grow(size)
		for j, h := range hashTails(c.Name, tails) {
			b.WriteString("-A " + c.Name + " ")
			b.WriteString(hashFragment(h))
			if tails[j] != "" {
				b.WriteByte(' ')
				b.WriteString(tails[j])
			}
			b.WriteByte('\n')
		}
	}
	for _, h := range hooks {
		b.WriteString(h.Line())
		b.WriteByte('\n')
	}
	b.WriteString("COMMIT\n")
	return b.String()
}
