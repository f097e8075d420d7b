package kdd

import (
	"crypto/sha256"
	"crypto/sha3"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// The labels and annotation Calico's Kubernetes backend puts on IPAM
// objects (the keys and values are package ipamkv's).
const (
	ipamMetadataAnnotation = "projectcalico.org/metadata"
	ipamLabelHostnameHash  = "projectcalico.org/hostname-hash"
	ipamLabelAffinityType  = "projectcalico.org/affinity-type"
	ipamLabelIPVersion     = "projectcalico.org/ip-version"

	// ipamConfigName is the IPAMConfig singleton's name.
	ipamConfigName = "default"
	// ipamMaxNameLen is the longest object name the API server takes.
	ipamMaxNameLen = 253
)

// errNotIPAMKey: a key outside Calico's IPAM layout.
var errNotIPAMKey = errors.New("not a Calico IPAM key")

// ipamObject is an IPAM custom resource as the API server stores it. The
// read side only needs these fields; the write side sends exactly these.
type ipamObject struct {
	APIVersion string          `json:"apiVersion,omitempty"`
	Kind       string          `json:"kind,omitempty"`
	Metadata   ipamObjectMeta  `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
}

type ipamObjectMeta struct {
	Name            string            `json:"name"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
}

// Specs of the custom resources (libcalico-go lib/apis/v3, v3.31).
type (
	blockSpec struct {
		CIDR                        string            `json:"cidr"`
		Affinity                    *string           `json:"affinity,omitempty"`
		Allocations                 []*int            `json:"allocations"`
		Unallocated                 []int             `json:"unallocated"`
		Attributes                  []blockAllocAttr  `json:"attributes"`
		SequenceNumber              uint64            `json:"sequenceNumber"`
		SequenceNumberForAllocation map[string]uint64 `json:"sequenceNumberForAllocation"`
		Deleted                     bool              `json:"deleted"`
		// DeprecatedStrictAffinity: Calico writes false and reads nothing.
		DeprecatedStrictAffinity bool `json:"strictAffinity"`
	}
	blockAllocAttr struct {
		HandleID  *string           `json:"handle_id,omitempty"`
		Secondary map[string]string `json:"secondary,omitempty"`
	}
	affinitySpec struct {
		State string `json:"state"`
		Node  string `json:"node"`
		Type  string `json:"type,omitempty"`
		CIDR  string `json:"cidr"`
		// Deleted is a string ("false"), as Calico has it for old readers.
		Deleted string `json:"deleted"`
	}
	handleSpec struct {
		HandleID string         `json:"handleID"`
		Block    map[string]int `json:"block"`
		Deleted  bool           `json:"deleted"`
	}
	ipamConfigSpec struct {
		StrictAffinity     bool `json:"strictAffinity"`
		AutoAllocateBlocks bool `json:"autoAllocateBlocks"`
		MaxBlocksPerHost   int  `json:"maxBlocksPerHost,omitempty"`
	}
)

// ipamResource is one of the four IPAM custom resources: where it lives
// and how its objects map to keys and values. Conversions are pure.
type ipamResource struct {
	kind, plural string
	// covers reports whether a key under prefix may be an object of this
	// resource (so that List and Watch of prefix must read it).
	covers func(prefix string) bool
	// name is the object name of key; false if key is not one of this
	// resource's.
	name func(key string) (string, bool)
	// encode builds the object stored for key and its etcd-JSON value.
	encode func(key string, value []byte) (ipamObject, error)
	// decode returns the key and etcd-JSON value of a stored object, and
	// whether Calico has marked it deleted (it then does not exist). An
	// empty key: the object is none of Calico's IPAM data (an IPAMConfig
	// not named "default").
	decode func(obj ipamObject) (key string, value []byte, deleted bool, err error)
}

func (r *ipamResource) path() string { return "/apis/" + CRDGroupVersion + "/" + r.plural }

func (r *ipamResource) objPath(name string) string { return r.path() + "/" + url.PathEscape(name) }

// The four resources, in the order List, Snapshot and Watch read them.
var (
	ipamBlocks = &ipamResource{
		kind: "IPAMBlock", plural: "ipamblocks",
		covers: func(p string) bool { return keyRangesOverlap(p, ipamkv.BlockPrefix) },
		name: func(key string) (string, bool) {
			cidr, ok := ipamkv.ParseBlockKey(key)
			return cidrToName(cidr), ok
		},
		encode: encodeBlock,
		decode: decodeBlockObject,
	}
	ipamAffinities = &ipamResource{
		kind: "BlockAffinity", plural: "blockaffinities",
		covers: func(p string) bool {
			return keyRangesOverlap(p, ipamkv.HostPrefix) || keyRangesOverlap(p, ipamkv.VirtualPrefix)
		},
		name: func(key string) (string, bool) {
			_, node, cidr, ok := ipamkv.ParseAffinityKey(key)
			return affinityName(node, cidr), ok
		},
		encode: encodeAffinity,
		decode: decodeAffinityObject,
	}
	ipamHandles = &ipamResource{
		kind: "IPAMHandle", plural: "ipamhandles",
		covers: func(p string) bool { return keyRangesOverlap(p, ipamkv.HandlePrefix) },
		name: func(key string) (string, bool) {
			id, ok := ipamkv.ParseHandleKey(key)
			return strings.ToLower(id), ok
		},
		encode: encodeHandle,
		decode: decodeHandleObject,
	}
	ipamConfigs = &ipamResource{
		kind: "IPAMConfig", plural: "ipamconfigs",
		covers: func(p string) bool { return strings.HasPrefix(ipamkv.ConfigKey, p) },
		name:   func(key string) (string, bool) { return ipamConfigName, key == ipamkv.ConfigKey },
		encode: encodeIPAMConfig,
		decode: decodeIPAMConfigObject,
	}
	ipamResources = []*ipamResource{ipamBlocks, ipamAffinities, ipamHandles, ipamConfigs}
)

// keyRangesOverlap reports whether some key can start with both prefix
// and root.
func keyRangesOverlap(prefix, root string) bool {
	return strings.HasPrefix(root, prefix) || strings.HasPrefix(prefix, root)
}

// resourceOfKey finds the resource a key belongs to and the object name.
func resourceOfKey(key string) (*ipamResource, string, error) {
	for _, r := range ipamResources {
		if name, ok := r.name(key); ok {
			return r, name, nil
		}
	}
	return nil, "", fmt.Errorf("key %q: %w", key, errNotIPAMKey)
}

// cidrToName is libcalico-go's names.CIDRToName: the CIDR with ".", ":"
// and "/" replaced by "-" ("10-244-166-128-26", "fd00-15---122").
func cidrToName(p netip.Prefix) string {
	name := strings.Replace(p.String(), ".", "-", 3)
	name = strings.Replace(name, ":", "-", 7)
	return strings.Replace(name, "/", "-", 1)
}

// affinityName is Calico's BlockAffinity name: "<node>-<block name>"; a
// name that would reach 253 characters keeps as much of the node name as
// fits and ends in 11 hex digits of sha256("<node>+<block name>") to stay
// unique (libcalico-go blockAffinityClient.parseKey).
func affinityName(node string, cidr netip.Prefix) string {
	cidrName := cidrToName(cidr)
	name := node + "-" + cidrName
	if len(name) < ipamMaxNameLen {
		return name
	}
	sum := sha256.Sum256([]byte(node + "+" + cidrName))
	return node[:ipamMaxNameLen-1-len(cidrName)-13] + "-" + cidrName + "-" + hex.EncodeToString(sum[:])[:11]
}

// hostnameHash is the projectcalico.org/hostname-hash label value: a node
// name may be longer than a label value, so Calico stores base32 (no
// padding) of its SHA3-256.
func hostnameHash(node string) string {
	sum := sha3.Sum256([]byte(node))
	return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:])
}

