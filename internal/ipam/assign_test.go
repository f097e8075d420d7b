package ipam_test

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/datastore/etcd"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// The allocation scenarios run against both etcd servers and the Kubernetes
// API; each starts from an empty datastore.
func TestAllocation(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(t *testing.T, f *fixture)
	}{
		{"lowest free address and block claim", testLowestFreeAndClaim},
		{"freed address not reused while others are free", testNoQuickReuse},
		{"borrowing only without strict affinity", testBorrowing},
		{"disabled pools are never used", testDisabledPools},
		{"reserved addresses are skipped", testReservations},
		{"node selector", testNodeSelector},
		{"explicit pools, manual pools and allowed uses", testExplicitPools},
		{"assign a specific address", testAssignIP},
		{"dual stack", testDualStack},
		{"release by address", testReleaseIPs},
		{"failed request allocates nothing", testAllOrNothing},
		{"block limit", testBlockLimit},
		{"namespace selector", testNamespaceSelector},
		{"pools written behind validation are skipped", testUnusablePools},
		{"LoadBalancer addresses belong to the virtual host", testLoadBalancer},
	}
	forEachBackend(t, allBackends, func(t *testing.T, f *fixture) {
		for _, s := range scenarios {
			t.Run(s.name, func(t *testing.T) {
				f.reset(t)
				s.run(t, f)
			})
		}
	})
}

func testLowestFreeAndClaim(t *testing.T, f *fixture) {
	pool := mustPrefix("10.1.0.0/24")
	f.create(t, ippool("pool1", pool.String(), 28), node("node1", nil))

	first := f.assign4(t, "node1", "k8s-pod-network.c0")
	blk, _ := first.Prefix(28)
	if !pool.Contains(first) || first != blk.Addr() {
		t.Fatalf("first address %s: want the first address of a /28 in %s", first, pool)
	}
	// What Calico writes for a claim and an allocation.
	if got, want := f.raw(t, ipam.AffinityKey("node1", blk)), `{"state":"confirmed","deleted":false}`; got != want {
		t.Errorf("affinity = %s, want %s", got, want)
	}
	if got, want := f.raw(t, ipam.HandleKey("k8s-pod-network.c0")), fmt.Sprintf(`{"block":{"%s":1},"deleted":false}`, blk); got != want {
		t.Errorf("handle = %s, want %s", got, want)
	}
	if got, want := f.raw(t, "/calico/ipam/v2/config"), `{"auto_allocate_blocks":true}`; got != want {
		t.Errorf("config = %s, want %s", got, want)
	}
	b := f.block(t, blk)
	if b.Affinity == nil || *b.Affinity != "host:node1" || b.Allocations[0] == nil || *b.Allocations[0] != 0 {
		t.Errorf("block: affinity %v allocations[0] %v", b.Affinity, b.Allocations[0])
	}
	if a := b.Attributes[0]; *a.HandleID != "k8s-pod-network.c0" || a.Secondary["node"] != "node1" || a.Secondary["timestamp"] == "" {
		t.Errorf("attributes %+v", a)
	}

	if got := f.assign4(t, "node1", "k8s-pod-network.c1"); got != first.Next() {
		t.Errorf("second address %s, want %s", got, first.Next())
	}
	// Fill the block in one call: 14 addresses, in order.
	v4, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 14, HandleID: "k8s-pod-network.many", Node: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range v4 {
		if want := netip.PrefixFrom(blk.Addr(), 32).Addr(); p.Addr() != addrPlus(want, 2+i) {
			t.Errorf("address %d of the batch = %s, want %s", i, p, addrPlus(want, 2+i))
		}
	}
	// Full: the next one claims a second block.
	next := f.assign4(t, "node1", "k8s-pod-network.c16")
	blk2, _ := next.Prefix(28)
	if blk2 == blk || next != blk2.Addr() || !pool.Contains(next) {
		t.Errorf("after a full block got %s, want the first address of a new block", next)
	}
	got, err := f.c.AffineBlocks(f.ctx, "node1")
	want := []netip.Prefix{blk, blk2}
	slices.SortFunc(want, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("AffineBlocks = %v, %v; want %v", got, err, want)
	}
	ips, err := f.c.IPsByHandle(f.ctx, "k8s-pod-network.many")
	if err != nil || len(ips) != 14 {
		t.Errorf("IPsByHandle = %v, %v", ips, err)
	}
}

