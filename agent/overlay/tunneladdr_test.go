package overlay

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

// dsFixture is one datastore with a store and an IPAM client.
type dsFixture struct {
	ctx   context.Context
	store datastore.Store
	ipam  *ipam.Client
	kube  *kubetest.Cluster // the datastore on KDD; nil on etcd
}

// onBothDatastores runs fn on etcd and on the Kubernetes API (a
// kube-apiserver with Calico's CRDs; skipped with -short).
func onBothDatastores(t *testing.T, fn func(t *testing.T, f *dsFixture)) {
	t.Run("etcd", func(t *testing.T) { fn(t, newDS(t, etcdtest.Start(t))) })
	t.Run("kdd", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short: no kube-apiserver")
		}
		fn(t, newKDD(t))
	})
}

func newDS(t *testing.T, srv *etcdtest.Server) *dsFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	store := storetest.Etcd(t, ctx, srv.Endpoints)
	return &dsFixture{ctx: ctx, store: store, ipam: ipam.New(store.IPAM(), store, nil)}
}

func newKDD(t *testing.T) *dsFixture {
	t.Helper()
	c := kubetest.Start(t, kubetest.WithoutControllerManager())
	c.InstallCalicoCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	store := storetest.KDD(t, ctx, c)
	return &dsFixture{ctx: ctx, store: store, ipam: ipam.New(store.IPAM(), store, nil), kube: c}
}

// annotations are the Kubernetes Node's annotations on KDD, where Calico
// keeps a Node's tunnel addresses; nil on etcd.
func (f *dsFixture) annotations(t *testing.T, name string) map[string]string {
	t.Helper()
	if f.kube == nil {
		return nil
	}
	n, err := f.kube.Client.CoreV1().Nodes().Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Annotations
}

// wantAnnotations checks, on KDD, the Kubernetes Node's annotations named
// in want ("" for absent).
func (f *dsFixture) wantAnnotations(t *testing.T, node string, want map[string]string) {
	t.Helper()
	if f.kube == nil {
		return
	}
	got := f.annotations(t, node)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Kubernetes Node %s annotation %s = %q, want %q", node, k, got[k], v)
		}
	}
}

func (f *dsFixture) apply(t *testing.T, objs ...api.Object) {
	t.Helper()
	for _, o := range objs {
		if n, ok := o.(*api.Node); ok && f.kube != nil {
			// On KDD a Calico Node is a Kubernetes Node kubelet made.
			_, err := f.kube.Client.CoreV1().Nodes().Create(f.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("create Kubernetes Node %s: %v", n.Name, err)
			}
		}
		o.Meta().ResourceVersion = ""
		if _, err := f.store.Apply(f.ctx, o); err != nil {
			t.Fatalf("apply %s %s: %v", o.Type().Kind, o.Meta().Name, err)
		}
	}
}

func (f *dsFixture) node(t *testing.T, name string) *api.Node {
	t.Helper()
	o, err := f.store.Get(f.ctx, "Node", "", name)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*api.Node)
}

func (f *dsFixture) ensure(t *testing.T, name string) *api.Node {
	t.Helper()
	n, err := EnsureTunnelAddrs(f.ctx, f.store, f.ipam, name, nil)
	if err != nil {
		t.Fatalf("EnsureTunnelAddrs(%s): %v", name, err)
	}
	if stored := f.node(t, name); stored.ResourceVersion != n.ResourceVersion {
		t.Fatalf("returned node rev %s, stored %s", n.ResourceVersion, stored.ResourceVersion)
	}
	return n
}

// holder asserts that a is allocated to handle with Calico's attributes.
func (f *dsFixture) holder(t *testing.T, a, handle, node, typ string) {
	t.Helper()
	ip, err := netip.ParseAddr(a)
	if err != nil {
		t.Fatalf("tunnel address %q: %v", a, err)
	}
	h, err := f.ipam.Lookup(f.ctx, ip)
	if err != nil {
		t.Fatalf("lookup %s: %v", a, err)
	}
	if h.Handle != handle || h.Attrs[ipam.AttrNode] != node || h.Attrs[ipam.AttrType] != typ {
		t.Fatalf("%s held by %q attrs %v, want %s node=%s type=%s", a, h.Handle, h.Attrs, handle, node, typ)
	}
	held, err := f.ipam.IPsByHandle(f.ctx, handle)
	if err != nil || len(held) != 1 || held[0] != ip {
		t.Fatalf("handle %s holds %v (%v), want exactly %s", handle, held, err, a)
	}
}