// ipamMetadata is the projectcalico.org/metadata annotation Calico writes
// on IPAM objects: the v3 metadata with no creation time and, on
// affinities, the labels.
func ipamMetadata(labels map[string]string) string {
	data, _ := json.Marshal(struct {
		CreationTimestamp *string           `json:"creationTimestamp"`
		Labels            map[string]string `json:"labels,omitempty"`
	}{Labels: labels})
	return string(data)
}

func newIPAMObject(kind, name string, labels map[string]string, spec any) (ipamObject, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return ipamObject{}, err
	}
	return ipamObject{
		APIVersion: CRDGroupVersion,
		Kind:       kind,
		Metadata: ipamObjectMeta{
			Name:        name,
			Labels:      labels,
			Annotations: map[string]string{ipamMetadataAnnotation: ipamMetadata(labels)},
		},
		Spec: data,
	}, nil
}

func decodeValue(key string, value []byte, v any) error {
	if err := json.Unmarshal(value, v); err != nil {
		return fmt.Errorf("value of %s is not Calico's etcd JSON: %w", key, err)
	}
	return nil
}

// encodeBlock is libcalico-go's IPAMBlockV1toV3: the spec is the block,
// with the key's CIDR.
func encodeBlock(key string, value []byte) (ipamObject, error) {
	cidr, ok := ipamkv.ParseBlockKey(key)
	if !ok {
		return ipamObject{}, fmt.Errorf("block key %q: %w", key, errNotIPAMKey)
	}
	var v ipamkv.Block
	if err := decodeValue(key, value, &v); err != nil {
		return ipamObject{}, err
	}
	v.UpgradeAffinity()
	spec := blockSpec{
		CIDR:                        cidr.String(),
		Affinity:                    v.Affinity,
		Allocations:                 v.Allocations,
		Unallocated:                 v.Unallocated,
		Attributes:                  make([]blockAllocAttr, len(v.Attributes)),
		SequenceNumber:              v.SequenceNumber,
		SequenceNumberForAllocation: v.SequenceNumberForAllocation,
		Deleted:                     v.Deleted,
	}
	for i, a := range v.Attributes {
		spec.Attributes[i] = blockAllocAttr(a)
	}
	// Empty lists as lists: a null would be pruned by a structural schema.
	if spec.Allocations == nil {
		spec.Allocations = []*int{}
	}
	if spec.Unallocated == nil {
		spec.Unallocated = []int{}
	}
	if spec.SequenceNumberForAllocation == nil {
		spec.SequenceNumberForAllocation = map[string]uint64{}
	}
	return newIPAMObject("IPAMBlock", cidrToName(cidr), nil, spec)
}

