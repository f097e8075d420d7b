package ctl_test

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// nodeFixture is a node's Calico state besides the Node: a pod address
// with its block affinity, and a BGP peer.
type nodeFixture struct {
	t     *testing.T
	ctx   context.Context
	store datastore.Store
	ipam  *ipam.Client
}

func (f *nodeFixture) create(objs ...api.Object) {
	f.t.Helper()
	for _, o := range objs {
		if _, err := f.store.Create(f.ctx, o); err != nil {
			f.t.Fatalf("create %s %s: %v", o.Type().Kind, o.Meta().Name, err)
		}
	}
}

// leave gives node an address and a peer, and returns the address.
func (f *nodeFixture) leave(node, handle string) netip.Addr {
	f.t.Helper()
	v4, _, err := f.ipam.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: handle, Node: node,
		Attrs: map[string]string{"namespace": "default", "pod": "web-" + handle}})
	if err != nil || len(v4) != 1 {
		f.t.Fatalf("allocate on %s: %v %v", node, v4, err)
	}
	peer := &api.BGPPeer{}
	peer.Kind, peer.APIVersion, peer.Name = "BGPPeer", api.GroupVersion, "tor-"+node
	peer.Spec.Node, peer.Spec.PeerIP, peer.Spec.ASNumber = node, "192.0.2.1", api.ASNumber(64512)
	f.create(peer)
	return v4[0].Addr()
}

// cleaned checks that what leave made for node is gone.
func (f *nodeFixture) cleaned(node string, ip netip.Addr) {
	f.t.Helper()
	if _, err := f.ipam.Lookup(f.ctx, ip); !errors.Is(err, ipam.ErrNotAllocated) {
		f.t.Errorf("address %s of %s: %v, want released", ip, node, err)
	}
	if blocks, err := f.ipam.AffineBlocks(f.ctx, node); err != nil || len(blocks) > 0 {
		f.t.Errorf("blocks affine to %s: %v, %v", node, blocks, err)
	}
	if _, err := f.store.Get(f.ctx, "BGPPeer", "", "tor-"+node); !errors.Is(err, datastore.ErrNotFound) {
		f.t.Errorf("peer of %s: %v, want not found", node, err)
	}
}

func pool(cidr string) *api.IPPool {
	p := &api.IPPool{}
	p.Kind, p.APIVersion, p.Name = "IPPool", api.GroupVersion, "pool1"
	p.Spec.CIDR, p.Spec.BlockSize = cidr, 28
	return p
}

// TestDeleteNode: `calicoctl delete node` on etcd removes the Node and
// what is its; for a Node that is not there it still cleans up what was
// left of it, and reports it not found, as Calico's calicoctl does.
func TestDeleteNode(t *testing.T) {
	c := newCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := storetest.Etcd(t, ctx, c.etcd.Endpoints)
	f := &nodeFixture{t: t, ctx: ctx, store: store, ipam: ipam.New(store.IPAM(), store, nil)}
	n := &api.Node{}
	n.Kind, n.APIVersion, n.Name = "Node", api.GroupVersion, "n1"
	f.create(pool("10.50.0.0/16"), n)
	ip := f.leave("n1", "h1")

	if out := c.ok("delete", "node", "n1"); !strings.Contains(out, "Successfully deleted 1 'Node' resource(s)") {
		t.Errorf("stdout: %s", out)
	}
	f.cleaned("n1", ip)
	if _, err := store.Get(ctx, "Node", "", "n1"); !errors.Is(err, datastore.ErrNotFound) {
		t.Errorf("node n1: %v, want not found", err)
	}

	// Left behind by a node deleted some other way.
	ip = f.leave("n1", "h2")
	if stderr := c.fails("delete", "node", "n1"); !strings.Contains(stderr, "resource does not exist: Node(n1)") {
		t.Errorf("stderr: %s", stderr)
	}
	f.cleaned("n1", ip)
	c.ok("delete", "--skip-not-exists", "node", "n1")
}

// TestDeleteNodeKDD: on the Kubernetes datastore the cleanup is the same,
// and then the Node's own deletion is refused, as Calico's calicoctl
// refuses it there: the Node is the Kubernetes Node, which stays.
func TestDeleteNodeKDD(t *testing.T) {
	k := kubetest.Start(t, kubetest.WithoutControllerManager())
	k.InstallCalicoCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := storetest.KDD(t, ctx, k)
	if _, err := k.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f := &nodeFixture{t: t, ctx: ctx, store: store, ipam: ipam.New(store.IPAM(), store, nil)}
	f.create(pool("10.50.0.0/16"))
	ip := f.leave("n1", "h1")

	// No etcd: the CLI reaches the Kubernetes API alone.
	c := &cli{t: t, bin: filepath.Join(testbin.Dir(t), "calicoctl"), etcd: &etcdtest.Server{},
		extEnv: []string{"DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + k.Kubeconfig}}
	stderr := c.fails("delete", "node", "n1")
	texttest.Contains(t, "stderr", stderr, "Calico Nodes cannot be deleted", "delete the Kubernetes Node")
	t.Logf("calicoctl delete node n1 on KDD:\n%s", stderr)
	f.cleaned("n1", ip)
	if _, err := k.Client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
		t.Errorf("Kubernetes node n1: %v", err)
	}
}
