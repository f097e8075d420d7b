package ipam

import (
	"context"
	"strings"
	"sync"

	"github.com/projectcalico/calico-node/internal/datastore"
)

// Cache is a long-lived process's memory of the IPAM keys it last read
// or wrote: blocks, block affinities, handles and the IPAM config, each
// with its revision. A Client using one (UseCache) starts an allocation for a node
// from what the cache holds of the node's affinities and blocks instead of
// reading them, which on the Kubernetes datastore saves two of the four
// API round trips made under the node's IPAM lock (the IPAM keys' reads
// and GET ipamblocks).
//
// The cache never decides anything: every write stays conditional on the
// revision of each key it changes, now the cached one, so a block someone
// else changed since (another node borrowing, a plugin process, calicoctl)
// fails the write and the allocation starts again from fresh reads, as
// after any lost race. What the cache can vouch for is kept narrow (see
// AutoAssign): an allocation from the cache only ever writes the node's
// own blocks and the handle, created conditional on its absence.
//
// It is kept fresh by everything the Client's reads and writes return
// (the datastore hands back the revision each write left,
// datastore.TxnResult.Written); a key whose outcome it cannot know is
// forgotten. Nothing is watched: a change by another writer shows as one
// lost conditional write.
//
// A Cache is safe for concurrent use and may be shared by the Clients of
// one datastore (not of two: revisions are per datastore).
type Cache struct {
	mu   sync.Mutex
	keys map[string]entry
	// nodes holds the nodes whose affinities keys holds completely (from
	// a list of the node's affinity prefix and the writes since).
	nodes map[string]bool

	// qmu guards queues: per node, the AutoAssign calls waiting for a
	// batch (batch.go).
	qmu    sync.Mutex
	queues map[string]*nodeQueue
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{keys: map[string]entry{}, nodes: map[string]bool{}, queues: map[string]*nodeQueue{}}
}

// UseCache makes c keep cache up to date and allocate from it (see
// Cache); it returns c. Call it before c is used.
func (c *Client) UseCache(cache *Cache) *Client {
	c.cache = cache
	c.kv = cachingKV{KV: c.kv, cache: cache}
	return c
}

// cacheable reports the keys a Cache holds: all of IPAM's. Handles come
// and go with the node's pods: the one an ADD created is what its DEL
// releases, without reading it.
func cacheable(key string) bool {
	return strings.HasPrefix(key, Prefix)
}

// put records kv as read or written, unless the cache holds a later
// revision of it already (a slow read answering after a write).
func (m *Cache) put(kv datastore.KeyValue) {
	if !cacheable(kv.Key) {
		return
	}
	if kv.Rev == 0 {
		// Absent. A node's affinities stay complete without it.
		delete(m.keys, kv.Key)
		return
	}
	if old, ok := m.keys[kv.Key]; ok && old.rev > kv.Rev {
		return
	}
	m.keys[kv.Key] = entry{value: kv.Value, rev: kv.Rev}
}

// forget drops key; an affinity leaves its node's affinities incomplete.
func (m *Cache) forget(key string) {
	delete(m.keys, key)
	if node, _, ok := parseAffinityKey(key); ok {
		delete(m.nodes, node)
	}
}

// listed records the complete contents of prefix.
func (m *Cache) listed(prefix string, kvs []datastore.KeyValue) {
	if !cacheable(prefix) {
		return
	}
	seen := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		m.put(kv)
		seen[kv.Key] = true
	}
	for key := range m.keys {
		if strings.HasPrefix(key, prefix) && !seen[key] {
			delete(m.keys, key)
		}
	}
	if owner, ok := affinityPrefixOwner(prefix); ok {
		m.nodes[owner] = true
	}
}

// affinityPrefixOwner is the owner whose nodeAffinityPrefix prefix is.
func affinityPrefixOwner(prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(prefix, hostPrefix)
	virtual := ""
	if !ok {
		if rest, ok = strings.CutPrefix(prefix, virtualPrefix); !ok {
			return "", false
		}
		virtual = virtualAffinityPrefix
	}
	owner, ok := strings.CutSuffix(rest, "/")
	if !ok || owner == "" || strings.Contains(owner, "/") {
		return "", false
	}
	return virtual + owner, true
}

// nodeEnv fills snap with what the cache holds for an allocation on node:
// the IPAM config (or its absence), the node's affinities and the blocks
// of those it has. It returns the affinities, and false when the cache
// does not know the config or the node's complete affinities.
func (m *Cache) nodeEnv(node string, snap snapshot) ([]datastore.KeyValue, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cfg, ok := m.keys[configKey]
	if !ok || !m.nodes[node] {
		return nil, false
	}
	snap[configKey] = cfg
	prefix := nodeAffinityPrefix(node)
	var affs []datastore.KeyValue
	for key, e := range m.keys {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		affs = append(affs, datastore.KeyValue{Key: key, Value: e.value, Rev: e.rev})
		if _, cidr, ok := parseAffinityKey(key); ok {
			if b, ok := m.keys[BlockKey(cidr)]; ok {
				snap[BlockKey(cidr)] = b
			}
		}
	}
	return affs, true
}

// fill copies into snap what the cache holds of keys; a nil Cache holds
// nothing.
func (m *Cache) fill(snap snapshot, keys []string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, key := range keys {
		if e, ok := m.keys[key]; ok {
			snap[key] = e
		}
	}
}

// cachingKV is the KV of a Client with a Cache: every call goes to the
// datastore, and what it returns is recorded.
type cachingKV struct {
	datastore.KV
	cache *Cache
}

func (k cachingKV) Get(ctx context.Context, keys ...string) ([]datastore.KeyValue, error) {
	kvs, err := k.KV.Get(ctx, keys...)
	if err == nil {
		k.cache.mu.Lock()
		for _, kv := range kvs {
			k.cache.put(kv)
		}
		k.cache.mu.Unlock()
	}
	return kvs, err
}

func (k cachingKV) List(ctx context.Context, prefix string, keysOnly bool) ([]datastore.KeyValue, int64, error) {
	kvs, rev, err := k.KV.List(ctx, prefix, keysOnly)
	if err == nil && !keysOnly {
		k.cache.mu.Lock()
		k.cache.listed(prefix, kvs)
		k.cache.mu.Unlock()
	}
	return kvs, rev, err
}

func (k cachingKV) Snapshot(ctx context.Context, prefixes ...string) ([][]datastore.KeyValue, error) {
	lists, err := k.KV.Snapshot(ctx, prefixes...)
	if err == nil {
		k.cache.mu.Lock()
		for i, p := range prefixes {
			k.cache.listed(p, lists[i])
		}
		k.cache.mu.Unlock()
	}
	return lists, err
}

func (k cachingKV) Txn(ctx context.Context, t datastore.Txn) (datastore.TxnResult, error) {
	res, err := k.KV.Txn(ctx, t)
	k.cache.mu.Lock()
	defer k.cache.mu.Unlock()
	switch {
	case err != nil:
		// Applied, partly applied or not at all: unknown.
		for _, op := range t.Ops {
			k.cache.forget(op.Key)
		}
	case res.Succeeded:
		written := make(map[string]bool, len(res.Written))
		for _, kv := range res.Written {
			written[kv.Key] = true
			k.cache.put(kv)
		}
		for _, op := range t.Ops {
			if !written[op.Key] {
				k.cache.forget(op.Key)
			}
		}
	default:
		for _, kv := range res.Current {
			k.cache.put(kv)
		}
		for i, p := range t.Refresh {
			if i < len(res.Refreshed) {
				k.cache.listed(p, res.Refreshed[i])
			}
		}
	}
	return res, err
}