func addrPlus(a netip.Addr, n int) netip.Addr {
	for range n {
		a = a.Next()
	}
	return a
}

func testNoQuickReuse(t *testing.T, f *fixture) {
	f.create(t, ippool("pool1", "10.2.0.0/28", 28), node("node1", nil))
	var got []netip.Addr
	for i := range 3 {
		got = append(got, f.assign4(t, "node1", fmt.Sprintf("h%d", i)))
	}
	if err := f.c.ReleaseByHandle(f.ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	freed := got[1]
	// Every other free address comes before the freed one.
	for i := 3; i <= 16; i++ {
		a := f.assign4(t, "node1", fmt.Sprintf("h%d", i))
		if i < 16 && a == freed {
			t.Fatalf("allocation %d reused %s while %d other addresses were free", i, a, 16-i)
		}
		if i == 16 && a != freed {
			t.Errorf("last free address: got %s, want the freed %s", a, freed)
		}
	}
	_, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h17", Node: "node1"})
	if !errors.Is(err, ipam.ErrNoFreeAddresses) || !strings.Contains(err.Error(), "10.2.0.0/28") {
		t.Errorf("exhausted pool: err = %v, want ErrNoFreeAddresses naming the pool", err)
	}
}

func testBorrowing(t *testing.T, f *fixture) {
	// Four blocks of 4 addresses; four nodes take one block each.
	f.create(t, ippool("pool1", "10.3.0.0/28", 30))
	owners := map[netip.Prefix]string{}
	for i := 1; i <= 4; i++ {
		n := fmt.Sprintf("node%d", i)
		f.create(t, node(n, nil))
		a := f.assign4(t, n, "first-"+n)
		blk, _ := a.Prefix(30)
		if owners[blk] != "" {
			t.Fatalf("%s got an address in %s, a block of %s, while free blocks remained", n, blk, owners[blk])
		}
		owners[blk] = n
	}
	// node5 finds no free block: it borrows.
	f.create(t, node("node5", nil))
	a := f.assign4(t, "node5", "borrower")
	blk, _ := a.Prefix(30)
	if owners[blk] == "" {
		t.Fatalf("borrowed %s from unknown block", a)
	}
	if b := f.block(t, blk); *b.Affinity != "host:"+owners[blk] {
		t.Errorf("borrowing changed the block's affinity to %s", *b.Affinity)
	}
	if aff, _ := f.c.AffineBlocks(f.ctx, "node5"); len(aff) != 0 {
		t.Errorf("borrower got affinities %v", aff)
	}
	rep, err := f.c.Check(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if al := rep.Allocations[a.String()]; len(al) != 1 || !al[0].Borrowed || al[0].Node != "node5" {
		t.Errorf("check report for the borrowed address: %+v", al)
	}

	// With strict affinity, no borrowing: node5 has no block and none is free.
	if err := f.c.SetConfig(f.ctx, ipam.Config{StrictAffinity: true, AutoAllocateBlocks: true}); err != nil {
		t.Fatal(err)
	}
	_, _, err = f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "borrower2", Node: "node5"})
	if !errors.Is(err, ipam.ErrNoFreeAddresses) {
		t.Errorf("strict affinity: err = %v, want ErrNoFreeAddresses", err)
	}
	// An owner still allocates from its own block.
	a = f.assign4(t, "node1", "own")
	if blk, _ := a.Prefix(30); owners[blk] != "node1" {
		t.Errorf("node1 under strict affinity got %s from %s's block", a, owners[blk])
	}
}

