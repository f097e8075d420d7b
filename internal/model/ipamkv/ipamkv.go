// Package ipamkv is Calico's IPAM data as its etcd backend stores it
// (libcalico-go lib/backend/model, v3.31): the key layout and the JSON
// of each value.
//
// Model: every IPAM object is one key under Prefix:
//
//	assignment/ipv4/block/10.244.166.128-26    a Block
//	host/node1/ipv4/block/10.244.166.128-26    an Affinity of node1
//	virtual/load-balancer/ipv4/block/...       an Affinity of a virtual host
//	handle/k8s-pod-network.X                   a Handle
//	config                                     the Config
//
// Design: two packages speak this vocabulary, the allocator (internal/ipam)
// and the Kubernetes backend, which maps each key onto an IPAM custom
// resource and back (internal/datastore/kdd). What one writes the other
// must read byte for byte, so the keys and value types are defined here
// once. The value structs keep Calico's field order and omitempty, so
// that json.Marshal writes exactly what Calico writes.
//
// Pure: no I/O, no state; safe for concurrent use.
package ipamkv

import (
	"fmt"
	"net/netip"
	"strings"
)

// The key layout.
const (
	// Prefix is the root of all IPAM data.
	Prefix       = "/calico/ipam/v2/"
	BlockPrefix  = Prefix + "assignment/"
	HandlePrefix = Prefix + "handle/"
	ConfigKey    = Prefix + "config"
	// HostPrefix holds the affinities of nodes; VirtualPrefix those of
	// virtual hosts (Calico's AffinityTypeVirtual, such as the
	// LoadBalancer controller's "load-balancer").
	HostPrefix    = Prefix + AffinityHost + "/"
	VirtualPrefix = Prefix + AffinityVirtual + "/"
)

// Affinity types: the first segment of an affinity key below Prefix.
const (
	AffinityHost    = "host"
	AffinityVirtual = "virtual"
)

// A block's Affinity names its holder: "host:<node>" or "virtual:<host>".
const (
	HostAffinityPrefix    = AffinityHost + ":"
	VirtualAffinityPrefix = AffinityVirtual + ":"
)

// Affinity states a BlockAffinity goes through in Calico's claim protocol.
const (
	StatePending         = "pending"
	StateConfirmed       = "confirmed"
	StatePendingDeletion = "pendingDeletion"
)

// Block is an allocation block (model.AllocationBlock).
type Block struct {
	CIDR string `json:"cidr"`
	// Affinity is "host:<node>" or "virtual:<host>"; nil for a block
	// with no affinity.
	Affinity *string `json:"affinity"`
	// Allocations has one entry per address of the block: nil when free,
	// else the index of the allocation's entry in Attributes.
	Allocations []*int `json:"allocations"`
	// Unallocated lists the free ordinals in the order they are handed out:
	// a released ordinal is appended, so it comes back last.
	Unallocated []int                 `json:"unallocated"`
	Attributes  []AllocationAttribute `json:"attributes"`
	// SequenceNumber grows by one on every write of the block;
	// SequenceNumberForAllocation records its value when each ordinal was
	// allocated, so a release can prove it concerns that allocation.
	SequenceNumber              uint64            `json:"sequenceNumber"`
	SequenceNumberForAllocation map[string]uint64 `json:"sequenceNumberForAllocation"`
	// Deleted is used by Calico's Kubernetes backend only: a block being
	// deleted, so that a racing write conflicts.
	Deleted bool `json:"deleted"`
	// HostAffinity is the pre-v3 spelling of Affinity, read but never written.
	HostAffinity *string `json:"hostAffinity,omitempty"`
}

// UpgradeAffinity reads a block written before Calico v3, which has only
// HostAffinity, as Calico does: its Affinity becomes "host:<node>" and
// HostAffinity is dropped, so that a write stores the v3 spelling.
func (b *Block) UpgradeAffinity() {
	if b.Affinity == nil && b.HostAffinity != nil {
		a := HostAffinityPrefix + *b.HostAffinity
		b.Affinity = &a
		b.HostAffinity = nil
	}
}

// AllocationAttribute is who holds an allocation: the handle ("handle_id",
// Calico's AttrPrimary) and free-form attributes ("secondary").
type AllocationAttribute struct {
	HandleID  *string           `json:"handle_id"`
	Secondary map[string]string `json:"secondary"`
}

