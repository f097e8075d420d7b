// Package selector implements Calico's label selector language: parsing,
// evaluation against a label map, and the canonical printed form that Calico
// uses to identify (and hash) a selector.
//
// # Language
//
//	expr     = or
//	or       = and { "||" and }
//	and      = unary { "&&" unary }
//	unary    = { "!" } primary
//	primary  = "(" or ")" | "all()" | "global()" | "has(" key ")"
//	         | key ( "==" | "!=" | "contains" | "starts with" | "ends with" ) value
//	         | key ( "in" | "not in" ) "{" [ value { "," value } [ "," ] ] "}"
//	value    = '"' any bytes but '"' '"' | "'" any bytes but "'" "'"
//
// "!" binds tightest, then "&&", then "||"; both are left associative. A run
// of "!" collapses to its parity, and "!" negates the whole primary that
// follows it, so `!a == "x"` means `!(a == "x")`. Spaces and tabs may appear
// between any two tokens and inside the parentheses of has(), all() and
// global(); a function name must be followed directly by "(" (so `has (a)`
// is rejected, as Calico rejects it). The empty (or blank) selector means
// all(). Quoted values have no escapes: a value containing '"' must be
// single-quoted and vice versa.
//
// Label keys use the characters [a-zA-Z0-9_./-] as Calico's tokenizer does,
// and must have the Kubernetes shape: a name, optionally preceded by a
// non-empty prefix and one "/". Calico itself accepts keys such as "a/b/c"
// or "/a"; no Kubernetes or Calico label can carry such a key, so such a
// selector could never match and we report it as a mistake instead. The
// other Kubernetes rules (lengths, first and last character) are not
// enforced, because Calico does not enforce them and selectors already in a
// Calico datastore must keep parsing. Nesting of parentheses is limited to
// MaxDepth levels so hostile input cannot exhaust the stack.
//
// # Semantics
//
// As in Calico: `k == v`, `k in {...}`, `has(k)`, `contains`, `starts with`
// and `ends with` are false when k is absent; `k != v` and `k not in {...}`
// are true when k is absent.
//
// all() and global() are scope operators. Calico's parser evaluates both as
// "true", and so does Evaluate here: at the top level of a policy selector
// global() behaves exactly like all(). Their difference only matters in a
// policy rule's namespaceSelector, where Calico rewrites all() to
// has(projectcalico.org/namespace) ("any namespaced endpoint") and global()
// to !has(projectcalico.org/namespace) ("only non-namespaced resources":
// HostEndpoints, GlobalNetworkSets) before matching endpoints. Calico does
// that rewrite on the printed string, which also rewrites a quoted value
// such as `a == "all()"`; here the policy code instead calls EvaluateWith
// with EvaluateOpts{NamespaceSelector: true, Global: ...}, which gives the
// same answer for every real selector without touching values. UsesGlobal
// tells whether a selector mentions global() at all.
//
// # Canonical form and identity
//
// String prints Calico's canonical form: values double-quoted (single-quoted
// when they contain '"'), set members sorted and de-duplicated, one space
// around operators, every "&&" and "||" group wrapped in parentheses, a
// collapsed "!" printed directly before its operand, and "all()" for the
// empty selector. The form is a fixed point: Parse(s.String()).String() ==
// s.String(). UniqueID hashes it exactly as Calico does ("s:" + unpadded
// base64url of SHA-224 over "s:" + canonical form), so a selector gets the
// same ID here and in Calico. One deliberate difference: a "!" applied to a
// parenthesised negation, `!(!has(a))`, cancels out here (printing
// `has(a)`), where Calico prints `!!has(a)` — which its own parser reads
// back as `has(a)`, so Calico's form is not a fixed point there.
//
// # Design
//
// A hand-written lexer feeds a recursive-descent parser that builds a small
// tree of one node type; evaluation is a switch over that tree and does not
// allocate. Parse errors are *ParseError values carrying the 0-based byte
// offset of the offending token.
//
// # Thread safety
//
// A Selector is immutable once Parse returns; it is safe for concurrent use.
// The package holds no mutable state.
package selector
