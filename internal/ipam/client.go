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
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// PoolSource reads the resources IPAM consults: IPPools, IPReservations,
// Nodes (for nodeSelector labels), WorkloadEndpoints and
// ClusterInformation (for Check). *datastore.Store satisfies it.
type PoolSource interface {
	List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error)
	Get(ctx context.Context, kind, namespace, name string) (api.Object, error)
}

const (
	// maxAttempts bounds the optimistic retries of one operation. Each
	// lost race costs one transaction and hands the loser fresh values, so
	// n writers fighting over one block all finish within n attempts; the
	// margin covers block claims and borrowing.
	maxAttempts = 200
	// maxTxnOps stays under etcd's default --max-txn-ops (128).
	maxTxnOps = 120
)

// Client allocates and releases addresses. See the package documentation.
type Client struct {
	kv     *clientv3.Client
	store  PoolSource
	logger *slog.Logger
	// now is time.Now; tests pin it.
	now func() time.Time
}

// New returns a Client on the etcd client kv, reading pools and the other
// resources from store. A nil logger discards.
func New(kv *clientv3.Client, store PoolSource, logger *slog.Logger) *Client {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Client{kv: kv, store: store, logger: logger, now: time.Now}
}

// mvccKV is a key-value as etcd returns it.
type mvccKV = mvccpb.KeyValue

// entry is one key as last read: rev is its mod revision, 0 if absent.
type entry struct {
	value []byte
	rev   int64
}

// snapshot holds every key an operation has read, updated in place when a
// transaction loses a race and hands back the winners' values.
type snapshot map[string]entry

// read fetches keys into snap in as few transactions as possible (one,
// unless there are more than maxTxnOps).
func (c *Client) read(ctx context.Context, snap snapshot, keys []string) error {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	for len(keys) > 0 {
		n := min(len(keys), maxTxnOps)
		chunk := keys[:n]
		keys = keys[n:]
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpGet(k)
		}
		resp, err := c.kv.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("read IPAM keys: %w", c.etcdErr(err))
		}
		for i, k := range chunk {
			snap.set(k, resp.Responses[i].GetResponseRange().Kvs)
		}
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

// set records a Get result for key.
func (snap snapshot) set(key string, kvs []*mvccKV) {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			snap[key] = entry{value: kv.Value, rev: kv.ModRevision}
			return
		}
	}
	snap[key] = entry{}
}

// cmp is the condition that key is still as snap saw it.
func (snap snapshot) cmp(key string) clientv3.Cmp {
	if e := snap[key]; e.rev != 0 {
		return clientv3.Compare(clientv3.ModRevision(key), "=", e.rev)
	}
	return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
}

// txn is one optimistic write: conditions on every key it writes (and any
// it relies on), and the writes.
type txn struct {
	keys []string // compared keys
	ops  []clientv3.Op
	// refresh are extra reads returned when the conditions fail, so the
	// retry starts from current data without another round trip.
	refresh []clientv3.Op
}

func (t *txn) put(key string, value []byte) {
	t.keys = append(t.keys, key)
	t.ops = append(t.ops, clientv3.OpPut(key, string(value)))
}

func (t *txn) del(key string) {
	t.keys = append(t.keys, key)
	t.ops = append(t.ops, clientv3.OpDelete(key))
}

// commit runs t against snap's revisions. When another writer got in
// first it updates snap with the current values of the compared keys and
// returns false with the key-values read by t.refresh.
func (c *Client) commit(ctx context.Context, snap snapshot, t *txn) (bool, [][]*mvccKV, error) {
	keys := slices.Compact(slices.Sorted(slices.Values(t.keys)))
	cmps := make([]clientv3.Cmp, len(keys))
	for i, k := range keys {
		cmps[i] = snap.cmp(k)
	}
	var elseOps []clientv3.Op
	inline := len(keys)+len(t.refresh) <= maxTxnOps
	if inline {
		for _, k := range keys {
			elseOps = append(elseOps, clientv3.OpGet(k))
		}
		elseOps = append(elseOps, t.refresh...)
	}
	resp, err := c.kv.Txn(ctx).If(cmps...).Then(t.ops...).Else(elseOps...).Commit()
	if err != nil {
		return false, nil, fmt.Errorf("write IPAM data: %w", c.etcdErr(err))
	}
	if resp.Succeeded {
		return true, nil, nil
	}
	var refreshed [][]*mvccKV
	if inline {
		for i, k := range keys {
			snap.set(k, resp.Responses[i].GetResponseRange().Kvs)
		}
		for _, r := range resp.Responses[len(keys):] {
			refreshed = append(refreshed, r.GetResponseRange().Kvs)
		}
		return false, refreshed, nil
	}
	// Too many keys to read back in the same transaction: a second round
	// trip, only on this rare path.
	if err := c.read(ctx, snap, keys); err != nil {
		return false, nil, err
	}
	for _, op := range t.refresh {
		r, err := c.kv.Do(ctx, op)
		if err != nil {
			return false, nil, fmt.Errorf("read IPAM keys: %w", c.etcdErr(err))
		}
		refreshed = append(refreshed, r.Get().Kvs)
	}
	return false, refreshed, nil
}

