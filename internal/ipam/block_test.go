package ipam

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// An owner's affinity keys: a node's under host/, a virtual host's under
// virtual/ (package ipamkv tests the key layout itself).
func TestAffinityKeyOwners(t *testing.T) {
	p := netip.MustParsePrefix("10.244.166.128/26")
	for owner, key := range map[string]string{
		"node1":                 "/calico/ipam/v2/host/node1/ipv4/block/10.244.166.128-26",
		"load-balancer":         "/calico/ipam/v2/host/load-balancer/ipv4/block/10.244.166.128-26",
		"virtual:load-balancer": "/calico/ipam/v2/virtual/load-balancer/ipv4/block/10.244.166.128-26",
	} {
		if got := AffinityKey(owner, p); got != key {
			t.Errorf("AffinityKey(%s) = %s, want %s", owner, got, key)
		}
		if !strings.HasPrefix(key, nodeAffinityPrefix(owner)) {
			t.Errorf("nodeAffinityPrefix(%s) = %s, not a prefix of %s", owner, nodeAffinityPrefix(owner), key)
		}
		back, cidr, ok := parseAffinityKey(key)
		if !ok || back != owner || cidr != p {
			t.Errorf("parseAffinityKey(%s) = %s %v %v, want %s", key, back, cidr, ok, owner)
		}
	}
}

// Every block size Calico allows: ordinal <-> address round trips at both
// ends, and nothing outside the block has an ordinal.
func TestBlockOrdinals(t *testing.T) {
	var cases []netip.Prefix
	for bits := minBlockSize4; bits <= maxBlockSize4; bits++ {
		cases = append(cases, blockFor(netip.MustParseAddr("10.20.255.255"), bits))
	}
	for bits := minBlockSize6; bits <= maxBlockSize6; bits++ {
		cases = append(cases, blockFor(netip.MustParseAddr("fd00:0:0:1:ffff:ffff:ffff:ffff"), bits))
	}
	for _, cidr := range cases {
		t.Run(cidr.String(), func(t *testing.T) {
			b := newBlock(cidr, "n", 1)
			size := 1 << (cidr.Addr().BitLen() - cidr.Bits())
			if len(b.v.Allocations) != size || len(b.v.Unallocated) != size || blockSize(cidr) != size {
				t.Fatalf("size %d: allocations %d unallocated %d", size, len(b.v.Allocations), len(b.v.Unallocated))
			}
			if b.addr(0) != cidr.Addr() {
				t.Errorf("addr(0) = %s", b.addr(0))
			}
			last := b.addr(size - 1)
			if !cidr.Contains(last) || cidr.Contains(last.Next()) {
				t.Errorf("addr(%d) = %s is not the block's last address", size-1, last)
			}
			for _, ord := range []int{0, size / 2, size - 1} {
				if got, ok := b.ordinal(b.addr(ord)); !ok || got != ord {
					t.Errorf("ordinal(addr(%d)) = %d %v", ord, got, ok)
				}
			}
			if _, ok := b.ordinal(cidr.Addr().Prev()); ok {
				t.Errorf("address before the block has an ordinal")
			}
			if _, ok := b.ordinal(last.Next()); ok {
				t.Errorf("address after the block has an ordinal")
			}
		})
	}
	if blockSize(netip.MustParsePrefix("10.0.0.0/19")) != 0 {
		t.Error("a /19 is not a valid block")
	}
}

func TestNthBlock(t *testing.T) {
	tests := []struct {
		pool string
		bits int
		idx  uint64
		want string
		n    uint64
	}{
		{"10.0.0.0/24", 28, 0, "10.0.0.0/28", 16},
		{"10.0.0.0/24", 28, 15, "10.0.0.240/28", 16},
		{"10.244.0.0/16", 26, 666, "10.244.166.128/26", 1024},
		{"fd00::/64", 122, 1, "fd00::40/122", 1 << 58},
		{"fd00::/48", 122, 1 << 58, "fd00:0:0:1::/122", 1 << 62},
		{"fd00::/120", 128, 255, "fd00::ff/128", 256},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d/%d", tt.pool, tt.bits, tt.idx), func(t *testing.T) {
			p := netip.MustParsePrefix(tt.pool)
			if got := nthBlock(p, tt.bits, tt.idx); got.String() != tt.want {
				t.Errorf("nthBlock = %s, want %s", got, tt.want)
			}
			if got := numBlocks(p, tt.bits); got != tt.n {
				t.Errorf("numBlocks = %d, want %d", got, tt.n)
			}
		})
	}
}

// The reference block real Calico v3.31 wrote decodes, and re-encodes to
// the same JSON apart from the sequence number a write bumps.
func TestBlockReferenceRoundTrip(t *testing.T) {
	const ref = `{"cidr":"10.244.166.128/26","affinity":"host:node1","allocations":[0,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null],"unallocated":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63],"attributes":[{"handle_id":"k8s-pod-network.probecontainer000","secondary":{"node":"node1","timestamp":"2026-11-21 22:19:32.00917435 +0000 UTC"}}],"sequenceNumber":1795299572018225391,"sequenceNumberForAllocation":{"0":1795299572018225390},"deleted":false}`
	b, err := decodeBlock([]byte(ref))
	if err != nil {
		t.Fatal(err)
	}
	if b.host() != "node1" || b.handleOf(0) != "k8s-pod-network.probecontainer000" || b.seqOf(0) != 1795299572018225390 {
		t.Errorf("decoded block: host %q handle %q seq %d", b.host(), b.handleOf(0), b.seqOf(0))
	}
	b.v.SequenceNumber-- // encode bumps it
	out, err := b.encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != ref {
		t.Errorf("re-encoded block differs:\n got %s\nwant %s", out, ref)
	}
}

