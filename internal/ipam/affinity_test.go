package ipam_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/projectcalico/calico-node/internal/ipam"
)

// TestReleaseHostAffinities: a removed node's blocks are given up; empty
// ones vanish, ones still holding addresses keep them without affinity,
// and other nodes' blocks are untouched.
func TestReleaseHostAffinities(t *testing.T) {
	forEachBackend(t, []backend{etcdEmbedded, kubeAPI}, testReleaseHostAffinities)
}

func testReleaseHostAffinities(t *testing.T, f *fixture) {
	f.create(t, ippool("p", "10.10.0.0/24", 28), node("gone", nil), node("stays", nil))

	// "gone" gets two blocks: one emptied again, one still used.
	var addrs []netip.Addr
	for i := range 17 {
		addrs = append(addrs, f.assign4(t, "gone", "h"+string(rune('a'+i))))
	}
	other := f.assign4(t, "stays", "other")
	blocks, err := f.c.AffineBlocks(f.ctx, "gone")
	if err != nil || len(blocks) != 2 {
		t.Fatalf("AffineBlocks(gone) = %v, %v; want 2 blocks", blocks, err)
	}
	full, partial := blocks[0], blocks[1]
	// Free the whole first block.
	if _, err := f.c.ReleaseIPs(f.ctx, addrs[:16]...); err != nil {
		t.Fatal(err)
	}
	if !full.Contains(addrs[0]) || !partial.Contains(addrs[16]) {
		t.Fatalf("unexpected block layout %v for %v", blocks, addrs)
	}

	// mustBeEmpty: only the empty block goes.
	released, err := f.c.ReleaseHostAffinities(f.ctx, "gone", true)
	if !errors.Is(err, ipam.ErrBlockNotEmpty) {
		t.Fatalf("mustBeEmpty: err = %v, want ErrBlockNotEmpty", err)
	}
	if !slices.Equal(released, []netip.Prefix{full}) {
		t.Errorf("mustBeEmpty released %v, want [%s]", released, full)
	}
	if f.raw(t, ipam.BlockKey(full)) != "" || f.raw(t, ipam.AffinityKey("gone", full)) != "" {
		t.Error("empty block or its affinity still stored")
	}
	if f.raw(t, ipam.AffinityKey("gone", partial)) == "" {
		t.Error("affinity of the non-empty block removed with mustBeEmpty")
	}

	// Without mustBeEmpty the used block loses its affinity, not its address.
	released, err = f.c.ReleaseHostAffinities(f.ctx, "gone", false)
	if err != nil || !slices.Equal(released, []netip.Prefix{partial}) {
		t.Fatalf("released %v, %v; want [%s]", released, err, partial)
	}
	b := f.block(t, partial)
	if b.Affinity != nil {
		t.Errorf("block %s affinity = %q, want none", partial, *b.Affinity)
	}
	if h, err := f.c.Lookup(f.ctx, addrs[16]); err != nil || h.Handle != "hq" {
		t.Errorf("address %s after release: %+v, %v; want still held by hq", addrs[16], h, err)
	}
	if keys := f.keys(t, "/calico/ipam/v2/host/gone/"); len(keys) != 0 {
		t.Errorf("affinity keys left: %v", keys)
	}
	if h, err := f.c.Lookup(f.ctx, other); err != nil || h.Affinity != "host:stays" {
		t.Errorf("other node's address: %+v, %v", h, err)
	}

	// Nothing left: a second call is a no-op.
	if released, err := f.c.ReleaseHostAffinities(f.ctx, "gone", false); err != nil || len(released) != 0 {
		t.Errorf("second release = %v, %v", released, err)
	}
}
