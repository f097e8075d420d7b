package selector

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

type labels = map[string]string

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name    string
		sel     string
		match   []labels
		noMatch []labels
	}{
		// Equality, both quote styles, absent label.
		{"eq double", `a == "b"`, []labels{{"a": "b"}, {"a": "b", "c": "d"}}, []labels{{}, nil, {"a": "c"}, {"c": "b"}, {"a": "B"}}},
		{"eq single", `a == 'b'`, []labels{{"a": "b"}}, []labels{{}, {"a": "bb"}}},
		{"eq empty value", `a == ""`, []labels{{"a": ""}}, []labels{{}, {"a": "x"}}},
		{"eq no spaces", `a=="b"`, []labels{{"a": "b"}}, []labels{{}}},
		{"eq tabs", "\ta\t==\t'b'\t", []labels{{"a": "b"}}, []labels{{}}},
		{"ne present", `a != "b"`, []labels{{"a": "c"}, {"a": ""}}, []labels{{"a": "b"}}},
		{"ne absent is true", `a != "b"`, []labels{{}, nil, {"c": "b"}}, nil},
		{"ne single", `a!='b'`, []labels{{"a": "x"}, {}}, []labels{{"a": "b"}}},

		// Sets.
		{"in", `a in {"x", "y"}`, []labels{{"a": "x"}, {"a": "y"}}, []labels{{}, {"a": "z"}, {"b": "x"}}},
		{"in mixed quotes", `a in {"'", '"', "c"}`, []labels{{"a": "'"}, {"a": `"`}, {"a": "c"}}, []labels{{}, {"a": "e"}}},
		{"in empty set", `a in {}`, nil, []labels{{}, {"a": ""}, {"a": "x"}}},
		{"in trailing comma", `a in {"x",}`, []labels{{"a": "x"}}, []labels{{"a": "y"}}},
		{"in large set", `a in {"1","2","3","4","5","6","7","8","9","10","11"}`, []labels{{"a": "1"}, {"a": "11"}, {"a": "5"}}, []labels{{"a": "12"}, {"a": "0"}, {}}},
		{"not in", `a not in {"x", "y"}`, []labels{{"a": "z"}, {}, {"b": "x"}}, []labels{{"a": "x"}, {"a": "y"}}},
		{"not in empty set", `a not in {}`, []labels{{}, {"a": "x"}}, nil},
		{"notin without space", `a notin {'x'}`, []labels{{"a": "y"}, {}}, []labels{{"a": "x"}}},
		{"negated in", `!a in {"a"}`, []labels{{"a": "b"}, {}}, []labels{{"a": "a"}}},

		// has / !has.
		{"has", `has(a)`, []labels{{"a": ""}, {"a": "x"}}, []labels{{}, {"b": "a"}}},
		{"has spaces inside", `has(  a	)`, []labels{{"a": "x"}}, []labels{{}}},
		{"not has", `!has(a)`, []labels{{}, {"b": "b"}}, []labels{{"a": "b"}, {"a": ""}}},
		{"not has space", `! has(a)`, []labels{{}}, []labels{{"a": "b"}}},
		{"double not", `!!has(a)`, []labels{{"a": "b"}}, []labels{{}}},
		{"triple not", `!! ! has(a)`, []labels{{}}, []labels{{"a": "b"}}},

		// String operators.
		{"contains", `a contains "ab"`, []labels{{"a": "ab"}, {"a": "xaby"}}, []labels{{}, {"a": "a"}, {"b": "ab"}}},
		{"contains empty", `a contains ""`, []labels{{"a": ""}, {"a": "x"}}, []labels{{}}},
		{"starts with", `a starts with "ab"`, []labels{{"a": "ab"}, {"a": "abc"}}, []labels{{}, {"a": "cab"}, {"b": "ab"}}},
		{"startswith", `a startswith 'ab'`, []labels{{"a": "abc"}}, []labels{{"a": "b"}}},
		{"starts  with tab", "a starts\twith 'ab'", []labels{{"a": "abc"}}, []labels{{"a": "b"}}},
		{"ends with", `a ends with "ab"`, []labels{{"a": "ab"}, {"a": "cab"}}, []labels{{}, {"a": "abc"}, {"b": "ab"}}},
		{"endswith", `a endswith"ab"`, []labels{{"a": "cab"}}, []labels{{"a": "abc"}}},

		// Scope operators and the empty selector.
		{"empty", ``, []labels{{}, nil, {"a": "b"}}, nil},
		{"blank", " \t ", []labels{{}, {"a": "b"}}, nil},
		{"all", `all()`, []labels{{}, {"a": "b"}}, nil},
		{"all spaces", ` all( ) `, []labels{{}}, nil},
		{"not all", `!all()`, nil, []labels{{}, {"a": "b"}}},
		{"global", `global()`, []labels{{}, {"a": "b"}}, nil},

		// Precedence: ! binds tightest, then &&, then ||.
		{"and", `a == "1" && b == "2"`, []labels{{"a": "1", "b": "2"}}, []labels{{"a": "1"}, {"b": "2"}, {"a": "1", "b": "3"}}},
		{"or", `a == "1" || b == "2"`, []labels{{"a": "1"}, {"b": "2"}, {"a": "1", "b": "2"}}, []labels{{}, {"a": "2", "b": "1"}}},
		{"and over or", `a == "1" || b == "2" && c == "3"`,
			[]labels{{"a": "1"}, {"b": "2", "c": "3"}, {"a": "1", "b": "x"}},
			[]labels{{"b": "2"}, {"c": "3"}, {}}},
		{"and over or left", `a == "1" && b == "2" || c == "3"`,
			[]labels{{"a": "1", "b": "2"}, {"c": "3"}},
			[]labels{{"a": "1"}, {"b": "2"}, {}}},
		{"parens override", `(a == "1" || b == "2") && c == "3"`,
			[]labels{{"a": "1", "c": "3"}, {"b": "2", "c": "3"}},
			[]labels{{"a": "1"}, {"b": "2"}, {"c": "3"}}},
		{"not binds to comparison", `!a == "x"`, []labels{{}, {"a": "y"}}, []labels{{"a": "x"}}},
		{"not binds tighter than and", `!a == "x" && b == "y"`,
			[]labels{{"b": "y"}, {"a": "z", "b": "y"}},
			[]labels{{"a": "x", "b": "y"}, {}}},
		{"not of group", `!(a == "x" || b == "y")`, []labels{{}, {"a": "z"}}, []labels{{"a": "x"}, {"b": "y"}}},
		{"not inside or", `! a == 'a1' || ! b == 'b1'`, []labels{{"a": "a1"}, {}}, []labels{{"a": "a1", "b": "b1"}}},
		{"not of not group", `!(!has(a))`, []labels{{"a": ""}}, []labels{{}}},
		{"de morgan", `!(!has(a) || has(b))`, []labels{{"a": "a"}}, []labels{{"a": "a", "b": "b"}, {}}},
		{"nested parens", `((((a == "1"))))`, []labels{{"a": "1"}}, []labels{{}}},
		{"deep mix", `(has(a) && (b in {"1","2"} || !(c != "3"))) || global() && d ends with "z"`,
			[]labels{{"a": "", "b": "2"}, {"a": "", "c": "3"}, {"d": "zz"}},
			[]labels{{"a": ""}, {"a": "", "b": "3", "c": "4"}, {"d": "za"}}},
		{"no whitespace at all", `has(a)&&!has(b)||c=="d"`, []labels{{"a": "1"}, {"c": "d", "b": "1"}}, []labels{{"a": "1", "b": "1"}, {}}},
		{"lots of whitespace", "  has( a )   &&\t! has(b)  ", []labels{{"a": "1"}}, []labels{{"a": "1", "b": "1"}}},

		// Keys.
		{"prefixed key", `projectcalico.org/namespace == "kube-system"`,
			[]labels{{"projectcalico.org/namespace": "kube-system"}},
			[]labels{{"namespace": "kube-system"}, {"projectcalico.org/namespace": "default"}}},
		{"key chars", `A-b_c.d/E_f-9 == "1"`, []labels{{"A-b_c.d/E_f-9": "1"}}, []labels{{"a-b_c.d/e_f-9": "1"}}},
		// "not in" after && is the key "not" with operator "in".
		{"keyword as key", `in == "x" && has(has) && all == "y" && not in {"z"}`,
			[]labels{{"in": "x", "has": "", "all": "y", "not": "z"}},
			[]labels{{"in": "x", "has": "", "all": "y"}}},
		{"has is key without paren", `has == "x"`, []labels{{"has": "x"}}, []labels{{}}},

		// Values.
		{"value with spaces", `a == "hello world"`, []labels{{"a": "hello world"}}, []labels{{"a": "hello"}}},
		{"value with specials", `a == "x&&y||!(z)=={}"`, []labels{{"a": "x&&y||!(z)=={}"}}, []labels{{"a": "x"}}},
		{"value with single quote", `a == "it's"`, []labels{{"a": "it's"}}, nil},
		{"value with double quote", `a == 'say "hi"'`, []labels{{"a": `say "hi"`}}, nil},
		{"value unicode", `a == "héllo ☃"`, []labels{{"a": "héllo ☃"}}, []labels{{"a": "hello"}}},
		{"value looks like op", `a == "all()"`, []labels{{"a": "all()"}}, []labels{{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := Parse(tt.sel)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.sel, err)
			}
			if err := Validate(tt.sel); err != nil {
				t.Errorf("Validate(%q): %v", tt.sel, err)
			}
			again := MustParse(sel.String())
			for _, l := range tt.match {
				if !sel.Evaluate(l) {
					t.Errorf("%q should match %v", tt.sel, l)
				}
				if !again.Evaluate(l) {
					t.Errorf("canonical %q should match %v", sel.String(), l)
				}
			}
			for _, l := range tt.noMatch {
				if sel.Evaluate(l) {
					t.Errorf("%q should not match %v", tt.sel, l)
				}
				if again.Evaluate(l) {
					t.Errorf("canonical %q should not match %v", sel.String(), l)
				}
			}
		})
	}
}

