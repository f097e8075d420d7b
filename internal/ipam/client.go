package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// PoolSource reads the resources IPAM consults: IPPools, IPReservations,
// Nodes (for nodeSelector labels), WorkloadEndpoints and
// ClusterInformation (for Check). datastore.Store satisfies it.
type PoolSource interface {
	List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error)
	Get(ctx context.Context, kind, namespace, name string) (api.Object, error)
}

// maxAttempts bounds the optimistic retries of one operation. Each lost
// race costs one transaction and hands the loser fresh values, so n
// writers fighting over one block all finish within n attempts; the margin
// covers block claims and borrowing.
const maxAttempts = 200

// Client allocates and releases addresses. See the package documentation.
type Client struct {
	kv     datastore.KV
	store  PoolSource
	logger *slog.Logger
	// now is time.Now; tests pin it.
	now func() time.Time
	// cache, if set, is what allocations start from (see Cache).
	cache *Cache
}

// New returns a Client on the IPAM store kv (a datastore.Store's IPAM()),
// reading pools and the other resources from store. A nil logger discards.
func New(kv datastore.KV, store PoolSource, logger *slog.Logger) *Client {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Client{kv: kv, store: store, logger: logger, now: time.Now}
}

// entry is one key as last read: rev is its revision, 0 if absent.
type entry struct {
	value []byte
	rev   int64
}

// snapshot holds every key an operation has read, updated in place when a
// transaction loses a race and hands back the winners' values.
type snapshot map[string]entry

// read fetches keys into snap in one request.
func (c *Client) read(ctx context.Context, snap snapshot, keys []string) error {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	if len(keys) == 0 {
		return nil
	}
	kvs, err := c.kv.Get(ctx, keys...)
	if err != nil {
		return fmt.Errorf("read IPAM keys: %w", err)
	}
	for _, kv := range kvs {
		snap.setKV(kv)
	}
	return nil
}

