package ipam

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// etcd keys of Calico's IPAM data (libcalico-go backend/model, v3.31).
const (
	// Prefix is the root of all IPAM data.
	Prefix       = "/calico/ipam/v2/"
	configKey    = Prefix + "config"
	handlePrefix = Prefix + "handle/"
	hostPrefix   = Prefix + "host/"
	// virtualPrefix holds the affinities of virtual hosts (Calico's
	// AffinityTypeVirtual): /calico/ipam/v2/virtual/load-balancer/ipv4/block/...
	virtualPrefix = Prefix + "virtual/"
	blockPrefix   = Prefix + "assignment/"
)

// Affinity states a BlockAffinity goes through in Calico's claim protocol.
const (
	statePending         = "pending"
	stateConfirmed       = "confirmed"
	statePendingDeletion = "pendingDeletion"
)

// Allocation attribute keys Calico's CNI plugin and calico-node write into
// an allocation's "secondary" map.
const (
	AttrNode      = "node"
	AttrNamespace = "namespace"
	AttrPod       = "pod"
	AttrTimestamp = "timestamp"
	AttrType      = "type"
	// AttrService is the Service of a LoadBalancer address (Calico's
	// LoadBalancer controller also sets namespace and type).
	AttrService = "service"
)

// hostAffinityPrefix is the "host:" of a block's "affinity" field.
const hostAffinityPrefix = "host:"

// virtualAffinityPrefix is the "virtual:" of a block affine to a virtual
// host rather than a node.
const virtualAffinityPrefix = "virtual:"

// LoadBalancerHost is the virtual host Calico's LoadBalancer addresses are
// allocated to (api's VirtualLoadBalancer): their blocks have the
// affinity "virtual:load-balancer" and the affinity key
// /calico/ipam/v2/virtual/load-balancer/ipv4/block/<cidr>.
const LoadBalancerHost = "load-balancer"

// Owners. Inside this package the holder of a block affinity is its
// owner: a node name, or "virtual:<host>" for a virtual host (a block's
// affinity field spells it so). No node name contains a colon, so the two
// never meet, and a node really named "load-balancer" keeps its own
// blocks.
const lbOwner = virtualAffinityPrefix + LoadBalancerHost

// virtualHost is the virtual host an owner names, if it names one.
func virtualHost(owner string) (string, bool) { return strings.CutPrefix(owner, virtualAffinityPrefix) }

// ownerAffinity is a block's "affinity" value for owner.
func ownerAffinity(owner string) string {
	if _, ok := virtualHost(owner); ok {
		return owner
	}
	return hostAffinityPrefix + owner
}

// blockValue is an allocation block exactly as Calico stores it
// (model.AllocationBlock). Field order and omitempty match Calico's struct so
// that what we write is byte-for-byte what Calico would write.
type blockValue struct {
	CIDR     string  `json:"cidr"`
	Affinity *string `json:"affinity"`
	// Allocations has one entry per address of the block: nil when free,
	// else the index of the allocation's entry in Attributes.
	Allocations []*int `json:"allocations"`
	// Unallocated lists the free ordinals in the order they are handed out:
	// a released ordinal is appended, so it comes back last.
	Unallocated []int                 `json:"unallocated"`
	Attributes  []allocationAttribute `json:"attributes"`
	// SequenceNumber grows by one on every write of the block;
	// SequenceNumberForAllocation records its value when each ordinal was
	// allocated, so a release can prove it concerns that allocation.
	SequenceNumber              uint64            `json:"sequenceNumber"`
	SequenceNumberForAllocation map[string]uint64 `json:"sequenceNumberForAllocation"`
	// Deleted is used by Calico's Kubernetes backend only; always false here.
	Deleted bool `json:"deleted"`
	// HostAffinity is the pre-v3 spelling of Affinity, read but never written.
	HostAffinity *string `json:"hostAffinity,omitempty"`
}

// allocationAttribute is who holds an allocation: the handle ("handle_id",
// Calico's AttrPrimary) and free-form attributes ("secondary").
type allocationAttribute struct {
	HandleID  *string           `json:"handle_id"`
	Secondary map[string]string `json:"secondary"`
}

// affinityValue is a BlockAffinity (model.BlockAffinity).
type affinityValue struct {
	State   string `json:"state"`
	Deleted bool   `json:"deleted"`
}

// handleValue is an IPAMHandle: how many addresses the handle holds in each
// block, keyed by block CIDR.
type handleValue struct {
	Block   map[string]int `json:"block"`
	Deleted bool           `json:"deleted"`
}

// configValue is the global IPAM config (model.IPAMConfig); note Calico's
// mixed spelling of the field names.
type configValue struct {
	StrictAffinity     bool `json:"strict_affinity,omitempty"`
	AutoAllocateBlocks bool `json:"auto_allocate_blocks,omitempty"`
	MaxBlocksPerHost   int  `json:"maxBlocksPerHost,omitempty"`
}

