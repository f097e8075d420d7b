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
)

// Calico's IPAM keys (libcalico-go lib/backend/model, v3.31) and the
// labels and annotation its Kubernetes backend puts on IPAM objects.
const (
	ipamPrefix     = "/calico/ipam/v2/"
	ipamBlockRoot  = ipamPrefix + "assignment/"
	ipamHandleRoot = ipamPrefix + "handle/"
	ipamConfigKey  = ipamPrefix + "config"
	// Affinity keys are /calico/ipam/v2/<type>/<node>/ipv4/block/<cidr>,
	// type "host" (the only one calico-node writes) or "virtual".
	ipamHostRoot = ipamPrefix + ipamAffinityHost + "/"

	ipamAffinityHost    = "host"
	ipamAffinityVirtual = "virtual"

	ipamMetadataAnnotation = "projectcalico.org/metadata"
	ipamLabelHostnameHash  = "projectcalico.org/hostname-hash"
	ipamLabelAffinityType  = "projectcalico.org/affinity-type"
	ipamLabelIPVersion     = "projectcalico.org/ip-version"

	// ipamConfigName is the IPAMConfig singleton's name.
	ipamConfigName = "default"
	// ipamMaxNameLen is the longest object name the API server takes.
	ipamMaxNameLen = 253

	ipamStateConfirmed = "confirmed"
	ipamStatePending   = "pending"
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

// Values in Calico's etcd JSON (lib/backend/model), with its field order
// and omitempty, so that what a Get returns is byte for byte what the etcd
// backend stores for the same data.
type (
	etcdBlock struct {
		CIDR                        string            `json:"cidr"`
		Affinity                    *string           `json:"affinity"`
		Allocations                 []*int            `json:"allocations"`
		Unallocated                 []int             `json:"unallocated"`
		Attributes                  []etcdAllocAttr   `json:"attributes"`
		SequenceNumber              uint64            `json:"sequenceNumber"`
		SequenceNumberForAllocation map[string]uint64 `json:"sequenceNumberForAllocation"`
		Deleted                     bool              `json:"deleted"`
		HostAffinity                *string           `json:"hostAffinity,omitempty"`
	}
	etcdAllocAttr struct {
		HandleID  *string           `json:"handle_id"`
		Secondary map[string]string `json:"secondary"`
	}
	etcdAffinity struct {
		State   string `json:"state"`
		Deleted bool   `json:"deleted"`
	}
	etcdHandle struct {
		Block   map[string]int `json:"block"`
		Deleted bool           `json:"deleted"`
	}
	etcdIPAMConfig struct {
		StrictAffinity     bool `json:"strict_affinity,omitempty"`
		AutoAllocateBlocks bool `json:"auto_allocate_blocks,omitempty"`
		MaxBlocksPerHost   int  `json:"maxBlocksPerHost,omitempty"`
	}
)

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
	// name is the object name of key; errNotIPAMKey if key is not one
	// of this resource's.
	name func(key string) (string, error)
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
		covers: func(p string) bool { return keyRangesOverlap(p, ipamBlockRoot) },
		name: func(key string) (string, error) {
			cidr, err := parseBlockKey(key)
			if err != nil {
				return "", err
			}
			return cidrToName(cidr), nil
		},
		encode: encodeBlock,
		decode: decodeBlockObject,
	}
	ipamAffinities = &ipamResource{
		kind: "BlockAffinity", plural: "blockaffinities",
		covers: func(p string) bool {
			return keyRangesOverlap(p, ipamHostRoot) || keyRangesOverlap(p, ipamPrefix+ipamAffinityVirtual+"/")
		},
		name: func(key string) (string, error) {
			_, node, cidr, err := parseAffinityKey(key)
			if err != nil {
				return "", err
			}
			return affinityName(node, cidr), nil
		},
		encode: encodeAffinity,
		decode: decodeAffinityObject,
	}
	ipamHandles = &ipamResource{
		kind: "IPAMHandle", plural: "ipamhandles",
		covers: func(p string) bool { return keyRangesOverlap(p, ipamHandleRoot) },
		name: func(key string) (string, error) {
			id, err := parseHandleKey(key)
			if err != nil {
				return "", err
			}
			return strings.ToLower(id), nil
		},
		encode: encodeHandle,
		decode: decodeHandleObject,
	}
	ipamConfigs = &ipamResource{
		kind: "IPAMConfig", plural: "ipamconfigs",
		covers: func(p string) bool { return strings.HasPrefix(ipamConfigKey, p) },
		name: func(key string) (string, error) {
			if key != ipamConfigKey {
				return "", errNotIPAMKey
			}
			return ipamConfigName, nil
		},
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
		name, err := r.name(key)
		if err == nil {
			return r, name, nil
		}
		if !errors.Is(err, errNotIPAMKey) {
			return nil, "", err
		}
	}
	return nil, "", fmt.Errorf("key %q: %w", key, errNotIPAMKey)
}

// cidrSegment is a CIDR as a key spells it: "10.0.0.0-26", "fd00::-122".
func cidrSegment(p netip.Prefix) string { return strings.Replace(p.String(), "/", "-", 1) }

func parseCIDRSegment(seg string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(strings.Replace(seg, "-", "/", 1))
	if err != nil || p.Masked() != p || p.Addr().Is4In6() || p.Addr().Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("block CIDR %q in key: %w", seg, errNotIPAMKey)
	}
	return p, nil
}

func ipVersion(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 4
	}
	return 6
}

// blockKey is /calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26.
func blockKey(cidr netip.Prefix) string {
	return fmt.Sprintf("%sipv%d/block/%s", ipamBlockRoot, ipVersion(cidr), cidrSegment(cidr))
}

