package ipam_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

// backend is a datastore the scenarios run against.
type backend struct {
	name string
	open func(testing.TB) *fixture
}

// The backends: Debian's etcd binary, the embedded etcd server the
// product ships, and the Kubernetes API (one kube-apiserver shared by the
// package's tests, see kube_test.go).
var (
	etcdBinary   = backend{"etcd-binary", func(t testing.TB) *fixture { return openEtcd(t, etcdtest.Start) }}
	etcdEmbedded = backend{"etcd-embedded", func(t testing.TB) *fixture { return openEtcd(t, etcdtest.StartEmbedded) }}
	kubeAPI      = backend{"kdd", openKDD}
	// allBackends is for the scenarios worth running on both etcd servers.
	allBackends = []backend{etcdBinary, etcdEmbedded, kubeAPI}
)

// forEachBackend runs fn as a subtest per backend, each with a fresh
// fixture.
func forEachBackend(t *testing.T, bs []backend, fn func(t *testing.T, f *fixture)) {
	t.Helper()
	for _, b := range bs {
		t.Run(b.name, func(t *testing.T) { fn(t, b.open(t)) })
	}
}

// resources is where IPAM reads pools, nodes, reservations, endpoints and
// the cluster information, and where the scenarios write them.
type resources interface {
	ipam.PoolSource
	Create(ctx context.Context, obj api.Object) (api.Object, error)
	Update(ctx context.Context, obj api.Object) (api.Object, error)
}

// fixture is one datastore with an IPAM client on it. Every IPAM key the
// scenarios read or poke goes through kv, the datastore's own datastore.KV,
// so that one scenario checks both backends.
type fixture struct {
	ctx     context.Context
	backend string
	store   resources
	kv      datastore.KV
	c       *ipam.Client
	// kube is the shared cluster of the kdd backend (nil on etcd).
	kube *kubetest.Cluster
	// wipe removes everything the backend stores.
	wipe func(t testing.TB)
	// putResource stores a v3 resource as given, behind validation, at its
	// etcd key (/calico/resources/v3/projectcalico.org/...).
	putResource func(t testing.TB, key, value string)
}

func openEtcd(t testing.TB, start func(testing.TB, ...etcdtest.Option) *etcdtest.Server) *fixture {
	t.Helper()
	srv := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	store := storetest.Etcd(t, ctx, srv.Endpoints)
	cli := store.Etcd()
	return &fixture{
		ctx: ctx, backend: "etcd", store: store, kv: store.IPAM(), c: ipam.New(store.IPAM(), store, nil),
		wipe: func(t testing.TB) {
			t.Helper()
			if _, err := cli.Delete(ctx, "/calico/", clientv3.WithPrefix()); err != nil {
				t.Fatalf("wipe datastore: %v", err)
			}
		},
		putResource: func(t testing.TB, key, value string) {
			t.Helper()
			if _, err := cli.Put(ctx, key, value); err != nil {
				t.Fatalf("put %s: %v", key, err)
			}
		},
	}
}

func openKDD(t testing.TB) *fixture {
	t.Helper()
	c := kube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	store := storetest.KDD(t, ctx, c)
	// The other kinds are other mappers' business on this datastore (a
	// WorkloadEndpoint is a Pod there); the scenarios are about IPAM's
	// storage, so the resources IPAM reads are kept in memory.
	res := newMemStore()
	f := &fixture{
		ctx: ctx, backend: "kdd", store: res, kv: store.IPAM(), c: ipam.New(store.IPAM(), res, nil), kube: c,
		wipe: func(t testing.TB) {
			t.Helper()
			res.reset()
			wipeIPAMObjects(t, ctx, c)
		},
		putResource: func(t testing.TB, key, value string) {
			t.Helper()
			res.putRaw(t, value)
		},
	}
	f.reset(t) // the cluster is shared: start from nothing
	return f
}

// reset wipes everything Calico stores, so scenarios can share a server.
func (f *fixture) reset(t testing.TB) {
	t.Helper()
	f.wipe(t)
}

func (f *fixture) create(t testing.TB, objs ...api.Object) {
	t.Helper()
	for _, o := range objs {
		if _, err := f.store.Create(f.ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", o.Type().Kind, o.Meta().Name, err)
		}
	}
}

func (f *fixture) update(t testing.TB, o api.Object) {
	t.Helper()
	if _, err := f.store.Update(f.ctx, o); err != nil {
		t.Fatalf("update %s %s: %v", o.Type().Kind, o.Meta().Name, err)
	}
}

