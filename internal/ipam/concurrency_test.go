package ipam_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
)

// Three nodes allocate 100 addresses each, all at once, from a pool of 16
// blocks of 16 addresses (256 in all), each call through its own Client as
// separate CNI processes would. No address may be handed out twice, each
// node's blocks are affine to it, a node borrows only once every block of
// the pool is claimed, exactly 256 requests succeed, and releasing them all
// leaves IPAM clean.
func TestConcurrentAllocation(t *testing.T) {
	if testing.Short() {
		t.Skip("300 concurrent allocations against etcd")
	}
	f := newFixture(t, etcdtest.Start)
	pool := mustPrefix("10.30.0.0/24")
	f.create(t, ippool("pool1", pool.String(), 28), node("node1", nil), node("node2", nil), node("node3", nil))

	// Record every block write in order, to check when borrowing happened.
	start, err := f.kv.Get(f.ctx, "/calico/ipam/")
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWatch := context.WithCancel(f.ctx)
	defer stopWatch()
	watch := f.kv.Watch(wctx, "/calico/ipam/v2/assignment/", clientv3.WithPrefix(), clientv3.WithPrevKV(),
		clientv3.WithRev(start.Header.Revision+1))

	type result struct {
		node, handle string
		addr         netip.Addr
		err          error
	}
	results := make(chan result, 300)
	var wg sync.WaitGroup
	for n := 1; n <= 3; n++ {
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nodeName := fmt.Sprintf("node%d", n)
				handle := fmt.Sprintf("k8s-pod-network.%s-%03d", nodeName, i)
				c := ipam.New(f.store.IPAM(), f.store, nil)
				v4, _, err := c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: handle, Node: nodeName})
				r := result{node: nodeName, handle: handle, err: err}
				if err == nil {
					r.addr = v4[0].Addr()
				}
				results <- r
			}()
		}
	}
	wg.Wait()
	close(results)

	byAddr := map[netip.Addr]string{}
	var ok []result
	failures := 0
	for r := range results {
		if r.err != nil {
			if !errors.Is(r.err, ipam.ErrNoFreeAddresses) {
				t.Errorf("%s: %v, want success or ErrNoFreeAddresses", r.handle, r.err)
			}
			failures++
			continue
		}
		if prev, dup := byAddr[r.addr]; dup {
			t.Errorf("%s handed out twice: %s and %s", r.addr, prev, r.handle)
		}
		if !pool.Contains(r.addr) {
			t.Errorf("%s outside the pool", r.addr)
		}
		byAddr[r.addr] = r.handle
		ok = append(ok, r)
	}
	if len(ok) != 256 || failures != 44 {
		t.Errorf("%d allocations succeeded and %d failed, want 256 and 44 (the pool has 256 addresses)", len(ok), failures)
	}

	// The stored data agrees with what the callers were told.
	blockOwner := map[netip.Prefix]string{}
	for _, key := range f.keys(t, "/calico/ipam/v2/assignment/ipv4/block/") {
		seg := strings.TrimPrefix(key, "/calico/ipam/v2/assignment/ipv4/block/")
		cidr := mustPrefix(strings.Replace(seg, "-", "/", 1))
		b := f.block(t, cidr)
		if b.Affinity == nil {
			t.Errorf("block %s has no affinity", cidr)
			continue
		}
		owner := strings.TrimPrefix(*b.Affinity, "host:")
		blockOwner[cidr] = owner
		if f.raw(t, ipam.AffinityKey(owner, cidr)) == "" {
			t.Errorf("block %s affine to %s without an affinity key", cidr, owner)
		}
	}
	if len(blockOwner) != 16 {
		t.Errorf("%d blocks claimed, want all 16", len(blockOwner))
	}
	borrowed := 0
	for _, r := range ok {
		h, err := f.c.Lookup(f.ctx, r.addr)
		if err != nil || h.Handle != r.handle {
			t.Errorf("%s: stored holder %q (%v), want %s", r.addr, h.Handle, err, r.handle)
		}
		blk, _ := r.addr.Prefix(28)
		if blockOwner[blk] != r.node {
			borrowed++
		}
	}
	for n := 1; n <= 3; n++ {
		nodeName := fmt.Sprintf("node%d", n)
		aff, err := f.c.AffineBlocks(f.ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		for _, cidr := range aff {
			if blockOwner[cidr] != nodeName {
				t.Errorf("%s has an affinity to %s, which is %s's", nodeName, cidr, blockOwner[cidr])
			}
		}
	}
	t.Logf("%d blocks, %d borrowed addresses", len(blockOwner), borrowed)

	// Replay the block writes: an address given to a node from a block
	// affine to another node may only appear once all 16 blocks exist.
	end, err := f.kv.Get(f.ctx, "/calico/ipam/")
	if err != nil {
		t.Fatal(err)
	}
	exists := map[string]bool{}
	borrowEvents := 0
replay:
	for resp := range watch {
		if err := resp.Err(); err != nil {
			t.Fatalf("watch: %v", err)
		}
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			if ev.Type == clientv3.EventTypeDelete {
				delete(exists, key)
				continue
			}
			exists[key] = true
			var before, after blockJSON
			json.Unmarshal(ev.Kv.Value, &after)
			if ev.PrevKv != nil {
				json.Unmarshal(ev.PrevKv.Value, &before)
			}
			for ord, a := range after.Allocations {
				if a == nil || (ord < len(before.Allocations) && before.Allocations[ord] != nil) {
					continue
				}
				if after.Attributes[*a].Secondary["node"] != strings.TrimPrefix(after.Affinity, "host:") {
					borrowEvents++
					if len(exists) != 16 {
						t.Errorf("revision %d: borrowed from %s while only %d of 16 blocks existed", ev.Kv.ModRevision, key, len(exists))
					}
				}
			}
			if ev.Kv.ModRevision >= end.Header.Revision {
				break replay
			}
		}
	}
	stopWatch()
	if borrowEvents != borrowed {
		t.Errorf("replay saw %d borrowed allocations, the blocks hold %d", borrowEvents, borrowed)
	}

	// Release everything concurrently: IPAM is empty and clean.
	var rwg sync.WaitGroup
	for _, r := range ok {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			if err := ipam.New(f.store.IPAM(), f.store, nil).ReleaseByHandle(f.ctx, r.handle); err != nil {
				t.Errorf("release %s: %v", r.handle, err)
			}
		}()
	}
	rwg.Wait()
	u, err := f.c.Usage(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range u.Blocks {
		if b.InUse != 0 || b.Free != 16 {
			t.Errorf("block %s after releasing everything: %d in use, %d free", b.CIDR, b.InUse, b.Free)
		}
	}
	if len(u.Handles) != 0 || u.Pools[0].InUse != 0 {
		t.Errorf("after releasing everything: %d handles, %d addresses in use", len(u.Handles), u.Pools[0].InUse)
	}
	rep, err := f.c.Check(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Problems(); n != 0 {
		t.Errorf("check after releasing everything found %d problems: %+v", n, rep)
	}
	// And the pool is usable again from the start.
	if a := f.assign4(t, "node1", "again"); !pool.Contains(a) {
		t.Errorf("after release: %s", a)
	}
}

type blockJSON struct {
	Affinity    string `json:"affinity"`
	Allocations []*int `json:"allocations"`
	Attributes  []struct {
		Secondary map[string]string `json:"secondary"`
	} `json:"attributes"`
}
