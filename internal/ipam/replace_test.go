package ipam_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/projectcalico/calico-node/internal/ipam"
)

// A retried CNI ADD finds the container's handle still holding the
// address an earlier, failed ADD allocated (etcd went away before its undo
// could release it). With Replace the handle ends up with exactly the new
// request's addresses; without it Calico's additive semantics hold.
func TestReplaceHandle(t *testing.T) {
	const h = "k8s-pod-network.c1"
	auto := func(f *fixture, _ netip.Addr, replace bool) error {
		_, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: h, Node: "node1", Replace: replace})
		return err
	}
	same := func(f *fixture, first netip.Addr, replace bool) error {
		return f.c.AssignIP(f.ctx, ipam.AssignIPArgs{IP: first, HandleID: h, Node: "node1", Replace: replace})
	}
	cases := []struct {
		name string
		// second is the retried request; the first one auto-assigned one
		// IPv4 address to h.
		second    func(f *fixture, first netip.Addr, replace bool) error
		replace   bool
		wantErr   error
		wantHeld  int
		firstFree bool // the first address is free afterwards
	}{
		{"auto-assign adds without Replace", auto, false, nil, 2, false},
		{"auto-assign with Replace frees the old address", auto, true, nil, 1, true},
		{"the same address without Replace is in use", same, false, ipam.ErrAddressInUse, 1, false},
		{"the same address with Replace", same, true, nil, 1, false},
	}
	forEachBackend(t, []backend{etcdBinary, kubeAPI}, func(t *testing.T, f *fixture) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				f.reset(t)
				f.create(t, ippool("pool1", "10.1.0.0/24", 28), node("node1", nil))
				first := f.assign4(t, "node1", h)
				if err := tc.second(f, first, tc.replace); !errors.Is(err, tc.wantErr) {
					t.Fatalf("second request: %v, want %v", err, tc.wantErr)
				}
				held, err := f.c.IPsByHandle(f.ctx, h)
				if err != nil {
					t.Fatal(err)
				}
				if len(held) != tc.wantHeld {
					t.Errorf("handle holds %v, want %d addresses", held, tc.wantHeld)
				}
				_, lerr := f.c.Lookup(f.ctx, first)
				if free := errors.Is(lerr, ipam.ErrNotAllocated); free != tc.firstFree {
					t.Errorf("first address %s free = %v (%v), want %v", first, free, lerr, tc.firstFree)
				}
				if tc.firstFree && slices.Contains(held, first) {
					t.Errorf("handle still holds the replaced address %s", first)
				}
				// The handle's counts match its blocks: one release frees all.
				if err := f.c.ReleaseByHandle(f.ctx, h); err != nil {
					t.Fatal(err)
				}
				if got := f.keys(t, "/calico/ipam/v2/handle/"); len(got) != 0 {
					t.Errorf("handles left after the release: %v", got)
				}
				rep, err := f.c.Check(f.ctx, "node1")
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Allocations) != 0 || rep.Problems() != 0 {
					t.Errorf("after the release: %d allocations, %d problems", len(rep.Allocations), rep.Problems())
				}
			})
		}
	})
}
