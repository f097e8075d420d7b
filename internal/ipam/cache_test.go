package ipam_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
)

// countingKV counts the requests an IPAM client makes.
type countingKV struct {
	datastore.KV
	reads, txns atomic.Int64
}

func (k *countingKV) Get(ctx context.Context, keys ...string) ([]datastore.KeyValue, error) {
	k.reads.Add(1)
	return k.KV.Get(ctx, keys...)
}

func (k *countingKV) List(ctx context.Context, prefix string, keysOnly bool) ([]datastore.KeyValue, int64, error) {
	k.reads.Add(1)
	return k.KV.List(ctx, prefix, keysOnly)
}

func (k *countingKV) Txn(ctx context.Context, t datastore.Txn) (datastore.TxnResult, error) {
	k.txns.Add(1)
	return k.KV.Txn(ctx, t)
}

// The agent's client allocates from its cache: once it has seen the
// node's blocks, an allocation reads no IPAM key and writes once. When
// another writer (a plugin process on the node) changed the block since,
// the write conditional on the cached block loses, and the allocation
// reads again and succeeds with an address nobody holds. A handle that
// already exists (an ADD retried) is released first, as without the
// cache. A release through the agent of a handle it created reads
// nothing either, and keeps the cache right for the next allocation.
// Every address is held once and every handle matches its
// block.
func TestCachedAllocation(t *testing.T) {
	forEachBackend(t, []backend{etcdBinary, kubeAPI}, func(t *testing.T, f *fixture) {
		f.create(t, ippool("pool1", "10.31.0.0/24", 26), node("node1", nil))
		kv := &countingKV{KV: f.kv}
		agent := ipam.New(kv, f.store, nil).UseCache(ipam.NewCache())
		assign := func(c *ipam.Client, handle string) netip.Addr {
			t.Helper()
			v4, _, err := c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: handle, Node: "node1", Replace: true})
			if err != nil || len(v4) != 1 {
				t.Fatalf("AutoAssign(%s) = %v, %v", handle, v4, err)
			}
			return v4[0].Addr()
		}
		book := &addrBook{}
		hold := func(a netip.Addr, handle string) {
			t.Helper()
			book.add(t, handle, []netip.Prefix{netip.PrefixFrom(a, 32)}, nil)
		}

		hold(assign(agent, "k8s-pod-network.a1"), "k8s-pod-network.a1") // claims the block, fills the cache
		kv.reads.Store(0)
		kv.txns.Store(0)
		a2 := assign(agent, "k8s-pod-network.a2")
		hold(a2, "k8s-pod-network.a2")
		if r, w := kv.reads.Load(), kv.txns.Load(); r != 0 || w != 1 {
			t.Errorf("allocation from the cache made %d IPAM reads and %d writes, want 0 and 1", r, w)
		}

		// A plugin process allocates in the block behind the agent's back.
		hold(f.assign4(t, "node1", "k8s-pod-network.p1"), "k8s-pod-network.p1")
		kv.txns.Store(0)
		hold(assign(agent, "k8s-pod-network.a3"), "k8s-pod-network.a3")
		if w := kv.txns.Load(); w != 2 {
			t.Errorf("allocation from a stale cache made %d writes, want 2 (the lost conditional write, then the one from fresh reads)", w)
		}

		// An earlier ADD of the same container left its handle holding an
		// address: the agent's allocation replaces it.
		old := f.assign4(t, "node1", "k8s-pod-network.retried")
		now := assign(agent, "k8s-pod-network.retried")
		hold(now, "k8s-pod-network.retried")
		if ips, err := agent.IPsByHandle(f.ctx, "k8s-pod-network.retried"); err != nil || !slices.Equal(ips, []netip.Addr{now}) {
			t.Errorf("retried handle holds %v (%v), want only %s (the earlier %s released)", ips, err, now, old)
		}

		// A release through the agent (of the handle its allocation
		// created: nothing to read), then allocations from the cache.
		kv.reads.Store(0)
		kv.txns.Store(0)
		if err := agent.ReleaseByHandle(f.ctx, "k8s-pod-network.a2"); err != nil {
			t.Fatal(err)
		}
		if r, w := kv.reads.Load(), kv.txns.Load(); r != 0 || w != 1 {
			t.Errorf("release from the cache made %d IPAM reads and %d writes, want 0 and 1", r, w)
		}
		book.release("k8s-pod-network.a2")
		kv.reads.Store(0)
		kv.txns.Store(0)
		hold(assign(agent, "k8s-pod-network.a4"), "k8s-pod-network.a4")
		if r, w := kv.reads.Load(), kv.txns.Load(); r != 0 || w != 1 {
			t.Errorf("allocation after the agent's release made %d IPAM reads and %d writes, want 0 and 1", r, w)
		}

		checkHeld(t, f, book)
	})
}