// decodeBlockObject is libcalico-go's IPAMBlockV3toV1.
func decodeBlockObject(obj ipamObject) (string, []byte, bool, error) {
	var s blockSpec
	if err := json.Unmarshal(obj.Spec, &s); err != nil {
		return "", nil, false, fmt.Errorf("IPAMBlock %s: decode spec: %w", obj.Metadata.Name, err)
	}
	cidr, err := netip.ParsePrefix(s.CIDR)
	if err != nil {
		return "", nil, false, fmt.Errorf("IPAMBlock %s: cidr %q: %w", obj.Metadata.Name, s.CIDR, err)
	}
	cidr = cidr.Masked()
	v := ipamkv.Block{
		CIDR:                        cidr.String(),
		Affinity:                    s.Affinity,
		Allocations:                 s.Allocations,
		Unallocated:                 s.Unallocated,
		Attributes:                  make([]ipamkv.AllocationAttribute, len(s.Attributes)),
		SequenceNumber:              s.SequenceNumber,
		SequenceNumberForAllocation: s.SequenceNumberForAllocation,
		Deleted:                     s.Deleted,
	}
	for i, a := range s.Attributes {
		v.Attributes[i] = ipamkv.AllocationAttribute(a)
	}
	if v.Unallocated == nil {
		v.Unallocated = []int{}
	}
	if v.SequenceNumberForAllocation == nil {
		v.SequenceNumberForAllocation = map[string]uint64{}
	}
	data, err := json.Marshal(v)
	return ipamkv.BlockKey(cidr), data, s.Deleted, err
}

// encodeAffinity is libcalico-go's blockAffinityClient.toV3, with the
// labels of model.EnsureBlockAffinityLabels.
func encodeAffinity(key string, value []byte) (ipamObject, error) {
	typ, node, cidr, ok := ipamkv.ParseAffinityKey(key)
	if !ok {
		return ipamObject{}, fmt.Errorf("affinity key %q: %w", key, errNotIPAMKey)
	}
	var v ipamkv.Affinity
	if err := decodeValue(key, value, &v); err != nil {
		return ipamObject{}, err
	}
	spec := affinitySpec{State: v.State, Node: node, Type: typ, CIDR: cidr.String(), Deleted: strconv.FormatBool(v.Deleted)}
	labels := map[string]string{
		ipamLabelHostnameHash: hostnameHash(node),
		ipamLabelAffinityType: typ,
		ipamLabelIPVersion:    strconv.Itoa(ipamkv.IPVersion(cidr)),
	}
	return newIPAMObject("BlockAffinity", affinityName(node, cidr), labels, spec)
}

