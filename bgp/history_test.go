package bgp

import (
	"net/netip"
	"testing"
	"time"
)

// TestHistoryForgetsOldest: past historySize prefixes the oldest
// withdrawal is forgotten; a prefix withdrawn again counts from its new
// withdrawal, and a deleted one (learned again) frees its place.
func TestHistoryForgetsOldest(t *testing.T) {
	var h history
	at := time.Unix(0, 0)
	pfx := func(i int) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
	}
	add := func(i int) { at = at.Add(time.Second); h.add(pfx(i), withdrawal{At: at}) }
	for i := range historySize {
		add(i)
	}
	add(0)               // withdrawn again: now the newest
	h.del(pfx(1))        // learned again
	add(historySize)     // fills the place 1 left
	add(historySize + 1) // evicts the oldest: 2
	for i, want := range map[int]bool{0: true, 1: false, 2: false, 3: true, historySize: true, historySize + 1: true} {
		if got := h.get(pfx(i)) != nil; got != want {
			t.Errorf("prefix %d remembered: %v, want %v", i, got, want)
		}
	}
	if len(h.m) != historySize {
		t.Errorf("%d remembered, want %d", len(h.m), historySize)
	}
	// Many more withdrawals keep the bound and the order.
	for i := range 10 * historySize {
		add(historySize + 2 + i)
	}
	if len(h.m) != historySize || len(h.order) > 4*historySize+1 {
		t.Errorf("%d remembered, %d in order", len(h.m), len(h.order))
	}
	if h.get(pfx(historySize+2+10*historySize-1)) == nil || h.get(pfx(historySize+2+9*historySize-1)) != nil {
		t.Error("not the newest historySize withdrawals remembered")
	}
}
