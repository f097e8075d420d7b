package ipam_test

import (
	"encoding/json"
	"net/netip"
	"slices"
	"testing"

	"github.com/projectcalico/calico-node/internal/ipam"
)

// Calico claims a block in steps (pending affinity, block, confirmed
// affinity, then the allocation), so a Calico node whose etcd went away
// in the middle leaves one of these states behind; this package claims in
// one transaction and never does. Whatever the step, the next allocation
// on that node, once etcd is back, finishes the claim and allocates from
// the block, and a stale claim is dropped.
func TestHalfClaimResumed(t *testing.T) {
	const (
		pending   = `{"state":"pending","deleted":false}`
		confirmed = `{"state":"confirmed","deleted":false}`
	)
	// Not the block node1 would claim first (index 4 of the pool for
	// node1's name hash), so only a resumed claim lands in it.
	blk := mustPrefix("10.1.0.160/28")
	emptyBlock := func(host string) string {
		allocs := make([]*int, 16)
		unalloc := make([]int, 16)
		for i := range unalloc {
			unalloc[i] = i
		}
		data, _ := json.Marshal(map[string]any{
			"cidr": blk.String(), "affinity": "host:" + host, "allocations": allocs, "unallocated": unalloc,
			"attributes": []any{}, "deleted": false, "sequenceNumber": 7, "sequenceNumberForAllocation": map[string]any{},
		})
		return string(data)
	}
	cases := []struct {
		name     string
		affinity string // node1's affinity to blk, "" = none
		block    string // blk's value, "" = none
		// resumed: the claim is node1's and the address comes from blk;
		// otherwise node1's stale affinity goes and blk is left alone.
		resumed bool
	}{
		{"after the pending affinity", pending, "", true},
		{"after the block, before the confirmation", pending, emptyBlock("node1"), true},
		{"after the confirmation, before the allocation", confirmed, emptyBlock("node1"), true},
		{"pending affinity to a block another node got", pending, emptyBlock("node2"), false},
	}
	forEachBackend(t, []backend{etcdBinary, kubeAPI}, func(t *testing.T, f *fixture) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				f.reset(t)
				f.create(t, ippool("pool1", "10.1.0.0/24", 28), node("node1", nil), node("node2", nil))
				if tc.affinity != "" {
					f.put(t, ipam.AffinityKey("node1", blk), tc.affinity)
				}
				if tc.block != "" {
					f.put(t, ipam.BlockKey(blk), tc.block)
				}
				got := f.assign4(t, "node1", "k8s-pod-network.c1")
				if blk.Contains(got) != tc.resumed {
					t.Errorf("address %s, from the half-claimed block %s = %v, want %v", got, blk, blk.Contains(got), tc.resumed)
				}
				affine, err := f.c.AffineBlocks(f.ctx, "node1")
				if err != nil {
					t.Fatal(err)
				}
				aff := f.raw(t, ipam.AffinityKey("node1", blk))
				if tc.resumed {
					if aff != confirmed {
						t.Errorf("affinity = %q, want confirmed", aff)
					}
					if b := f.block(t, blk); b.Affinity == nil || *b.Affinity != "host:node1" {
						t.Errorf("block affinity %v, want host:node1", b.Affinity)
					}
					if !slices.Equal(affine, []netip.Prefix{blk}) {
						t.Errorf("node1's blocks %v, want only %s (no second claim)", affine, blk)
					}
				} else {
					if aff != "" {
						t.Errorf("stale affinity kept: %s", aff)
					}
					if b := f.block(t, blk); *b.Affinity != "host:node2" || slices.ContainsFunc(b.Allocations, func(a *int) bool { return a != nil }) {
						t.Errorf("node2's block changed: %+v", b)
					}
				}
				// Nothing dangling: every handle has its addresses and every
				// block its node.
				rep, err := f.c.Check(f.ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.LeakedHandles)+len(rep.MissingHandles)+len(rep.BlocksOfMissingNodes) != 0 {
					t.Errorf("check: leaked handles %v, missing handles %v, blocks of missing nodes %v",
						rep.LeakedHandles, rep.MissingHandles, rep.BlocksOfMissingNodes)
				}
			})
		}
	})
}
