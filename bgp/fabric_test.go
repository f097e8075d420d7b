package bgp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/agent/routeproto"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// The fabric: every "node" is a network namespace with one veth (eth0) into
// a shared bridge namespace, addresses from 192.0.2.0/24. Agents are the
// real binary started with `ip netns exec`. etcd runs in the test's own
// namespace; the agents reach it through a unix socket (a file, so visible
// from every network namespace) rather than through a route out of their
// namespaces, which would need addresses and routes in the host namespace.
//
// Everything is torn down in t.Cleanup: processes first (by PID), then the
// namespaces, which takes their veths with them.

var fabricSeq atomic.Int32

func needFabric(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("network namespace test")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
}

func needBIRD(t testing.TB) {
	t.Helper()
	for _, b := range []string{"bird", "birdc"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s not found: install Debian's bird2 package (make deps)", b)
		}
	}
}

type fabric struct {
	t      testing.TB
	prefix string
	bridge string
	etcd   *etcdtest.Server // nil on KDD
	store  datastore.Store
	kv     *clientv3.Client  // etcd's; nil on KDD
	kube   *kubetest.Cluster // the datastore on KDD; nil on etcd
	vethN  int
}

// onBothDatastores runs fn on a fabric whose datastore is etcd and on one
// whose datastore is the Kubernetes API.
func onBothDatastores(t *testing.T, fn func(t *testing.T, f *fabric)) {
	t.Run("etcd", func(t *testing.T) { fn(t, newFabric(t)) })
	t.Run("kdd", func(t *testing.T) { fn(t, newKDDFabric(t)) })
}

// newKDDFabric is a fabric on the Kubernetes datastore: a kube-apiserver
// with Calico's CRDs, relayed onto every host's loopback at its own
// address, so the agents use its kubeconfig as it is.
func newKDDFabric(t testing.TB) *fabric {
	t.Helper()
	needFabric(t)
	f := &fabric{t: t, prefix: fmt.Sprintf("bgpt%d-%d", os.Getpid()%100000, fabricSeq.Add(1))}
	f.kube = kubetest.Start(t, kubetest.WithoutControllerManager())
	if out, err := f.kube.RunKubectl(nil, "apply", "-f", filepath.Join(testbin.RepoRoot(), "deploy", "crds.yaml")); err != nil {
		t.Fatalf("apply CRDs: %v\n%s", err, out)
	}
	if out, err := f.kube.RunKubectl(nil, "wait", "--for=condition=Established", "--timeout=90s", "crd", "--all"); err != nil {
		t.Fatalf("wait for CRDs: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := kdd.New(ctx, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{Kubeconfig: f.kube.Kubeconfig}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f.store = store
	f.bridge = f.newNS("br")
	f.ip(f.bridge, "link", "add", "br0", "type", "bridge")
	f.ip(f.bridge, "link", "set", "br0", "up")
	return f
}

func newFabric(t testing.TB) *fabric {
	t.Helper()
	needFabric(t)
	f := &fabric{t: t, prefix: fmt.Sprintf("bgpt%d-%d", os.Getpid()%100000, fabricSeq.Add(1))}
	f.etcd = etcdtest.Start(t, etcdtest.WithUnixSocket())
	f.kv = f.etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := storetest.Etcd(t, ctx, f.etcd.Endpoints)
	f.store = store
	f.bridge = f.newNS("br")
	f.ip(f.bridge, "link", "add", "br0", "type", "bridge")
	f.ip(f.bridge, "link", "set", "br0", "up")
	return f
}

func (f *fabric) ip(ns string, args ...string) {
	f.t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
		f.t.Fatalf("ip -n %s %s: %v: %s", ns, strings.Join(args, " "), err, out)
	}
}

func (f *fabric) newNS(suffix string) string {
	f.t.Helper()
	name := f.prefix + "-" + suffix
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		f.t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	f.t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			f.t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	f.ip(name, "link", "set", "lo", "up")
	return name
}

// host is one namespace on the fabric.
type host struct {
	ns   string
	addr netip.Addr
	nl   *netlink.Handle
}

// host adds a namespace with eth0 = addr/24 on the bridge.
func (f *fabric) host(suffix, addr string) *host {
	f.t.Helper()
	ns := f.newNS(suffix)
	f.vethN++
	peer := fmt.Sprintf("v%d", f.vethN)
	f.ip(f.bridge, "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", ns)
	f.ip(f.bridge, "link", "set", peer, "master", "br0", "up")
	f.ip(ns, "addr", "add", addr+"/24", "dev", "eth0")
	f.ip(ns, "link", "set", "eth0", "up")
	if f.kube != nil {
		f.kube.RelayInto(f.t, "/var/run/netns/"+ns)
	}
	h, err := netns.GetFromName(ns)
	if err != nil {
		f.t.Fatal(err)
	}
	nl, err := netlink.NewHandleAt(h)
	h.Close()
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(nl.Close)
	return &host{ns: ns, addr: netip.MustParseAddr(addr), nl: nl}
}

// routes returns this namespace's routes of protocol proto as
// "dst via gw" / "dst blackhole" strings.
func (h *host) routes(proto netlink.RouteProtocol) (map[string]string, error) {
	rs, err := h.nl.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: proto}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range rs {
		if r.Dst == nil {
			continue
		}
		switch {
		case r.Type == syscall.RTN_BLACKHOLE:
			out[r.Dst.String()] = "blackhole"
		case r.Gw != nil:
			out[r.Dst.String()] = "via " + r.Gw.String()
		default:
			out[r.Dst.String()] = "dev"
		}
	}
	return out, nil
}

