package startup

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/node/autodetect"
	"github.com/projectcalico/calico-node/internal/testkit/errtest"
)

// memStore is a hand-written in-memory Store with revision checks.
type memStore struct {
	mu   sync.Mutex
	rev  int64
	objs map[string]api.Object
}

func newMem() *memStore { return &memStore{objs: map[string]api.Object{}} }

func key(kind, name string) string { return kind + "/" + name }

func (m *memStore) Get(_ context.Context, kind, _, name string) (api.Object, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[key(kind, name)]
	if !ok {
		return nil, &datastore.Error{Op: "get", Kind: kind, Name: name, Err: datastore.ErrNotFound}
	}
	return o, nil
}

func (m *memStore) List(_ context.Context, kind, _ string) ([]api.Object, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []api.Object
	for k, o := range m.objs {
		if strings.HasPrefix(k, kind+"/") {
			out = append(out, o)
		}
	}
	return out, m.rev, nil
}

func (m *memStore) Create(_ context.Context, o api.Object) (api.Object, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(o.Type().Kind, o.Meta().Name)
	if _, ok := m.objs[k]; ok {
		return nil, &datastore.Error{Op: "create", Kind: o.Type().Kind, Name: o.Meta().Name, Err: datastore.ErrAlreadyExists}
	}
	o.Default()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	m.rev++
	o.Meta().ResourceVersion = strconv.FormatInt(m.rev, 10)
	m.objs[k] = o
	return o, nil
}

func (m *memStore) Update(_ context.Context, o api.Object) (api.Object, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(o.Type().Kind, o.Meta().Name)
	cur, ok := m.objs[k]
	if !ok {
		return nil, &datastore.Error{Op: "update", Err: datastore.ErrNotFound}
	}
	if cur.Meta().ResourceVersion != o.Meta().ResourceVersion {
		return nil, &datastore.Error{Op: "update", Err: datastore.ErrConflict}
	}
	m.rev++
	o.Meta().ResourceVersion = strconv.FormatInt(m.rev, 10)
	m.objs[k] = o
	return o, nil
}

type fakeIfaces []autodetect.Interface

func (f fakeIfaces) Interfaces() ([]autodetect.Interface, error) { return f, nil }
func (f fakeIfaces) RouteSrc(netip.Addr) (netip.Addr, error) {
	return f[0].Addrs[0].Addr(), nil
}

