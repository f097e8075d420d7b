package ipam_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
)

// nextSnapshot waits for the next snapshot from ch.
func nextSnapshot(t *testing.T, ch <-chan ipam.BlockSnapshot) ipam.BlockSnapshot {
	t.Helper()
	select {
	case s, ok := <-ch:
		if !ok {
			t.Fatal("block watch closed")
		}
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no block snapshot within 10s")
	}
	panic("unreachable")
}

// noSnapshot asserts that nothing arrives for a while.
func noSnapshot(t *testing.T, ch <-chan ipam.BlockSnapshot) {
	t.Helper()
	select {
	case s := <-ch:
		t.Fatalf("unexpected snapshot %+v", s)
	case <-time.After(300 * time.Millisecond):
	}
}

func wantAffinity(t *testing.T, s ipam.BlockSnapshot, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for p, n := range s.Affinity {
		got[p.String()] = n
	}
	if !maps.Equal(got, want) {
		t.Fatalf("affinities = %v, want %v", got, want)
	}
}

func TestWatchBlocks(t *testing.T) {
	forEachBackend(t, []backend{etcdBinary, kubeAPI}, testWatchBlocks)
}

func testWatchBlocks(t *testing.T, f *fixture) {
	f.create(t, ippool("pool1", "10.65.0.0/16", 26), node("node1", nil), node("node2", nil))
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	ch := ipam.WatchBlocks(ctx, f.kv, nil)

	// The first snapshot is the (empty) listing.
	s := nextSnapshot(t, ch)
	wantAffinity(t, s, map[string]string{})
	if s.Revision == 0 {
		t.Error("snapshot has no revision")
	}

	// A claim shows up with its node.
	a := f.assign4(t, "node1", "h1")
	blk := netip.PrefixFrom(a, 26).Masked()
	wantAffinity(t, nextSnapshot(t, ch), map[string]string{blk.String(): "node1"})

	// More allocations in the same block change no route: nothing is sent.
	f.assign4(t, "node1", "h2")
	noSnapshot(t, ch)

	// An address of node1's block held for node2 is borrowed.
	borrowed := blk.Addr().Next().Next().Next().Next().Next()
	if err := f.c.AssignIP(f.ctx, ipam.AssignIPArgs{IP: borrowed, HandleID: "h3", Node: "node2"}); err != nil {
		t.Fatal(err)
	}
	s = nextSnapshot(t, ch)
	if got := s.Borrowed; len(got) != 1 || got[borrowed] != "node2" {
		t.Fatalf("borrowed = %v, want %s on node2", got, borrowed)
	}
	// The receiver owns the maps: scribbling on them changes nothing for
	// the watch.
	clear(s.Borrowed)
	clear(s.Affinity)

	// A second node's block, while the receiver is not reading, then a
	// release: the receiver gets only the newest state, not each step.
	b := f.assign4(t, "node2", "h4")
	blk2 := netip.PrefixFrom(b, 26).Masked()
	if err := f.c.ReleaseByHandle(f.ctx, "h3"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	s = nextSnapshot(t, ch)
	wantAffinity(t, s, map[string]string{blk.String(): "node1", blk2.String(): "node2"})
	if len(s.Borrowed) != 0 {
		t.Fatalf("borrowed after release = %v, want none", s.Borrowed)
	}
	noSnapshot(t, ch)

	// A deleted block disappears.
	f.del(t, ipam.BlockKey(blk2))
	wantAffinity(t, nextSnapshot(t, ch), map[string]string{blk.String(): "node1"})

	// A write IPAM cannot use keeps what was known: a block whose
	// allocations do not fit its CIDR, and, on etcd, a value that is not
	// JSON at all (the Kubernetes API stores only what its KV can convert,
	// and refuses it).
	f.put(t, ipam.BlockKey(blk), fmt.Sprintf(`{"cidr":%q,"affinity":"host:node2","allocations":[],"unallocated":[],"attributes":[],"sequenceNumber":1,"sequenceNumberForAllocation":{},"deleted":false}`, blk))
	noSnapshot(t, ch)
	notJSON := datastore.Txn{Ops: []datastore.Op{{Type: datastore.OpPut, Key: ipam.BlockKey(blk), Value: []byte("{not json")}}}
	res, err := f.kv.Txn(f.ctx, notJSON)
	switch {
	case f.backend == "kdd" && err == nil:
		t.Errorf("the Kubernetes datastore stored a block that is not JSON: %+v", res)
	case f.backend != "kdd" && (err != nil || !res.Succeeded):
		t.Fatalf("put a value that is not JSON: %+v %v", res, err)
	}
	noSnapshot(t, ch)

	// The channel closes with the context.
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			// One pending snapshot may still be delivered; the next read
			// must see the close.
			if _, ok := <-ch; ok {
				t.Fatal("channel still open after cancel")
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed after cancel")
	}
}

// TestWatchBlocksSurvivesRestart: a change made after etcd restarts is
// still delivered. (The Kubernetes datastore's watch restarts are tested
// in package kdd, against an API server that fails on purpose.)
func TestWatchBlocksSurvivesRestart(t *testing.T) {
	srv := etcdtest.Start(t)
	f := openEtcd(t, func(testing.TB, ...etcdtest.Option) *etcdtest.Server { return srv })
	f.create(t, ippool("pool1", "10.66.0.0/16", 26), node("node1", nil))
	ch := ipam.WatchBlocks(f.ctx, f.kv, nil)
	wantAffinity(t, nextSnapshot(t, ch), map[string]string{})
	srv.Restart(t)
	a := f.assign4(t, "node1", "h1")
	wantAffinity(t, nextSnapshot(t, ch), map[string]string{netip.PrefixFrom(a, 26).Masked().String(): "node1"})
}
