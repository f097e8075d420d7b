package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// Export is all of IPAM's data as `calicoctl datastore migrate export`
// writes it after its second "===" line: calicoctl's migrateIPAM struct,
// each key the etcd key and each value the etcd JSON, whatever the
// datastore it was read from. Empty sections are left out, as Calico's
// omitempty does.
type Export struct {
	BlockAffinities []ExportKV `json:"block_affinities,omitempty"`
	Blocks          []ExportKV `json:"blocks,omitempty"`
	Handles         []ExportKV `json:"handles,omitempty"`
	Config          *ExportKV  `json:"config,omitempty"`
}

// ExportKV is one key, spelt as calicoctl's KVPair structs marshal
// (capitalised field names; TTL in nanoseconds, always 0 for IPAM).
type ExportKV struct {
	Key   string
	Value json.RawMessage
	TTL   time.Duration
}

// tunnelHandlePrefixes are the handles of a node's own tunnel addresses,
// named after the node ("vxlan-tunnel-addr-node1"), which a rename must
// follow. Calico's migration lists the first three; the IPv6 VXLAN one is
// named the same way and is renamed too.
var tunnelHandlePrefixes = []string{"ipip-tunnel-addr-", "vxlan-tunnel-addr-", "wireguard-tunnel-addr-", "vxlan-v6-tunnel-addr-"}

// ReadExport reads every IPAM key of kv into its section. A key that is
// none of block, affinity, handle or config is an error: the export would
// silently lose it.
func ReadExport(ctx context.Context, kv datastore.KV) (*Export, error) {
	kvs, _, err := kv.List(ctx, Prefix, false)
	if err != nil {
		return nil, fmt.Errorf("list IPAM data: %w", err)
	}
	e := &Export{}
	for _, k := range kvs {
		item := ExportKV{Key: k.Key, Value: json.RawMessage(k.Value)}
		switch {
		case k.Key == configKey:
			e.Config = &item
		case strings.HasPrefix(k.Key, blockPrefix):
			e.Blocks = append(e.Blocks, item)
		case strings.HasPrefix(k.Key, hostPrefix), strings.HasPrefix(k.Key, virtualPrefix):
			e.BlockAffinities = append(e.BlockAffinities, item)
		case strings.HasPrefix(k.Key, handlePrefix):
			e.Handles = append(e.Handles, item)
		default:
			return nil, fmt.Errorf("IPAM key %s is not a block, affinity, handle or config", k.Key)
		}
	}
	return e, nil
}

// Len is the number of keys.
func (e *Export) Len() int {
	n := len(e.BlockAffinities) + len(e.Blocks) + len(e.Handles)
	if e.Config != nil {
		n++
	}
	return n
}

// RenameNodes rewrites the data of every node named in names (old name →
// new name) as Calico's migration does when an etcd node name is not its
// Kubernetes node's name: affinity keys, each block's "affinity", the
// "node" attribute of its allocations, and the handles of tunnel addresses
// (keys and the blocks' handle_ids). A value that needs no change keeps its
// bytes.
func (e *Export) RenameNodes(names map[string]string) error {
	renamed := func(old string) (string, bool) {
		n, ok := names[old]
		return n, ok && n != old
	}
	renameHandle := func(id string) (string, bool) {
		for _, p := range tunnelHandlePrefixes {
			if node, ok := strings.CutPrefix(id, p); ok {
				if n, ok := renamed(node); ok {
					return p + n, true
				}
			}
		}
		return id, false
	}
	for i, a := range e.BlockAffinities {
		node, cidr, ok := parseAffinityKey(a.Key)
		if !ok {
			return fmt.Errorf("bad block affinity key %s", a.Key)
		}
		if n, ok := renamed(node); ok {
			e.BlockAffinities[i].Key = AffinityKey(n, cidr)
		}
	}
	for i, h := range e.Handles {
		id, ok := ipamkv.ParseHandleKey(h.Key)
		if !ok {
			return fmt.Errorf("bad handle key %s", h.Key)
		}
		if n, ok := renameHandle(id); ok {
			e.Handles[i].Key = HandleKey(n)
		}
	}
	for i, b := range e.Blocks {
		var v blockValue
		if err := json.Unmarshal(b.Value, &v); err != nil {
			return fmt.Errorf("decode block %s: %w", b.Key, err)
		}
		changed := false
		if v.Affinity != nil {
			if host, ok := strings.CutPrefix(*v.Affinity, hostAffinityPrefix); ok {
				if n, ok := renamed(host); ok {
					aff := hostAffinityPrefix + n
					v.Affinity, changed = &aff, true
				}
			}
		}
		for j := range v.Attributes {
			at := &v.Attributes[j]
			if n, ok := renamed(at.Secondary[AttrNode]); ok {
				at.Secondary[AttrNode], changed = n, true
			}
			if at.HandleID != nil {
				if id, ok := renameHandle(*at.HandleID); ok {
					at.HandleID, changed = &id, true
				}
			}
		}
		if !changed {
			continue
		}
		data, err := json.Marshal(&v)
		if err != nil {
			return fmt.Errorf("encode block %s: %w", b.Key, err)
		}
		e.Blocks[i].Value = data
	}
	return nil
}

