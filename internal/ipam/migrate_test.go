package ipam_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

// TestExportImportRenamesNodes: IPAM read from one etcd, with a node
// renamed as an etcd → Kubernetes migration does, and created in a fresh
// one: every handle keeps its addresses, the renamed node owns its blocks
// and tunnel address, and new allocations never reuse an address.
func TestExportImportRenamesNodes(t *testing.T) {
	src := newMigrateSide(t)
	dst := newMigrateSide(t)
	for _, f := range []*migrateSide{src, dst} {
		f.create(t, ippool("pool", "10.70.0.0/24", 28))
	}
	src.create(t, node("etcd-a", nil), node("b", nil))
	pods := map[string]netip.Addr{}
	for i, n := range []string{"etcd-a", "etcd-a", "b", "etcd-a", "b"} {
		h := "k8s-pod-network.c" + string(rune('0'+i))
		v4, _, err := src.c.AutoAssign(src.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: h, Node: n,
			Attrs: map[string]string{ipam.AttrNamespace: "shop", ipam.AttrPod: "p" + string(rune('0'+i))}})
		if err != nil {
			t.Fatal(err)
		}
		pods[h] = v4[0].Addr()
	}
	tunnel := src.assign4(t, "etcd-a", "vxlan-tunnel-addr-etcd-a")
	untouchedBlock := src.raw(t, ipam.BlockKey(src.lookup(t, pods["k8s-pod-network.c2"]).Block))

	e, err := ipam.ReadExport(src.ctx, src.store.IPAM())
	if err != nil {
		t.Fatal(err)
	}
	if e.Config == nil || len(e.Blocks) != 2 || len(e.BlockAffinities) != 2 || len(e.Handles) != 6 {
		t.Fatalf("export sections: %+v", e)
	}
	if err := e.RenameNodes(map[string]string{"etcd-a": "k8s-a", "b": "b"}); err != nil {
		t.Fatal(err)
	}
	n, err := e.Import(dst.ctx, dst.store.IPAM())
	if err != nil || n != e.Len() {
		t.Fatalf("import: %d of %d, %v", n, e.Len(), err)
	}

	for h, ip := range pods {
		got, err := dst.c.IPsByHandle(dst.ctx, h)
		if err != nil || !slices.Equal(got, []netip.Addr{ip}) {
			t.Errorf("handle %s holds %v (%v), want %s", h, got, err, ip)
		}
	}
	hold := dst.lookup(t, pods["k8s-pod-network.c0"])
	if hold.Affinity != "host:k8s-a" || hold.Attrs[ipam.AttrNode] != "k8s-a" || hold.Attrs[ipam.AttrPod] != "p0" {
		t.Errorf("renamed node's pod: %+v", hold)
	}
	if got, _ := dst.c.IPsByHandle(dst.ctx, "vxlan-tunnel-addr-k8s-a"); !slices.Equal(got, []netip.Addr{tunnel}) {
		t.Errorf("tunnel handle after rename holds %v, want %s", got, tunnel)
	}
	if h := dst.lookup(t, tunnel); h.Handle != "vxlan-tunnel-addr-k8s-a" {
		t.Errorf("tunnel address held by %q", h.Handle)
	}
	if keys := dst.keys(t, "/calico/ipam/v2/host/"); len(keys) != 2 || !strings.Contains(strings.Join(keys, " "), "/host/k8s-a/") || strings.Contains(strings.Join(keys, " "), "etcd-a") {
		t.Errorf("affinity keys: %v", keys)
	}
	// A block with nothing to rename is stored exactly as read.
	if got := dst.raw(t, ipam.BlockKey(dst.lookup(t, pods["k8s-pod-network.c2"]).Block)); got != untouchedBlock {
		t.Errorf("untouched block changed:\n got %s\nwant %s", got, untouchedBlock)
	}
	if r, err := dst.c.Check(dst.ctx, "k8s-a", "b"); err != nil || len(r.MissingHandles)+len(r.LeakedHandles)+len(r.BlocksOfMissingNodes) != 0 {
		t.Errorf("check after import: %+v %v", r, err)
	}

	// New allocations on both nodes never collide with imported ones.
	taken := map[netip.Addr]bool{tunnel: true}
	for _, ip := range pods {
		taken[ip] = true
	}
	for i := range 40 {
		nodeName := []string{"k8s-a", "b"}[i%2]
		v4, _, err := dst.c.AutoAssign(dst.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "new." + string(rune('A'+i)), Node: nodeName})
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if taken[v4[0].Addr()] {
			t.Fatalf("allocation %d on %s got %s, already allocated", i, nodeName, v4[0].Addr())
		}
		taken[v4[0].Addr()] = true
	}
}

