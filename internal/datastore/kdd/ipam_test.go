package kdd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// ipamCluster is a kube-apiserver with Calico's CRDs, shared by the IPAM
// subtests; each starts by deleting every IPAM object.
type ipamCluster struct {
	*kubetest.Cluster
	ctx context.Context
}

// TestIPAMOnKubernetes runs the IPAM store against a real kube-apiserver.
func TestIPAMOnKubernetes(t *testing.T) {
	c := kubetest.Start(t, kubetest.WithoutControllerManager())
	c.InstallCalicoCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k := &ipamCluster{Cluster: c, ctx: ctx}
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *ipamCluster)
	}{
		{"objects as Calico stores them", testIPAMGolden},
		{"transactions", testIPAMTxn},
		{"undo when a concurrent writer wins", testIPAMUndoConcurrent},
		{"two nodes claim one block", testIPAMClaimRace},
		{"a failed allocation leaves nothing", testIPAMFailedAllocation},
		{"objects Calico marked deleted", testIPAMMarkedDeleted},
		{"long node names and IPv6", testIPAMNamesOnServer},
		{"watch", testIPAMWatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k.wipe(t)
			tc.run(t, k)
		})
	}
}

var ipamPlurals = []string{"ipamblocks", "blockaffinities", "ipamhandles", "ipamconfigs"}

func (k *ipamCluster) wipe(t *testing.T) {
	t.Helper()
	for _, p := range ipamPlurals {
		if err := k.Client.CoreV1().RESTClient().Delete().AbsPath("/apis/crd.projectcalico.org/v1/" + p).Do(k.ctx).Error(); err != nil {
			t.Fatalf("delete all %s: %v", p, err)
		}
	}
}

// open connects a Store, as a separate process would.
func (k *ipamCluster) open(t *testing.T) *kdd.Store {
	t.Helper()
	s, err := kdd.New(k.ctx, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{Kubeconfig: k.Kubeconfig}})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// raw is the JSON of a collection or object as the API server returns it.
func (k *ipamCluster) raw(t *testing.T, path string) []byte {
	t.Helper()
	data, err := k.Client.CoreV1().RESTClient().Get().AbsPath("/apis/crd.projectcalico.org/v1/" + path).DoRaw(k.ctx)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return data
}

// pools is the PoolSource of the IPAM client in these tests: the pools
// given, no nodes (an unregistered node has no labels), nothing else.
type pools []api.Object

func newPools(t *testing.T, cidr string, blockSize int) pools {
	t.Helper()
	info, _ := api.LookupKind("IPPool")
	p, err := datastore.Prepare("create", info, &api.IPPool{
		TypeMeta:   api.TypeMeta{Kind: "IPPool", APIVersion: api.GroupVersion},
		ObjectMeta: api.ObjectMeta{Name: "pool1", ResourceVersion: "1"},
		Spec:       api.IPPoolSpec{CIDR: cidr, BlockSize: blockSize},
	})
	if err != nil {
		t.Fatal(err)
	}
	return pools{p}
}

func (p pools) List(_ context.Context, kind, _ string) ([]api.Object, int64, error) {
	if kind == "IPPool" {
		return p, 1, nil
	}
	return nil, 1, nil
}

func (p pools) Get(_ context.Context, kind, ns, name string) (api.Object, error) {
	return nil, &datastore.Error{Op: "get", Kind: kind, Namespace: ns, Name: name, Err: datastore.ErrNotFound}
}

const (
	refHandle = "k8s-pod-network.0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	refBlock  = "/calico/ipam/v2/assignment/ipv4/block/10.244.166.128-26"
)