func testDisabledPools(t *testing.T, f *fixture) {
	f.create(t,
		ippool("a-disabled", "10.4.0.0/24", 26, func(s *api.IPPoolSpec) { s.Disabled = true }),
		ippool("b-enabled", "10.5.0.0/24", 26),
		node("node1", nil))
	for i := range 5 {
		if a := f.assign4(t, "node1", fmt.Sprintf("h%d", i)); !mustPrefix("10.5.0.0/24").Contains(a) {
			t.Fatalf("got %s from the disabled pool", a)
		}
	}
	_, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "x", Node: "node1", IPv4Pools: []string{"a-disabled"}})
	if !errors.Is(err, ipam.ErrPoolDisabled) {
		t.Errorf("requesting the disabled pool: %v, want ErrPoolDisabled", err)
	}
	err = f.c.AssignIP(f.ctx, ipam.AssignIPArgs{IP: netip.MustParseAddr("10.4.0.9"), HandleID: "x", Node: "node1"})
	if !errors.Is(err, ipam.ErrPoolDisabled) {
		t.Errorf("AssignIP in the disabled pool: %v, want ErrPoolDisabled", err)
	}
	f.reset(t)
	f.create(t, ippool("only", "10.4.0.0/24", 26, func(s *api.IPPoolSpec) { s.Disabled = true }))
	_, _, err = f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "x", Node: "node1"})
	if !errors.Is(err, ipam.ErrNoPools) {
		t.Errorf("only a disabled pool: %v, want ErrNoPools", err)
	}
	if keys := f.keys(t, "/calico/ipam/v2/assignment/"); len(keys) != 0 {
		t.Errorf("blocks written: %v", keys)
	}
}

func testReservations(t *testing.T, f *fixture) {
	f.create(t, ippool("pool1", "10.6.0.0/28", 28), node("node1", nil),
		reservation("r1", "10.6.0.0/30", "10.6.0.8"))
	reserved := func(a netip.Addr) bool {
		return mustPrefix("10.6.0.0/30").Contains(a) || a == netip.MustParseAddr("10.6.0.8")
	}
	for i := range 11 {
		if a := f.assign4(t, "node1", fmt.Sprintf("h%d", i)); reserved(a) {
			t.Fatalf("handed out reserved %s", a)
		}
	}
	_, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h11", Node: "node1"})
	if !errors.Is(err, ipam.ErrNoFreeAddresses) {
		t.Errorf("only reserved addresses left: %v, want ErrNoFreeAddresses", err)
	}
	// Explicit assignment may use a reserved address, as in Calico.
	if err := f.c.AssignIP(f.ctx, ipam.AssignIPArgs{IP: netip.MustParseAddr("10.6.0.8"), HandleID: "pinned", Node: "node1"}); err != nil {
		t.Errorf("AssignIP of a reserved address: %v", err)
	}
	// A pool wholly reserved is passed over for a whole block.
	f.reset(t)
	f.create(t, ippool("pool1", "10.7.0.0/27", 28), node("node1", nil), reservation("r", "10.7.0.0/28"))
	if a := f.assign4(t, "node1", "h"); !mustPrefix("10.7.0.16/28").Contains(a) {
		t.Errorf("got %s, want an address of the unreserved block", a)
	}
	if keys := f.keys(t, ipam.BlockKey(mustPrefix("10.7.0.0/28"))); len(keys) != 0 {
		t.Errorf("the reserved block was claimed")
	}
}