func (f *dsFixture) free(t *testing.T, a string) {
	t.Helper()
	if _, err := f.ipam.Lookup(f.ctx, netip.MustParseAddr(a)); !errors.Is(err, ipam.ErrNotAllocated) {
		t.Fatalf("%s still allocated (%v)", a, err)
	}
}

func inPool(t *testing.T, a, cidr string) {
	t.Helper()
	ip, err := netip.ParseAddr(a)
	if err != nil || !netip.MustParsePrefix(cidr).Contains(ip) {
		t.Fatalf("address %q not in %s", a, cidr)
	}
}

func TestEnsureTunnelAddrs(t *testing.T) { onBothDatastores(t, testEnsureTunnelAddrs) }

func testEnsureTunnelAddrs(t *testing.T, f *dsFixture) {
	// The 003 scenario: group 1 native, group 2 overlay (VXLAN here).
	p1 := testPool("ippool1", "10.101.0.0/16", nodeSelector(`calico == "1"`))
	p2 := testPool("ippool2", "10.102.0.0/16", vxlanMode(api.VXLANModeAlways), nodeSelector(`calico == "2"`))
	f.apply(t, p1, p2,
		testNode("a1", "192.0.2.11/24", labels("calico", "1")),
		testNode("b1", "192.0.2.21/24", labels("calico", "2")))

	// Only the selected node gets a VXLAN address, from the overlay pool,
	// with a locally administered unicast MAC.
	a1 := f.ensure(t, "a1")
	if a1.Spec.IPv4VXLANTunnelAddr != "" || a1.Spec.VXLANTunnelMACAddr != "" {
		t.Fatalf("a1 got tunnel state %+v", a1.Spec)
	}
	b1 := f.ensure(t, "b1")
	addr := b1.Spec.IPv4VXLANTunnelAddr
	inPool(t, addr, "10.102.0.0/16")
	f.holder(t, addr, "vxlan-tunnel-addr-b1", "b1", "vxlanTunnelAddress")
	mac, err := net.ParseMAC(b1.Spec.VXLANTunnelMACAddr)
	if err != nil || mac[0]&0x02 == 0 || mac[0]&0x01 != 0 {
		t.Fatalf("MAC %q is not a locally administered unicast MAC", b1.Spec.VXLANTunnelMACAddr)
	}
	if b1.Spec.BGP == nil || b1.Spec.BGP.IPv4Address != "192.0.2.21/24" {
		t.Fatalf("node BGP spec lost: %+v", b1.Spec.BGP)
	}
	// Where Calico keeps them on KDD.
	f.wantAnnotations(t, "b1", map[string]string{
		"projectcalico.org/IPv4VXLANTunnelAddr": addr,
		"projectcalico.org/VXLANTunnelMACAddr":  b1.Spec.VXLANTunnelMACAddr,
		"projectcalico.org/IPv4Address":         "192.0.2.21/24",
	})
	f.wantAnnotations(t, "a1", map[string]string{"projectcalico.org/IPv4VXLANTunnelAddr": "", "projectcalico.org/VXLANTunnelMACAddr": ""})

	// Nothing to do: no write at all.
	if again := f.ensure(t, "b1"); again.ResourceVersion != b1.ResourceVersion {
		t.Fatalf("idempotent call rewrote the node (%s -> %s)", b1.ResourceVersion, again.ResourceVersion)
	}

	// The pool stops being VXLAN: the address is released and cleared; the
	// MAC stays.
	p2.Spec.VXLANMode = api.VXLANModeNever
	f.apply(t, p2)
	b1 = f.ensure(t, "b1")
	if b1.Spec.IPv4VXLANTunnelAddr != "" {
		t.Fatalf("address not cleared: %q", b1.Spec.IPv4VXLANTunnelAddr)
	}
	f.free(t, addr)
	if b1.Spec.VXLANTunnelMACAddr != mac.String() {
		t.Fatalf("MAC changed to %q, want %s kept", b1.Spec.VXLANTunnelMACAddr, mac)
	}
	f.wantAnnotations(t, "b1", map[string]string{"projectcalico.org/IPv4VXLANTunnelAddr": "", "projectcalico.org/VXLANTunnelMACAddr": mac.String()})

	// A pool added later (and a pool that does not allow Tunnel use,
	// ignored) brings it back, with the same MAC.
	f.apply(t, testPool("workload-only", "10.103.0.0/16", vxlanMode(api.VXLANModeAlways),
		func(s *api.IPPoolSpec) { s.AllowedUses = []api.IPPoolAllowedUse{api.IPPoolAllowedUseWorkload} }))
	if n := f.ensure(t, "b1"); n.Spec.IPv4VXLANTunnelAddr != "" {
		t.Fatalf("address %s from a pool that does not allow Tunnel", n.Spec.IPv4VXLANTunnelAddr)
	}
	f.apply(t, testPool("ippool3", "10.104.0.0/16", vxlanMode(api.VXLANModeCrossSubnet)))
	b1 = f.ensure(t, "b1")
	inPool(t, b1.Spec.IPv4VXLANTunnelAddr, "10.104.0.0/16")
	if b1.Spec.VXLANTunnelMACAddr != mac.String() {
		t.Fatalf("MAC changed to %q", b1.Spec.VXLANTunnelMACAddr)
	}

	// Someone clears the field by hand: the address the handle holds is
	// recorded again, not a second one allocated.
	addr = b1.Spec.IPv4VXLANTunnelAddr
	b1.Spec.IPv4VXLANTunnelAddr = ""
	f.apply(t, b1)
	if n := f.ensure(t, "b1"); n.Spec.IPv4VXLANTunnelAddr != addr {
		t.Fatalf("after hand edit: %q, want %s again", n.Spec.IPv4VXLANTunnelAddr, addr)
	}
	f.holder(t, addr, "vxlan-tunnel-addr-b1", "b1", "vxlanTunnelAddress")
}

