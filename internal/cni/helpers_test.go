package cni_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/etcd"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// Reference plugins from github.com/containernetworking/plugins, built once
// per test process.
var refPlugins struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}

func referencePlugins(t testing.TB) string {
	t.Helper()
	refPlugins.once.Do(func() {
		refPlugins.dir, refPlugins.err = os.MkdirTemp("", "cni-ref-plugins-")
		if refPlugins.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", refPlugins.dir+"/",
			"github.com/containernetworking/plugins/plugins/ipam/host-local",
			"github.com/containernetworking/plugins/plugins/main/ptp",
			"github.com/containernetworking/plugins/plugins/meta/tuning")
		cmd.Dir = repoRoot()
		refPlugins.out, refPlugins.err = cmd.CombinedOutput()
	})
	if refPlugins.err != nil {
		t.Fatalf("build reference plugins: %v\n%s", refPlugins.err, refPlugins.out)
	}
	return refPlugins.dir
}

func cleanupReferencePlugins() {
	if refPlugins.dir != "" {
		os.RemoveAll(refPlugins.dir)
	}
}

func repoRoot() string { return testbin.RepoRoot() }

// env is one node's CNI setup: etcd, the plugin binaries in a CNI bin dir,
// a libcni instance as a runtime has, and files the configs point at.
type env struct {
	t    testing.TB
	etcd *etcdtest.Server
	// kube is the API server of an env on the Kubernetes datastore
	// (newKDDEnv); etcd is nil then.
	kube *kubetest.Cluster
	*conn
	binDir   string
	cacheDir string
	dataDir  string // host-local's
	lockFile string
	node     string
	cni      *libcni.CNIConfig
	ctx      context.Context
}

type envOption func(*envOptions)

type envOptions struct{ tls bool }