func testNodeSelector(t *testing.T, f *fixture) {
	f.create(t,
		ippool("zone-a", "10.8.0.0/24", 26, func(s *api.IPPoolSpec) { s.NodeSelector = `zone == "a"` }),
		ippool("zone-b", "10.9.0.0/24", 26, func(s *api.IPPoolSpec) { s.NodeSelector = `zone == "b"` }),
		node("node-a", map[string]string{"zone": "a"}),
		node("node-b", map[string]string{"zone": "b"}),
		node("node-c", map[string]string{"zone": "c"}))
	if a := f.assign4(t, "node-a", "ha"); !mustPrefix("10.8.0.0/24").Contains(a) {
		t.Errorf("node-a got %s", a)
	}
	if a := f.assign4(t, "node-b", "hb"); !mustPrefix("10.9.0.0/24").Contains(a) {
		t.Errorf("node-b got %s", a)
	}
	for _, n := range []string{"node-c", "unregistered"} {
		_, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "hc", Node: n})
		if !errors.Is(err, ipam.ErrNoPools) {
			t.Errorf("%s matches no pool: err = %v, want ErrNoPools", n, err)
		}
	}
	// A node's new labels take effect on its next allocation.
	f.update(t, node("node-c", map[string]string{"zone": "a"}))
	if a := f.assign4(t, "node-c", "hc"); !mustPrefix("10.8.0.0/24").Contains(a) {
		t.Errorf("relabelled node-c got %s", a)
	}
}

func testExplicitPools(t *testing.T, f *fixture) {
	manual := api.AssignmentModeManual
	f.create(t,
		ippool("auto", "10.10.0.0/24", 26),
		ippool("second", "10.11.0.0/24", 26),
		ippool("manual", "10.12.0.0/24", 26, func(s *api.IPPoolSpec) { s.AssignmentMode = &manual }),
		ippool("tunnel-only", "10.13.0.0/24", 26, func(s *api.IPPoolSpec) {
			s.AllowedUses = []api.IPPoolAllowedUse{api.IPPoolAllowedUseTunnel}
		}),
		node("node1", nil))
	tests := []struct {
		pools []string
		use   api.IPPoolAllowedUse
		want  string // containing pool, or error text
		err   error
	}{
		{pools: nil, want: "10.10.0.0/24"},                       // by name order: "auto" first; never manual or tunnel-only
		{pools: []string{"10.11.0.77/24"}, want: "10.11.0.0/24"}, // CIDR, host bits ignored
		{pools: []string{"second"}, want: "10.11.0.0/24"},
		{pools: []string{"manual"}, want: "10.12.0.0/24"},
		{pools: []string{"10.12.0.0/24"}, want: "10.12.0.0/24"},
		{pools: []string{"nope"}, err: ipam.ErrPoolNotFound},
		{pools: []string{"10.99.0.0/24"}, err: ipam.ErrPoolNotFound},
		{pools: []string{"tunnel-only"}, err: ipam.ErrNoPools},
		{pools: []string{"tunnel-only"}, use: api.IPPoolAllowedUseTunnel, want: "10.13.0.0/24"},
	}
	for i, tt := range tests {
		v4, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: fmt.Sprintf("h%d", i), Node: "node1", IPv4Pools: tt.pools, Use: tt.use})
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("pools %v: err = %v, want %v", tt.pools, err, tt.err)
			}
			continue
		}
		if err != nil || len(v4) != 1 || !mustPrefix(tt.want).Contains(v4[0].Addr()) {
			t.Errorf("pools %v: got %v, %v; want an address in %s", tt.pools, v4, err, tt.want)
		}
	}
	// Automatic choice never lands in the manual or tunnel-only pool, even
	// when it has to claim block after block.
	for i := range 8 {
		v4, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 40, HandleID: fmt.Sprintf("bulk%d", i), Node: "node1"})
		if err != nil {
			if errors.Is(err, ipam.ErrNoFreeAddresses) {
				break
			}
			t.Fatal(err)
		}
		for _, p := range v4 {
			if mustPrefix("10.12.0.0/23").Contains(p.Addr()) {
				t.Fatalf("automatic assignment used %s", p)
			}
		}
	}
}