func TestEnsureTunnelAddrsIPIPAndIPv6(t *testing.T) {
	onBothDatastores(t, testEnsureTunnelAddrsIPIPAndIPv6)
}

func testEnsureTunnelAddrsIPIPAndIPv6(t *testing.T, f *dsFixture) {
	f.apply(t,
		testPool("ipip", "10.110.0.0/16", ipipMode(api.IPIPModeAlways)),
		testPool("v6", "fd00:110::/48", vxlanMode(api.VXLANModeAlways)),
		testNode("n1", "192.0.2.11/24"))
	n := f.ensure(t, "n1")
	ipip := n.Spec.BGP.IPv4IPIPTunnelAddr
	inPool(t, ipip, "10.110.0.0/16")
	f.holder(t, ipip, "ipip-tunnel-addr-n1", "n1", "ipipTunnelAddress")
	inPool(t, n.Spec.IPv6VXLANTunnelAddr, "fd00:110::/48")
	f.holder(t, n.Spec.IPv6VXLANTunnelAddr, "vxlan-v6-tunnel-addr-n1", "n1", "vxlanV6TunnelAddress")
	if _, err := net.ParseMAC(n.Spec.VXLANTunnelMACAddrV6); err != nil || n.Spec.VXLANTunnelMACAddr != "" {
		t.Fatalf("MACs v4=%q v6=%q", n.Spec.VXLANTunnelMACAddr, n.Spec.VXLANTunnelMACAddrV6)
	}
	f.wantAnnotations(t, "n1", map[string]string{
		"projectcalico.org/IPv4IPIPTunnelAddr":   ipip,
		"projectcalico.org/IPv6VXLANTunnelAddr":  n.Spec.IPv6VXLANTunnelAddr,
		"projectcalico.org/VXLANTunnelMACAddrV6": n.Spec.VXLANTunnelMACAddrV6,
	})

	// Removing the IP-in-IP pool clears the field but keeps the node's
	// address.
	if _, err := f.store.Delete(f.ctx, "IPPool", "", "ipip", ""); err != nil {
		t.Fatal(err)
	}
	n = f.ensure(t, "n1")
	if n.Spec.BGP == nil || n.Spec.BGP.IPv4IPIPTunnelAddr != "" || n.Spec.BGP.IPv4Address != "192.0.2.11/24" {
		t.Fatalf("BGP spec after removal: %+v", n.Spec.BGP)
	}
	f.free(t, ipip)

	// A node with no BGP spec gets one just for the IP-in-IP address, and
	// loses it again with the address (Calico refuses an empty one).
	f.apply(t, testPool("ipip", "10.110.0.0/16", ipipMode(api.IPIPModeAlways)), testNode("bare", ""))
	if n := f.ensure(t, "bare"); n.Spec.BGP == nil || n.Spec.BGP.IPv4IPIPTunnelAddr == "" {
		t.Fatalf("bare node BGP spec %+v", n.Spec.BGP)
	}
	if _, err := f.store.Delete(f.ctx, "IPPool", "", "ipip", ""); err != nil {
		t.Fatal(err)
	}
	if n := f.ensure(t, "bare"); n.Spec.BGP != nil {
		t.Fatalf("bare node kept BGP spec %+v", n.Spec.BGP)
	}
}

