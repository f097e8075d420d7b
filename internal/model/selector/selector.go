package selector

import (
	"crypto/sha256"
	"encoding/base64"
	"slices"
	"strings"
)

// Selector is a parsed label selector.
type Selector interface {
	// Evaluate reports whether the labels match. all() and global() match
	// everything here; see EvaluateWith for namespaceSelector scoping.
	Evaluate(labels map[string]string) bool
	// String returns the canonical form, e.g. `(a == "b" && has(c))`.
	String() string
	// UniqueID returns a stable hash of the canonical form, identical to
	// Calico's selector ID ("s:" + base64url SHA-224).
	UniqueID() string
	// LabelKeys returns the label keys the selector refers to, sorted and
	// unique. The caller owns the returned slice.
	LabelKeys() []string
}

// EvaluateOpts chooses how the scope operators all() and global() evaluate.
// The zero value gives plain Evaluate semantics (both match everything).
type EvaluateOpts struct {
	// NamespaceSelector evaluates the selector as Calico evaluates a policy
	// rule's namespaceSelector: all() then matches only namespaced objects
	// and global() only non-namespaced ones.
	NamespaceSelector bool
	// Global says the object being matched is not namespaced (a
	// HostEndpoint, a GlobalNetworkSet). Only used with NamespaceSelector;
	// pass nil labels for such objects, since they have no namespace labels.
	Global bool
}

// EvaluateWith evaluates s under opts. A Selector not made by this package
// is evaluated with its own Evaluate.
func EvaluateWith(s Selector, labels map[string]string, opts EvaluateOpts) bool {
	if p, ok := s.(*parsed); ok {
		return p.root.eval(labels, opts)
	}
	return s.Evaluate(labels)
}

// UsesGlobal reports whether s contains the global() operator anywhere.
func UsesGlobal(s Selector) bool {
	if p, ok := s.(*parsed); ok {
		return p.global
	}
	// Re-parse rather than search the text: a quoted value may contain
	// "global()".
	p, err := parse(s.String())
	if err != nil {
		return false
	}
	return newParsed(p).global
}

// parsed is the package's Selector. Everything is computed in Parse so the
// value is immutable and needs no locking.
type parsed struct {
	root   *node
	canon  string
	id     string
	keys   []string
	global bool
}

func newParsed(root *node) *parsed {
	var b strings.Builder
	root.write(&b)
	canon := b.String()

	var keys []string
	global := false
	root.walk(func(n *node) {
		if n.key != "" {
			keys = append(keys, n.key)
		}
		if n.op == opGlobal {
			global = true
		}
	})
	slices.Sort(keys)
	keys = slices.Compact(keys)

	return &parsed{root: root, canon: canon, id: uniqueID(canon), keys: keys, global: global}
}

