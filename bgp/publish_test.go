package bgp

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent/routes"
)

// TestPublishSpacesExplanations: every change of a burst reaches the
// route table at once, but the explanations' copy of the published set
// (what `bgp why` checks a route against) is made at most every
// exposeCostPerRoute per route: publish says when to call again, and the
// call then catches the copy up with everything published.
func TestPublishSpacesExplanations(t *testing.T) {
	sink := &fakeSink{}
	a := New(Config{NodeName: "a"}, nil, nil, sink, nil)
	in := RoutingInput{Identity: testID}
	r := &reconciler{a: a, ready: true, enabled: true, in: in}
	learn := func(i int) Learned {
		l := Learned{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}), 32),
			Peer: netip.MustParseAddr("192.0.2.9"), NextHop: netip.MustParseAddr("192.0.2.9")}
		a.lmu.Lock()
		a.learned[l.Prefix], a.changed[l.Prefix] = l, true
		a.lmu.Unlock()
		return l
	}
	const n = 2000
	var all []Learned
	for i := range n {
		all = append(all, learn(i))
	}
	if wait := r.publish(); wait != 0 { // the first: a whole set
		t.Fatalf("first publish: call again in %s, want never", wait)
	}
	published := func(l Learned) bool {
		return slices.ContainsFunc(a.view.Load().Published, func(rt routes.Route) bool { return rt.Dst == l.Prefix })
	}
	inTable := func(l Learned) bool {
		return slices.ContainsFunc(sink.rs[routes.SourceBGP], func(rt routes.Route) bool { return rt.Dst == l.Prefix })
	}
	if !published(all[n-1]) || !inTable(all[n-1]) {
		t.Fatal("the first publish is not in the table and the explanations")
	}

	first := learn(n)
	if wait := r.publish(); wait != 0 { // after a quiet spell: copied at once
		t.Fatalf("a change after a quiet spell: copy put off by %s", wait)
	}
	if !published(first) || !inTable(first) {
		t.Fatal("a change after a quiet spell is not in the table and the explanations")
	}
	start := time.Now()
	second := learn(n + 1)
	wait := r.publish()
	if spacing := time.Duration(n) * exposeCostPerRoute; wait <= 0 || wait > spacing {
		t.Fatalf("the next change's copy put off by %s, want up to %s", wait, spacing)
	}
	if !inTable(second) || published(second) {
		t.Fatalf("within the spacing: in the table %v (want true), in the explanations %v (want false)", inTable(second), published(second))
	}
	time.Sleep(wait)
	if again := r.publish(); again != 0 {
		t.Fatalf("%s after the put-off copy: call again in %s, want never", time.Since(start), again)
	}
	if !published(second) || !published(first) || !published(all[0]) {
		t.Fatal("the put-off copy misses published routes")
	}
	if got := len(a.view.Load().Published); got != n+2 {
		t.Fatalf("the explanations hold %d routes, want %d", got, n+2)
	}
}