// migrateSide is one etcd with its store and IPAM client; the scenario
// reads and writes IPAM's keys through the store's own datastore.KV, as
// the migration does.
type migrateSide struct {
	ctx   context.Context
	store datastore.Store
	c     *ipam.Client
}

func newMigrateSide(t *testing.T) *migrateSide {
	t.Helper()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	store := storetest.Etcd(t, ctx, srv.Endpoints)
	return &migrateSide{ctx: ctx, store: store, c: ipam.New(store.IPAM(), store, nil)}
}

func (f *migrateSide) create(t testing.TB, objs ...api.Object) {
	t.Helper()
	for _, o := range objs {
		if _, err := f.store.Create(f.ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", o.Type().Kind, o.Meta().Name, err)
		}
	}
}

func (f *migrateSide) assign4(t testing.TB, n, handle string) netip.Addr {
	t.Helper()
	v4, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: handle, Node: n})
	if err != nil || len(v4) != 1 {
		t.Fatalf("AutoAssign(%s on %s) = %v, %v", handle, n, v4, err)
	}
	return v4[0].Addr()
}

func (f *migrateSide) lookup(t testing.TB, ip netip.Addr) ipam.Holder {
	t.Helper()
	h, err := f.c.Lookup(f.ctx, ip)
	if err != nil {
		t.Fatalf("lookup %s: %v", ip, err)
	}
	return h
}

// raw is a key's value, "" if absent.
func (f *migrateSide) raw(t testing.TB, key string) string {
	t.Helper()
	kvs, err := f.store.IPAM().Get(f.ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(kvs[0].Value)
}

func (f *migrateSide) keys(t testing.TB, prefix string) []string {
	return listKeys(t, f.ctx, f.store.IPAM(), prefix)
}

// TestImportChecksEverythingFirst: an entry that does not parse writes
// nothing; a key that exists is reported and the others are written.
func TestImportChecksEverythingFirst(t *testing.T) {
	f := newMigrateSide(t)
	good := ipam.ExportKV{Key: "/calico/ipam/v2/handle/h1", Value: json.RawMessage(`{"block":{"10.0.0.0/26":1},"deleted":false}`)}
	tests := []struct {
		name string
		e    ipam.Export
		want string
	}{
		{"value of the wrong type", ipam.Export{Handles: []ipam.ExportKV{good, {Key: "/calico/ipam/v2/handle/h2", Value: json.RawMessage(`{"block":"x"}`)}}}, "handle/h2"},
		{"block key in the handles", ipam.Export{Handles: []ipam.ExportKV{good, {Key: "/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26", Value: good.Value}}}, "not an IPAM key of this section"},
		{"block whose key names another CIDR", ipam.Export{Handles: []ipam.ExportKV{good}, Blocks: []ipam.ExportKV{{Key: "/calico/ipam/v2/assignment/ipv4/block/10.0.0.64-26",
			Value: json.RawMessage(`{"cidr":"10.0.0.0/26","affinity":null,"allocations":[` + strings.Repeat("null,", 63) + `null],"unallocated":[],"attributes":[],"sequenceNumber":0,"sequenceNumberForAllocation":{},"deleted":false}`)}}}, "holds block 10.0.0.0/26"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := tc.e.Import(f.ctx, f.store.IPAM())
			if n != 0 || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("import: %d written, %v; want nothing and %q", n, err, tc.want)
			}
			if keys := f.keys(t, ipam.Prefix); len(keys) != 0 {
				t.Errorf("written: %v", keys)
			}
		})
	}

	if res, err := f.store.IPAM().Txn(f.ctx, datastore.Txn{Ops: []datastore.Op{{Type: datastore.OpPut, Key: good.Key, Value: []byte(`{"block":{},"deleted":false}`)}}}); err != nil || !res.Succeeded {
		t.Fatal(err)
	}
	e := ipam.Export{Handles: []ipam.ExportKV{good, {Key: "/calico/ipam/v2/handle/h2", Value: good.Value}}}
	n, err := e.Import(f.ctx, f.store.IPAM())
	if n != 1 || !errors.Is(err, datastore.ErrAlreadyExists) {
		t.Errorf("import over an existing key: %d written, %v", n, err)
	}
	if got := f.raw(t, good.Key); got != `{"block":{},"deleted":false}` {
		t.Errorf("existing key overwritten: %s", got)
	}
	if got := f.raw(t, "/calico/ipam/v2/handle/h2"); got != `{"block":{"10.0.0.0/26":1},"deleted":false}` {
		t.Errorf("the other key: %q", got)
	}
}
