package selector

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of parentheses Parse accepts. Real
// selectors nest a few levels; the limit keeps hostile input from driving
// the recursive-descent parser arbitrarily deep.
const MaxDepth = 128

// ParseError describes why a selector does not parse.
type ParseError struct {
	// Selector is the complete input.
	Selector string
	// Pos is the 0-based byte offset of the offending token; len(Selector)
	// when the input ended too early.
	Pos int
	// Msg says what was expected or what is wrong with the token at Pos.
	Msg string
}

// Error names the selector, the offending text and its position, e.g.
// `selector "a == ": unexpected end of input at position 5, expected a quoted value`.
func (e *ParseError) Error() string {
	if e.Pos < 0 || e.Pos >= len(e.Selector) {
		return fmt.Sprintf("selector %q: unexpected end of input at position %d, %s", e.Selector, e.Pos, e.Msg)
	}
	return fmt.Sprintf("selector %q: unexpected %q at position %d, %s",
		e.Selector, offendingText(e.Selector, e.Pos), e.Pos, e.Msg)
}

// offendingText returns the token starting at pos, shortened so a long
// unterminated string does not flood the message.
func offendingText(src string, pos int) string {
	l := lexer{src: src, pos: pos}
	t := l.next()
	text := src[t.start:t.end]
	const maxLen = 40
	if len(text) > maxLen {
		cut := maxLen
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "..."
	}
	return text
}

// Parse parses a selector. The empty or blank selector is all().
func Parse(s string) (Selector, error) {
	root, err := parse(s)
	if err != nil {
		return nil, err
	}
	return newParsed(root), nil
}

// MustParse is Parse for selectors known to be valid (constants, tests).
// It panics on a parse error.
func MustParse(s string) Selector {
	sel, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return sel
}

// Validate reports whether s parses, returning the same error Parse would.
func Validate(s string) error {
	if _, err := parse(s); err != nil {
		return err
	}
	return nil
}

// parse returns a *ParseError (not error) so callers can't be handed a
// typed nil inside a non-nil interface.
func parse(src string) (*node, *ParseError) {
	p := parser{lex: lexer{src: src}}
	p.advance()
	if p.tok.kind == tEOF {
		return &node{op: opAll}, nil
	}
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	switch p.tok.kind {
	case tEOF:
		return n, nil
	case tRParen:
		return nil, p.unexpected("no matching '('")
	default:
		return nil, p.unexpected("expected '&&', '||' or end of input")
	}
}

type tokKind uint8

const (
	tEOF tokKind = iota
	tWord
	tString
	tUnterminated // a quote with no closing quote before the end of input
	tLParen
	tRParen
	tLBrace
	tRBrace
	tComma
	tNot
	tEq
	tNe
	tAnd
	tOr
	tIllegal
)

// token is a span of the input; its text is src[start:end].
type token struct {
	kind       tokKind
	start, end int
}

// lexer splits a selector into tokens. Words (label keys and the operator
// words contains/in/not/starts/ends/with and has/all/global) are one token
// kind; the parser decides from context which they are, as Calico's
// tokenizer does, so a label may itself be called "in" or "has".
type lexer struct {
	src string
	pos int
}

// isSpace matches Calico, which only skips spaces and tabs.
func isSpace(c byte) bool { return c == ' ' || c == '\t' }

func isKeyChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '.' || c == '/' || c == '-'
}

