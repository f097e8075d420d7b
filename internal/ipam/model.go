package ipam

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// The key layout and stored values are package ipamkv's, which the
// Kubernetes backend shares; these are this package's names for them.
const (
	// Prefix is the root of all IPAM data.
	Prefix        = ipamkv.Prefix
	configKey     = ipamkv.ConfigKey
	handlePrefix  = ipamkv.HandlePrefix
	hostPrefix    = ipamkv.HostPrefix
	virtualPrefix = ipamkv.VirtualPrefix
	blockPrefix   = ipamkv.BlockPrefix

	stateConfirmed = ipamkv.StateConfirmed
)

type (
	blockValue          = ipamkv.Block
	allocationAttribute = ipamkv.AllocationAttribute
	affinityValue       = ipamkv.Affinity
	handleValue         = ipamkv.Handle
	configValue         = ipamkv.Config
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

// The "host:" and "virtual:" that start a block's "affinity" field.
const (
	hostAffinityPrefix    = ipamkv.HostAffinityPrefix
	virtualAffinityPrefix = ipamkv.VirtualAffinityPrefix
)

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

// BlockKey is the etcd key of the block with the given CIDR:
// /calico/ipam/v2/assignment/ipv4/block/10.244.166.128-26.
func BlockKey(cidr netip.Prefix) string { return ipamkv.BlockKey(cidr) }

// AffinityKey is the etcd key recording that owner claimed the block:
// /calico/ipam/v2/host/node1/ipv4/block/10.244.166.128-26 (for the
// virtual owner "virtual:load-balancer",
// /calico/ipam/v2/virtual/load-balancer/ipv4/block/...).
func AffinityKey(owner string, cidr netip.Prefix) string {
	typ, host := affinityHost(owner)
	return ipamkv.AffinityKey(typ, host, cidr)
}

// nodeAffinityPrefix covers every affinity of one owner, both IP versions.
func nodeAffinityPrefix(owner string) string { return ipamkv.AffinityHostPrefix(affinityHost(owner)) }

// affinityHost is the affinity type and host of an owner's keys.
func affinityHost(owner string) (typ, host string) {
	if h, ok := virtualHost(owner); ok {
		return ipamkv.AffinityVirtual, h
	}
	return ipamkv.AffinityHost, owner
}

// HandleKey is the etcd key of a handle.
func HandleKey(id string) string { return ipamkv.HandleKey(id) }

// parseAffinityKey returns the owner (a node, or "virtual:<host>") and
// block CIDR of an affinity key.
func parseAffinityKey(key string) (owner string, cidr netip.Prefix, ok bool) {
	typ, host, cidr, ok := ipamkv.ParseAffinityKey(key)
	if !ok {
		return "", netip.Prefix{}, false
	}
	if typ == ipamkv.AffinityVirtual {
		host = virtualAffinityPrefix + host
	}
	return host, cidr, true
}

// sanitizeHandle drops what follows a carriage return: old host-local to
// Calico IPAM migrations wrote such handles, and Calico cleans them the
// same way.
func sanitizeHandle(id string) string {
	id, _, _ = strings.Cut(id, "\r")
	return id
}