// normalise checks every key and value and returns what is to be stored:
// each value decoded into Calico's struct and encoded again, as calicoctl's
// import does (so the stored JSON is Calico's whatever the file's
// spacing), in calicoctl's order: affinities, blocks, handles, config.
func (e *Export) normalise() ([]datastore.KeyValue, error) {
	var out []datastore.KeyValue
	var bad []error
	add := func(key string, raw json.RawMessage, keyOK bool, v any) {
		if !keyOK {
			bad = append(bad, fmt.Errorf("%s: not an IPAM key of this section", key))
			return
		}
		if err := json.Unmarshal(raw, v); err != nil {
			bad = append(bad, fmt.Errorf("%s: %w", key, err))
			return
		}
		data, err := json.Marshal(v)
		if err != nil {
			bad = append(bad, fmt.Errorf("%s: %w", key, err))
			return
		}
		out = append(out, datastore.KeyValue{Key: key, Value: data})
	}
	for _, a := range e.BlockAffinities {
		_, _, ok := parseAffinityKey(a.Key)
		add(a.Key, a.Value, ok, &affinityValue{})
	}
	for _, b := range e.Blocks {
		cidr, ok := ipamkv.ParseBlockKey(b.Key)
		if ok {
			blk, err := decodeBlock(b.Value)
			switch {
			case err != nil:
				bad = append(bad, fmt.Errorf("%s: %w", b.Key, err))
				continue
			case blk.cidr != cidr:
				bad = append(bad, fmt.Errorf("%s: holds block %s", b.Key, blk.cidr))
				continue
			}
		}
		add(b.Key, b.Value, ok, &blockValue{})
	}
	for _, h := range e.Handles {
		_, ok := ipamkv.ParseHandleKey(h.Key)
		add(h.Key, h.Value, ok, &handleValue{})
	}
	if c := e.Config; c != nil {
		add(c.Key, c.Value, c.Key == configKey, &configValue{})
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%d IPAM entries are invalid, nothing was written: %w", len(bad), errors.Join(bad...))
	}
	return out, nil
}

// Import creates every key of e in kv, each only if absent, and returns
// how many it wrote. Nothing is written when any entry does not parse; a
// key that already exists, or a failed write, is reported and the others
// are still written (calicoctl reports a partial import the same way).
func (e *Export) Import(ctx context.Context, kv datastore.KV) (int, error) {
	kvs, err := e.normalise()
	if err != nil {
		return 0, err
	}
	written := 0
	var errs []error
	for _, k := range kvs {
		res, err := kv.Txn(ctx, datastore.Txn{
			Conds: []datastore.Cond{{Key: k.Key}},
			Ops:   []datastore.Op{{Type: datastore.OpPut, Key: k.Key, Value: k.Value}},
		})
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("create %s: %w", k.Key, err))
		case !res.Succeeded:
			errs = append(errs, fmt.Errorf("create %s: %w", k.Key, datastore.ErrAlreadyExists))
		default:
			written++
		}
	}
	return written, errors.Join(errs...)
}