// Config is the global IPAM configuration.
type Config struct {
	// StrictAffinity forbids borrowing addresses from blocks affine to
	// other nodes.
	StrictAffinity bool
	// AutoAllocateBlocks lets nodes claim new blocks. Calico's default (no
	// config key) is true.
	AutoAllocateBlocks bool
	// MaxBlocksPerHost caps the blocks one node may claim; 0 = no limit.
	MaxBlocksPerHost int
}

// defaultConfig is what Calico uses, and writes, when no config key exists.
var defaultConfigValue = configValue{AutoAllocateBlocks: true}

func decodeConfig(data []byte) (Config, error) {
	var v configValue
	if err := json.Unmarshal(data, &v); err != nil {
		return Config{}, fmt.Errorf("decode %s: %w", configKey, err)
	}
	return Config{StrictAffinity: v.StrictAffinity, AutoAllocateBlocks: v.AutoAllocateBlocks, MaxBlocksPerHost: v.MaxBlocksPerHost}, nil
}

// ipVersion is 4 or 6.
func ipVersion(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// cidrSegment is a block CIDR as it appears in a key: the first "/"
// replaced by "-" ("10.0.0.0-26", "fd00::-122").
func cidrSegment(p netip.Prefix) string {
	return strings.Replace(p.String(), "/", "-", 1)
}

// BlockKey is the etcd key of the block with the given CIDR:
// /calico/ipam/v2/assignment/ipv4/block/10.244.166.128-26.
func BlockKey(cidr netip.Prefix) string {
	return fmt.Sprintf("%sipv%d/block/%s", blockPrefix, ipVersion(cidr.Addr()), cidrSegment(cidr))
}

// blockPrefixFor is the key prefix of all blocks of one IP version.
func blockPrefixFor(version int) string {
	return fmt.Sprintf("%sipv%d/block/", blockPrefix, version)
}

// AffinityKey is the etcd key recording that node claimed the block:
// /calico/ipam/v2/host/node1/ipv4/block/10.244.166.128-26 (for the
// virtual owner "virtual:load-balancer",
// /calico/ipam/v2/virtual/load-balancer/ipv4/block/...).
func AffinityKey(node string, cidr netip.Prefix) string {
	return fmt.Sprintf("%sipv%d/block/%s", nodeAffinityPrefix(node), ipVersion(cidr.Addr()), cidrSegment(cidr))
}

// nodeAffinityPrefix covers every affinity of one owner, both IP versions.
func nodeAffinityPrefix(owner string) string {
	if h, ok := virtualHost(owner); ok {
		return virtualPrefix + h + "/"
	}
	return hostPrefix + owner + "/"
}

// HandleKey is the etcd key of a handle.
func HandleKey(id string) string { return handlePrefix + id }

// parseCIDRSegment undoes cidrSegment and insists on a masked prefix.
func parseCIDRSegment(s string) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(strings.Replace(s, "-", "/", 1))
	if err != nil || p.Masked() != p {
		return netip.Prefix{}, false
	}
	return p, true
}

// parseBlockKey returns the CIDR of a block key.
func parseBlockKey(key string) (netip.Prefix, bool) {
	rest, ok := strings.CutPrefix(key, blockPrefix)
	if !ok {
		return netip.Prefix{}, false
	}
	ver, seg, ok := strings.Cut(rest, "/block/")
	if !ok || strings.Contains(seg, "/") {
		return netip.Prefix{}, false
	}
	p, ok := parseCIDRSegment(seg)
	if !ok || ver != fmt.Sprintf("ipv%d", ipVersion(p.Addr())) {
		return netip.Prefix{}, false
	}
	return p, true
}

// parseAffinityKey returns the owner (a node, or "virtual:<host>") and
// block CIDR of an affinity key.
func parseAffinityKey(key string) (owner string, cidr netip.Prefix, ok bool) {
	virtual := ""
	rest, ok := strings.CutPrefix(key, hostPrefix)
	if !ok {
		if rest, ok = strings.CutPrefix(key, virtualPrefix); !ok {
			return "", netip.Prefix{}, false
		}
		virtual = virtualAffinityPrefix
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || parts[0] == "" || parts[2] != "block" {
		return "", netip.Prefix{}, false
	}
	p, ok := parseCIDRSegment(parts[3])
	if !ok || parts[1] != fmt.Sprintf("ipv%d", ipVersion(p.Addr())) {
		return "", netip.Prefix{}, false
	}
	return virtual + parts[0], p, true
}

// parseHandleKey returns the handle ID of a handle key.
func parseHandleKey(key string) (string, bool) {
	id, ok := strings.CutPrefix(key, handlePrefix)
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", false
	}
	return id, true
}

// sanitizeHandle drops what follows a carriage return: old host-local to
// Calico IPAM migrations wrote such handles, and Calico cleans them the
// same way.
func sanitizeHandle(id string) string {
	id, _, _ = strings.Cut(id, "\r")
	return id
}