// testIPAMGolden: the CNI ADD and DEL of the reference capture, through
// this package's IPAM, leave the objects real Calico v3.31 left, but for
// uids, times, resourceVersions and generations, and with the sequence
// numbers (seeded from the clock) compared relative to the first.
func testIPAMGolden(t *testing.T, k *ipamCluster) {
	s := k.open(t)
	// The pool is the block itself, so that the block claimed is the
	// reference's (which block Calico picks in a bigger pool is random).
	c := ipam.New(s.IPAM(), newPools(t, "10.244.166.128/26", 26), nil)
	add := func(want string) {
		t.Helper()
		v4, _, err := c.AutoAssign(k.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: refHandle, Node: "node1",
			Attrs: map[string]string{ipam.AttrNamespace: "demo", ipam.AttrPod: "web-0"}})
		if err != nil || len(v4) != 1 || v4[0].String() != want {
			t.Fatalf("AutoAssign = %v, %v; want %s", v4, err, want)
		}
	}
	// The reference's first ADD failed after allocating .128 and released
	// it; the second got .129.
	add("10.244.166.128/32")
	if err := c.ReleaseByHandle(k.ctx, refHandle); err != nil {
		t.Fatal(err)
	}
	add("10.244.166.129/32")
	k.compareGolden(t, "after-add")
	if err := c.ReleaseByHandle(k.ctx, refHandle); err != nil {
		t.Fatal(err)
	}
	k.compareGolden(t, "after-del")
}