// racingStore changes the Node behind the allocator's back just before
// its first update, so that the compare-and-swap fails once.
type racingStore struct {
	datastore.Store
	raced bool
}

func (s *racingStore) Update(ctx context.Context, obj api.Object) (api.Object, error) {
	if !s.raced {
		s.raced = true
		o, err := s.Store.Get(ctx, "Node", "", obj.Meta().Name)
		if err != nil {
			return nil, err
		}
		other := o.(*api.Node)
		other.Annotations = map[string]string{"someone": "else"}
		if _, err := s.Store.Update(ctx, other); err != nil {
			return nil, err
		}
	}
	return s.Store.Update(ctx, obj)
}

func TestEnsureTunnelAddrsRetriesLostUpdate(t *testing.T) {
	onBothDatastores(t, testEnsureTunnelAddrsRetriesLostUpdate)
}

func testEnsureTunnelAddrsRetriesLostUpdate(t *testing.T, f *dsFixture) {
	f.apply(t, testPool("p", "10.120.0.0/16", vxlanMode(api.VXLANModeAlways)), testNode("n1", "192.0.2.11/24"))
	rs := &racingStore{Store: f.store}
	n, err := EnsureTunnelAddrs(f.ctx, rs, f.ipam, "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rs.raced {
		t.Fatal("the race was not staged")
	}
	stored := f.node(t, "n1")
	if stored.Annotations["someone"] != "else" {
		t.Error("the other writer's change was overwritten")
	}
	if stored.Spec.IPv4VXLANTunnelAddr == "" || stored.Spec.IPv4VXLANTunnelAddr != n.Spec.IPv4VXLANTunnelAddr {
		t.Fatalf("stored address %q, returned %q", stored.Spec.IPv4VXLANTunnelAddr, n.Spec.IPv4VXLANTunnelAddr)
	}
	// The first attempt's allocation was reused, not leaked.
	f.holder(t, stored.Spec.IPv4VXLANTunnelAddr, "vxlan-tunnel-addr-n1", "n1", "vxlanTunnelAddress")
}

func TestEnsureTunnelAddrsUnknownNode(t *testing.T) {
	onBothDatastores(t, testEnsureTunnelAddrsUnknownNode)
}

func testEnsureTunnelAddrsUnknownNode(t *testing.T, f *dsFixture) {
	_, err := EnsureTunnelAddrs(f.ctx, f.store, f.ipam, "ghost", nil)
	if !errors.Is(err, datastore.ErrNotFound) {
		t.Fatalf("err = %v, want not found", err)
	}
}