// etcdErr names the etcd endpoints in a failed request's error, as the
// datastore's errors do: "etcd at URL: rpc error: ... Unavailable" tells
// an operator reading a pod's events which service to look at.
func (c *Client) etcdErr(err error) error {
	return fmt.Errorf("etcd at %s: %w", strings.Join(c.kv.Endpoints(), ","), err)
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
}

// loadEnv reads, concurrently, everything an allocation for node needs
// before it can look at blocks: pools, reservations, the node's labels,
// and the IPAM config, the node's affinities and the given handles.
func (c *Client) loadEnv(ctx context.Context, node string, handles ...string) (*env, error) {
	e := &env{node: node, snap: snapshot{}, blockKeys: map[int]map[string]bool{}}
	var (
		wg                       sync.WaitGroup
		poolErr, resErr, nodeErr error
		kvErr                    error
		poolObjs, resObjs        []api.Object
		nodeObj                  api.Object
		kvResp                   *clientv3.TxnResponse
	)
	wg.Add(4)
	go func() {
		defer wg.Done()
		poolObjs, _, poolErr = c.store.List(ctx, "IPPool", "")
	}()
	go func() {
		defer wg.Done()
		resObjs, _, resErr = c.store.List(ctx, "IPReservation", "")
	}()
	go func() {
		defer wg.Done()
		if node != "" {
			nodeObj, nodeErr = c.store.Get(ctx, "Node", "", node)
		}
	}()
	go func() {
		defer wg.Done()
		ops := []clientv3.Op{clientv3.OpGet(configKey)}
		if node != "" {
			ops = append(ops, clientv3.OpGet(nodeAffinityPrefix(node), clientv3.WithPrefix()))
		}
		for _, h := range handles {
			ops = append(ops, clientv3.OpGet(HandleKey(h)))
		}
		kvResp, kvErr = c.kv.Txn(ctx).Then(ops...).Commit()
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
		return nil, fmt.Errorf("read IPAM config: %w", c.etcdErr(kvErr))
	}
	e.pools = parsePools(poolObjs, c.logger)
	e.res = parseReservations(resObjs, c.logger)
	if n, ok := nodeObj.(*api.Node); ok && nodeErr == nil {
		e.nodeLabels = n.Labels
	} else if node != "" {
		// Calico refuses to allocate for a node it has no resource for; a
		// CNI ADD that races calico-node's registration is better served
		// by treating the node as unlabelled.
		c.logger.Debug("node resource not found, using no labels", "node", node)
	}

	rs := kvResp.Responses
	e.snap.set(configKey, rs[0].GetResponseRange().Kvs)
	e.cfg, e.cfgExists = Config{AutoAllocateBlocks: true}, false
	if ce := e.snap[configKey]; ce.rev != 0 {
		cfg, err := decodeConfig(ce.value)
		if err != nil {
			return nil, err
		}
		e.cfg, e.cfgExists = cfg, true
	}
	i := 1
	if node != "" {
		e.setAffinities(rs[1].GetResponseRange().Kvs)
		i = 2
	}
	for _, h := range handles {
		e.snap.set(HandleKey(h), rs[i].GetResponseRange().Kvs)
		i++
	}
	return e, nil
}

// setAffinities records the node's affinities from a prefix read.
func (e *env) setAffinities(kvs []*mvccKV) {
	e.affinities = e.affinities[:0]
	for _, kv := range kvs {
		node, cidr, ok := parseAffinityKey(string(kv.Key))
		if !ok || node != e.node {
			continue
		}
		e.affinities = append(e.affinities, cidr)
		e.snap[string(kv.Key)] = entry{value: kv.Value, rev: kv.ModRevision}
	}
}

// listBlockKeys loads the set of existing IPv<v> block keys (keys only).
func (c *Client) listBlockKeys(ctx context.Context, e *env, v int) (map[string]bool, error) {
	if set, ok := e.blockKeys[v]; ok {
		return set, nil
	}
	resp, err := c.kv.Get(ctx, blockPrefixFor(v), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list IPv%d blocks: %w", v, c.etcdErr(err))
	}
	set := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		set[string(kv.Key)] = true
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