// decodeAffinityObject is libcalico-go's blockAffinityClient.toV1: the key
// comes from the spec, since a long node name does not survive in the
// object name.
func decodeAffinityObject(obj ipamObject) (string, []byte, bool, error) {
	var s affinitySpec
	if err := json.Unmarshal(obj.Spec, &s); err != nil {
		return "", nil, false, fmt.Errorf("BlockAffinity %s: decode spec: %w", obj.Metadata.Name, err)
	}
	cidr, err := netip.ParsePrefix(s.CIDR)
	if err != nil {
		return "", nil, false, fmt.Errorf("BlockAffinity %s: cidr %q: %w", obj.Metadata.Name, s.CIDR, err)
	}
	if s.Node == "" || strings.Contains(s.Node, "/") {
		return "", nil, false, fmt.Errorf("BlockAffinity %s: node %q", obj.Metadata.Name, s.Node)
	}
	deleted := false
	if s.Deleted != "" {
		if deleted, err = strconv.ParseBool(s.Deleted); err != nil {
			return "", nil, false, fmt.Errorf("BlockAffinity %s: deleted %q: %w", obj.Metadata.Name, s.Deleted, err)
		}
	}
	typ := s.Type
	if typ == "" {
		typ = ipamkv.AffinityHost
	}
	data, err := json.Marshal(ipamkv.Affinity{State: s.State, Deleted: deleted})
	return ipamkv.AffinityKey(typ, s.Node, cidr.Masked()), data, deleted, err
}

// encodeHandle is libcalico-go's ipamHandleClient.toV3: the object name is
// the handle ID in lower case, the spec keeps it as written.
func encodeHandle(key string, value []byte) (ipamObject, error) {
	id, ok := ipamkv.ParseHandleKey(key)
	if !ok {
		return ipamObject{}, fmt.Errorf("handle key %q: %w", key, errNotIPAMKey)
	}
	var v ipamkv.Handle
	if err := decodeValue(key, value, &v); err != nil {
		return ipamObject{}, err
	}
	if v.Block == nil {
		v.Block = map[string]int{} // required by Calico's schema
	}
	return newIPAMObject("IPAMHandle", strings.ToLower(id), nil, handleSpec{HandleID: id, Block: v.Block, Deleted: v.Deleted})
}

func decodeHandleObject(obj ipamObject) (string, []byte, bool, error) {
	var s handleSpec
	if err := json.Unmarshal(obj.Spec, &s); err != nil {
		return "", nil, false, fmt.Errorf("IPAMHandle %s: decode spec: %w", obj.Metadata.Name, err)
	}
	id := s.HandleID
	if id == "" {
		id = obj.Metadata.Name
	}
	if strings.Contains(id, "/") {
		return "", nil, false, fmt.Errorf("IPAMHandle %s: handle ID %q", obj.Metadata.Name, id)
	}
	data, err := json.Marshal(ipamkv.Handle{Block: s.Block, Deleted: s.Deleted})
	return ipamkv.HandleKey(id), data, s.Deleted, err
}

func encodeIPAMConfig(key string, value []byte) (ipamObject, error) {
	if key != ipamkv.ConfigKey {
		return ipamObject{}, fmt.Errorf("config key %q: %w", key, errNotIPAMKey)
	}
	var v ipamkv.Config
	if err := decodeValue(key, value, &v); err != nil {
		return ipamObject{}, err
	}
	return newIPAMObject("IPAMConfig", ipamConfigName, nil, ipamConfigSpec(v))
}

func decodeIPAMConfigObject(obj ipamObject) (string, []byte, bool, error) {
	if obj.Metadata.Name != ipamConfigName {
		// Calico reads only "default"; anything else is not the config.
		return "", nil, false, nil
	}
	var s ipamConfigSpec
	if err := json.Unmarshal(obj.Spec, &s); err != nil {
		return "", nil, false, fmt.Errorf("IPAMConfig %s: decode spec: %w", obj.Metadata.Name, err)
	}
	data, err := json.Marshal(ipamkv.Config(s))
	return ipamkv.ConfigKey, data, false, err
}