// Concurrent allocations through agents sharing one cache, and plugin
// processes beside them, on one node: no address twice, every handle
// consistent with its block.
func TestCachedConcurrentAllocation(t *testing.T) {
	forEachBackend(t, []backend{etcdBinary, kubeAPI}, func(t *testing.T, f *fixture) {
		f.create(t, ippool("pool1", "10.32.0.0/24", 28), node("node1", nil))
		cache := ipam.NewCache()
		const n = 24
		book := &addrBook{}
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				c := ipam.New(f.kv, f.store, nil)
				if i%3 != 0 {
					c.UseCache(cache)
				}
				handle := "k8s-pod-network.c" + string(rune('a'+i))
				v4, _, err := c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: handle, Node: "node1", Replace: true})
				book.add(t, handle, v4, err)
			})
		}
		wg.Wait()
		checkHeld(t, f, book)
	})
}

// addrBook is what allocations told their callers: address -> handle.
type addrBook struct {
	mu   sync.Mutex
	held map[netip.Addr]string
}

// add records handle's allocation (v4, err of AutoAssign): one address,
// held by nobody else.
func (b *addrBook) add(t *testing.T, handle string, v4 []netip.Prefix, err error) {
	t.Helper()
	if err != nil || len(v4) != 1 {
		t.Errorf("AutoAssign(%s) = %v, %v", handle, v4, err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == nil {
		b.held = map[netip.Addr]string{}
	}
	a := v4[0].Addr()
	if prev, dup := b.held[a]; dup {
		t.Errorf("%s handed out twice: to %s and %s", a, prev, handle)
	}
	b.held[a] = handle
}

// release forgets handle's addresses.
func (b *addrBook) release(handle string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for a, h := range b.held {
		if h == handle {
			delete(b.held, a)
		}
	}
}

// checkHeld: the blocks hold exactly the addresses in book, each for its
// handle, and no handle disagrees with its blocks.
func checkHeld(t *testing.T, f *fixture, book *addrBook) {
	t.Helper()
	held := book.held
	rep, err := f.c.Check(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for a, h := range held {
		if al := rep.Allocations[a.String()]; len(al) != 1 || al[0].Handle != h {
			t.Errorf("%s: stored allocations %+v, want one held by %s", a, al, h)
		}
	}
	if len(rep.Allocations) != len(held) {
		t.Errorf("%d addresses allocated in the blocks, %d handed out", len(rep.Allocations), len(held))
	}
	if len(rep.LeakedHandles)+len(rep.MissingHandles) != 0 {
		t.Errorf("handles without addresses %v, addresses without handle %v", rep.LeakedHandles, rep.MissingHandles)
	}
	handlesMatchBlocks(t, f)
}

// gate is a node's IPAM lock for AutoAssignArgs.Lock that the test holds
// closed until the requests have queued behind it; taken counts its holds.
type gate struct {
	mu    sync.Mutex
	taken atomic.Int64
}

func (g *gate) lock() func() {
	g.mu.Lock()
	g.taken.Add(1)
	return g.mu.Unlock
}

// ADDs queued in the agent for one node are allocated together: eight
// requests waiting for the node's lock take it once and write the block
// once, each gets its own address, and handles and blocks agree. DELs
// queue with them: releases and allocations in one write. When a
// plugin process changed the block while they waited, the batch's
// conditional write loses and each request allocates alone from fresh
// reads, still with an address nobody else holds; a request whose handle
// exists already (a retried ADD) ends with only its new address.
func TestGroupCommit(t *testing.T) {
	forEachBackend(t, []backend{etcdBinary, kubeAPI}, func(t *testing.T, f *fixture) {
		f.create(t, ippool("pool1", "10.33.0.0/24", 26), node("node1", nil))
		kv := &countingKV{KV: f.kv}
		agent := ipam.New(kv, f.store, nil).UseCache(ipam.NewCache())
		g := &gate{}
		book := &addrBook{}
		// queue runs the allocations for handles, and the releases of
		// release, behind the closed gate while during runs, then opens
		// it.
		queue := func(handles []string, during func(), release ...string) {
			t.Helper()
			unlock := g.lock()
			var wg sync.WaitGroup
			for _, h := range release {
				wg.Go(func() {
					if err := agent.ReleaseHandle(f.ctx, "node1", h, g.lock); err != nil {
						t.Errorf("ReleaseHandle(%s): %v", h, err)
						return
					}
					book.release(h)
				})
			}
			for _, h := range handles {
				wg.Go(func() {
					v4, _, err := agent.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: h, Node: "node1", Replace: true, Lock: g.lock})
					book.add(t, h, v4, err)
				})
			}
			time.Sleep(300 * time.Millisecond) // all queue behind the gate
			during()
			unlock()
			wg.Wait()
		}
		handles := func(prefix string, n int) []string {
			var out []string
			for i := range n {
				out = append(out, fmt.Sprintf("k8s-pod-network.%s%d", prefix, i))
			}
			return out
		}

		queue(handles("warm", 1), func() {}) // claims the block, fills the cache
		g.taken.Store(0)
		kv.txns.Store(0)
		queue(handles("a", 8), func() {})
		if n, w := g.taken.Load(), kv.txns.Load(); n != 2 || w != 1 {
			t.Errorf("8 queued requests took the lock %d times (the test's hold included) and wrote %d times, want 2 and 1", n, w)
		}
		// Releases (DELs) queue with allocations.
		g.taken.Store(0)
		kv.txns.Store(0)
		kv.reads.Store(0)
		queue(handles("c", 4), func() {}, handles("a", 8)...)
		if n, w := g.taken.Load(), kv.txns.Load(); n != 2 || w != 1 {
			t.Errorf("8 queued releases and 4 allocations took the lock %d times (the test's hold included) and wrote %d times, want 2 and 1", n, w)
		}
		if r := kv.reads.Load(); r != 0 {
			t.Errorf("the batch read %d IPAM keys, want none (all cached)", r)
		}
		checkHeld(t, f, book)

		// A plugin process allocates while they wait; one request is an
		// ADD retried after one that left its handle.
		old := f.assign4(t, "node1", "k8s-pod-network.retried")
		queue(append(handles("b", 7), "k8s-pod-network.retried"), func() {
			a := f.assign4(t, "node1", "k8s-pod-network.p1")
			book.add(t, "k8s-pod-network.p1", []netip.Prefix{netip.PrefixFrom(a, 32)}, nil)
		})
		if ips, err := agent.IPsByHandle(f.ctx, "k8s-pod-network.retried"); err != nil || len(ips) != 1 || ips[0] == old {
			t.Errorf("retried handle holds %v (%v), want one address other than the earlier %s", ips, err, old)
		}
		checkHeld(t, f, book)
	})
}