func (h *host) calicoRoutes(t testing.TB) map[string]string {
	t.Helper()
	rs, err := h.routes(routeproto.Calico)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// proc is a process started in a namespace, ended by its PID.
type proc struct{ *proctest.Proc }

func startProc(t testing.TB, name, ns string, argv ...string) proc {
	t.Helper()
	// `ip netns exec` execs the program in place: the PID is the program's.
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.Env = append(os.Environ(), "ETCD_ENDPOINTS=", "HOSTNAME="+name)
	return proc{proctest.Start(t, name, cmd)}
}

// stop sends SIGTERM and waits; a process still running 15s later is
// killed and fails the test.
func (p proc) stop(t testing.TB) {
	t.Helper()
	if err := p.Stop(15 * time.Second); errors.Is(err, proctest.ErrKilled) {
		t.Error(err)
	}
}

// agent is `calico-node run` on a host.
type agent struct {
	f      *fabric
	h      *host
	node   string
	dir    string
	socket string
	extra  []string
	p      proc
}

func (f *fabric) agent(h *host, node string, extra ...string) *agent {
	f.t.Helper()
	dir := f.t.TempDir()
	a := &agent{f: f, h: h, node: node, dir: dir, socket: filepath.Join(dir, "bgp.sock"), extra: extra}
	if f.kube != nil {
		// The Kubernetes Node kubelet registers; the agent waits for it.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := f.kube.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
			Labels: map[string]string{"kubernetes.io/hostname": node}}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			f.t.Fatalf("create Kubernetes Node %s: %v", node, err)
		}
	}
	a.start(f.t)
	return a
}

func (a *agent) start(t testing.TB) {
	t.Helper()
	var datastoreArgs []string
	if a.f.kube != nil {
		datastoreArgs = []string{"--datastore-type=kubernetes", "--kubeconfig=" + a.f.kube.Kubeconfig}
	} else {
		datastoreArgs = []string{"--etcd-endpoints=" + a.f.etcd.UnixEndpoint}
	}
	// The endpoint status files in the agent's directory, not the
	// machine's /var/run/calico (env execs the agent in place).
	args := append(append([]string{"env", "FELIX_ENDPOINTSTATUSPATHPREFIX=" + a.dir, testbin.Path(t), "run"}, datastoreArgs...),
		"--nodename="+a.node,
		"--ip="+a.h.addr.String()+"/24",
		"--no-default-pools",
		"--data-dir="+a.dir,
		"--bgp-status-socket="+a.socket,
		// Not the machine's /var/run/calico/cni.sock: other tests' plugins
		// must not reach these agents.
		"--cni-socket="+filepath.Join(a.dir, "cni.sock"),
		"--status-socket="+filepath.Join(a.dir, "status.sock"),
		"--health-addr=127.0.0.1:9099",
		"--log-level=info",
	)
	args = append(args, a.extra...)
	a.p = startProc(t, a.node, a.h.ns, args...)
}

func (a *agent) status() (*Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return QueryStatus(ctx, a.socket)
}

func (a *agent) sessions() map[string]PeerStatus {
	out := map[string]PeerStatus{}
	if st, err := a.status(); err == nil {
		for _, p := range st.Peers {
			out[p.Address] = p
		}
	}
	return out
}

// waitSessions waits until the agent's sessions are exactly peers, all
// Established.
func (a *agent) waitSessions(t testing.TB, timeout time.Duration, peers ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if !a.p.Running() {
			t.Fatalf("agent %s exited", a.node)
		}
		ss := a.sessions()
		ok := len(ss) == len(peers)
		var parts []string
		for _, p := range peers {
			s, found := ss[p]
			if !found || s.BGPState != StateEstablished {
				ok = false
			}
		}
		for addr, s := range ss {
			parts = append(parts, addr+"="+s.BGPState+" "+s.LastError)
		}
		last = strings.Join(parts, ", ")
		if ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: sessions not established with %v within %s; have: %s", a.node, peers, timeout, last)
}