func TestCanonicalString(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{``, `all()`},
		{`   `, `all()`},
		{` all() `, `all()`},
		{` (all( ) )`, `all()`},
		{`global( )`, `global()`},
		{`a=='b'`, `a == "b"`},
		{`a  !=  "b"`, `a != "b"`},
		{`a == "'"`, `a == "'"`},
		{`a == '"'`, `a == '"'`},
		{`a contains '"'`, `a contains '"'`},
		{`a startswith 'x'`, `a starts with "x"`},
		{`a starts	with 'x'`, `a starts with "x"`},
		{`a endswith "'"`, `a ends with "'"`},
		{`a!='"'`, `a != '"'`},
		{`has( b )`, `has(b)`},
		{`!has(b)`, `!has(b)`},
		{`!!has(b)`, `has(b)`},
		{`!!!has(b)`, `!has(b)`},
		{`!(a == "b")`, `!a == "b"`},
		// Calico would print `!!has(b)` here, which is not a fixed point.
		{`!(!has(b))`, `has(b)`},
		{`!(!(!has(b)))`, `!has(b)`},
		{`!!(!(a == "1" || b == "2"))`, `!(a == "1" || b == "2")`},
		{`!(!(a == "1" || b == "2"))`, `(a == "1" || b == "2")`},
		{`! (has( b)||! has(a ))`, `!(has(b) || !has(a))`},
		{`! (a == "b"&&! c != "d")`, `!(a == "b" && !c != "d")`},
		{`a == "1" && b == "2"`, `(a == "1" && b == "2")`},
		{`a == "1" && b == "2" && c == "3"`, `(a == "1" && b == "2" && c == "3")`},
		{`a == "1" || b == "2" && c == "3"`, `(a == "1" || (b == "2" && c == "3"))`},
		{`(a == "1" || b == "2") && c == "3"`, `((a == "1" || b == "2") && c == "3")`},
		{`(a == "1" || b == "2") || c == "3"`, `((a == "1" || b == "2") || c == "3")`},
		{`((a == "1"))`, `a == "1"`},
		{`a in {"d"}`, `a in {"d"}`},
		{`a in {}`, `a in {}`},
		{`a in {"d", "a", "b"}`, `a in {"a", "b", "d"}`},
		{`a in {"z", "z", "x", "y", "x", "a",}`, `a in {"a", "x", "y", "z"}`},
		{`a not in{'"', "'"}`, `a not in {'"', "'"}`},
		{`a notin {'b'}`, `a not in {"b"}`},
		{`projectcalico.org/namespace=='default'`, `projectcalico.org/namespace == "default"`},
		{`a == "hello world"`, `a == "hello world"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			sel, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if got := sel.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			again, err := Parse(sel.String())
			if err != nil {
				t.Fatalf("re-Parse(%q): %v", sel.String(), err)
			}
			if again.String() != sel.String() {
				t.Errorf("round trip: %q -> %q", sel.String(), again.String())
			}
			if again.UniqueID() != sel.UniqueID() {
				t.Errorf("UniqueID changed on round trip: %q vs %q", sel.UniqueID(), again.UniqueID())
			}
		})
	}
}

// Calico's own IDs for these selectors; equal IDs mean our canonical form
// and hash match Calico's byte for byte.
func TestUniqueIDMatchesCalico(t *testing.T) {
	tests := []struct{ sel, id string }{
		{``, "s:5y5I3VdRZfDU01O--xXAPx2yxCQQqMf0M6IWug"},
		{` all() `, "s:5y5I3VdRZfDU01O--xXAPx2yxCQQqMf0M6IWug"},
		{`! (has( b)||! has(a ))`, "s:Iss0uCleLYv1GSv_pNm7hAO58kE9jAx1NKyG3Q"},
		{`! (a == "b"&&! c != "d")`, "s:lh3haoY1ikTRkd4UZu0nWSaIBknYLPJLX16d-w"},
	}
	for _, tt := range tests {
		t.Run(tt.sel, func(t *testing.T) {
			if got := MustParse(tt.sel).UniqueID(); got != tt.id {
				t.Errorf("UniqueID() = %q, want %q", got, tt.id)
			}
		})
	}
	if MustParse(`a == "b"`).UniqueID() == MustParse(`a == "c"`).UniqueID() {
		t.Error("different selectors share a UniqueID")
	}
}

func TestLabelKeys(t *testing.T) {
	tests := []struct {
		sel  string
		want []string
	}{
		{``, nil},
		{`all() || global()`, nil},
		{`has(b) && a == "1"`, []string{"a", "b"}},
		{`z in {"1"} || !has(z) && y not in {} && x contains "q" && w starts with "" && v ends with "" && u != "1"`,
			[]string{"u", "v", "w", "x", "y", "z"}},
		{`projectcalico.org/namespace == "a" && app == "b" && has(app)`, []string{"app", "projectcalico.org/namespace"}},
	}
	for _, tt := range tests {
		t.Run(tt.sel, func(t *testing.T) {
			sel := MustParse(tt.sel)
			got := sel.LabelKeys()
			if !slices.Equal(got, tt.want) {
				t.Fatalf("LabelKeys() = %q, want %q", got, tt.want)
			}
			if len(got) > 0 {
				got[0] = "mutated"
				if sel.LabelKeys()[0] == "mutated" {
					t.Error("LabelKeys exposes internal state")
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		sel     string
		pos     int
		msgPart string // substring of Error()
	}{
		// Unterminated strings.
		{"unterminated double", `a == "b`, 5, "no closing quote"},
		{"unterminated single", `a == 'b`, 5, "no closing quote"},
		{"unterminated mixed", `a == "b'`, 5, "no closing quote"},
		{"unterminated alone", `"FOO`, 0, "no closing quote"},
		{"unterminated in set", `a in {"x", "y}`, 11, "no closing quote"},
		{"unterminated where op expected", `a "b`, 2, "no closing quote"},

		// Missing operands.
		{"missing value", `a == `, 5, "unexpected end of input at position 5, expected a quoted value"},
		{"missing value no space", `a ==`, 4, "expected a quoted value"},
		{"bare label", `a`, 1, "expected an operator"},
		{"bare label space", `a `, 2, "expected an operator"},
		{"missing lhs", `== "b"`, 0, "expected a label key"},
		{"literal lhs", `'b1' == b`, 0, "expected a label key"},
		{"label rhs", `b == b`, 5, "expected a quoted value"},
		{"label rhs contains", `b contains b`, 11, "expected a quoted value"},
		{"and missing rhs", `a == "b" && `, 12, "expected a label key"},
		{"or missing rhs", `has(a) ||`, 9, "expected a label key"},
		{"lone not", `!`, 1, "expected a label key"},
		{"not not", `!!`, 2, "expected a label key"},
		{"in missing set", `a in "b"`, 5, "expected '{'"},
		{"in missing brace", `a in {"b"`, 9, "expected ',' or '}'"},
		{"in missing comma", `a in {"b" "c"}`, 10, "expected ',' or '}'"},
		{"in leading comma", `a in {,}`, 6, "expected a quoted value or '}'"},
		{"in double comma", `a in {"a",,}`, 10, "expected a quoted value or '}'"},
		{"in bare word", `a in {b}`, 6, "expected a quoted value or '}'"},
		{"has empty", `has()`, 4, "expected a label key"},
		{"has unclosed", `has(a`, 5, "expected ')'"},
		{"has two keys", `has(a b)`, 6, "expected ')'"},
		{"all with arg", `all(x)`, 4, "expected ')'"},
		{"global unclosed", `global(`, 7, "expected ')'"},

		// Bad operators.
		{"single equals", `a = "b"`, 2, `unexpected "=" at position 2, expected an operator`},
		{"triple equals", `a === "b"`, 4, "expected a quoted value"},
		{"word operator", `a equals "b"`, 2, `unexpected "equals"`},
		{"starts without with", `a starts "x"`, 9, `expected "with" after "starts"`},
		{"ends then eof", `a ends`, 6, `expected "with" after "ends"`},
		{"not without in", `a not {"x"}`, 6, `expected "in" after "not"`},
		{"single ampersand", `a == "b" & c == "d"`, 9, "expected '&&', '||' or end of input"},
		{"single pipe", `a == "b" | c == "d"`, 9, "expected '&&', '||' or end of input"},
		{"dangling ampersand", `foo == "bar" &`, 13, "expected '&&', '||' or end of input"},
		{"ne then or", `foo != ||`, 7, "expected a quoted value"},
		{"has with space", `has (a)`, 4, "expected an operator"},
		{"percent", `%`, 0, `unexpected "%"`},
		{"percent after and", `a == "b" && %`, 12, "expected a label key"},
		{"unicode junk", `a == "b" && ☃`, 12, `unexpected "☃"`},
		{"newline is not whitespace", "a == \"b\"\n", 8, "expected '&&', '||' or end of input"},

		// Unbalanced parentheses.
		{"open only", `(`, 1, "expected a label key"},
		{"unclosed", `(a == "foo"`, 11, "expected '&&', '||' or ')'"},
		{"unclosed nested", `((a == "b")`, 11, "expected '&&', '||' or ')'"},
		{"close only", `)`, 0, "expected a label key"},
		{"empty parens", `()`, 1, "expected a label key"},
		{"extra close", `a == "b")`, 8, "no matching '('"},
		{"extra close after group", `(has(a)) && has(b))`, 18, "no matching '('"},
		{"too deep", strings.Repeat("(", MaxDepth+1) + "has(a)" + strings.Repeat(")", MaxDepth+1), MaxDepth, "nested deeper"},

		// Bad label keys.
		{"two slashes", `a/b/c == "x"`, 0, "invalid label key: more than one '/'"},
		{"empty prefix", `/a == "x"`, 0, "invalid label key: empty prefix"},
		{"empty name", `a/ == "x"`, 0, "invalid label key: empty name"},
		{"bad key in has", `has(a/b/c)`, 4, "invalid label key"},
		{"bad key after and", `has(a) && x// != "y"`, 10, "invalid label key"},
		{"bad key char", `a:b == "x"`, 1, "expected an operator"},

		// Trailing garbage.
		{"trailing label", `a == "b" c`, 9, "expected '&&', '||' or end of input"},
		{"trailing string", `a == "b" "c"`, 9, "expected '&&', '||' or end of input"},
		{"trailing not", `has(a) !`, 7, "expected '&&', '||' or end of input"},
		{"trailing paren group", `all() (has(a))`, 6, "expected '&&', '||' or end of input"},
		{"garbage words", `a b`, 2, `unexpected "b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := Parse(tt.sel)
			if err == nil {
				t.Fatalf("Parse(%q) = %q, want error", tt.sel, sel)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not *ParseError: %v", err, err)
			}
			if pe.Pos != tt.pos {
				t.Errorf("Pos = %d, want %d (%v)", pe.Pos, tt.pos, err)
			}
			if pe.Selector != tt.sel {
				t.Errorf("Selector = %q, want %q", pe.Selector, tt.sel)
			}
			if !strings.Contains(err.Error(), tt.msgPart) {
				t.Errorf("Error() = %q, want it to contain %q", err.Error(), tt.msgPart)
			}
			verr := Validate(tt.sel)
			if verr == nil || verr.Error() != err.Error() {
				t.Errorf("Validate error %v differs from Parse error %v", verr, err)
			}
		})
	}
}

func TestParseErrorMessage(t *testing.T) {
	_, err := Parse(`a == `)
	want := `selector "a == ": unexpected end of input at position 5, expected a quoted value`
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %s", err, want)
	}
	_, err = Parse(`a == "` + strings.Repeat("x", 100))
	if err == nil || !strings.Contains(err.Error(), `xxx..." at position 5`) {
		t.Fatalf("long offending text not shortened: %v", err)
	}
}

func TestMustParsePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MustParse of a bad selector did not panic")
		}
	}()
	MustParse(`a ==`)
}