func testAssignIP(t *testing.T, f *fixture) {
	f.create(t, ippool("pool1", "10.14.0.0/24", 26), node("node1", nil), node("node2", nil))
	ip := netip.MustParseAddr("10.14.0.70")
	if err := f.c.AssignIP(f.ctx, ipam.AssignIPArgs{IP: ip, HandleID: "pinned", Node: "node1",
		Attrs: map[string]string{"namespace": "ns1", "pod": "p1"}}); err != nil {
		t.Fatal(err)
	}
	if ips, err := f.c.IPsByHandle(f.ctx, "pinned"); err != nil || !slices.Equal(ips, []netip.Addr{ip}) {
		t.Errorf("IPsByHandle = %v, %v", ips, err)
	}
	h, err := f.c.Lookup(f.ctx, ip)
	if err != nil || h.Handle != "pinned" || h.Attrs["pod"] != "p1" || h.Attrs["node"] != "node1" || h.Affinity != "host:node1" {
		t.Errorf("Lookup = %+v, %v", h, err)
	}
	err = f.c.AssignIP(f.ctx, ipam.AssignIPArgs{IP: ip, HandleID: "other", Node: "node2"})
	if !errors.Is(err, ipam.ErrAddressInUse) {
		t.Errorf("assigning it again: %v, want ErrAddressInUse", err)
	}
	err = f.c.AssignIP(f.ctx, ipam.AssignIPArgs{IP: netip.MustParseAddr("192.168.9.9"), HandleID: "other", Node: "node2"})
	if !errors.Is(err, ipam.ErrNotInPool) {
		t.Errorf("address outside pools: %v, want ErrNotInPool", err)
	}
	// The block was claimed for node1: its next automatic allocation starts
	// at the block's first address.
	if a := f.assign4(t, "node1", "auto"); a != netip.MustParseAddr("10.14.0.64") {
		t.Errorf("next automatic address %s, want 10.14.0.64", a)
	}
	if _, err := f.c.Lookup(f.ctx, netip.MustParseAddr("10.14.0.66")); !errors.Is(err, ipam.ErrNotAllocated) {
		t.Errorf("Lookup of a free address: %v", err)
	}
}

func testDualStack(t *testing.T, f *fixture) {
	f.create(t, ippool("v4", "10.15.0.0/24", 26), ippool("v6", "fd00:15::/120", 122), node("node1", nil))
	v4, v6, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, Num6: 1, HandleID: "k8s-pod-network.ds", Node: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(v4) != 1 || len(v6) != 1 || v4[0].Bits() != 32 || v6[0].Bits() != 128 ||
		!mustPrefix("10.15.0.0/24").Contains(v4[0].Addr()) || !mustPrefix("fd00:15::/120").Contains(v6[0].Addr()) {
		t.Fatalf("got %v %v", v4, v6)
	}
	b6, _ := v6[0].Addr().Prefix(122)
	if !strings.Contains(ipam.BlockKey(b6), "/ipv6/block/fd00:15::") || f.raw(t, ipam.BlockKey(b6)) == "" {
		t.Errorf("IPv6 block key %s missing", ipam.BlockKey(b6))
	}
	if f.raw(t, ipam.AffinityKey("node1", b6)) == "" {
		t.Errorf("IPv6 affinity missing")
	}
	b4, _ := v4[0].Addr().Prefix(26)
	want := fmt.Sprintf(`{"block":{"%s":1,"%s":1},"deleted":false}`, b4, b6)
	if got := f.raw(t, ipam.HandleKey("k8s-pod-network.ds")); got != want {
		t.Errorf("handle = %s, want %s", got, want)
	}
	if err := f.c.ReleaseByHandle(f.ctx, "k8s-pod-network.ds"); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(v4, v6...) {
		if _, err := f.c.Lookup(f.ctx, p.Addr()); !errors.Is(err, ipam.ErrNotAllocated) {
			t.Errorf("%s still allocated after release: %v", p, err)
		}
	}
	if f.raw(t, ipam.HandleKey("k8s-pod-network.ds")) != "" {
		t.Error("handle left behind")
	}
	// Releasing again is fine (CNI DEL is idempotent).
	if err := f.c.ReleaseByHandle(f.ctx, "k8s-pod-network.ds"); err != nil {
		t.Errorf("second release: %v", err)
	}
	// IPv6 only.
	_, v6, err = f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num6: 2, HandleID: "v6only", Node: "node1", IPv6Pools: []string{"fd00:15::1/120"}})
	if err != nil || len(v6) != 2 {
		t.Errorf("IPv6-only: %v %v", v6, err)
	}
}

