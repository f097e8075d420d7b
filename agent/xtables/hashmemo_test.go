package xtables

import (
	"slices"
	"testing"

	"github.com/projectcalico/calico-node/internal/policy"
)

// TestHashChainsMemo: after a change compiled by policy.Compiler, the
// memoised hashes equal a fresh hashing of every chain; a chain whose
// rules are the very ones of the memo keeps the memo's hashes, one whose
// rules are new is hashed again.
func TestHashChainsMemo(t *testing.T) {
	ic := policy.NewCompiler()
	first := ic.Compile(snapshot(false)).V4.Filter
	_, memo := hashChains(&first, nil)
	second := ic.Compile(snapshot(true)).V4.Filter
	got, _ := hashChains(&second, memo)
	want, _ := hashChains(&second, nil)
	for i := range second.Chains {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("chain %s: memoised hashes %v, want %v", second.Chains[i].Name, got[i], want[i])
		}
	}

	// Plant false hashes: kept for identical rules, ignored for others.
	planted := map[string]hashMemo{}
	for i := range second.Chains {
		c := &second.Chains[i]
		id, ok := c.Identity()
		if !ok {
			continue
		}
		planted[c.Name] = hashMemo{id: id, hashes: []string{"planted"}}
	}
	got, _ = hashChains(&second, planted)
	reused, rehashed := 0, 0
	for i := range second.Chains {
		c := &second.Chains[i]
		if _, ok := c.Identity(); !ok {
			continue
		}
		if !slices.Equal(got[i], []string{"planted"}) {
			t.Errorf("chain %s: rules unchanged but hashed again", c.Name)
		}
		reused++
	}
	fresh := policy.Compile(snapshot(true)).V4.Filter // same content, new rules
	got, _ = hashChains(&fresh, planted)
	for i := range fresh.Chains {
		if len(fresh.Chains[i].Rules) == 0 {
			continue
		}
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("chain %s: new rules took another chain's memo", fresh.Chains[i].Name)
		}
		rehashed++
	}
	if reused == 0 || rehashed == 0 {
		t.Fatalf("nothing checked: %d reused, %d rehashed", reused, rehashed)
	}
}
