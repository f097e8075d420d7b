package ipam

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Block size limits, as Calico's IPPool validation has them.
const (
	minBlockSize4, maxBlockSize4 = 20, 32
	minBlockSize6, maxBlockSize6 = 116, 128
)

// block is a decoded allocation block with the operations IPAM performs on
// it. It is pure data: no I/O. Methods that change it keep Calico's
// invariants: every ordinal is either in Unallocated or has an Allocations
// entry pointing at a live attribute.
type block struct {
	cidr netip.Prefix
	v    blockValue
}

// newBlock is an empty block affine to owner ("" = no affinity) whose
// sequence number starts at seq. Calico seeds it with the current time in
// nanoseconds so that a deleted and recreated block never repeats numbers.
func newBlock(cidr netip.Prefix, owner string, seq uint64) *block {
	n := blockSize(cidr)
	b := &block{cidr: cidr, v: blockValue{
		CIDR:                        cidr.String(),
		Allocations:                 make([]*int, n),
		Unallocated:                 make([]int, n),
		SequenceNumber:              seq,
		SequenceNumberForAllocation: map[string]uint64{},
	}}
	for i := range b.v.Unallocated {
		b.v.Unallocated[i] = i
	}
	if owner != "" {
		aff := ownerAffinity(owner)
		b.v.Affinity = &aff
	}
	return b
}

// decodeBlock parses a block value and checks its internal consistency, so
// that later index arithmetic cannot panic on a corrupt value.
func decodeBlock(data []byte) (*block, error) {
	var v blockValue
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("decode block: %w", err)
	}
	p, err := netip.ParsePrefix(v.CIDR)
	if err != nil || p.Masked() != p {
		return nil, fmt.Errorf("decode block: bad cidr %q", v.CIDR)
	}
	if p.Addr().Is4In6() {
		return nil, fmt.Errorf("decode block: bad cidr %q", v.CIDR)
	}
	n := blockSize(p)
	if n == 0 || len(v.Allocations) != n {
		return nil, fmt.Errorf("decode block %s: %d allocations for %d addresses", p, len(v.Allocations), n)
	}
	for ord, a := range v.Allocations {
		if a != nil && (*a < 0 || *a >= len(v.Attributes)) {
			return nil, fmt.Errorf("decode block %s: ordinal %d points at missing attribute %d", p, ord, *a)
		}
	}
	for _, ord := range v.Unallocated {
		if ord < 0 || ord >= n {
			return nil, fmt.Errorf("decode block %s: unallocated ordinal %d out of range", p, ord)
		}
	}
	v.UpgradeAffinity()
	if v.SequenceNumberForAllocation == nil {
		v.SequenceNumberForAllocation = map[string]uint64{}
	}
	if v.Unallocated == nil {
		v.Unallocated = []int{}
	}
	return &block{cidr: p, v: v}, nil
}

// encode is the value to store. Every write bumps the sequence number, as
// Calico's block writer does.
func (b *block) encode() ([]byte, error) {
	b.v.SequenceNumber++
	data, err := json.Marshal(&b.v)
	if err != nil {
		return nil, fmt.Errorf("encode block %s: %w", b.cidr, err)
	}
	return data, nil
}

// blockSize is the number of addresses in p, or 0 when p is too large to
// be a block.
func blockSize(p netip.Prefix) int {
	host := p.Addr().BitLen() - p.Bits()
	if host < 0 || host > maxBlockSize4-minBlockSize4 {
		return 0
	}
	return 1 << host
}

// host is the node the block is affine to, "" if none.
func (b *block) host() string {
	if b.v.Affinity == nil {
		return ""
	}
	h, ok := strings.CutPrefix(*b.v.Affinity, hostAffinityPrefix)
	if !ok {
		return ""
	}
	return h
}

// owner is the node the block is affine to or, for a block of a virtual
// host, its affinity ("virtual:load-balancer"); "" if none.
func (b *block) owner() string {
	if h := b.host(); h != "" {
		return h
	}
	if _, ok := virtualHost(b.affinity()); ok {
		return b.affinity()
	}
	return ""
}

// affinity is the raw affinity ("host:node1"), "" if none.
func (b *block) affinity() string {
	if b.v.Affinity == nil {
		return ""
	}
	return *b.v.Affinity
}

// addr is the address at ordinal ord.
func (b *block) addr(ord int) netip.Addr { return addrAdd(b.cidr.Addr(), uint64(ord)) }

