package ipam_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
)

// Nodes allocate addresses all at once, many each, from a pool of 16
// blocks, each call through its own Client as separate CNI processes
// would, and ask for more addresses than the pool has. No address may be
// handed out twice, each node's blocks are affine to it, a node borrows
// only once every block of the pool is claimed, exactly as many requests
// as the pool has addresses succeed, every handle matches its blocks, and
// releasing them all leaves IPAM clean. On the Kubernetes API, where a
// transaction is applied write by write and undone when a later write
// loses, this is the test of that undo under real contention; it runs
// fewer requests there (each write is a request, and a lost race costs
// several), with small blocks so that claims race often.
//
// The cached cases are a node's agent (half the requests, sharing one
// ipam.Cache per node) racing that node's plugin processes (the other
// half) and the other nodes: allocations and releases from a cache that
// other writers make stale at every turn.
func TestConcurrentAllocation(t *testing.T) {
	if testing.Short() {
		t.Skip("hundreds of concurrent allocations")
	}
	for _, tc := range []struct {
		b              backend
		cached         bool
		nodes, perNode int
		pool           string
		blockSize      int
	}{
		{etcdBinary, false, 3, 100, "10.30.0.0/24", 28}, // 16 blocks of 16
		{kubeAPI, false, 4, 20, "10.30.0.0/26", 30},     // 16 blocks of 4
		{etcdBinary, true, 3, 100, "10.30.0.0/24", 28},
		{kubeAPI, true, 4, 20, "10.30.0.0/26", 30},
	} {
		name := tc.b.name
		if tc.cached {
			name += "/cached"
		}
		t.Run(name, func(t *testing.T) {
			testConcurrentAllocation(t, tc.b.open(t), tc.cached, tc.nodes, tc.perNode, mustPrefix(tc.pool), tc.blockSize)
		})
	}
}