// waitRoutes waits until the host's proto-80 routes include every want
// entry (dst -> "via x" / "blackhole") and none of the absent ones.
func waitRoutes(t testing.TB, h *host, timeout time.Duration, want map[string]string, absent ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got map[string]string
	for time.Now().Before(deadline) {
		got = h.calicoRoutes(t)
		ok := true
		for dst, v := range want {
			if got[dst] != v {
				ok = false
			}
		}
		for _, dst := range absent {
			if _, present := got[dst]; present {
				ok = false
			}
		}
		if ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: routes (proto 80) = %v; want %v without %v", h.ns, got, want, absent)
}

func (f *fabric) apply(objs ...api.Object) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, o := range objs {
		if _, err := f.store.Apply(ctx, o); err != nil {
			f.t.Fatalf("apply %s %s: %v", o.Type().Kind, o.Meta().Name, err)
		}
	}
}

func (f *fabric) applyYAML(path string) {
	f.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		f.t.Fatal(err)
	}
	docs, err := api.Decode(data)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, d := range docs {
		if d.Err != nil {
			f.t.Fatalf("%s: %v", path, d.Err)
		}
		f.apply(d.Object)
	}
}

// label sets labels on a registered Node.
func (f *fabric) label(node string, kv ...string) {
	f.t.Helper()
	f.updateNode(node, "label", func(n *api.Node) error {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
		return nil
	})
}

// updateNode applies change to a registered Node, retrying while the
// node's agent registers it or races the write, or change refuses the
// Node as it is yet; what names the change.
func (f *fabric) updateNode(node, what string, change func(*api.Node) error) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	for {
		obj, err := f.store.Get(ctx, "Node", "", node)
		if err == nil {
			n := obj.(*api.Node)
			if err = change(n); err == nil {
				if _, err = f.store.Update(ctx, n); err == nil {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s node %s: %v", what, node, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// put writes an IPAM key: straight into etcd, or through the Kubernetes
// datastore's IPAM store onto its custom resource.
func (f *fabric) put(key string, v any) {
	f.t.Helper()
	if f.kube == nil {
		putJSON(f.t, f.kv, key, v)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		f.t.Fatal(err)
	}
	f.kvWrite(datastore.Op{Type: datastore.OpPut, Key: key, Value: b})
}

func (f *fabric) del(key string) {
	f.t.Helper()
	if f.kube != nil {
		f.kvWrite(datastore.Op{Type: datastore.OpDelete, Key: key})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := f.kv.Delete(ctx, key); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fabric) kvWrite(op datastore.Op) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := f.store.IPAM().Txn(ctx, datastore.Txn{Ops: []datastore.Op{op}}); err != nil || !res.Succeeded {
		f.t.Fatalf("write %s: %v %v", op.Key, res, err)
	}
}

func (f *fabric) affine(node, cidr string) {
	f.put(affinityKey(node, cidr), map[string]any{"state": "confirmed", "deleted": false})
}

// bird is a BIRD 2 daemon in a namespace.
type bird struct {
	h    *host
	sock string
	p    proc
}

func (f *fabric) bird(h *host, config string) *bird {
	f.t.Helper()
	needBIRD(f.t)
	dir := f.t.TempDir()
	conf := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(conf, []byte(config), 0o644); err != nil {
		f.t.Fatal(err)
	}
	b := &bird{h: h, sock: filepath.Join(dir, "bird.ctl")}
	b.p = startProc(f.t, "bird-"+h.addr.String(), h.ns, "bird", "-f", "-c", conf, "-s", b.sock)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && b.p.Running() {
		// The control socket answers once the configuration is in.
		if out, err := exec.Command("birdc", "-s", b.sock, "show", "status").CombinedOutput(); err == nil &&
			strings.Contains(string(out), "Daemon is up and running") && b.p.Running() {
			return b
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.t.Fatalf("bird did not start:\n%s", b.p.Log.String())
	return nil
}

func (b *bird) ctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("birdc", append([]string{"-s", b.sock}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("birdc %v: %v: %s", args, err, out)
	}
	return string(out)
}

// waitEstablished waits until BIRD reports every named protocol up.
func (b *bird) waitEstablished(t testing.TB, timeout time.Duration, protos ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out string
	for time.Now().Before(deadline) {
		out = b.ctl(t, "show", "protocols")
		ok := true
		for _, p := range protos {
			found := false
			for _, line := range strings.Split(out, "\n") {
				f := strings.Fields(line)
				if len(f) > 0 && f[0] == p && strings.Contains(line, "Established") {
					found = true
				}
			}
			if !found {
				ok = false
			}
		}
		if ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("BIRD sessions %v not established:\n%s", protos, out)
}