func testReleaseIPs(t *testing.T, f *fixture) {
	f.create(t, ippool("pool1", "10.16.0.0/24", 26), node("node1", nil))
	v4, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 3, HandleID: "h", Node: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := v4[0].Addr().Prefix(26)
	free := addrPlus(v4[2].Addr(), 5)
	outside := netip.MustParseAddr("192.168.1.1")
	unalloc, err := f.c.ReleaseIPs(f.ctx, v4[0].Addr(), free, outside)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(unalloc, []netip.Addr{free, outside}) {
		t.Errorf("unallocated = %v, want [%s %s]", unalloc, free, outside)
	}
	if got, want := f.raw(t, ipam.HandleKey("h")), fmt.Sprintf(`{"block":{"%s":2},"deleted":false}`, blk); got != want {
		t.Errorf("handle after releasing one = %s, want %s", got, want)
	}
	// Conditional release: wrong handle or sequence number leaves it alone.
	h, _ := f.c.Lookup(f.ctx, v4[1].Addr())
	wrong := h.SequenceNumber + 1
	for _, o := range []ipam.ReleaseOptions{
		{Addr: v4[1].Addr(), Handle: "someone-else"},
		{Addr: v4[1].Addr(), SequenceNumber: &wrong},
	} {
		if un, err := f.c.Release(f.ctx, o); err != nil || len(un) != 1 {
			t.Errorf("mismatched release %+v: %v %v", o, un, err)
		}
	}
	seq := h.SequenceNumber
	if un, err := f.c.Release(f.ctx, ipam.ReleaseOptions{Addr: v4[1].Addr(), Handle: "h", SequenceNumber: &seq}); err != nil || len(un) != 0 {
		t.Errorf("matching release: %v %v", un, err)
	}
	if _, err := f.c.ReleaseIPs(f.ctx, v4[2].Addr()); err != nil {
		t.Fatal(err)
	}
	if got := f.raw(t, ipam.HandleKey("h")); got != "" {
		t.Errorf("handle with no addresses left: %s", got)
	}
	// The block stays claimed, empty.
	if b := f.block(t, blk); len(b.Unallocated) != 64 || *b.Affinity != "host:node1" {
		t.Errorf("emptied block: %d free, affinity %v", len(b.Unallocated), b.Affinity)
	}
	// Many addresses at once take the listing path.
	v4, _, err = f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 10, HandleID: "bulk", Node: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	var addrs []netip.Addr
	for _, p := range v4 {
		addrs = append(addrs, p.Addr())
	}
	if un, err := f.c.ReleaseIPs(f.ctx, addrs...); err != nil || len(un) != 0 {
		t.Errorf("bulk release: %v %v", un, err)
	}
	if f.raw(t, ipam.HandleKey("bulk")) != "" {
		t.Error("bulk handle left behind")
	}
}

func testAllOrNothing(t *testing.T, f *fixture) {
	f.create(t, ippool("v4", "10.17.0.0/24", 26), ippool("v6", "fd00:17::/122", 122), node("node1", nil))
	// The IPv6 pool has 64 addresses: asking for 65 fails, and the IPv4
	// part of the same request must not stay allocated.
	_, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, Num6: 65, HandleID: "h", Node: "node1"})
	if !errors.Is(err, ipam.ErrNoFreeAddresses) {
		t.Fatalf("err = %v, want ErrNoFreeAddresses", err)
	}
	if keys := f.keys(t, "/calico/ipam/v2/assignment/"); len(keys) != 0 {
		t.Errorf("failed request left blocks: %v", keys)
	}
	if keys := f.keys(t, "/calico/ipam/v2/handle/"); len(keys) != 0 {
		t.Errorf("failed request left handles: %v", keys)
	}
}