// ordinal is a's position in the block.
func (b *block) ordinal(a netip.Addr) (int, bool) {
	if !b.cidr.Contains(a) {
		return 0, false
	}
	hi0, lo0 := addrBits(b.cidr.Addr())
	hi1, lo1 := addrBits(a)
	if hi0 != hi1 {
		return 0, false
	}
	return int(lo1 - lo0), true
}

// inUse is the number of allocated addresses.
func (b *block) inUse() int {
	n := 0
	for _, a := range b.v.Allocations {
		if a != nil {
			n++
		}
	}
	return n
}

// free counts the addresses that could be handed out automatically.
func (b *block) free(res reservations) int {
	if len(res) == 0 || !res.overlaps(b.cidr) {
		return len(b.v.Unallocated)
	}
	n := 0
	for _, ord := range b.v.Unallocated {
		if !res.contains(b.addr(ord)) {
			n++
		}
	}
	return n
}

// empty reports that nothing is allocated.
func (b *block) empty() bool { return b.inUse() == 0 }

// attributeIndex returns the index of an attribute equal to (handle,
// attrs), adding one if none exists; Calico shares one attribute between
// all allocations that carry the same handle and attributes.
func (b *block) attributeIndex(handle string, attrs map[string]string) int {
	for i, at := range b.v.Attributes {
		if at.HandleID != nil && *at.HandleID == handle && maps.Equal(at.Secondary, attrs) &&
			(at.Secondary == nil) == (attrs == nil) {
			return i
		}
	}
	h := handle
	b.v.Attributes = append(b.v.Attributes, allocationAttribute{HandleID: &h, Secondary: maps.Clone(attrs)})
	return len(b.v.Attributes) - 1
}

// take allocates up to n free ordinals in Unallocated order, skipping
// reserved addresses (which keep their place in the list), and returns
// them.
func (b *block) take(n int, handle string, attrs map[string]string, res reservations) []int {
	if n <= 0 {
		return nil
	}
	var got []int
	kept := b.v.Unallocated[:0]
	attr := -1
	for i, ord := range b.v.Unallocated {
		if len(got) == n {
			kept = append(kept, b.v.Unallocated[i:]...)
			break
		}
		if res.contains(b.addr(ord)) {
			kept = append(kept, ord)
			continue
		}
		if attr < 0 {
			attr = b.attributeIndex(handle, attrs)
		}
		idx := attr
		b.v.Allocations[ord] = &idx
		b.v.SequenceNumberForAllocation[strconv.Itoa(ord)] = b.v.SequenceNumber
		got = append(got, ord)
	}
	b.v.Unallocated = kept
	return got
}

// assign allocates one specific ordinal. It fails if it is taken.
func (b *block) assign(ord int, handle string, attrs map[string]string) error {
	if b.v.Allocations[ord] != nil {
		return ErrAddressInUse
	}
	idx := b.attributeIndex(handle, attrs)
	b.v.Allocations[ord] = &idx
	b.v.SequenceNumberForAllocation[strconv.Itoa(ord)] = b.v.SequenceNumber
	if i := slices.Index(b.v.Unallocated, ord); i >= 0 {
		b.v.Unallocated = slices.Delete(b.v.Unallocated, i, i+1)
	}
	return nil
}

// handleOf is the (sanitized) handle holding ord, "" if none or free.
func (b *block) handleOf(ord int) string {
	a := b.v.Allocations[ord]
	if a == nil {
		return ""
	}
	if h := b.v.Attributes[*a].HandleID; h != nil {
		return sanitizeHandle(*h)
	}
	return ""
}

// attrsOf is the attribute record of an allocated ordinal.
func (b *block) attrsOf(ord int) (allocationAttribute, bool) {
	a := b.v.Allocations[ord]
	if a == nil {
		return allocationAttribute{}, false
	}
	return b.v.Attributes[*a], true
}

// seqOf is the block sequence number recorded when ord was allocated.
func (b *block) seqOf(ord int) uint64 {
	return b.v.SequenceNumberForAllocation[strconv.Itoa(ord)]
}

// ordinalsOf lists the ordinals held by handle, ascending.
func (b *block) ordinalsOf(handle string) []int {
	var ords []int
	for ord := range b.v.Allocations {
		if b.v.Allocations[ord] != nil && b.handleOf(ord) == handle {
			ords = append(ords, ord)
		}
	}
	return ords
}

// release frees the given allocated ordinals: each goes to the end of
// Unallocated (so it is handed out again only after every other free
// address), its sequence number is forgotten, and attributes nobody
// references any more are dropped with the remaining indexes renumbered.
// It returns how many addresses each handle lost. This is Calico's release
// by address; see releaseByHandle.
func (b *block) release(ords []int) map[string]int {
	return b.unallocate(ords, true)
}