func TestMaxDepthAccepted(t *testing.T) {
	s := strings.Repeat("(", MaxDepth) + "has(a)" + strings.Repeat(")", MaxDepth)
	if got := MustParse(s).String(); got != "has(a)" {
		t.Errorf("String() = %q", got)
	}
}

func TestEvaluateWithScope(t *testing.T) {
	nsScope := EvaluateOpts{NamespaceSelector: true}
	globalScope := EvaluateOpts{NamespaceSelector: true, Global: true}
	nsLabels := labels{"env": "prod"}
	tests := []struct {
		sel string
		// Results for: plain Evaluate on nsLabels; as a namespaceSelector for a
		// namespace labelled nsLabels; as a namespaceSelector for a
		// non-namespaced resource.
		plain, namespaced, global bool
	}{
		{`all()`, true, true, false},
		{``, true, true, false},
		{`global()`, true, false, true},
		{`!global()`, false, true, false},
		{`!all()`, false, false, true},
		{`env == "prod"`, true, true, false},
		{`env != "prod"`, false, false, true},
		{`env == "prod" || global()`, true, true, true},
		{`env == "dev" || global()`, true, false, true},
		{`has(env) && global()`, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.sel, func(t *testing.T) {
			sel := MustParse(tt.sel)
			if got := sel.Evaluate(nsLabels); got != tt.plain {
				t.Errorf("Evaluate = %v, want %v", got, tt.plain)
			}
			if got := EvaluateWith(sel, nsLabels, EvaluateOpts{}); got != tt.plain {
				t.Errorf("EvaluateWith(zero opts) = %v, want %v", got, tt.plain)
			}
			if got := EvaluateWith(sel, nsLabels, nsScope); got != tt.namespaced {
				t.Errorf("namespaced = %v, want %v", got, tt.namespaced)
			}
			if got := EvaluateWith(sel, nil, globalScope); got != tt.global {
				t.Errorf("global = %v, want %v", got, tt.global)
			}
		})
	}
}

func TestUsesGlobal(t *testing.T) {
	for sel, want := range map[string]bool{
		`global()`:                true,
		`!(a == "b" && global())`: true,
		`all()`:                   false,
		`a == "global()"`:         false,
		`has(global)`:             false,
		`global == "x"`:           false,
		`has(a) || !has(b)`:       false,
	} {
		if got := UsesGlobal(MustParse(sel)); got != want {
			t.Errorf("UsesGlobal(%q) = %v, want %v", sel, got, want)
		}
	}
}

// foreign is a Selector from outside the package, as a test double might be.
type foreign struct{ Selector }

func TestHelpersAcceptForeignSelectors(t *testing.T) {
	g := foreign{MustParse(`a == "global()" || global()`)}
	if !UsesGlobal(g) {
		t.Error("UsesGlobal(foreign with global()) = false")
	}
	if UsesGlobal(foreign{MustParse(`a == "global()"`)}) {
		t.Error("UsesGlobal counted global() inside a quoted value")
	}
	// A foreign selector falls back to its own Evaluate.
	if !EvaluateWith(g, nil, EvaluateOpts{NamespaceSelector: true}) {
		t.Error("EvaluateWith did not fall back to Evaluate")
	}
}
