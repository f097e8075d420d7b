package ipam_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/etcd"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
)

// backends are the etcd servers the scenario tests run against: Debian's
// etcd binary and the embedded server the product ships.
var backends = []struct {
	name  string
	start func(testing.TB, ...etcdtest.Option) *etcdtest.Server
}{
	{"etcd-binary", etcdtest.Start},
	{"etcd-embedded", etcdtest.StartEmbedded},
}

// fixture is one etcd with a store and an IPAM client on it.
type fixture struct {
	ctx   context.Context
	store datastore.Store
	kv    *clientv3.Client
	c     *ipam.Client
}

func newFixture(t testing.TB, start func(testing.TB, ...etcdtest.Option) *etcdtest.Server) *fixture {
	t.Helper()
	srv := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	store, err := etcd.New(ctx, datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatalf("open datastore: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	return &fixture{ctx: ctx, store: store, kv: store.Etcd(), c: ipam.New(store.IPAM(), store, nil)}
}

// reset wipes everything Calico stores, so scenarios can share a server.
func (f *fixture) reset(t testing.TB) {
	t.Helper()
	if _, err := f.kv.Delete(f.ctx, "/calico/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("wipe datastore: %v", err)
	}
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

// raw returns a key's value, "" if absent.
func (f *fixture) raw(t testing.TB, key string) string {
	t.Helper()
	resp, err := f.kv.Get(f.ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func (f *fixture) put(t testing.TB, key, value string) {
	t.Helper()
	if _, err := f.kv.Put(f.ctx, key, value); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// keys lists the keys under prefix.
func (f *fixture) keys(t testing.TB, prefix string) []string {
	t.Helper()
	resp, err := f.kv.Get(f.ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("list %s: %v", prefix, err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
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