var host = fakeIfaces{{Name: "eth0", Index: 2, Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.5/24"), netip.MustParsePrefix("2001:db8::5/64")}}}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func baseConfig(t *testing.T) Config {
	return Config{
		NodeName:     "n1",
		IPMethod:     "first-found",
		IPv4Pool:     PoolConfig{CIDR: "192.168.0.0/16", NATOutgoing: true},
		NodenameFile: filepath.Join(t.TempDir(), "nodename"),
		Version:      "test",
	}
}

func TestRunRegistersEverything(t *testing.T) {
	m := newMem()
	cfg := baseConfig(t)
	cfg.IP6 = "autodetect"
	cfg.ASNumber = "64513"
	cfg.IPv6Pool = PoolConfig{CIDR: "fd00:10::/48"}
	node, err := Run(context.Background(), m, host, cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.BGP.IPv4Address != "192.0.2.5/24" || node.Spec.BGP.IPv6Address != "2001:db8::5/64" || *node.Spec.BGP.ASNumber != 64513 {
		t.Errorf("node bgp = %+v", node.Spec.BGP)
	}
	for _, k := range []string{"IPPool/default-ipv4-ippool", "IPPool/default-ipv6-ippool", "Tier/default", "Tier/adminnetworkpolicy", "Tier/baselineadminnetworkpolicy", "ClusterInformation/default"} {
		if _, ok := m.objs[k]; !ok {
			t.Errorf("%s not created", k)
		}
	}
	v6 := m.objs["IPPool/default-ipv6-ippool"].(*api.IPPool)
	if v6.Spec.BlockSize != 122 || v6.Spec.CIDR != "fd00:10::/48" {
		t.Errorf("v6 pool %+v", v6.Spec)
	}
	if b, _ := os.ReadFile(cfg.NodenameFile); string(b) != "n1" {
		t.Errorf("nodename file %q", b)
	}
	// Idempotent: a second run changes no pool and keeps the cluster GUID.
	guid := m.objs["ClusterInformation/default"].(*api.ClusterInformation).Spec.ClusterGUID
	if _, err := Run(context.Background(), m, host, cfg, quiet()); err != nil {
		t.Fatal(err)
	}
	if g := m.objs["ClusterInformation/default"].(*api.ClusterInformation).Spec.ClusterGUID; g != guid {
		t.Errorf("cluster GUID changed on restart")
	}
}

func TestAddressRules(t *testing.T) {
	tests := []struct {
		name, ip, current, want, wantErr string
	}{
		{name: "explicit", ip: "198.51.100.9/26", want: "198.51.100.9/26"},
		{name: "explicit bare", ip: "192.0.2.5", want: "192.0.2.5/24"},
		{name: "empty keeps registered", ip: "", current: "198.51.100.1/24", want: "198.51.100.1/24"},
		{name: "empty detects when unregistered", ip: "", want: "192.0.2.5/24"},
		{name: "autodetect replaces registered", ip: "autodetect", current: "198.51.100.1/24", want: "192.0.2.5/24"},
		{name: "none clears", ip: "none", current: "198.51.100.1/24", want: ""},
		{name: "garbage", ip: "not-an-ip", wantErr: `IP="not-an-ip"`},
		{name: "wrong family", ip: "2001:db8::1", wantErr: "is not an IPv4 address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := chooseAddress(4, tt.ip, "first-found", tt.current, host)
			if !errtest.Want(t, err, tt.wantErr) {
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := chooseAddress(4, "", "interface=nomatch.*", "", host); err == nil || !strings.Contains(err.Error(), "IP_AUTODETECTION_METHOD") {
		t.Errorf("no matching interface: %v", err)
	}
}

func TestConflictAndBadPool(t *testing.T) {
	m := newMem()
	cfg := baseConfig(t)
	if _, err := Run(context.Background(), m, host, cfg, quiet()); err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.NodeName = "n2"
	if _, err := Run(context.Background(), m, host, other, quiet()); err == nil || !strings.Contains(err.Error(), `already used by Calico node "n1"`) {
		t.Errorf("duplicate address: %v", err)
	}
	for _, tc := range []struct {
		pc   PoolConfig
		want string
	}{
		{PoolConfig{CIDR: "10.0.0.0/33"}, `CALICO_IPV4POOL_CIDR="10.0.0.0/33" is not a valid CIDR`},
		{PoolConfig{CIDR: "fd00::/64"}, "is not an IPv4 CIDR"},
		{PoolConfig{CIDR: "10.0.0.0/16", IPIPMode: "sometimes"}, "sometimes"},
		{PoolConfig{CIDR: "10.0.0.0/16", BlockSize: 40}, "blockSize"},
	} {
		if _, err := buildPool("p", 4, tc.pc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.pc, err, tc.want)
		}
	}
	p, err := buildPool("p", 4, PoolConfig{CIDR: "10.0.0.0/16", IPIPMode: "cross-subnet", VXLANMode: "off"})
	if err != nil || p.Spec.IPIPMode != "CrossSubnet" || p.Spec.VXLANMode != "Never" {
		t.Errorf("mode spellings: %+v %v", p, err)
	}
}

func TestDatastoreNotReady(t *testing.T) {
	m := newMem()
	notReady := false
	ci := &api.ClusterInformation{}
	ci.Kind, ci.APIVersion, ci.Name = "ClusterInformation", api.GroupVersion, "default"
	ci.Spec.DatastoreReady = &notReady
	m.Create(context.Background(), ci)
	// Start-up goes on, as calico-node's does (Felix waits instead), and
	// leaves the lock alone.
	if _, err := Run(context.Background(), m, host, baseConfig(t), quiet()); err != nil {
		t.Fatalf("start-up on a locked datastore: %v", err)
	}
	obj, err := m.Get(context.Background(), "ClusterInformation", "", "default")
	if err != nil {
		t.Fatal(err)
	}
	if r := obj.(*api.ClusterInformation).Spec.DatastoreReady; r == nil || *r {
		t.Errorf("start-up changed the lock: datastoreReady %v", r)
	}
	if _, err := m.Get(context.Background(), "Node", "", baseConfig(t).NodeName); err != nil {
		t.Errorf("node not registered on a locked datastore: %v", err)
	}
}

func TestNodeName(t *testing.T) {
	env := map[string]string{"HOSTNAME": " Worker-1 "}
	get := func(k string) string { return env[k] }
	if n, _ := NodeName("Explicit", get); n != "explicit" {
		t.Errorf("explicit: %q", n)
	}
	if n, _ := NodeName("", get); n != "worker-1" {
		t.Errorf("HOSTNAME: %q", n)
	}
}

// TestDefaultPoolsBesideExisting: a family's default pool is created only
// when the datastore has no pool of that family. A pool written behind
// validation still counts when its CIDR names the family (the user chose
// a pool there), and does not when even its CIDR is unreadable.
func TestDefaultPoolsBesideExisting(t *testing.T) {
	raw := func(name, cidr string, blockSize int) *api.IPPool {
		p := &api.IPPool{}
		p.Kind, p.APIVersion, p.Name = "IPPool", api.GroupVersion, name
		p.Spec.CIDR, p.Spec.BlockSize = cidr, blockSize
		return p
	}
	tests := []struct {
		name     string
		existing []*api.IPPool
		created  []string
	}{
		{name: "none", created: []string{"default-ipv4-ippool", "default-ipv6-ippool"}},
		{name: "a valid IPv4 pool", existing: []*api.IPPool{raw("mine", "10.10.0.0/16", 0)}, created: []string{"default-ipv6-ippool"}},
		{name: "an IPv6 pool with a bad block size", existing: []*api.IPPool{raw("broken", "fd00:99::/48", 26)}, created: []string{"default-ipv4-ippool"}},
		{name: "an unreadable CIDR", existing: []*api.IPPool{raw("garbage", "10.10.0.0/99", 0)}, created: []string{"default-ipv4-ippool", "default-ipv6-ippool"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMem()
			for _, p := range tc.existing {
				m.objs[key("IPPool", p.Name)] = p // behind validation, as an old writer would
			}
			cfg := baseConfig(t)
			cfg.IPv6Pool = PoolConfig{CIDR: "fd00:10::/48"}
			if err := ensureDefaultPools(context.Background(), m, cfg, quiet()); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"default-ipv4-ippool", "default-ipv6-ippool"} {
				_, ok := m.objs[key("IPPool", name)]
				if want := slices.Contains(tc.created, name); ok != want {
					t.Errorf("%s created = %v, want %v", name, ok, want)
				}
			}
		})
	}
}

// TestDefaultPoolMasksHostBits: CALICO_IPV4POOL_CIDR with host bits set is
// taken as its network, as Calico's start-up takes it.
func TestDefaultPoolMasksHostBits(t *testing.T) {
	p, err := buildPool("p", 4, PoolConfig{CIDR: "10.1.2.3/16"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.CIDR != "10.1.0.0/16" {
		t.Errorf("pool CIDR %q, want 10.1.0.0/16", p.Spec.CIDR)
	}
}

// typedStore is a memStore that says which datastore it is.
type typedStore struct {
	*memStore
	typ string
}

func (s typedStore) Type() string { return s.typ }

// TestClusterTypeRecordsKDD: on the Kubernetes datastore the
// ClusterInformation created at start-up says "kdd", as Calico's does.
func TestClusterTypeRecordsKDD(t *testing.T) {
	tests := []struct {
		typ, configured, want string
	}{
		{datastore.TypeEtcd, "k8s,bgp", "k8s,bgp"},
		{datastore.TypeEtcd, "", ""},
		{datastore.TypeKubernetes, "", "kdd"},
		{datastore.TypeKubernetes, "k8s,bgp", "k8s,bgp,kdd"},
		{datastore.TypeKubernetes, "k8s,bgp,", "k8s,bgp,kdd"},
		{datastore.TypeKubernetes, "k8s,kdd", "k8s,kdd"},
	}
	for _, tc := range tests {
		t.Run(tc.typ+"/"+tc.configured, func(t *testing.T) {
			s := typedStore{newMem(), tc.typ}
			cfg := baseConfig(t)
			cfg.ClusterType = tc.configured
			if err := ensureClusterInformation(context.Background(), s, cfg, quiet()); err != nil {
				t.Fatal(err)
			}
			ci := s.objs["ClusterInformation/default"].(*api.ClusterInformation)
			if ci.Spec.ClusterType != tc.want {
				t.Errorf("clusterType = %q, want %q", ci.Spec.ClusterType, tc.want)
			}
		})
	}
}