// uniqueID reproduces Calico's hash.MakeUniqueID("s", canon) so that IDs
// (and anything named after them, such as ipsets) agree with Calico's.
func uniqueID(canon string) string {
	h := sha256.New224()
	h.Write([]byte("s:"))
	h.Write([]byte(canon))
	return "s:" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

func (p *parsed) Evaluate(labels map[string]string) bool {
	return p.root.eval(labels, EvaluateOpts{})
}

func (p *parsed) String() string      { return p.canon }
func (p *parsed) UniqueID() string    { return p.id }
func (p *parsed) LabelKeys() []string { return slices.Clone(p.keys) }

type opKind uint8

const (
	opAll opKind = iota
	opGlobal
	opHas
	opEq
	opNe
	opContains
	opStartsWith
	opEndsWith
	opIn
	opNotIn
	opNot
	opAnd
	opOr
)

// node is one tree node. A single concrete type (instead of one type per
// operator behind an interface) keeps evaluation a plain switch with no
// dynamic dispatch.
type node struct {
	op   opKind
	key  string   // label key for the comparison operators and has()
	val  string   // value for ==, !=, contains, starts with, ends with
	set  []string // sorted, unique members for in / not in
	kids []*node  // operands of && and ||; kids[0] is the operand of !
}

func (n *node) eval(labels map[string]string, o EvaluateOpts) bool {
	switch n.op {
	case opAll:
		return !o.NamespaceSelector || !o.Global
	case opGlobal:
		return !o.NamespaceSelector || o.Global
	case opHas:
		_, ok := labels[n.key]
		return ok
	case opEq:
		v, ok := labels[n.key]
		return ok && v == n.val
	case opNe:
		v, ok := labels[n.key]
		return !ok || v != n.val
	case opContains:
		v, ok := labels[n.key]
		return ok && strings.Contains(v, n.val)
	case opStartsWith:
		v, ok := labels[n.key]
		return ok && strings.HasPrefix(v, n.val)
	case opEndsWith:
		v, ok := labels[n.key]
		return ok && strings.HasSuffix(v, n.val)
	case opIn:
		v, ok := labels[n.key]
		return ok && inSet(n.set, v)
	case opNotIn:
		v, ok := labels[n.key]
		return !ok || !inSet(n.set, v)
	case opNot:
		return !n.kids[0].eval(labels, o)
	case opAnd:
		for _, k := range n.kids {
			if !k.eval(labels, o) {
				return false
			}
		}
		return true
	case opOr:
		for _, k := range n.kids {
			if k.eval(labels, o) {
				return true
			}
		}
		return false
	}
	return false
}

func inSet(set []string, v string) bool {
	// Sets in selectors are almost always a handful of values, where a
	// linear scan beats binary search.
	if len(set) <= 8 {
		for _, s := range set {
			if s == v {
				return true
			}
		}
		return false
	}
	_, found := slices.BinarySearch(set, v)
	return found
}

func (n *node) walk(f func(*node)) {
	f(n)
	for _, k := range n.kids {
		k.walk(f)
	}
}

// write appends the canonical form; it must stay byte-for-byte compatible
// with Calico's printer because UniqueID hashes it.
func (n *node) write(b *strings.Builder) {
	switch n.op {
	case opAll:
		b.WriteString("all()")
	case opGlobal:
		b.WriteString("global()")
	case opHas:
		b.WriteString("has(")
		b.WriteString(n.key)
		b.WriteByte(')')
	case opEq, opNe, opContains, opStartsWith, opEndsWith:
		b.WriteString(n.key)
		b.WriteString(opText(n.op))
		writeQuoted(b, n.val)
	case opIn, opNotIn:
		b.WriteString(n.key)
		if n.op == opIn {
			b.WriteString(" in {")
		} else {
			b.WriteString(" not in {")
		}
		for i, v := range n.set {
			if i > 0 {
				b.WriteString(", ")
			}
			writeQuoted(b, v)
		}
		b.WriteByte('}')
	case opNot:
		b.WriteByte('!')
		n.kids[0].write(b)
	case opAnd, opOr:
		sep := " && "
		if n.op == opOr {
			sep = " || "
		}
		b.WriteByte('(')
		for i, k := range n.kids {
			if i > 0 {
				b.WriteString(sep)
			}
			k.write(b)
		}
		b.WriteByte(')')
	}
}

func opText(op opKind) string {
	switch op {
	case opEq:
		return " == "
	case opNe:
		return " != "
	case opContains:
		return " contains "
	case opStartsWith:
		return " starts with "
	case opEndsWith:
		return " ends with "
	}
	return " ? "
}

// writeQuoted quotes v with '"' unless v contains one. A parsed value can
// never contain both quote characters, so the output always re-parses.
func writeQuoted(b *strings.Builder, v string) {
	q := byte('"')
	if strings.IndexByte(v, '"') >= 0 {
		q = '\''
	}
	b.WriteByte(q)
	b.WriteString(v)
	b.WriteByte(q)
}