func (l *lexer) next() token {
	for l.pos < len(l.src) && isSpace(l.src[l.pos]) {
		l.pos++
	}
	start := l.pos
	if start >= len(l.src) {
		return token{kind: tEOF, start: start, end: start}
	}
	c := l.src[start]
	kind, n := tIllegal, 1
	twoChar := func(second byte) bool { return start+1 < len(l.src) && l.src[start+1] == second }
	switch {
	case c == '(':
		kind = tLParen
	case c == ')':
		kind = tRParen
	case c == '{':
		kind = tLBrace
	case c == '}':
		kind = tRBrace
	case c == ',':
		kind = tComma
	case c == '"' || c == '\'':
		if i := strings.IndexByte(l.src[start+1:], c); i >= 0 {
			kind, n = tString, i+2
		} else {
			kind, n = tUnterminated, len(l.src)-start
		}
	case c == '=':
		if twoChar('=') {
			kind, n = tEq, 2
		}
	case c == '!':
		if twoChar('=') {
			kind, n = tNe, 2
		} else {
			kind = tNot
		}
	case c == '&':
		if twoChar('&') {
			kind, n = tAnd, 2
		}
	case c == '|':
		if twoChar('|') {
			kind, n = tOr, 2
		}
	case isKeyChar(c):
		for n < len(l.src)-start && isKeyChar(l.src[start+n]) {
			n++
		}
		kind = tWord
	default:
		// Take the whole rune so error messages quote a readable character.
		_, n = utf8.DecodeRuneInString(l.src[start:])
	}
	l.pos = start + n
	return token{kind: kind, start: start, end: start + n}
}

// parser is a recursive-descent parser with one token of lookahead.
type parser struct {
	lex   lexer
	tok   token
	depth int
}

func (p *parser) advance() { p.tok = p.lex.next() }

func (p *parser) text() string { return p.lex.src[p.tok.start:p.tok.end] }

// unexpected reports the current token as wrong. An unterminated string is
// reported as such whatever was expected, because that is the real mistake.
func (p *parser) unexpected(msg string) *ParseError {
	if p.tok.kind == tUnterminated {
		msg = "string has no closing quote"
	}
	return &ParseError{Selector: p.lex.src, Pos: p.tok.start, Msg: msg}
}

func (p *parser) parseOr() (*node, *ParseError) {
	return p.parseList(tOr, opOr, p.parseAnd)
}

func (p *parser) parseAnd() (*node, *ParseError) {
	return p.parseList(tAnd, opAnd, p.parseUnary)
}

// parseList parses operand { sep operand } into one n-ary node (Calico
// keeps `a && b && c` as a single three-operand group, which shows in the
// canonical form).
func (p *parser) parseList(sep tokKind, op opKind, operand func() (*node, *ParseError)) (*node, *ParseError) {
	first, err := operand()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != sep {
		return first, nil
	}
	kids := []*node{first}
	for p.tok.kind == sep {
		p.advance()
		k, err := operand()
		if err != nil {
			return nil, err
		}
		kids = append(kids, k)
	}
	return &node{op: op, kids: kids}, nil
}

// parseUnary collapses a run of "!" to its parity, as Calico does, so
// `!!has(a)` is the same selector as `has(a)`. It also cancels a "!" against
// a negated parenthesised operand: Calico keeps `!(!has(a))` as a double
// negation and prints `!!has(a)`, which re-parses as `has(a)`, so its
// canonical form would not be a fixed point.
func (p *parser) parseUnary() (*node, *ParseError) {
	neg := false
	for p.tok.kind == tNot {
		neg = !neg
		p.advance()
	}
	n, err := p.parsePrimary()
	if err != nil {
		return nil, err
	}
	switch {
	case !neg:
	case n.op == opNot:
		n = n.kids[0]
	default:
		n = &node{op: opNot, kids: []*node{n}}
	}
	return n, nil
}

const expectedExpr = "expected a label key, has(), all(), global(), '!' or '('"

func (p *parser) parsePrimary() (*node, *ParseError) {
	switch p.tok.kind {
	case tLParen:
		if p.depth >= MaxDepth {
			return nil, p.unexpected(fmt.Sprintf("parentheses nested deeper than %d levels", MaxDepth))
		}
		p.depth++
		p.advance()
		n, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tRParen {
			return nil, p.unexpected("expected '&&', '||' or ')'")
		}
		p.depth--
		p.advance()
		return n, nil
	case tWord:
		// has/all/global are functions only when "(" follows at once;
		// otherwise they are label keys, exactly as in Calico.
		if end := p.tok.end; end < len(p.lex.src) && p.lex.src[end] == '(' {
			switch p.text() {
			case "has":
				return p.parseHas()
			case "all":
				return p.parseNullary(opAll)
			case "global":
				return p.parseNullary(opGlobal)
			}
		}
		return p.parseComparison()
	default:
		return nil, p.unexpected(expectedExpr)
	}
}