func withTLS() envOption { return func(o *envOptions) { o.tls = true } }

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	requireNode(t)
	var o envOptions
	for _, opt := range opts {
		opt(&o)
	}
	var srvOpts []etcdtest.Option
	if o.tls {
		srvOpts = append(srvOpts, etcdtest.WithTLS())
	}
	srv := etcdtest.Start(t, srvOpts...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	store, err := etcd.New(ctx, datastore.Config{
		Endpoints: srv.Endpoints, CACertFile: srv.CACertFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile,
	})
	if err != nil {
		t.Fatalf("open datastore: %v", err)
	}

	e := newEnvOn(t, ctx, &conn{store: store, kv: store.Etcd(), ipam: ipam.New(store.IPAM(), store, nil)})
	e.etcd = srv
	ref := referencePlugins(t)
	for _, p := range []string{"host-local", "ptp", "tuning"} {
		if err := os.Symlink(filepath.Join(ref, p), filepath.Join(e.binDir, p)); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// newEnvOn is an env around the test's datastore connection c, which it
// closes when the test ends; ctx bounds the test.
func newEnvOn(t testing.TB, ctx context.Context, c *conn) *env {
	t.Helper()
	tmp := t.TempDir()
	e := &env{
		t: t, conn: c,
		binDir:   testbin.Dir(t),
		cacheDir: filepath.Join(tmp, "cache"),
		dataDir:  filepath.Join(tmp, "host-local"),
		lockFile: filepath.Join(tmp, "ipam.lock"),
		node:     "node1",
		ctx:      ctx,
	}
	e.cni = libcni.NewCNIConfigWithCacheDir([]string{e.binDir}, e.cacheDir, nil)
	t.Cleanup(func() { e.conn.store.Close() })
	return e
}

// conn is the test's own datastore connection, shared by the env's
// copies (see in) so that reconnect fixes it for all of them.
type conn struct {
	store datastore.Store
	kv    *clientv3.Client
	ipam  *ipam.Client
}

// reconnect replaces the test's connection after etcd restarted (the old
// client would wait out its reconnect backoff).
func (e *env) reconnect() {
	e.t.Helper()
	store, err := etcd.New(e.ctx, datastore.Config{
		Endpoints: e.etcd.Endpoints, CACertFile: e.etcd.CACertFile, CertFile: e.etcd.CertFile, KeyFile: e.etcd.KeyFile,
	})
	if err != nil {
		e.t.Fatalf("reopen datastore: %v", err)
	}
	old := e.conn.store
	*e.conn = conn{store: store, kv: store.Etcd(), ipam: ipam.New(store.IPAM(), store, nil)}
	old.Close()
}

// in returns the env for use in subtest t: its helpers then fail t.
func (e *env) in(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// addPool creates an IPPool.
func (e *env) addPool(name, cidr string, blockSize int) {
	e.t.Helper()
	p := &api.IPPool{
		TypeMeta:   api.TypeMeta{Kind: "IPPool", APIVersion: api.GroupVersion},
		ObjectMeta: api.ObjectMeta{Name: name},
		Spec:       api.IPPoolSpec{CIDR: cidr, BlockSize: blockSize},
	}
	if _, err := e.store.Create(e.ctx, p); err != nil {
		e.t.Fatalf("create pool %s: %v", cidr, err)
	}
}

// conf is a calico network config for this env: etcd, node name, lock
// file, MTU and the given fields merged in ("ipam", "cniVersion", ...).
// Node name and MTU are explicit so that the plugin never reads the
// machine's /var/lib/calico (TestNodename and TestMTU cover the defaults).
func (e *env) conf(cniVersion string, extra map[string]any) []byte {
	e.t.Helper()
	c := map[string]any{
		"cniVersion":     cniVersion,
		"name":           "k8s-pod-network",
		"type":           "calico",
		"nodename":       e.node,
		"ipam_lock_file": e.lockFile,
		"mtu":            1500,
		"log_level":      "debug",
		"ipam":           map[string]any{"type": "calico-ipam"},
	}
	switch {
	case e.kube != nil:
		c["datastore_type"] = datastore.TypeKubernetes
		c["kubernetes"] = map[string]any{"kubeconfig": e.kube.Kubeconfig}
	default:
		c["etcd_endpoints"] = strings.Join(e.etcd.Endpoints, ",")
		if e.etcd.CACertFile != "" {
			c["etcd_ca_cert_file"] = e.etcd.CACertFile
			c["etcd_cert_file"] = e.etcd.CertFile
			c["etcd_key_file"] = e.etcd.KeyFile
		}
	}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	if cniVersion == "" {
		delete(c, "cniVersion")
	}
	data, err := json.Marshal(c)
	if err != nil {
		e.t.Fatal(err)
	}
	return data
}

// hostLocal is an ipam section for the reference host-local plugin.
func (e *env) hostLocal(ranges ...string) map[string]any {
	var sets [][]map[string]string
	for _, r := range ranges {
		sets = append(sets, []map[string]string{{"subnet": r}})
	}
	return map[string]any{"type": "host-local", "ranges": sets, "dataDir": e.dataDir}
}

// pod is a pod network namespace and the runtime's view of it.
type pod struct {
	ns   ns.NetNS
	name string // the namespace's name under /var/run/netns
	rt   *libcni.RuntimeConf
}

var podSeq struct {
	sync.Mutex
	n int
}

// newPod creates a pod namespace; k8s names the pod (namespace, name) in
// CNI_ARGS as kubelet does.
func newPod(t testing.TB, k8s ...string) *pod {
	t.Helper()
	podNS, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create pod netns: %v", err)
	}
	t.Cleanup(func() {
		podNS.Close()
		testutils.UnmountNS(podNS)
	})
	podSeq.Lock()
	podSeq.n++
	id := fmt.Sprintf("c%08d", podSeq.n)
	podSeq.Unlock()
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: podNS.Path(), IfName: "eth0"}
	if len(k8s) == 2 {
		rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", k8s[0]}, {"K8S_POD_NAME", k8s[1]}, {"K8S_POD_INFRA_CONTAINER_ID", id}}
	}
	return &pod{ns: podNS, name: filepath.Base(podNS.Path()), rt: rt}
}

// dropPath removes the pod namespace's path, as a runtime does when it
// tears a sandbox down, while a reference keeps the namespace itself (and
// the veth into it) alive until the test ends: the kernel has not
// destroyed it yet, which under load lasts a while.
func (p *pod) dropPath(t testing.TB) {
	t.Helper()
	hold, err := os.Open(p.ns.Path())
	if err != nil {
		t.Fatalf("hold pod netns: %v", err)
	}
	t.Cleanup(func() { hold.Close() })
	p.ns.Close()
	if out := ipOut(t, nil, "netns", "delete", p.name); out != "" {
		t.Logf("ip netns delete: %s", out)
	}
}

// addThenDropNetNS adds a plain-CNI pod with conf, then removes its
// namespace's path as a runtime tearing the sandbox down does (dropPath);
// it returns the pod and its host veth, which is still there.
func (e *env) addThenDropNetNS(conf []byte) (*pod, string) {
	e.t.Helper()
	p := newPod(e.t)
	e.mustAdd(conf, p)
	p.dropPath(e.t)
	veth := "cali" + p.rt.ContainerID
	if _, err := netlink.LinkByName(veth); err != nil {
		e.t.Fatalf("host veth %s gone before DEL: %v", veth, err)
	}
	return p, veth
}

// add runs ADD through libcni as a runtime does.
func (e *env) add(conf []byte, p *pod) (*types100.Result, error) {
	e.t.Helper()
	net, err := libcni.ConfFromBytes(conf)
	if err != nil {
		e.t.Fatalf("libcni rejects the config: %v\n%s", err, conf)
	}
	r, err := e.cni.AddNetwork(e.ctx, net, p.rt)
	if err != nil {
		return nil, err
	}
	res, err := types100.NewResultFromResult(r)
	if err != nil {
		e.t.Fatalf("convert result: %v", err)
	}
	return res, nil
}

func (e *env) mustAdd(conf []byte, p *pod) *types100.Result {
	e.t.Helper()
	res, err := e.add(conf, p)
	if err != nil {
		e.t.Fatalf("ADD %s: %v", p.rt.ContainerID, err)
	}
	return res
}

func (e *env) check(conf []byte, p *pod) error {
	e.t.Helper()
	net, err := libcni.ConfFromBytes(conf)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.cni.CheckNetwork(e.ctx, net, p.rt)
}

func (e *env) del(conf []byte, p *pod) error {
	e.t.Helper()
	net, err := libcni.ConfFromBytes(conf)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.cni.DelNetwork(e.ctx, net, p.rt)
}

func (e *env) mustDel(conf []byte, p *pod) {
	e.t.Helper()
	if err := e.del(conf, p); err != nil {
		e.t.Fatalf("DEL %s: %v", p.rt.ContainerID, err)
	}
}

// cniCode extracts the CNI error code from a libcni error.
func cniCode(err error) (uint, string) {
	if e, ok := err.(*types.Error); ok {
		return e.Code, e.Msg
	}
	return 0, fmt.Sprint(err)
}

// endpoints lists the stored endpoints of a container (any interface).
func (e *env) endpoints(namespace string) map[string]*api.WorkloadEndpoint {
	e.t.Helper()
	objs, _, err := e.store.List(e.ctx, "WorkloadEndpoint", namespace)
	if err != nil {
		e.t.Fatalf("list endpoints: %v", err)
	}
	out := map[string]*api.WorkloadEndpoint{}
	for _, o := range objs {
		ep := o.(*api.WorkloadEndpoint)
		out[ep.Name] = ep
	}
	return out
}

func (e *env) endpointsOf(containerID string) []*api.WorkloadEndpoint {
	e.t.Helper()
	var out []*api.WorkloadEndpoint
	for _, ep := range e.endpoints("") {
		if ep.Spec.ContainerID == containerID {
			out = append(out, ep)
		}
	}
	return out
}

// heldBy returns the addresses a handle holds.
func (e *env) heldBy(handle string) []netip.Addr {
	e.t.Helper()
	ips, err := e.ipam.IPsByHandle(e.ctx, handle)
	if err != nil {
		e.t.Fatalf("addresses of %s: %v", handle, err)
	}
	return ips
}

// assertNothingLeft fails when anything of the container survives: its
// host veth, its IPAM handle (with or without addresses), its endpoint, a
// host-local reservation.
func (e *env) assertNothingLeft(network string, p *pod, hostVeth string) {
	e.t.Helper()
	if hostVeth != "" {
		if _, err := netlink.LinkByName(hostVeth); err == nil {
			e.t.Errorf("host veth %s is still there", hostVeth)
		}
	}
	handle := network + "." + p.rt.ContainerID
	if ips := e.heldBy(handle); len(ips) > 0 {
		e.t.Errorf("handle %s still holds %v", handle, ips)
	}
	resp, err := e.kv.Get(e.ctx, ipam.HandleKey(handle))
	if err != nil {
		e.t.Fatal(err)
	}
	if len(resp.Kvs) > 0 {
		e.t.Errorf("handle key %s is still stored: %s", handle, resp.Kvs[0].Value)
	}
	if eps := e.endpointsOf(p.rt.ContainerID); len(eps) > 0 {
		e.t.Errorf("workload endpoint %s is still stored", eps[0].Name)
	}
	// host-local keeps one file per address, holding the container ID.
	filepath.WalkDir(e.dataDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if data, _ := os.ReadFile(path); strings.HasPrefix(string(data), p.rt.ContainerID) {
			e.t.Errorf("host-local still holds %s for %s", filepath.Base(path), p.rt.ContainerID)
		}
		return nil
	})
}

// inPod runs f inside the pod's namespace.
func inPod(t testing.TB, p *pod, f func() error) {
	t.Helper()
	if err := p.ns.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatal(err)
	}
}

// ipOut runs iproute2 (in the pod's namespace when p is set) and returns
// its output.
func ipOut(t testing.TB, p *pod, args ...string) string {
	t.Helper()
	if p != nil {
		args = append([]string{"-n", p.name}, args...)
	}
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func readSysctl(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc/sys", path))
	if err != nil {
		t.Fatalf("read sysctl %s: %v", path, err)
	}
	return strings.TrimSpace(string(data))
}

// podSysctl reads a sysctl inside the pod.
func podSysctl(t testing.TB, p *pod, path string) string {
	t.Helper()
	var v string
	inPod(t, p, func() error {
		data, err := os.ReadFile(filepath.Join("/proc/sys", path))
		v = strings.TrimSpace(string(data))
		return err
	})
	return v
}

// k8sVethName is Calico's name for a Kubernetes pod's host veth.
func k8sVethName(namespace, pod string) string {
	sum := sha1.Sum([]byte(namespace + "." + pod))
	return "cali" + hex.EncodeToString(sum[:])[:11]
}

func ipNetOf(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
