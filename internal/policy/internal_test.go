package policy

import (
	"slices"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/selector"
)

// TestRuleHashesSurviveInsertions: a rule's hash names the chain, the
// rule and its place among equal rules, not what comes before it, so that
// the programmer can insert into a chain in the kernel and leave the rules
// already there alone.
func TestRuleHashesSurviveInsertions(t *testing.T) {
	drop, accept, ret := Rule{Action: Drop{}}, Rule{Action: Accept{}}, Rule{Action: Return{}}
	a := Chain{Name: "cali-x", Rules: []Rule{drop, accept, drop, ret}}
	// accept inserted at the start and in the middle, a third drop at the end.
	b := Chain{Name: "cali-x", Rules: []Rule{accept, drop, accept, accept, drop, ret, drop}}
	ha, hb := a.Hashes(), b.Hashes()
	// Equal rules are told apart by how many precede them: b's first
	// accept is a's accept, its first two drops are a's.
	for i, j := range map[int]int{0: 1, 1: 0, 2: 4, 3: 5} {
		if ha[i] != hb[j] {
			t.Errorf("rule %d of a (%s) is rule %d of b (%s): want the same hash", i, ha[i], j, hb[j])
		}
	}
	seen := map[string]bool{}
	for _, h := range hb {
		if seen[h] {
			t.Errorf("hash %s repeats within a chain: %v", h, hb)
		}
		seen[h] = true
		if len(h) != 16 {
			t.Errorf("hash %q is not 16 characters", h)
		}
	}
	// A long chain (counted through a map) hashes as a short one would.
	long := Chain{Name: "cali-x", Rules: slices.Concat(b.Rules, b.Rules)}
	if hl := long.Hashes(); !slices.Equal(hl[:len(hb)], hb) || hl[len(hb)] == hb[0] {
		t.Errorf("long chain's hashes %v, the short one's %v", hl, hb)
	}
	// The same rules in another chain hash differently.
	c := Chain{Name: "cali-y", Rules: a.Rules}
	if c.Hashes()[0] == ha[0] {
		t.Error("hash does not depend on the chain name")
	}
	// A hook hashes as the first rule of a chain named after its
	// built-in chain.
	h := Hook{Chain: "FORWARD", Rule: drop}
	fwd := Chain{Name: "FORWARD", Rules: []Rule{drop}}
	if h.Hash() != fwd.Hashes()[0] {
		t.Errorf("hook hash = %s, want %s", h.Hash(), fwd.Hashes()[0])
	}
	if got, want := h.Line(), `-I FORWARD 1 -m comment --comment "cali:`+h.Hash()+`" --jump DROP`; got != want {
		t.Errorf("hook line = %s, want %s", got, want)
	}
}

// TestRuleHashesFixed: the hashes are those the kernels of running nodes
// hold; a change to them rewrites every chain of every node once, on its
// upgrade.
func TestRuleHashesFixed(t *testing.T) {
	c := Chain{Name: "FORWARD", Rules: []Rule{{Action: Drop{}}, {Action: Accept{}}, {Action: Drop{}}, {Action: Accept{}}}}
	want := []string{"jZxvdWiu23wbxjPv", "X36W3bfLJf1NQ4Ur", "l7VExwx6BaO9t7kS", "HvhTDi1dvYqYXZAv"}
	if got := c.Hashes(); !slices.Equal(got, want) {
		t.Errorf("hashes %q, want %q", got, want)
	}
}

func TestLengthLimitedMatchesFelix(t *testing.T) {
	tests := []struct {
		prefix, suffix string
		max            int
		want           string
	}{
		{"felix", "1234", 10, "felix1234"},
		{"felix", "123456", 11, "felix123456"},
		{"felix", "_2345", 10, "felix_kMQI"},
		{"felix", "12345678910", 13, "felix_Y2QCZIS"},
	}
	for _, tc := range tests {
		if got := lengthLimited(tc.prefix, tc.suffix, tc.max); got != tc.want {
			t.Errorf("lengthLimited(%q, %q, %d) = %q, want %q", tc.prefix, tc.suffix, tc.max, got, tc.want)
		}
	}
}