// Affinity is a BlockAffinity (model.BlockAffinity).
type Affinity struct {
	State   string `json:"state"`
	Deleted bool   `json:"deleted"`
}

// Handle is an IPAMHandle: how many addresses the handle holds in each
// block, keyed by block CIDR.
type Handle struct {
	Block   map[string]int `json:"block"`
	Deleted bool           `json:"deleted"`
}

// Config is the global IPAM config (model.IPAMConfig); note Calico's
// mixed spelling of the field names.
type Config struct {
	StrictAffinity     bool `json:"strict_affinity,omitempty"`
	AutoAllocateBlocks bool `json:"auto_allocate_blocks,omitempty"`
	MaxBlocksPerHost   int  `json:"maxBlocksPerHost,omitempty"`
}

// IPVersion is 4 or 6.
func IPVersion(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 4
	}
	return 6
}

// BlockKey is the key of the block with the given CIDR:
// /calico/ipam/v2/assignment/ipv4/block/10.244.166.128-26.
func BlockKey(cidr netip.Prefix) string {
	return BlockVersionPrefix(IPVersion(cidr)) + cidrSegment(cidr)
}

// BlockVersionPrefix is the key prefix of all blocks of one IP version.
func BlockVersionPrefix(version int) string {
	return fmt.Sprintf("%sipv%d/block/", BlockPrefix, version)
}

// ParseBlockKey returns the CIDR of a block key; false for any other key.
func ParseBlockKey(key string) (netip.Prefix, bool) {
	rest, ok := strings.CutPrefix(key, BlockPrefix)
	if !ok {
		return netip.Prefix{}, false
	}
	ver, seg, ok := strings.Cut(rest, "/block/")
	if !ok || strings.Contains(seg, "/") {
		return netip.Prefix{}, false
	}
	return parseCIDRSegment(ver, seg)
}

// AffinityHostPrefix covers every affinity of one host (a node for
// AffinityHost), both IP versions.
func AffinityHostPrefix(typ, host string) string { return Prefix + typ + "/" + host + "/" }

// AffinityKey is the key recording that host claimed the block:
// /calico/ipam/v2/host/node1/ipv4/block/10.244.166.128-26.
func AffinityKey(typ, host string, cidr netip.Prefix) string {
	return fmt.Sprintf("%sipv%d/block/%s", AffinityHostPrefix(typ, host), IPVersion(cidr), cidrSegment(cidr))
}

// ParseAffinityKey returns the type, host and block CIDR of an affinity
// key; false for any other key.
func ParseAffinityKey(key string) (typ, host string, cidr netip.Prefix, ok bool) {
	rest, ok := strings.CutPrefix(key, Prefix)
	if !ok {
		return "", "", netip.Prefix{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 5 || (parts[0] != AffinityHost && parts[0] != AffinityVirtual) ||
		parts[1] == "" || parts[3] != "block" {
		return "", "", netip.Prefix{}, false
	}
	p, ok := parseCIDRSegment(parts[2], parts[4])
	if !ok {
		return "", "", netip.Prefix{}, false
	}
	return parts[0], parts[1], p, true
}

// HandleKey is the key of a handle.
func HandleKey(id string) string { return HandlePrefix + id }

// ParseHandleKey returns the handle ID of a handle key; false for any
// other key.
func ParseHandleKey(key string) (string, bool) {
	id, ok := strings.CutPrefix(key, HandlePrefix)
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", false
	}
	return id, true
}

// cidrSegment is a block CIDR as a key spells it: the first "/" replaced
// by "-" ("10.0.0.0-26", "fd00::-122").
func cidrSegment(p netip.Prefix) string { return strings.Replace(p.String(), "/", "-", 1) }

// parseCIDRSegment undoes cidrSegment, insisting on a masked prefix of
// the key's IP version segment ver ("ipv4", "ipv6"). An IPv4-mapped IPv6
// prefix is refused: Calico never writes one, and its key would not say
// which version it is.
func parseCIDRSegment(ver, seg string) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(strings.Replace(seg, "-", "/", 1))
	if err != nil || p.Masked() != p || p.Addr().Is4In6() || ver != fmt.Sprintf("ipv%d", IPVersion(p)) {
		return netip.Prefix{}, false
	}
	return p, true
}