// raw returns an IPAM key's value as the datastore's KV reads it, "" if
// absent.
func (f *fixture) raw(t testing.TB, key string) string {
	t.Helper()
	kvs, err := f.kv.Get(f.ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if kvs[0].Rev == 0 {
		return ""
	}
	return string(kvs[0].Value)
}

// put writes an IPAM key unconditionally.
func (f *fixture) put(t testing.TB, key, value string) {
	t.Helper()
	f.write(t, datastore.Op{Type: datastore.OpPut, Key: key, Value: []byte(value)})
}

// del deletes an IPAM key unconditionally.
func (f *fixture) del(t testing.TB, key string) {
	t.Helper()
	f.write(t, datastore.Op{Type: datastore.OpDelete, Key: key})
}

func (f *fixture) write(t testing.TB, op datastore.Op) {
	t.Helper()
	res, err := f.kv.Txn(f.ctx, datastore.Txn{Ops: []datastore.Op{op}})
	if err != nil || !res.Succeeded {
		t.Fatalf("write %s: %+v, %v", op.Key, res, err)
	}
}

// keys lists the IPAM keys under prefix.
func (f *fixture) keys(t testing.TB, prefix string) []string { return listKeys(t, f.ctx, f.kv, prefix) }

// listKeys lists the keys of kv under prefix.
func listKeys(t testing.TB, ctx context.Context, kv datastore.KV, prefix string) []string {
	t.Helper()
	kvs, _, err := kv.List(ctx, prefix, true)
	if err != nil {
		t.Fatalf("list %s: %v", prefix, err)
	}
	var out []string
	for _, kv := range kvs {
		out = append(out, kv.Key)
	}
	return out
}

// rawBlock is a block value decoded generically, for assertions on the
// stored JSON.
type rawBlock struct {
	CIDR        string  `json:"cidr"`
	Affinity    *string `json:"affinity"`
	Allocations []*int  `json:"allocations"`
	Unallocated []int   `json:"unallocated"`
	Attributes  []struct {
		HandleID  *string           `json:"handle_id"`
		Secondary map[string]string `json:"secondary"`
	} `json:"attributes"`
	SequenceNumber              uint64            `json:"sequenceNumber"`
	SequenceNumberForAllocation map[string]uint64 `json:"sequenceNumberForAllocation"`
}

func (f *fixture) block(t testing.TB, cidr netip.Prefix) rawBlock {
	t.Helper()
	data := f.raw(t, ipam.BlockKey(cidr))
	if data == "" {
		t.Fatalf("block %s does not exist", cidr)
	}
	var b rawBlock
	if err := json.Unmarshal([]byte(data), &b); err != nil {
		t.Fatalf("decode block %s: %v", cidr, err)
	}
	return b
}

func ippool(name, cidr string, blockSize int, edit ...func(*api.IPPoolSpec)) *api.IPPool {
	p := &api.IPPool{
		TypeMeta:   api.TypeMeta{Kind: "IPPool", APIVersion: api.GroupVersion},
		ObjectMeta: api.ObjectMeta{Name: name},
		Spec:       api.IPPoolSpec{CIDR: cidr, BlockSize: blockSize},
	}
	for _, e := range edit {
		e(&p.Spec)
	}
	return p
}

func node(name string, labels map[string]string) *api.Node {
	return &api.Node{
		TypeMeta:   api.TypeMeta{Kind: "Node", APIVersion: api.GroupVersion},
		ObjectMeta: api.ObjectMeta{Name: name, Labels: labels},
	}
}

func reservation(name string, cidrs ...string) *api.IPReservation {
	return &api.IPReservation{
		TypeMeta:   api.TypeMeta{Kind: "IPReservation", APIVersion: api.GroupVersion},
		ObjectMeta: api.ObjectMeta{Name: name},
		Spec:       api.IPReservationSpec{ReservedCIDRs: cidrs},
	}
}

// wep is a CNI workload endpoint; containerID must not contain "-" (the
// name would need Calico's escaping).
func wep(ns, nodeName, containerID string, nets ...string) *api.WorkloadEndpoint {
	return &api.WorkloadEndpoint{
		TypeMeta:   api.TypeMeta{Kind: "WorkloadEndpoint", APIVersion: api.GroupVersion},
		ObjectMeta: api.ObjectMeta{Name: nodeName + "-cni-" + containerID + "-eth0", Namespace: ns},
		Spec: api.WorkloadEndpointSpec{Orchestrator: "cni", Node: nodeName, ContainerID: containerID,
			Endpoint: "eth0", IPNetworks: nets, InterfaceName: "cali0123456789a"},
	}
}

// assign4 allocates one IPv4 address for handle on n and returns it.
func (f *fixture) assign4(t testing.TB, n, handle string) netip.Addr {
	t.Helper()
	v4, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: handle, Node: n})
	if err != nil {
		t.Fatalf("AutoAssign(%s on %s): %v", handle, n, err)
	}
	if len(v4) != 1 || v4[0].Bits() != 32 {
		t.Fatalf("AutoAssign(%s on %s) = %v, want one /32", handle, n, v4)
	}
	return v4[0].Addr()
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