func TestPrefixKeys(t *testing.T) {
	tests := []struct{ in, want string }{
		{`a == "x"`, `pcns.a == "x"`},
		{`has(a)`, `has(pcns.a)`},
		{`!has(a)`, `!has(pcns.a)`},
		{`all()`, `all()`},
		{`global()`, `global()`},
		{`a in {"in", "has(b)"}`, `pcns.a in {"has(b)", "in"}`},
		{`a not in {"x"} && b != 'y'`, `(pcns.a not in {"x"} && pcns.b != "y")`},
		{`k starts with "a" || k ends with "b" || k contains "all()"`, `(pcns.k starts with "a" || pcns.k ends with "b" || pcns.k contains "all()")`},
		{`!(a == "1" && (b == "2" || has(c)))`, `!(pcns.a == "1" && (pcns.b == "2" || has(pcns.c)))`},
		{`kubernetes.io/metadata.name == "x"`, `pcns.kubernetes.io/metadata.name == "x"`},
		{`value == 'has "quotes"'`, `pcns.value == 'has "quotes"'`},
	}
	for _, tc := range tests {
		sel := selector.MustParse(tc.in)
		got := prefixKeys(sel, "pcns.")
		if got != tc.want {
			t.Errorf("prefixKeys(%s) = %s, want %s", tc.in, got, tc.want)
		}
		// The result must parse, and mention exactly the prefixed keys.
		p, err := selector.Parse(got)
		if err != nil {
			t.Errorf("prefixKeys(%s) = %s does not parse: %v", tc.in, got, err)
			continue
		}
		for i, k := range sel.LabelKeys() {
			if pk := p.LabelKeys()[i]; pk != "pcns."+k {
				t.Errorf("prefixKeys(%s): key %s became %s", tc.in, k, pk)
			}
		}
	}
}

func TestEntitySelectors(t *testing.T) {
	s := &selectors{cache: map[string]selectorResult{}}
	tests := []struct {
		name string
		er   string
		sel  string
		ns   string
		want string
	}{
		{name: "selector in a namespaced policy", ns: "ns1", sel: "app == 'web'",
			want: `(projectcalico.org/namespace == "ns1" && app == "web")`},
		{name: "global policy selector", sel: "app == 'web'", want: `app == "web"`},
		{name: "namespace selector all", ns: "ns1", er: "all()",
			want: `has(projectcalico.org/namespace)`},
		{name: "namespace selector global", ns: "ns1", er: "global()",
			want: `!has(projectcalico.org/namespace)`},
		{name: "namespace selector and selector", ns: "ns1", er: "team == 'red'", sel: "app == 'db'",
			want: `(pcns.team == "red" && app == "db")`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text, err := s.entitySelector(&api.EntityRule{Selector: tc.sel, NamespaceSelector: tc.er}, tc.ns)
			if err != nil {
				t.Fatal(err)
			}
			sel, err := s.parse(text)
			if err != nil {
				t.Fatal(err)
			}
			if sel.String() != tc.want {
				t.Errorf("selector %s, want %s", sel.String(), tc.want)
			}
		})
	}
}

func TestIPSetNames(t *testing.T) {
	id := selector.MustParse(`app == "web"`).UniqueID()
	if got := setName(4, id); !strings.HasPrefix(got, "cali40s:") || len(got) != 31 {
		t.Errorf("setName(4, %s) = %s", id, got)
	}
	if got := setName(6, setIDMasqPools); got != "cali60masq-ipam-pools" {
		t.Errorf("setName(6, masq) = %s", got)
	}
}

func TestRenderIPSets(t *testing.T) {
	got := RenderIPSets([]IPSet{
		{Name: "cali40s:abc", Type: SetTypeNet, Family: "inet", Members: []string{"10.0.0.1", "10.1.0.0/16"}},
		{Name: "cali60n:def", Type: SetTypeIPPort, Family: "inet6", Members: []string{"fd00::1,tcp:80"}},
	}, 0)
	want := `create cali40s:abc hash:net family inet maxelem 1048576 -exist
create cali4t0 hash:net family inet maxelem 1048576 -exist
flush cali4t0
add cali4t0 10.0.0.1
add cali4t0 10.1.0.0/16
swap cali4t0 cali40s:abc
destroy cali4t0
create cali60n:def hash:ip,port family inet6 maxelem 1048576 -exist
create cali6t0 hash:ip,port family inet6 maxelem 1048576 -exist
flush cali6t0
add cali6t0 fd00::1,tcp:80
swap cali6t0 cali60n:def
destroy cali6t0
`
	if got != want {
		t.Errorf("RenderIPSets:\n%s\nwant:\n%s", got, want)
	}
}

func TestAllocMarks(t *testing.T) {
	m, ok := allocMarks(0xffff0000)
	if !ok || m.accept != 0x10000 || m.pass != 0x20000 || m.drop != 0x40000 || m.scratch0 != 0x80000 || m.scratch1 != 0x100000 {
		t.Errorf("allocMarks(default) = %+v", m)
	}
	if _, ok := allocMarks(0xf); ok {
		t.Error("allocMarks accepted a mask of 4 bits")
	}
}