func testConcurrentAllocation(t *testing.T, f *fixture, cached bool, nodes, perNode int, pool netip.Prefix, blockSize int) {
	caches := map[string]*ipam.Cache{}
	for n := 1; n <= nodes; n++ {
		caches[fmt.Sprintf("node%d", n)] = ipam.NewCache()
	}
	// client is the i-th request's client on node: with cached, every
	// other one is the node's agent.
	client := func(node string, i int) *ipam.Client {
		c := ipam.New(f.kv, f.store, nil)
		if cached && i%2 == 0 {
			c.UseCache(caches[node])
		}
		return c
	}
	size := 1 << (32 - pool.Bits())
	blockAddrs := 1 << (32 - blockSize)
	blocks := size / blockAddrs
	f.create(t, ippool("pool1", pool.String(), blockSize))
	for n := 1; n <= nodes; n++ {
		f.create(t, node(fmt.Sprintf("node%d", n), nil))
	}

	// Record every block write in order, to check when borrowing happened.
	rec := recordWatch(t, f, "/calico/ipam/v2/assignment/")

	type result struct {
		node, handle string
		addr         netip.Addr
		err          error
	}
	results := make(chan result, nodes*perNode)
	var wg sync.WaitGroup
	start := time.Now()
	for n := 1; n <= nodes; n++ {
		for i := range perNode {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nodeName := fmt.Sprintf("node%d", n)
				handle := fmt.Sprintf("k8s-pod-network.%s-%03d", nodeName, i)
				v4, _, err := client(nodeName, i).AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: handle, Node: nodeName})
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
	t.Logf("%d concurrent allocations took %s", nodes*perNode, time.Since(start).Round(time.Millisecond))

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
	if len(ok) != size || failures != nodes*perNode-size {
		t.Errorf("%d allocations succeeded and %d failed, want %d and %d (the pool has %d addresses)", len(ok), failures, size, nodes*perNode-size, size)
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
		if got := f.raw(t, ipam.AffinityKey(owner, cidr)); got != `{"state":"confirmed","deleted":false}` {
			t.Errorf("block %s affine to %s: affinity key %q, want confirmed", cidr, owner, got)
		}
	}
	if len(blockOwner) != blocks {
		t.Errorf("%d blocks claimed, want all %d", len(blockOwner), blocks)
	}
	rep, err := f.c.Check(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	borrowed := 0
	for _, r := range ok {
		if al := rep.Allocations[r.addr.String()]; len(al) != 1 || al[0].Handle != r.handle {
			t.Errorf("%s: stored allocations %+v, want one held by %s", r.addr, al, r.handle)
		}
		blk, _ := r.addr.Prefix(blockSize)
		if blockOwner[blk] != r.node {
			borrowed++
		}
	}
	if len(rep.Allocations) != len(ok) {
		t.Errorf("%d addresses allocated in the blocks, %d handed out", len(rep.Allocations), len(ok))
	}
	if len(rep.LeakedHandles)+len(rep.MissingHandles) != 0 {
		t.Errorf("handles without addresses %v, addresses without handle %v", rep.LeakedHandles, rep.MissingHandles)
	}
	handlesMatchBlocks(t, f)
	// A node may be left with a pending affinity to a block another node
	// won, on the Kubernetes API, where a claim writes its affinity before
	// the block (see datastore.KV.Txn): harmless, BGP ignores it and the
	// node's next allocation drops it (checked below). A confirmed one
	// would be announced.
	const pending = `{"state":"pending","deleted":false}`
	for n := 1; n <= nodes; n++ {
		nodeName := fmt.Sprintf("node%d", n)
		aff, err := f.c.AffineBlocks(f.ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		for _, cidr := range aff {
			if v := f.raw(t, ipam.AffinityKey(nodeName, cidr)); blockOwner[cidr] != nodeName && (f.backend != "kdd" || v != pending) {
				t.Errorf("%s has an affinity %s to %s, which is %s's", nodeName, v, cidr, blockOwner[cidr])
			}
		}
	}
	t.Logf("%d blocks, %d borrowed addresses", len(blockOwner), borrowed)

	// Replay the block writes: an address given to a node from a block
	// affine to another node may only appear once all blocks exist.
	exists := map[string]bool{}
	prev := map[string][]byte{}
	borrowEvents := 0
	for _, ev := range rec.until(t, "/calico/ipam/v2/assignment/") {
		key := ev.KV.Key
		if ev.Type == datastore.KVDelete {
			delete(exists, key)
			delete(prev, key)
			continue
		}
		exists[key] = true
		var before, after blockJSON
		json.Unmarshal(ev.KV.Value, &after)
		json.Unmarshal(prev[key], &before)
		prev[key] = ev.KV.Value
		for ord, a := range after.Allocations {
			if a == nil || (ord < len(before.Allocations) && before.Allocations[ord] != nil) {
				continue
			}
			if after.Attributes[*a].Secondary["node"] != strings.TrimPrefix(after.Affinity, "host:") {
				borrowEvents++
				if len(exists) != blocks {
					t.Errorf("revision %d: borrowed from %s while only %d of %d blocks existed", ev.Rev, key, len(exists), blocks)
				}
			}
		}
	}
	if borrowEvents != borrowed {
		t.Errorf("replay saw %d borrowed allocations, the blocks hold %d", borrowEvents, borrowed)
	}

	// Release everything concurrently: IPAM is empty and clean.
	var rwg sync.WaitGroup
	for i, r := range ok {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			if err := client(r.node, i).ReleaseByHandle(f.ctx, r.handle); err != nil {
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
		if b.InUse != 0 || b.Free != blockAddrs {
			t.Errorf("block %s after releasing everything: %d in use, %d free", b.CIDR, b.InUse, b.Free)
		}
	}
	if len(u.Handles) != 0 || u.Pools[0].InUse != 0 {
		t.Errorf("after releasing everything: %d handles, %d addresses in use", len(u.Handles), u.Pools[0].InUse)
	}
	rep, err = f.c.Check(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Problems(); n != 0 {
		t.Errorf("check after releasing everything found %d problems: %+v", n, rep)
	}
	// And the pool is usable again, by every node from its own blocks,
	// and no node has an affinity to another's block any more.
	for n := 1; n <= nodes; n++ {
		nodeName := fmt.Sprintf("node%d", n)
		a := f.assign4(t, nodeName, "again-"+nodeName)
		blk, _ := a.Prefix(blockSize)
		if blockOwner[blk] != nodeName {
			t.Errorf("%s got %s from %s's block %s", nodeName, a, blockOwner[blk], blk)
		}
		aff, err := f.c.AffineBlocks(f.ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		for _, cidr := range aff {
			if blockOwner[cidr] != nodeName {
				t.Errorf("%s still has an affinity to %s, which is %s's", nodeName, cidr, blockOwner[cidr])
			}
		}
	}
}

type blockJSON struct {
	Affinity    string `json:"affinity"`
	Allocations []*int `json:"allocations"`
	Attributes  []struct {
		HandleID  *string           `json:"handle_id"`
		Secondary map[string]string `json:"secondary"`
	} `json:"attributes"`
}

// handlesMatchBlocks checks that every handle counts exactly the
// addresses the blocks hold for it, and every allocation has its handle.
func handlesMatchBlocks(t *testing.T, f *fixture) {
	t.Helper()
	held := map[string]map[string]int{} // handle -> block CIDR -> addresses
	blocks, _, err := f.kv.List(f.ctx, "/calico/ipam/v2/assignment/", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range blocks {
		var b struct {
			CIDR string `json:"cidr"`
			blockJSON
		}
		if err := json.Unmarshal(kv.Value, &b); err != nil {
			t.Fatalf("block %s: %v", kv.Key, err)
		}
		for _, a := range b.Allocations {
			if a == nil {
				continue
			}
			h := *b.Attributes[*a].HandleID
			if held[h] == nil {
				held[h] = map[string]int{}
			}
			held[h][b.CIDR]++
		}
	}
	handles, _, err := f.kv.List(f.ctx, "/calico/ipam/v2/handle/", false)
	if err != nil {
		t.Fatal(err)
	}
	counted := map[string]map[string]int{}
	for _, kv := range handles {
		var h struct {
			Block map[string]int `json:"block"`
		}
		if err := json.Unmarshal(kv.Value, &h); err != nil {
			t.Fatalf("handle %s: %v", kv.Key, err)
		}
		counted[strings.TrimPrefix(kv.Key, "/calico/ipam/v2/handle/")] = h.Block
	}
	for _, id := range slices.Sorted(maps.Keys(held)) {
		if !maps.Equal(held[id], counted[id]) {
			t.Errorf("handle %s counts %v, the blocks hold %v", id, counted[id], held[id])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(counted)) {
		if held[id] == nil {
			t.Errorf("handle %s counts %v, the blocks hold nothing for it", id, counted[id])
		}
	}
}

// kvRecorder keeps every event of a KV watch.
type kvRecorder struct {
	f      *fixture
	stop   context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	events []datastore.KVEvent
	errs   []string
}

// recordWatch watches prefix, which must be empty, and records what
// follows.
func recordWatch(t *testing.T, f *fixture, prefix string) *kvRecorder {
	t.Helper()
	ctx, stop := context.WithCancel(f.ctx)
	t.Cleanup(stop)
	ch := f.kv.Watch(ctx, prefix)
	select {
	case ev := <-ch:
		if ev.Type != datastore.KVReset || len(ev.Snapshot) != 0 {
			t.Fatalf("first watch event %+v, want an empty Reset", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no Reset from the watch")
	}
	r := &kvRecorder{f: f, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ev := range ch {
			r.mu.Lock()
			if ev.Err != nil || ev.Type == datastore.KVReset {
				// A restart would hide the writes in between.
				r.errs = append(r.errs, fmt.Sprintf("watch restarted: %+v", ev))
			} else {
				r.events = append(r.events, ev)
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// until waits for the watch to have seen every key under prefix at its
// current revision, stops it and returns what it recorded.
func (r *kvRecorder) until(t *testing.T, prefix string) []datastore.KVEvent {
	t.Helper()
	final, _, err := r.f.kv.List(r.f.ctx, prefix, true)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		seen := map[string]int64{}
		for _, ev := range r.events {
			if ev.Type == datastore.KVPut {
				seen[ev.KV.Key] = ev.KV.Rev
			}
		}
		r.mu.Unlock()
		caught := true
		for _, kv := range final {
			if seen[kv.Key] != kv.Rev {
				caught = false
			}
		}
		if caught {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch did not catch up with %d keys within 30s", len(final))
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.stop()
	<-r.done
	for _, e := range r.errs {
		t.Error(e)
	}
	return r.events
}