// parseNullary parses all() or global(); the current token is the name.
func (p *parser) parseNullary(op opKind) (*node, *ParseError) {
	p.advance() // name
	p.advance() // "("
	if p.tok.kind != tRParen {
		return nil, p.unexpected("expected ')'")
	}
	p.advance()
	return &node{op: op}, nil
}

func (p *parser) parseHas() (*node, *ParseError) {
	p.advance() // "has"
	p.advance() // "("
	key, err := p.parseKey()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tRParen {
		return nil, p.unexpected("expected ')'")
	}
	p.advance()
	return &node{op: opHas, key: key}, nil
}

// parseKey consumes a label key and checks its Kubernetes shape.
func (p *parser) parseKey() (string, *ParseError) {
	if p.tok.kind != tWord {
		return "", p.unexpected("expected a label key")
	}
	key := p.text()
	if msg := checkKey(key); msg != "" {
		return "", p.unexpected("invalid label key: " + msg)
	}
	p.advance()
	return key, nil
}

// checkKey returns why key is not a [prefix/]name label key, or "".
func checkKey(key string) string {
	slash := strings.IndexByte(key, '/')
	switch {
	case slash < 0:
		return ""
	case slash == 0:
		return "empty prefix before '/'"
	case slash == len(key)-1:
		return "empty name after '/'"
	case strings.IndexByte(key[slash+1:], '/') >= 0:
		return "more than one '/'"
	}
	return ""
}

const expectedOp = "expected an operator (==, !=, in, not in, contains, starts with, ends with)"

func (p *parser) parseComparison() (*node, *ParseError) {
	key, err := p.parseKey()
	if err != nil {
		return nil, err
	}
	var op opKind
	switch p.tok.kind {
	case tEq:
		op = opEq
	case tNe:
		op = opNe
	case tWord:
		// Calico matches operator words by prefix, so it also accepts
		// "startswith", "endswith" and "notin"; we accept the same.
		switch p.text() {
		case "contains":
			op = opContains
		case "in":
			op = opIn
		case "startswith":
			op = opStartsWith
		case "endswith":
			op = opEndsWith
		case "notin":
			op = opNotIn
		case "starts", "ends", "not":
			first := p.text()
			second, o := "with", opStartsWith
			if first == "ends" {
				o = opEndsWith
			} else if first == "not" {
				second, o = "in", opNotIn
			}
			p.advance()
			if p.tok.kind != tWord || p.text() != second {
				return nil, p.unexpected(fmt.Sprintf("expected %q after %q", second, first))
			}
			op = o
		default:
			return nil, p.unexpected(expectedOp)
		}
	default:
		return nil, p.unexpected(expectedOp)
	}
	p.advance()

	if op == opIn || op == opNotIn {
		set, err := p.parseSet()
		if err != nil {
			return nil, err
		}
		return &node{op: op, key: key, set: set}, nil
	}
	if p.tok.kind != tString {
		return nil, p.unexpected("expected a quoted value")
	}
	val := p.stringValue()
	p.advance()
	return &node{op: op, key: key, val: val}, nil
}

// parseSet parses `{ "a", "b" }` (a trailing comma is allowed, as in
// Calico) into a sorted, de-duplicated slice.
func (p *parser) parseSet() ([]string, *ParseError) {
	if p.tok.kind != tLBrace {
		return nil, p.unexpected("expected '{'")
	}
	p.advance()
	var set []string
	for p.tok.kind != tRBrace {
		if p.tok.kind != tString {
			return nil, p.unexpected("expected a quoted value or '}'")
		}
		set = append(set, p.stringValue())
		p.advance()
		switch p.tok.kind {
		case tComma:
			p.advance()
		case tRBrace:
		default:
			return nil, p.unexpected("expected ',' or '}'")
		}
	}
	p.advance()
	slices.Sort(set)
	return slices.Compact(set), nil
}

// stringValue is the current string token without its quotes.
func (p *parser) stringValue() string {
	return p.lex.src[p.tok.start+1 : p.tok.end-1]
}