// releaseByHandle is release as Calico's release by handle (a CNI DEL)
// does it: the ordinals' sequence numbers stay in
// sequenceNumberForAllocation, as real Calico leaves them
// (libcalico-go allocationBlock.releaseByHandle), until the ordinals are
// allocated again.
func (b *block) releaseByHandle(ords []int) map[string]int {
	return b.unallocate(ords, false)
}

func (b *block) unallocate(ords []int, forgetSeq bool) map[string]int {
	byHandle := map[string]int{}
	seen := map[int]bool{}
	var freed []int
	for _, ord := range ords {
		if seen[ord] || b.v.Allocations[ord] == nil {
			continue
		}
		seen[ord] = true
		if h := b.handleOf(ord); h != "" {
			byHandle[h]++
		}
		freed = append(freed, ord)
	}
	if len(freed) == 0 {
		return byHandle
	}
	for _, ord := range freed {
		b.v.Allocations[ord] = nil
		b.v.Unallocated = append(b.v.Unallocated, ord)
		if forgetSeq {
			delete(b.v.SequenceNumberForAllocation, strconv.Itoa(ord))
		}
	}
	b.compactAttributes()
	return byHandle
}

// compactAttributes drops unreferenced attributes and renumbers the rest.
func (b *block) compactAttributes() {
	used := make([]bool, len(b.v.Attributes))
	for _, a := range b.v.Allocations {
		if a != nil {
			used[*a] = true
		}
	}
	if !slices.Contains(used, false) {
		return
	}
	newIndex := make([]int, len(b.v.Attributes))
	kept := []allocationAttribute{}
	for i, at := range b.v.Attributes {
		if used[i] {
			newIndex[i] = len(kept)
			kept = append(kept, at)
		}
	}
	b.v.Attributes = kept
	for ord, a := range b.v.Allocations {
		if a != nil {
			x := newIndex[*a]
			b.v.Allocations[ord] = &x
		}
	}
}

// addrBits splits an address into its high and low 64 bits (IPv4 in the
// low 32).
func addrBits(a netip.Addr) (hi, lo uint64) {
	if a.Is4() {
		b := a.As4()
		return 0, uint64(binary.BigEndian.Uint32(b[:]))
	}
	b := a.As16()
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

// addrFromBits is the inverse of addrBits for the version of like.
func addrFromBits(like netip.Addr, hi, lo uint64) netip.Addr {
	if like.Is4() {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	return netip.AddrFrom16(b)
}

// addrAdd is a + n (no wrap-around checks: callers stay inside a prefix).
func addrAdd(a netip.Addr, n uint64) netip.Addr {
	hi, lo := addrBits(a)
	nlo := lo + n
	if nlo < lo {
		hi++
	}
	return addrFromBits(a, hi, nlo)
}

// nthBlock is the idx-th block of size bits inside pool.
func nthBlock(pool netip.Prefix, bits int, idx uint64) netip.Prefix {
	shift := uint(pool.Addr().BitLen() - bits)
	hi, lo := addrBits(pool.Addr())
	// idx << shift as a 128-bit number.
	var addHi, addLo uint64
	if shift >= 64 {
		addHi = idx << (shift - 64)
	} else {
		addLo = idx << shift
		if shift > 0 {
			addHi = idx >> (64 - shift)
		}
	}
	nlo := lo + addLo
	if nlo < lo {
		hi++
	}
	return netip.PrefixFrom(addrFromBits(pool.Addr(), hi+addHi, nlo), bits)
}

// numBlocks is how many blocks of size bits fit in pool, capped at 2^62
// (no pool is ever walked that far).
func numBlocks(pool netip.Prefix, bits int) uint64 {
	n := bits - pool.Bits()
	if n < 0 {
		return 0
	}
	if n > 62 {
		n = 62
	}
	return 1 << uint(n)
}

// blockFor is the block of size bits that contains a.
func blockFor(a netip.Addr, bits int) netip.Prefix {
	p, _ := a.Prefix(bits)
	return p
}

// reservations are the CIDRs of all IPReservations.
type reservations []netip.Prefix

func (r reservations) contains(a netip.Addr) bool {
	for _, p := range r {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// coversAll reports that every address of p is reserved.
func (r reservations) coversAll(p netip.Prefix) bool {
	for _, q := range r {
		if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func (r reservations) overlaps(p netip.Prefix) bool {
	for _, q := range r {
		if q.Overlaps(p) {
			return true
		}
	}
	return false
}