func (k *ipamCluster) compareGolden(t *testing.T, step string) {
	t.Helper()
	kinds := map[string]string{"ipamblocks": "04-ipamblocks", "blockaffinities": "04-blockaffinities", "ipamhandles": "04-ipamhandles", "ipamconfigs": "04-ipamconfigs"}
	for _, plural := range ipamPlurals {
		ref, err := os.ReadFile(filepath.Join("testdata", "calico-3.31-kdd", kinds[plural]+"."+step+".crd.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		refJSON, err := yaml.YAMLToJSON(ref)
		if err != nil {
			t.Fatal(err)
		}
		want, got := normalizeList(t, refJSON), normalizeList(t, k.raw(t, plural))
		if !reflect.DeepEqual(got, want) {
			g, _ := json.MarshalIndent(got, "", "  ")
			w, _ := json.MarshalIndent(want, "", "  ")
			t.Errorf("%s %s differ from Calico's:\n got %s\nwant %s", plural, step, g, w)
		}
	}
}

// normalizeList returns a list's items with what differs between any two
// runs taken out.
func normalizeList(t *testing.T, data []byte) []any {
	t.Helper()
	var list struct {
		Items []map[string]any `json:"items"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&list); err != nil {
		t.Fatalf("decode list: %v", err)
	}
	out := make([]any, 0, len(list.Items))
	for _, item := range list.Items {
		meta := item["metadata"].(map[string]any)
		for _, f := range []string{"uid", "creationTimestamp", "resourceVersion", "generation", "managedFields"} {
			delete(meta, f)
		}
		if spec, ok := item["spec"].(map[string]any); ok && item["kind"] == "IPAMBlock" {
			relativeSequenceNumbers(t, spec)
			for _, a := range spec["attributes"].([]any) {
				if sec, ok := a.(map[string]any)["secondary"].(map[string]any); ok && sec["timestamp"] != nil {
					sec["timestamp"] = "<time>"
				}
			}
		}
		out = append(out, item)
	}
	return out
}

// relativeSequenceNumbers replaces a block's sequence numbers by their
// distance from the smallest.
func relativeSequenceNumbers(t *testing.T, spec map[string]any) {
	t.Helper()
	num := func(v any) uint64 {
		n, err := strconv.ParseUint(string(v.(json.Number)), 10, 64)
		if err != nil {
			t.Fatalf("sequence number %v: %v", v, err)
		}
		return n
	}
	base := num(spec["sequenceNumber"])
	perOrdinal, _ := spec["sequenceNumberForAllocation"].(map[string]any)
	for _, v := range perOrdinal {
		base = min(base, num(v))
	}
	spec["sequenceNumber"] = num(spec["sequenceNumber"]) - base
	for k, v := range perOrdinal {
		perOrdinal[k] = num(v) - base
	}
}

func put(key, value string) datastore.Op {
	return datastore.Op{Type: datastore.OpPut, Key: key, Value: []byte(value)}
}

func get1(t *testing.T, kv datastore.KV, ctx context.Context, key string) datastore.KeyValue {
	t.Helper()
	kvs, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return kvs[0]
}

func mustTxn(t *testing.T, kv datastore.KV, ctx context.Context, txn datastore.Txn) datastore.TxnResult {
	t.Helper()
	res, err := kv.Txn(ctx, txn)
	if err != nil {
		t.Fatalf("txn: %v", err)
	}
	return res
}

const (
	blockA  = "/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-30"
	handleH = "/calico/ipam/v2/handle/h1"
	handleJ = "/calico/ipam/v2/handle/h2"
	affC    = "/calico/ipam/v2/host/node1/ipv4/block/10.0.0.0-30"
	cfgKey  = "/calico/ipam/v2/config"
)

func blockValue(seq int, affinity string) string {
	return fmt.Sprintf(`{"cidr":"10.0.0.0/30","affinity":"host:%s","allocations":[null,null,null,null],"unallocated":[0,1,2,3],"attributes":[],"sequenceNumber":%d,"sequenceNumberForAllocation":{},"deleted":false}`, affinity, seq)
}

// testIPAMTxn: the documented semantics of datastore.KV.Txn, one by one.
func testIPAMTxn(t *testing.T, k *ipamCluster) {
	s := k.open(t)
	kv, ctx := s.IPAM(), k.ctx
	if got := kv.String(); got != "Kubernetes API at "+k.URL {
		t.Errorf("String() = %q", got)
	}

	// Creates, conditional on absence.
	res := mustTxn(t, kv, ctx, datastore.Txn{
		Conds: []datastore.Cond{{Key: blockA}, {Key: handleH}, {Key: affC}},
		Ops:   []datastore.Op{put(handleH, `{"block":{"10.0.0.0/30":1},"deleted":false}`), put(affC, `{"state":"confirmed","deleted":false}`), put(blockA, blockValue(1, "node1"))},
	})
	if !res.Succeeded {
		t.Fatalf("creates: %+v", res)
	}
	a, h, c := get1(t, kv, ctx, blockA), get1(t, kv, ctx, handleH), get1(t, kv, ctx, affC)
	if string(a.Value) != blockValue(1, "node1") || a.Rev == 0 || h.Rev == 0 || string(c.Value) != `{"state":"confirmed","deleted":false}` {
		t.Fatalf("after creates: %+v %+v %+v", a, h, c)
	}
	// A create of an existing key fails and writes nothing.
	res = mustTxn(t, kv, ctx, datastore.Txn{
		Conds:   []datastore.Cond{{Key: handleJ}, {Key: blockA}},
		Ops:     []datastore.Op{put(handleJ, `{"block":{},"deleted":false}`), put(blockA, blockValue(9, "node1"))},
		Refresh: []string{"/calico/ipam/v2/host/node1/"},
	})
	if res.Succeeded || len(res.Current) != 2 || res.Current[0].Rev != 0 || !same(res.Current[1], a) ||
		len(res.Refreshed) != 1 || len(res.Refreshed[0]) != 1 || !same(res.Refreshed[0][0], c) {
		t.Errorf("create of an existing key: %+v, want failure with current values", res)
	}
	if got := get1(t, kv, ctx, handleJ); got.Rev != 0 {
		t.Errorf("the failed Txn's first create was not undone: %+v", got)
	}
	// A condition on a key no op writes is read first: when it fails,
	// nothing is written.
	res = mustTxn(t, kv, ctx, datastore.Txn{
		Conds: []datastore.Cond{{Key: affC, Rev: c.Rev + 1000}, {Key: handleJ}},
		Ops:   []datastore.Op{put(handleJ, `{"block":{},"deleted":false}`)},
	})
	if res.Succeeded || !same(res.Current[0], c) || get1(t, kv, ctx, handleJ).Rev != 0 {
		t.Errorf("stale condition on a compared key: %+v", res)
	}

	// Update, delete and create, then a write that loses: all undone, in
	// reverse, each to what it was.
	res = mustTxn(t, kv, ctx, datastore.Txn{
		Conds: []datastore.Cond{
			{Key: blockA, Rev: a.Rev, Value: a.Value},
			{Key: affC, Rev: c.Rev, Value: c.Value},
			{Key: handleJ},
			{Key: handleH, Rev: h.Rev + 1000},
		},
		Ops: []datastore.Op{
			put(blockA, blockValue(2, "node2")),
			{Type: datastore.OpDelete, Key: affC},
			put(handleJ, `{"block":{},"deleted":false}`),
			{Type: datastore.OpDelete, Key: handleH},
		},
	})
	if res.Succeeded {
		t.Fatalf("a Txn whose last write has a stale condition succeeded")
	}
	a2, c2, j2, h2 := get1(t, kv, ctx, blockA), get1(t, kv, ctx, affC), get1(t, kv, ctx, handleJ), get1(t, kv, ctx, handleH)
	if string(a2.Value) != string(a.Value) || string(c2.Value) != string(c.Value) || j2.Rev != 0 || !same(h2, h) {
		t.Errorf("after the undo: block %s, affinity %s, created handle %+v, handle %+v; want all as before", a2.Value, c2.Value, j2, h2)
	}
	if len(res.Current) != 4 || !same(res.Current[0], a2) || !same(res.Current[1], c2) || res.Current[2].Rev != 0 || !same(res.Current[3], h2) {
		t.Errorf("current values %+v, want the keys as they are now", res.Current)
	}
	// Labels of a re-created affinity are Calico's.
	if obj := string(k.raw(t, "blockaffinities/node1-10-0-0-0-30")); !strings.Contains(obj, `"projectcalico.org/ip-version":"4"`) {
		t.Errorf("re-created affinity: %s", obj)
	}

	// Create-if-absent never fails a Txn and keeps what exists;
	// unconditional ops write whatever is stored.
	res = mustTxn(t, kv, ctx, datastore.Txn{Ops: []datastore.Op{
		{Type: datastore.OpCreateIfAbsent, Key: cfgKey, Value: []byte(`{"auto_allocate_blocks":true}`)},
		{Type: datastore.OpCreateIfAbsent, Key: blockA, Value: []byte(blockValue(7, "node7"))},
		put(handleH, `{"block":{"10.0.0.0/30":2},"deleted":false}`),
		{Type: datastore.OpDelete, Key: affC},
		{Type: datastore.OpDelete, Key: handleJ},
	}})
	if !res.Succeeded {
		t.Fatalf("create-if-absent and unconditional ops: %+v", res)
	}
	if got := get1(t, kv, ctx, cfgKey); string(got.Value) != `{"auto_allocate_blocks":true}` {
		t.Errorf("config = %s", got.Value)
	}
	if got := get1(t, kv, ctx, blockA); string(got.Value) != string(a2.Value) {
		t.Errorf("create-if-absent overwrote the block: %s", got.Value)
	}
	if got := get1(t, kv, ctx, handleH); string(got.Value) != `{"block":{"10.0.0.0/30":2},"deleted":false}` {
		t.Errorf("unconditional put: %s", got.Value)
	}
	if got := get1(t, kv, ctx, affC); got.Rev != 0 {
		t.Errorf("unconditional delete left %+v", got)
	}

	// List and Snapshot by prefix; keys only.
	all, rev, err := kv.List(ctx, "/calico/ipam/v2/", true)
	if err != nil || rev == 0 {
		t.Fatalf("list: %v (rev %d)", err, rev)
	}
	var keys []string
	for _, e := range all {
		if e.Value != nil {
			t.Errorf("keys-only list returned the value of %s", e.Key)
		}
		keys = append(keys, e.Key)
	}
	if want := []string{blockA, cfgKey, handleH}; !reflect.DeepEqual(keys, want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	snap, err := kv.Snapshot(ctx, "/calico/ipam/v2/assignment/ipv6/", "/calico/ipam/v2/handle/")
	if err != nil || len(snap) != 2 || len(snap[0]) != 0 || len(snap[1]) != 1 || snap[1][0].Key != handleH || snap[1][0].Value == nil {
		t.Errorf("snapshot = %+v, %v", snap, err)
	}
	// A value that is not Calico's JSON is an error, and nothing is written.
	if _, err := kv.Txn(ctx, datastore.Txn{Ops: []datastore.Op{put(handleJ, `{"block":{},"deleted":false}`), put(cfgKey, "{not json")}}); err == nil {
		t.Error("Txn stored a config that is not JSON")
	}
	if got := get1(t, kv, ctx, handleJ); got.Rev != 0 {
		t.Errorf("the erroring Txn's first write stayed: %+v", got)
	}
}

// testIPAMUndoConcurrent: another process writes between two writes of a
// Txn. When it takes a key the Txn writes later, the Txn loses and its
// earlier writes are undone; when it builds on a key the Txn wrote, that
// key keeps the other process's value.
func testIPAMUndoConcurrent(t *testing.T, k *ipamCluster) {
	s, other := k.open(t), k.open(t)
	kv, okv, ctx := s.IPAM(), other.IPAM(), k.ctx
	mustTxn(t, okv, ctx, datastore.Txn{Ops: []datastore.Op{put(blockA, blockValue(1, "node1"))}})
	a := get1(t, kv, ctx, blockA)

	var hook func(ctx context.Context, i int, key string) error
	kdd.SetIPAMWriteHook(s, func(ctx context.Context, i int, key string) error { return hook(ctx, i, key) })
	defer kdd.SetIPAMWriteHook(s, nil)

	// The other process updates the block just before this Txn does.
	hook = func(ctx context.Context, i int, key string) error {
		if key == blockA {
			mustTxn(t, okv, ctx, datastore.Txn{Ops: []datastore.Op{put(blockA, blockValue(5, "node1"))}})
		}
		return nil
	}
	res := mustTxn(t, kv, ctx, datastore.Txn{
		Conds: []datastore.Cond{{Key: handleH}, {Key: blockA, Rev: a.Rev, Value: a.Value}},
		Ops:   []datastore.Op{put(handleH, `{"block":{"10.0.0.0/30":1},"deleted":false}`), put(blockA, blockValue(2, "node1"))},
	})
	if res.Succeeded {
		t.Fatal("the Txn won against a block written since its read")
	}
	if got := get1(t, kv, ctx, handleH); got.Rev != 0 {
		t.Errorf("handle of the lost Txn left: %s", got.Value)
	}
	cur := get1(t, kv, ctx, blockA)
	if string(cur.Value) != blockValue(5, "node1") || !same(res.Current[1], cur) {
		t.Errorf("block %s, reported current %+v; want the other writer's", cur.Value, res.Current)
	}

	// The other process builds on the handle this Txn created, then this
	// Txn loses: the handle keeps the other process's value.
	hook = func(ctx context.Context, i int, key string) error {
		if key == blockA {
			mustTxn(t, okv, ctx, datastore.Txn{Ops: []datastore.Op{put(handleH, `{"block":{"10.0.0.0/30":3},"deleted":false}`)}})
		}
		return nil
	}
	res = mustTxn(t, kv, ctx, datastore.Txn{
		Conds: []datastore.Cond{{Key: handleH}, {Key: blockA, Rev: a.Rev, Value: a.Value}},
		Ops:   []datastore.Op{put(handleH, `{"block":{"10.0.0.0/30":1},"deleted":false}`), put(blockA, blockValue(2, "node1"))},
	})
	if got := get1(t, kv, ctx, handleH); res.Succeeded || string(got.Value) != `{"block":{"10.0.0.0/30":3},"deleted":false}` {
		t.Errorf("handle %s (succeeded %v), want the other writer's value kept", got.Value, res.Succeeded)
	}

	// Through IPAM: another node takes an address of the same block
	// between this allocation's handle write and its block write. The
	// allocation retries and gets another address; every handle matches
	// its block.
	s2 := k.open(t)
	k.wipe(t)
	p := newPools(t, "10.1.0.0/30", 30)
	mine, theirs := ipam.New(s2.IPAM(), p, nil), ipam.New(okv, p, nil)
	if _, _, err := mine.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "first", Node: "node1"}); err != nil {
		t.Fatal(err)
	}
	var raced atomic.Bool
	kdd.SetIPAMWriteHook(s2, func(ctx context.Context, i int, key string) error {
		if strings.Contains(key, "/assignment/") && raced.CompareAndSwap(false, true) {
			if _, _, err := theirs.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "theirs", Node: "node2"}); err != nil {
				t.Errorf("concurrent allocation: %v", err)
			}
		}
		return nil
	})
	v4, _, err := mine.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "mine", Node: "node1"})
	if err != nil || !raced.Load() {
		t.Fatalf("allocation racing another: %v, %v (raced %v)", v4, err, raced.Load())
	}
	got := map[string][]netip.Addr{}
	for _, h := range []string{"first", "mine", "theirs"} {
		ips, err := mine.IPsByHandle(ctx, h)
		if err != nil || len(ips) != 1 {
			t.Errorf("handle %s holds %v (%v), want one address", h, ips, err)
		}
		got[h] = ips
	}
	if len(got["mine"]) == 1 && (got["mine"][0] != v4[0].Addr() || got["mine"][0] == got["theirs"][0]) {
		t.Errorf("allocations %v, returned %v", got, v4)
	}
	rep, err := mine.Check(ctx)
	if err != nil || len(rep.Allocations) != 3 || len(rep.LeakedHandles)+len(rep.MissingHandles) != 0 {
		t.Errorf("check: %d allocations, leaked handles %v, missing handles %v (%v)", len(rep.Allocations), rep.LeakedHandles, rep.MissingHandles, err)
	}
}

// testIPAMClaimRace: two nodes, as two processes, claim the only block of
// a pool at once: node2 claims it between node1's first writes and its
// block write. node2 wins and keeps the block; node1's claim loses, its
// earlier writes are undone, and it retries: it borrows an address of
// node2's block. Neither address is handed out twice, node1 keeps no
// affinity to the block, and IPAM checks clean.
func testIPAMClaimRace(t *testing.T, k *ipamCluster) {
	s1, s2 := k.open(t), k.open(t)
	p := newPools(t, "10.3.0.0/30", 30)
	node1, node2 := ipam.New(s1.IPAM(), p, nil), ipam.New(s2.IPAM(), p, nil)
	block := netip.MustParsePrefix("10.3.0.0/30")
	var raced atomic.Bool
	var theirs netip.Addr
	kdd.SetIPAMWriteHook(s1, func(ctx context.Context, i int, key string) error {
		if key == ipam.BlockKey(block) && raced.CompareAndSwap(false, true) {
			v4, _, err := node2.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "theirs", Node: "node2"})
			if err != nil || len(v4) != 1 {
				t.Errorf("node2's claim: %v, %v", v4, err)
				return nil
			}
			theirs = v4[0].Addr()
		}
		return nil
	})
	v4, _, err := node1.AutoAssign(k.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "mine", Node: "node1"})
	if err != nil || len(v4) != 1 || !raced.Load() {
		t.Fatalf("node1's claim racing node2's: %v, %v (raced %v)", v4, err, raced.Load())
	}
	mine := v4[0].Addr()
	if !block.Contains(mine) || mine == theirs {
		t.Errorf("node1 got %s, node2 %s: want two addresses of %s", mine, theirs, block)
	}
	for node, want := range map[string][]netip.Prefix{"node1": nil, "node2": {block}} {
		if got, err := node1.AffineBlocks(k.ctx, node); err != nil || !slices.Equal(got, want) {
			t.Errorf("%s's blocks: %v, %v; want %v", node, got, err, want)
		}
	}
	var b struct {
		Spec struct {
			Affinity *string `json:"affinity"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(k.raw(t, "ipamblocks/10-3-0-0-30"), &b); err != nil || b.Spec.Affinity == nil || *b.Spec.Affinity != "host:node2" {
		t.Errorf("block's affinity %v (%v), want host:node2", b.Spec.Affinity, err)
	}
	rep, err := node1.Check(k.ctx)
	if err != nil || len(rep.Allocations) != 2 || len(rep.LeakedHandles)+len(rep.MissingHandles) != 0 {
		t.Errorf("check: %d allocations, leaked handles %v, missing handles %v (%v)", len(rep.Allocations), rep.LeakedHandles, rep.MissingHandles, err)
	}
}

// testIPAMFailedAllocation: an error (not a lost race) at the block write
// of a block claim undoes the handle, the affinity and the config written
// before it: nothing is left.
func testIPAMFailedAllocation(t *testing.T, k *ipamCluster) {
	s := k.open(t)
	injected := errors.New("injected failure")
	var writes []string
	kdd.SetIPAMWriteHook(s, func(ctx context.Context, i int, key string) error {
		writes = append(writes, key)
		if strings.Contains(key, "/assignment/") {
			return injected
		}
		return nil
	})
	c := ipam.New(s.IPAM(), newPools(t, "10.2.0.0/24", 26), nil)
	_, _, err := c.AutoAssign(k.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h", Node: "node1"})
	if !errors.Is(err, injected) {
		t.Fatalf("AutoAssign = %v, want the injected error", err)
	}
	if len(writes) != 4 || !strings.Contains(writes[0], "/handle/") || !strings.Contains(writes[1], "/host/node1/") ||
		writes[2] != cfgKey || !strings.Contains(writes[3], "/assignment/") {
		t.Errorf("writes %v: want handle, affinity, config, block", writes)
	}
	for _, p := range ipamPlurals {
		if items := normalizeList(t, k.raw(t, p)); len(items) != 0 {
			t.Errorf("%s left: %v", p, items)
		}
	}
}

// testIPAMMarkedDeleted: Calico deletes an IPAM object by marking it
// (spec.deleted) and then deleting it, and may stop in between. Such an
// object does not exist for IPAM: a Get clears it, a List skips it, and
// creating the key over it works.
func testIPAMMarkedDeleted(t *testing.T, k *ipamCluster) {
	s := k.open(t)
	kv, ctx := s.IPAM(), k.ctx
	mustTxn(t, kv, ctx, datastore.Txn{Ops: []datastore.Op{
		put(handleH, `{"block":{},"deleted":true}`),
		put(blockA, strings.Replace(blockValue(1, "node1"), `"deleted":false`, `"deleted":true`, 1)),
		put(affC, `{"state":"confirmed","deleted":true}`),
	}})
	if kvs, _, err := kv.List(ctx, "/calico/ipam/v2/", false); err != nil || len(kvs) != 0 {
		t.Errorf("list = %+v, %v; want nothing", kvs, err)
	}
	if !strings.Contains(string(k.raw(t, "blockaffinities/node1-10-0-0-0-30")), `"deleted":"true"`) {
		t.Error("the affinity was not stored marked deleted, as Calico marks it")
	}
	if got := get1(t, kv, ctx, handleH); got.Rev != 0 {
		t.Errorf("get of a marked handle = %+v", got)
	}
	if items := normalizeList(t, k.raw(t, "ipamhandles")); len(items) != 0 {
		t.Errorf("the marked handle was not cleared: %v", items)
	}
	res := mustTxn(t, kv, ctx, datastore.Txn{Conds: []datastore.Cond{{Key: blockA}}, Ops: []datastore.Op{put(blockA, blockValue(2, "node1"))}})
	if got := get1(t, kv, ctx, blockA); !res.Succeeded || string(got.Value) != blockValue(2, "node1") {
		t.Errorf("create over a marked block: %+v, stored %s", res, got.Value)
	}
}

// testIPAMNamesOnServer: keys whose object names lose information (a node
// name too long for one, IPv6 CIDRs) come back whole.
func testIPAMNamesOnServer(t *testing.T, k *ipamCluster) {
	s := k.open(t)
	kv, ctx := s.IPAM(), k.ctx
	long := strings.Repeat("n", 240) + ".example"
	keys := []string{
		"/calico/ipam/v2/host/" + long + "/ipv4/block/10.0.0.0-30",
		"/calico/ipam/v2/host/" + long + "/ipv6/block/fd00:15::-122",
		"/calico/ipam/v2/host/node1/ipv6/block/fd00:15::-122",
	}
	txn := datastore.Txn{}
	for _, key := range keys {
		txn.Conds = append(txn.Conds, datastore.Cond{Key: key})
		txn.Ops = append(txn.Ops, put(key, `{"state":"confirmed","deleted":false}`))
	}
	if res := mustTxn(t, kv, ctx, txn); !res.Succeeded {
		t.Fatalf("%+v", res)
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"/calico/ipam/v2/host/" + long + "/", keys[:2]},
		{"/calico/ipam/v2/host/" + long + "/ipv6/", keys[1:2]},
		{"/calico/ipam/v2/host/node1/", keys[2:]},
		{"/calico/ipam/v2/host/", keys},
	} {
		kvs, _, err := kv.List(ctx, tc.prefix, false)
		var got []string
		for _, e := range kvs {
			got = append(got, e.Key)
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("list %s = %v, %v; want %v", tc.prefix, got, err, tc.want)
		}
	}
	if got := get1(t, kv, ctx, keys[1]); got.Rev == 0 {
		t.Errorf("get %s: absent", keys[1])
	}
}

// testIPAMWatch: a Reset with the blocks and affinities under the prefix,
// then their changes; handles and the config are not watched.
func testIPAMWatch(t *testing.T, k *ipamCluster) {
	s := k.open(t)
	kv, ctx := s.IPAM(), k.ctx
	block6 := "/calico/ipam/v2/assignment/ipv6/block/fd00:15::-126"
	mustTxn(t, kv, ctx, datastore.Txn{Ops: []datastore.Op{
		put(blockA, blockValue(1, "node1")), put(affC, `{"state":"confirmed","deleted":false}`),
		put(handleH, `{"block":{},"deleted":false}`), put(cfgKey, `{}`),
	}})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	all, blocks := kv.Watch(wctx, "/calico/ipam/v2/"), kv.Watch(wctx, "/calico/ipam/v2/assignment/ipv4/")
	next := func(ch <-chan datastore.KVEvent) datastore.KVEvent {
		t.Helper()
		select {
		case ev := <-ch:
			return ev
		case <-time.After(20 * time.Second):
			t.Fatal("no watch event within 20s")
		}
		panic("unreachable")
	}
	ev := next(all)
	if ev.Type != datastore.KVReset || len(ev.Snapshot) != 2 || ev.Snapshot[0].Key != blockA || ev.Snapshot[1].Key != affC ||
		string(ev.Snapshot[0].Value) != blockValue(1, "node1") || ev.Rev == 0 {
		t.Fatalf("first event %+v, want a Reset with the block and the affinity", ev)
	}
	if ev := next(blocks); ev.Type != datastore.KVReset || len(ev.Snapshot) != 1 || ev.Snapshot[0].Key != blockA {
		t.Fatalf("first event of the IPv4 block watch %+v", ev)
	}

	mustTxn(t, kv, ctx, datastore.Txn{Ops: []datastore.Op{put(handleH, `{"block":{"10.0.0.0/30":1},"deleted":false}`)}})
	mustTxn(t, kv, ctx, datastore.Txn{Ops: []datastore.Op{put(block6, `{"cidr":"fd00:15::/126","affinity":null,"allocations":[null,null,null,null],"unallocated":[0,1,2,3],"attributes":[],"sequenceNumber":1,"sequenceNumberForAllocation":{},"deleted":false}`)}})
	mustTxn(t, kv, ctx, datastore.Txn{Ops: []datastore.Op{put(blockA, blockValue(2, "node1"))}})
	mustTxn(t, kv, ctx, datastore.Txn{Ops: []datastore.Op{{Type: datastore.OpDelete, Key: affC}}})
	a := get1(t, kv, ctx, blockA)

	// The IPv6 block and the two changes, in order; no handle.
	var got []string
	for range 3 {
		ev := next(all)
		got = append(got, fmt.Sprintf("%d %s %s", ev.Type, ev.KV.Key, ev.KV.Value))
		if ev.Type == datastore.KVPut && ev.KV.Key == blockA && (ev.KV.Rev != a.Rev || ev.Rev != a.Rev) {
			t.Errorf("put of %s at revision %d/%d, stored at %d", blockA, ev.KV.Rev, ev.Rev, a.Rev)
		}
	}
	want := []string{
		fmt.Sprintf("%d %s %s", datastore.KVPut, blockA, blockValue(2, "node1")),
		fmt.Sprintf("%d %s %s", datastore.KVDelete, affC, `{"state":"confirmed","deleted":false}`),
	}
	// Blocks and affinities are separate watches: only the order within
	// each is defined.
	if !containsInOrder(got, want[:1]) || !containsInOrder(got, want[1:]) ||
		!strings.Contains(strings.Join(got, "\n"), block6) {
		t.Errorf("events:\n%s\nwant the IPv6 block, then\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if ev := next(blocks); ev.Type != datastore.KVPut || ev.KV.Key != blockA {
		t.Errorf("IPv4 block watch: %+v, want only the IPv4 block's change", ev)
	}
	select {
	case ev := <-all:
		t.Errorf("unexpected event %+v", ev)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	for range all {
	}
}

func same(a, b datastore.KeyValue) bool {
	return a.Key == b.Key && a.Rev == b.Rev && bytes.Equal(a.Value, b.Value)
}

func containsInOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}