func parseBlockKey(key string) (netip.Prefix, error) {
	rest, ok := strings.CutPrefix(key, ipamBlockRoot)
	if !ok {
		return netip.Prefix{}, errNotIPAMKey
	}
	ver, seg, ok := strings.Cut(rest, "/block/")
	if !ok || strings.Contains(seg, "/") {
		return netip.Prefix{}, fmt.Errorf("block key %q: %w", key, errNotIPAMKey)
	}
	p, err := parseCIDRSegment(seg)
	if err != nil {
		return netip.Prefix{}, err
	}
	if ver != fmt.Sprintf("ipv%d", ipVersion(p)) {
		return netip.Prefix{}, fmt.Errorf("block key %q: IP version: %w", key, errNotIPAMKey)
	}
	return p, nil
}

// affinityKey is /calico/ipam/v2/host/node1/ipv4/block/10.0.0.0-26.
func affinityKey(typ, node string, cidr netip.Prefix) string {
	return fmt.Sprintf("%s%s/%s/ipv%d/block/%s", ipamPrefix, typ, node, ipVersion(cidr), cidrSegment(cidr))
}

func parseAffinityKey(key string) (typ, node string, cidr netip.Prefix, err error) {
	rest, ok := strings.CutPrefix(key, ipamPrefix)
	if !ok {
		return "", "", netip.Prefix{}, errNotIPAMKey
	}
	parts := strings.Split(rest, "/")
	if len(parts) == 0 || (parts[0] != ipamAffinityHost && parts[0] != ipamAffinityVirtual) {
		return "", "", netip.Prefix{}, errNotIPAMKey
	}
	if len(parts) != 5 || parts[1] == "" || parts[3] != "block" {
		return "", "", netip.Prefix{}, fmt.Errorf("affinity key %q: %w", key, errNotIPAMKey)
	}
	p, err := parseCIDRSegment(parts[4])
	if err != nil {
		return "", "", netip.Prefix{}, err
	}
	if parts[2] != fmt.Sprintf("ipv%d", ipVersion(p)) {
		return "", "", netip.Prefix{}, fmt.Errorf("affinity key %q: IP version: %w", key, errNotIPAMKey)
	}
	return parts[0], parts[1], p, nil
}

func parseHandleKey(key string) (string, error) {
	id, ok := strings.CutPrefix(key, ipamHandleRoot)
	if !ok {
		return "", errNotIPAMKey
	}
	if id == "" || strings.Contains(id, "/") {
		return "", fmt.Errorf("handle key %q: %w", key, errNotIPAMKey)
	}
	return id, nil
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
	cidr, err := parseBlockKey(key)
	if err != nil {
		return ipamObject{}, err
	}
	var v etcdBlock
	if err := decodeValue(key, value, &v); err != nil {
		return ipamObject{}, err
	}
	aff := v.Affinity
	if aff == nil && v.HostAffinity != nil {
		a := "host:" + *v.HostAffinity
		aff = &a
	}
	spec := blockSpec{
		CIDR:                        cidr.String(),
		Affinity:                    aff,
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
	v := etcdBlock{
		CIDR:                        cidr.String(),
		Affinity:                    s.Affinity,
		Allocations:                 s.Allocations,
		Unallocated:                 s.Unallocated,
		Attributes:                  make([]etcdAllocAttr, len(s.Attributes)),
		SequenceNumber:              s.SequenceNumber,
		SequenceNumberForAllocation: s.SequenceNumberForAllocation,
		Deleted:                     s.Deleted,
	}
	for i, a := range s.Attributes {
		v.Attributes[i] = etcdAllocAttr(a)
	}
	if v.Unallocated == nil {
		v.Unallocated = []int{}
	}
	if v.SequenceNumberForAllocation == nil {
		v.SequenceNumberForAllocation = map[string]uint64{}
	}
	data, err := json.Marshal(v)
	return blockKey(cidr), data, s.Deleted, err
}

// encodeAffinity is libcalico-go's blockAffinityClient.toV3, with the
// labels of model.EnsureBlockAffinityLabels.
func encodeAffinity(key string, value []byte) (ipamObject, error) {
	typ, node, cidr, err := parseAffinityKey(key)
	if err != nil {
		return ipamObject{}, err
	}
	var v etcdAffinity
	if err := decodeValue(key, value, &v); err != nil {
		return ipamObject{}, err
	}
	spec := affinitySpec{State: v.State, Node: node, Type: typ, CIDR: cidr.String(), Deleted: strconv.FormatBool(v.Deleted)}
	labels := map[string]string{
		ipamLabelHostnameHash: hostnameHash(node),
		ipamLabelAffinityType: typ,
		ipamLabelIPVersion:    strconv.Itoa(ipVersion(cidr)),
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
		typ = ipamAffinityHost
	}
	data, err := json.Marshal(etcdAffinity{State: s.State, Deleted: deleted})
	return affinityKey(typ, s.Node, cidr.Masked()), data, deleted, err
}

// encodeHandle is libcalico-go's ipamHandleClient.toV3: the object name is
// the handle ID in lower case, the spec keeps it as written.
func encodeHandle(key string, value []byte) (ipamObject, error) {
	id, err := parseHandleKey(key)
	if err != nil {
		return ipamObject{}, err
	}
	var v etcdHandle
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
	data, err := json.Marshal(etcdHandle{Block: s.Block, Deleted: s.Deleted})
	return ipamHandleRoot + id, data, s.Deleted, err
}

func encodeIPAMConfig(key string, value []byte) (ipamObject, error) {
	if key != ipamConfigKey {
		return ipamObject{}, errNotIPAMKey
	}
	var v etcdIPAMConfig
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
	data, err := json.Marshal(etcdIPAMConfig(s))
	return ipamConfigKey, data, false, err
}