func testBlockLimit(t *testing.T, f *fixture) {
	f.create(t, ippool("pool1", "10.18.0.0/24", 30), node("node1", nil), node("node2", nil))
	for i := range 4 {
		f.assign4(t, "node2", fmt.Sprintf("other%d", i)) // node2 owns one full block
	}
	for i := range 8 {
		_, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: fmt.Sprintf("h%d", i), Node: "node1", MaxBlocksPerHost: 2})
		if err != nil {
			t.Fatalf("allocation %d within two blocks: %v", i, err)
		}
	}
	_, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h8", Node: "node1", MaxBlocksPerHost: 2})
	if !errors.Is(err, ipam.ErrBlockLimit) {
		t.Errorf("third block: err = %v, want ErrBlockLimit", err)
	}
	// The config's limit applies too.
	if err := f.c.SetConfig(f.ctx, ipam.Config{StrictAffinity: true, AutoAllocateBlocks: true, MaxBlocksPerHost: 2}); err != nil {
		t.Fatal(err)
	}
	if _, _, err = f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h9", Node: "node1"}); !errors.Is(err, ipam.ErrBlockLimit) {
		t.Errorf("config limit: err = %v, want ErrBlockLimit", err)
	}
	if err := f.c.SetConfig(f.ctx, ipam.Config{MaxBlocksPerHost: 2, AutoAllocateBlocks: true}); err == nil {
		t.Error("SetConfig accepted maxBlocksPerHost without strict affinity")
	}
}

func testNamespaceSelector(t *testing.T, f *fixture) {
	f.create(t,
		ippool("a-team", "10.19.0.0/24", 26, func(s *api.IPPoolSpec) {
			s.NamespaceSelector = `team == "a"`
			s.AllowedUses = []api.IPPoolAllowedUse{api.IPPoolAllowedUseWorkload}
		}),
		ippool("b-rest", "10.20.0.0/24", 26, func(s *api.IPPoolSpec) {
			s.NamespaceSelector = `team != "a"`
			s.AllowedUses = []api.IPPoolAllowedUse{api.IPPoolAllowedUseWorkload}
		}),
		node("node1", nil))
	v4, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h1", Node: "node1", NamespaceLabels: map[string]string{"team": "a"}})
	if err != nil || !mustPrefix("10.19.0.0/24").Contains(v4[0].Addr()) {
		t.Errorf("team a: %v %v", v4, err)
	}
	v4, _, err = f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h2", Node: "node1"})
	if err != nil || !mustPrefix("10.20.0.0/24").Contains(v4[0].Addr()) {
		t.Errorf("no namespace labels: %v %v", v4, err)
	}
}

// testUnusablePools: pools an old writer stored behind validation (a bad
// selector, an unreadable CIDR) are skipped, so allocation carries on from
// the pools that are usable, as every other consumer of pools skips them.
func testUnusablePools(t *testing.T, f *fixture) {
	f.create(t, ippool("b-good", "10.12.0.0/24", 26), node("node1", nil))
	for name, spec := range map[string]string{
		"a-bad-selector": `{"cidr":"10.11.0.0/24","nodeSelector":"zone =="}`,
		"a-bad-cidr":     `{"cidr":"10.11.0.0/99"}`,
	} {
		doc := `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"` + name + `"},"spec":` + spec + `}`
		f.putResource(t, etcd.Prefix+"ippools/"+name, doc)
	}
	if objs, _, err := f.store.List(f.ctx, "IPPool", ""); err != nil || len(objs) != 3 {
		t.Fatalf("the store lists %d pools (%v), want all 3", len(objs), err)
	}
	if a := f.assign4(t, "node1", "h1"); !mustPrefix("10.12.0.0/24").Contains(a) {
		t.Errorf("got %s, want an address of the usable pool b-good", a)
	}
	if _, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h2", Node: "node1", IPv4Pools: []string{"a-bad-selector"}}); !errors.Is(err, ipam.ErrPoolNotFound) {
		t.Errorf("requesting the unusable pool: err = %v, want ErrPoolNotFound", err)
	}
}