// What a Calico allocation of one address in a new block writes: ordinal
// 0, sequence numbers N (allocation) and N+1 (block).
func TestBlockNewAllocationShape(t *testing.T) {
	b := newBlock(netip.MustParsePrefix("10.244.166.128/26"), "node1", 100)
	ords := b.take(1, "k8s-pod-network.c1", map[string]string{"node": "node1"}, nil)
	if !slices.Equal(ords, []int{0}) {
		t.Fatalf("take = %v", ords)
	}
	data, err := b.encode()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m["sequenceNumber"].(float64) != 101 {
		t.Errorf("sequenceNumber = %v, want 101", m["sequenceNumber"])
	}
	if got := m["sequenceNumberForAllocation"].(map[string]any)["0"]; got.(float64) != 100 {
		t.Errorf("sequenceNumberForAllocation[0] = %v, want 100", got)
	}
	if _, ok := m["hostAffinity"]; ok {
		t.Error("hostAffinity written")
	}
	for _, f := range []string{"cidr", "affinity", "allocations", "unallocated", "attributes", "deleted"} {
		if _, ok := m[f]; !ok {
			t.Errorf("field %s missing", f)
		}
	}
}

// Released ordinals go to the back of the queue; reserved addresses are
// skipped but keep their place; shared attributes are kept until their
// last user is gone.
func TestBlockTakeRelease(t *testing.T) {
	b := newBlock(netip.MustParsePrefix("10.0.0.0/29"), "n", 1)
	attrs := map[string]string{"node": "n"}
	if got := b.take(3, "h1", attrs, nil); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("take 3 = %v", got)
	}
	if len(b.v.Attributes) != 1 {
		t.Errorf("one handle, one attribute record; got %d", len(b.v.Attributes))
	}
	b.take(1, "h2", attrs, nil) // ordinal 3
	freed := b.release([]int{1})
	if freed["h1"] != 1 {
		t.Errorf("release counts %v", freed)
	}
	res := reservations{netip.MustParsePrefix("10.0.0.4/32")}
	if got := b.take(1, "h3", attrs, res); !slices.Equal(got, []int{5}) {
		t.Errorf("after a release and with .4 reserved, take = %v, want [5]", got)
	}
	if got := b.take(10, "h3", attrs, res); !slices.Equal(got, []int{6, 7, 1}) {
		t.Errorf("rest = %v, want [6 7 1]: the freed ordinal comes last, the reserved one never", got)
	}
	if !slices.Equal(b.v.Unallocated, []int{4}) {
		t.Errorf("unallocated = %v, want [4]", b.v.Unallocated)
	}
	if got := b.ordinalsOf("h1"); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("ordinalsOf(h1) = %v", got)
	}
	b.release(b.ordinalsOf("h1"))
	b.release(b.ordinalsOf("h2"))
	if len(b.v.Attributes) != 1 || *b.v.Attributes[0].HandleID != "h3" {
		t.Errorf("attributes after releasing h1, h2: %+v", b.v.Attributes)
	}
	for _, ord := range []int{5, 6, 7, 1} {
		if b.handleOf(ord) != "h3" {
			t.Errorf("ordinal %d lost its holder after renumbering: %q", ord, b.handleOf(ord))
		}
	}
	if err := b.assign(5, "h4", attrs); err != ErrAddressInUse {
		t.Errorf("assign taken ordinal: %v", err)
	}
	if err := b.assign(4, "h4", attrs); err != nil || len(b.v.Unallocated) != 3 {
		t.Errorf("assign free ordinal: %v, unallocated %v", err, b.v.Unallocated)
	}
}

func TestDecodeBlockRejectsCorruption(t *testing.T) {
	for name, value := range map[string]string{
		"short allocations":  `{"cidr":"10.0.0.0/30","allocations":[null],"unallocated":[]}`,
		"dangling attribute": `{"cidr":"10.0.0.0/31","allocations":[3,null],"unallocated":[1],"attributes":[]}`,
		"bad ordinal":        `{"cidr":"10.0.0.0/31","allocations":[null,null],"unallocated":[0,9]}`,
		"host bits":          `{"cidr":"10.0.0.1/31","allocations":[null,null],"unallocated":[0,1]}`,
		"not json":           `{`,
	} {
		if _, err := decodeBlock([]byte(value)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	// Pre-v3 blocks carry hostAffinity instead.
	b, err := decodeBlock([]byte(`{"cidr":"10.0.0.0/31","hostAffinity":"old","allocations":[null,null],"unallocated":[0,1]}`))
	if err != nil || b.host() != "old" {
		t.Errorf("hostAffinity block: %v host %q", err, b.host())
	}
}

func TestReservations(t *testing.T) {
	r := reservations{netip.MustParsePrefix("10.0.0.0/27"), netip.MustParsePrefix("10.0.1.5/32")}
	if !r.coversAll(netip.MustParsePrefix("10.0.0.16/28")) || r.coversAll(netip.MustParsePrefix("10.0.0.0/26")) {
		t.Error("coversAll wrong")
	}
	if !r.overlaps(netip.MustParsePrefix("10.0.1.0/28")) || r.overlaps(netip.MustParsePrefix("10.0.2.0/28")) {
		t.Error("overlaps wrong")
	}
	b := newBlock(netip.MustParsePrefix("10.0.1.0/29"), "", 1)
	if got := b.free(r); got != 7 {
		t.Errorf("free with one reserved = %d, want 7", got)
	}
}
