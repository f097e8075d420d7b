package selector

import (
	"errors"
	"testing"
)

// fuzzLabels are the label sets a fuzzed selector and its canonical form
// must agree on.
var fuzzLabels = []map[string]string{
	nil,
	{"a": "b"},
	{"a": "", "b": "1", "c": "x y"},
	{"projectcalico.org/namespace": "default", "app": "web", "a": `"`, "b": "'"},
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		``, ` `, `all()`, `global()`, `!global()`,
		`a == "b"`, `a == 'b'`, `a != "b"`, `a=="b"`,
		`a in {"x", "y"}`, `a not in {'x',}`, `a notin {}`, `a in {"'", '"'}`,
		`has(a)`, `!has(a)`, `!! ! has( a )`,
		`a contains "x"`, `a starts with "x"`, `a startswith 'x'`, `a ends with "x"`, `a endswith "x"`,
		`a == "1" || b == "2" && c == "3"`, `!a == "x"`, `!(a == "x" || has(b))`,
		`((a == "1" || b == "2") && c == "3")`, `!(!has(a))`, `!(!(a == "1" || b == "2"))`, `projectcalico.org/namespace == "kube-system"`,
		`a == "hello world && x"`, `a == '"'`,
		// Errors.
		`a == "b`, `a ==`, `a = "b"`, `(a == "b"`, `a == "b")`, `a/b/c == "x"`, `a == "b" c`,
		`has(`, `all(x)`, `a in {`, `%`, "a == \"\xff\"", `((((((((((`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := Parse(s)
		verr := Validate(s)
		if (err == nil) != (verr == nil) {
			t.Fatalf("Parse error %v but Validate error %v", err, verr)
		}
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not *ParseError", err)
			}
			if pe.Pos < 0 || pe.Pos > len(s) {
				t.Fatalf("Pos %d outside input of length %d", pe.Pos, len(s))
			}
			_ = err.Error() // must not panic
			return
		}
		canon := sel.String()
		again, err := Parse(canon)
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", canon, s, err)
		}
		if again.String() != canon {
			t.Fatalf("canonical form not stable: %q -> %q", canon, again.String())
		}
		if again.UniqueID() != sel.UniqueID() {
			t.Fatalf("UniqueID differs after round trip")
		}
		for _, l := range fuzzLabels {
			if sel.Evaluate(l) != again.Evaluate(l) {
				t.Fatalf("%q and canonical %q disagree on %v", s, canon, l)
			}
			for _, o := range []EvaluateOpts{{NamespaceSelector: true}, {NamespaceSelector: true, Global: true}} {
				if EvaluateWith(sel, l, o) != EvaluateWith(again, l, o) {
					t.Fatalf("%q and canonical %q disagree on %v with %+v", s, canon, l, o)
				}
			}
		}
	})
}