// missing lists the keys of keys that snap has not seen.
func (snap snapshot) missing(keys []string) []string {
	var out []string
	for _, k := range keys {
		if _, ok := snap[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// setKV records one key as read (Rev 0: absent).
func (snap snapshot) setKV(kv datastore.KeyValue) {
	if kv.Rev == 0 {
		snap[kv.Key] = entry{}
		return
	}
	snap[kv.Key] = entry{value: kv.Value, rev: kv.Rev}
}

// txn is one optimistic write: conditions on every key it writes (and any
// it relies on), and the writes.
//
// The order of ops matters on the Kubernetes datastore, which applies them
// one by one and undoes the applied ones when a later one loses (see
// datastore.KV.Txn), so that a crash between two of them, or an undo that
// lost to a writer who built on a write, leaves a state the next
// operation repairs or ipam check reports:
//   - an allocation (plan.txn) writes what records an intent (the
//     handle's count, new affinities) and what is right whatever follows
//     (removing stale affinities, the config) before the blocks, which
//     decide and come last: once a block is written another allocator may
//     build on it, so nothing that can lose a race may follow it;
//   - a release (ReleaseByHandle, Release) writes the blocks, then
//     decrements or deletes the handles: a handle left counting addresses
//     its blocks no longer hold is released again or reported;
//   - a released affinity (releaseAffinity) goes after its block, as in
//     Calico: an affinity whose block is gone or belongs to another node is
//     completed or dropped by the node's next allocation.
type txn struct {
	keys []string // compared keys
	ops  []datastore.Op
	// refresh are key prefixes read back when the conditions fail, so the
	// retry starts from current data without another round trip.
	refresh []string
}

func (t *txn) put(key string, value []byte) {
	t.keys = append(t.keys, key)
	t.ops = append(t.ops, datastore.Op{Type: datastore.OpPut, Key: key, Value: value})
}

func (t *txn) del(key string) {
	t.keys = append(t.keys, key)
	t.ops = append(t.ops, datastore.Op{Type: datastore.OpDelete, Key: key})
}

// createIfAbsent writes value at key unless it exists, without making the
// transaction depend on it.
func (t *txn) createIfAbsent(key string, value []byte) {
	t.ops = append(t.ops, datastore.Op{Type: datastore.OpCreateIfAbsent, Key: key, Value: value})
}

// commit runs t against snap's revisions. When another writer got in
// first it updates snap with the current values of the compared keys and
// returns false with the contents of t.refresh.
func (c *Client) commit(ctx context.Context, snap snapshot, t *txn) (bool, [][]datastore.KeyValue, error) {
	keys := slices.Compact(slices.Sorted(slices.Values(t.keys)))
	conds := make([]datastore.Cond, len(keys))
	for i, k := range keys {
		e := snap[k]
		conds[i] = datastore.Cond{Key: k, Rev: e.rev, Value: e.value}
	}
	res, err := c.kv.Txn(ctx, datastore.Txn{Conds: conds, Ops: t.ops, Refresh: t.refresh})
	if err != nil {
		return false, nil, fmt.Errorf("write IPAM data: %w", err)
	}
	if res.Succeeded {
		return true, nil, nil
	}
	for _, kv := range res.Current {
		snap.setKV(kv)
	}
	return false, res.Refreshed, nil
}

// retryAfter is what every compare-and-swap loop does after losing a
// race: give up with ErrConflict once attempt was the last of maxAttempts,
// else sleep a little, growing with the attempt number and jittered so
// that the losers do not collide again in step.
func retryAfter(ctx context.Context, attempt int) error {
	if attempt+1 >= maxAttempts {
		return fmt.Errorf("%w: gave up after %d attempts", ErrConflict, maxAttempts)
	}
	limit := time.Duration(1<<min(attempt, 6)) * time.Millisecond
	d := time.Duration(rand.Int64N(int64(limit)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// env is what one operation knows about the world: resources read through
// the PoolSource and IPAM keys read from etcd.
type env struct {
	node       string
	pools      []api.Pool
	res        reservations
	nodeLabels map[string]string
	cfg        Config
	cfgExists  bool
	snap       snapshot
	// affinities are the node's block affinities (both versions), from the
	// last read of its affinity prefix.
	affinities []netip.Prefix
	// blockKeys[v] is the set of IPv<v> block keys that existed at the last
	// keys-only listing; nil until needed.
	blockKeys map[int]map[string]bool
	// cached: the config, affinities and blocks came from the Cache, and
	// the handles were not read (taken as absent, which the handle's
	// create checks).
	cached bool
}

// loadEnv reads, concurrently, everything an allocation for node needs
// before it can look at blocks: pools, reservations, the node's labels,
// and the IPAM config, the node's affinities and the given handles. With
// fromCache, and a Cache that knows the node, the IPAM keys come from
// the cache instead (env.cached).
func (c *Client) loadEnv(ctx context.Context, node string, fromCache bool, handles ...string) (*env, error) {
	e := &env{node: node, snap: snapshot{}, blockKeys: map[int]map[string]bool{}}
	var cachedAffs []datastore.KeyValue
	if fromCache && c.cache != nil && node != "" {
		cachedAffs, e.cached = c.cache.nodeEnv(node, e.snap)
	}
	var (
		wg                       sync.WaitGroup
		poolErr, resErr, nodeErr error
		kvErr, affErr            error
		poolObjs, resObjs        []api.Object
		nodeObj                  api.Object
		kvs, affs                []datastore.KeyValue
	)
	wg.Add(5)
	go func() {
		defer wg.Done()
		poolObjs, _, poolErr = c.store.List(ctx, "IPPool", "")
	}()
	go func() {
		defer wg.Done()
		resObjs, _, resErr = c.store.List(ctx, "IPReservation", "")
	}()
	_, virtual := virtualHost(node)
	go func() {
		defer wg.Done()
		// A virtual host has no Node: Calico matches pools' node
		// selectors against an unlabelled one.
		if node != "" && !virtual {
			nodeObj, nodeErr = c.store.Get(ctx, "Node", "", node)
		}
	}()
	go func() {
		defer wg.Done()
		if e.cached {
			return
		}
		keys := []string{configKey}
		for _, h := range handles {
			keys = append(keys, HandleKey(h))
		}
		kvs, kvErr = c.kv.Get(ctx, keys...)
	}()
	go func() {
		defer wg.Done()
		if e.cached {
			affs = cachedAffs
		} else if node != "" {
			affs, _, affErr = c.kv.List(ctx, nodeAffinityPrefix(node), false)
		}
	}()
	wg.Wait()
	switch {
	case poolErr != nil:
		return nil, fmt.Errorf("list IP pools: %w", poolErr)
	case resErr != nil:
		return nil, fmt.Errorf("list IP reservations: %w", resErr)
	case nodeErr != nil && !errors.Is(nodeErr, datastore.ErrNotFound):
		return nil, fmt.Errorf("get node %s: %w", node, nodeErr)
	case kvErr != nil:
		return nil, fmt.Errorf("read IPAM config: %w", kvErr)
	case affErr != nil:
		return nil, fmt.Errorf("read block affinities of %s: %w", node, affErr)
	}
	e.pools = parsePools(poolObjs, c.logger)
	e.res = parseReservations(resObjs, c.logger)
	if n, ok := nodeObj.(*api.Node); ok && nodeErr == nil {
		e.nodeLabels = n.Labels
	} else if node != "" && !virtual {
		// Calico refuses to allocate for a node it has no resource for; a
		// CNI ADD that races calico-node's registration is better served
		// by treating the node as unlabelled.
		c.logger.Debug("node resource not found, using no labels", "node", node)
	}

	for _, kv := range kvs {
		e.snap.setKV(kv)
	}
	e.cfg, e.cfgExists = Config{AutoAllocateBlocks: true}, false
	if ce := e.snap[configKey]; ce.rev != 0 {
		cfg, err := decodeConfig(ce.value)
		if err != nil {
			return nil, err
		}
		e.cfg, e.cfgExists = cfg, true
	}
	if node != "" {
		e.setAffinities(affs)
	}
	return e, nil
}

// setAffinities records the node's affinities from a prefix read.
func (e *env) setAffinities(kvs []datastore.KeyValue) {
	e.affinities = e.affinities[:0]
	for _, kv := range kvs {
		node, cidr, ok := parseAffinityKey(kv.Key)
		if !ok || node != e.node {
			continue
		}
		e.affinities = append(e.affinities, cidr)
		e.snap.setKV(kv)
	}
}

// listBlockKeys loads the set of existing IPv<v> block keys (keys only).
func (c *Client) listBlockKeys(ctx context.Context, e *env, v int) (map[string]bool, error) {
	if set, ok := e.blockKeys[v]; ok {
		return set, nil
	}
	kvs, _, err := c.kv.List(ctx, ipamkv.BlockVersionPrefix(v), true)
	if err != nil {
		return nil, fmt.Errorf("list IPv%d blocks: %w", v, err)
	}
	set := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		set[kv.Key] = true
	}
	e.blockKeys[v] = set
	return set, nil
}

// confirmedAffinity is the value of a claimed block's affinity.
var confirmedAffinity = mustJSON(affinityValue{State: stateConfirmed})

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

// affinityState is the state of an affinity value, "" if unreadable.
func affinityState(data []byte) string {
	var v affinityValue
	if json.Unmarshal(data, &v) != nil {
		return ""
	}
	return v.State
}

// decodeHandle parses a handle value; an absent handle is empty.
func decodeHandle(e entry) (handleValue, error) {
	h := handleValue{Block: map[string]int{}}
	if e.rev == 0 {
		return h, nil
	}
	if err := json.Unmarshal(e.value, &h); err != nil {
		return h, fmt.Errorf("decode handle: %w", err)
	}
	if h.Block == nil {
		h.Block = map[string]int{}
	}
	return h, nil
}
