package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/pkitest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

const (
	nodeName = "node1"
	nodeIP   = "192.0.2.1"   // on uplink0
	extIP    = "192.0.2.254" // the outside namespace's end of uplink0
	poolCIDR = "10.65.0.0/16"
	// resync is FELIX_IPTABLESREFRESHINTERVAL for the agent under test:
	// short, so that drift repair is observable.
	resync = 2 * time.Second
)

// node is the test node: etcd and a fake Kubernetes API (newNode), or a
// real kube-apiserver as the datastore (newKDDNode, kdd_test.go), the
// agent and the CNI plugin, all in this process's (private) network
// namespace.
type node struct {
	t       *testing.T
	ctx     context.Context
	etcd    *etcdtest.Server // nil on KDD
	store   datastore.Store
	kube    *fakeKube         // nil on KDD
	kc      *kubetest.Cluster // the datastore on KDD; nil on etcd
	binDir  string
	dataDir string
	// lockFile is the plugins' IPAM lock (not the machine's); kubeconfig
	// their way to the fake API.
	lockFile, kubeconfig string
	cni                  *libcni.CNIConfig
	conf                 *libcni.NetworkConfigList
	ext                  ns.NetNS // the outside, behind uplink0
	agent                proc
}

func newNode(t *testing.T) *node {
	t.Helper()
	requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	n := &node{t: t, ctx: ctx, binDir: testbin.Dir(t), dataDir: t.TempDir()}
	n.etcd = etcdtest.Start(t)
	n.store = storetest.Etcd(t, ctx, n.etcd.Endpoints)
	n.kube = newFakeKube(t)
	n.setupUplink()

	cacheDir := filepath.Join(t.TempDir(), "cni-cache")
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{n.binDir}, cacheDir, nil)
	n.lockFile = filepath.Join(t.TempDir(), "ipam.lock")
	n.kubeconfig = n.kube.kubeconfig(t)
	n.conf = n.confList(t, nil)
	return n
}

// confList is the node's CNI network configuration with extra fields
// of the calico plugin's (nil values delete).
func (n *node) confList(t testing.TB, extra map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	plugin := map[string]any{
		"type":           "calico",
		"etcd_endpoints": strings.Join(n.etcd.Endpoints, ","),
		"nodename":       nodeName,
		"mtu":            1500, // not the machine's /var/lib/calico/mtu
		"ipam_lock_file": n.lockFile,
		"ipam":           map[string]any{"type": "calico-ipam"},
		"kubernetes":     map[string]any{"kubeconfig": n.kubeconfig},
		// The agent's, in the node's private run directory (TestMain).
		"endpoint_status_dir": filepath.Join(os.Getenv("FELIX_ENDPOINTSTATUSPATHPREFIX"), "endpoint-status"),
	}
	for k, v := range extra {
		if v == nil {
			delete(plugin, k)
		} else {
			plugin[k] = v
		}
	}
	conf, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "k8s-pod-network", "plugins": []any{plugin}})
	list, err := libcni.ConfListFromBytes(conf)
	if err != nil {
		t.Fatalf("libcni rejects the config: %v", err)
	}
	return list
}

// setupUplink gives the node its "NIC": uplink0 (nodeIP) with its peer in
// the outside namespace (extIP).
func (n *node) setupUplink() {
	t := n.t
	ext, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create outside netns: %v", err)
	}
	t.Cleanup(func() { ext.Close(); testutils.UnmountNS(ext) })
	n.ext = ext
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "uplink0"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "uplink0p"}); err != nil {
		t.Fatalf("add uplink: %v", err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName("uplink0"); err == nil {
			netlink.LinkDel(l)
		}
	})
	peer, err := netlink.LinkByName("uplink0p")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetNsFd(peer, int(ext.Fd())); err != nil {
		t.Fatalf("move uplink peer: %v", err)
	}
	run(t, "ip", "addr", "add", nodeIP+"/24", "dev", "uplink0")
	run(t, "ip", "link", "set", "uplink0", "up")
	// A default route, as every node has: proxy ARP answers for the pods'
	// gateway (169.254.1.1) only when the node has a route to it.
	run(t, "ip", "route", "add", "default", "via", extIP, "dev", "uplink0")
	extName := filepath.Base(ext.Path())
	run(t, "ip", "-n", extName, "link", "set", "lo", "up")
	run(t, "ip", "-n", extName, "addr", "add", extIP+"/24", "dev", "uplink0p")
	run(t, "ip", "-n", extName, "link", "set", "uplink0p", "up")
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// startAgent runs `calico-node run` with the dataplane on and BGP off
// and waits until it has programmed the dataplane.
func (n *node) startAgent(t testing.TB) {
	t.Helper()
	n.launchAgent(t)
	n.waitProgrammed(t, 1)
}

// launchAgent starts `calico-node run` and does not wait for it.
func (n *node) launchAgent(t testing.TB) {
	t.Helper()
	var datastoreArgs []string
	if n.kc != nil {
		datastoreArgs = []string{"--datastore-type=kubernetes", "--kubeconfig=" + n.kc.Kubeconfig}
	} else {
		datastoreArgs = []string{"--etcd-endpoints=" + strings.Join(n.etcd.Endpoints, ",")}
	}
	cmd := exec.Command(filepath.Join(n.binDir, "calico-node"), append([]string{"run"}, append(datastoreArgs,
		"--nodename="+nodeName,
		"--ip="+nodeIP+"/24",
		"--no-default-pools",
		"--data-dir="+n.dataDir,
		"--health-addr=127.0.0.1:9099",
		"--log-level="+cmp.Or(os.Getenv("CALICO_INTEGRATION_LOGLEVEL"), "info"),
	)...)...)
	cmd.Env = append(os.Environ(),
		"ETCD_ENDPOINTS=", "DATASTORE_TYPE=", "KUBECONFIG=", "CALICO_NETWORKING_BACKEND=none", "CALICO_DATAPLANE=iptables",
		"FELIX_IPTABLESREFRESHINTERVAL="+strconv.Itoa(int(resync/time.Second)),
		"FELIX_IPV6SUPPORT=false", "HOSTNAME="+nodeName)
	// The agent outlives the subtest that (re)starts it: it belongs to
	// the node's test.
	n.agent = proc{proctest.Start(n.t, "calico-node", cmd)}
	if dir := os.Getenv("CALICO_INTEGRATION_LOGDIR"); dir != "" {
		// Every agent's whole output, for debugging a failure.
		a, path := n.agent, filepath.Join(dir, fmt.Sprintf("%s-agent-%d.log", strings.ReplaceAll(n.t.Name(), "/", "_"), n.agent.Cmd.Process.Pid))
		n.t.Cleanup(func() { os.WriteFile(path, []byte(a.Log.String()), 0o644) })
	}
}

// waitProgrammed waits until the running agent has programmed the
// dataplane at least count times (its apply-latency histogram).
func (n *node) waitProgrammed(t testing.TB, count int) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^calico_dataplane_apply_latency_seconds_count (\d+)`)
	n.agent.WaitFor(t, 60*time.Second, "dataplane programmed", func() bool {
		resp, err := http.Get("http://127.0.0.1:9099/metrics")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := re.FindSubmatch(body)
		if m == nil {
			return false
		}
		c, _ := strconv.Atoi(string(m[1]))
		return c >= count
	})
}

// metric reads one sample of the agent's /metrics (0 when absent).
func (n *node) metric(t testing.TB, sample string) float64 {
	t.Helper()
	return proctest.Metric(t, "http://127.0.0.1:9099/metrics", sample)
}

// apply stores every resource of a YAML document stream (as calicoctl
// apply does) and returns an undo that deletes them.
func (n *node) apply(t testing.TB, yaml string) func() {
	t.Helper()
	objs := storetest.Objects(t, yaml)
	for _, o := range objs {
		n.applyObject(t, o)
	}
	return func() {
		for i := len(objs) - 1; i >= 0; i-- {
			n.deleteObject(t, objs[i])
		}
	}
}

func (n *node) applyObject(t testing.TB, o api.Object) {
	t.Helper()
	if _, err := n.store.Apply(n.ctx, o); err != nil {
		t.Fatalf("apply %s %s: %v", o.Type().Kind, o.Meta().Name, err)
	}
}

func (n *node) deleteObject(t testing.TB, o api.Object) {
	t.Helper()
	if _, err := n.store.Delete(n.ctx, o.Type().Kind, o.Meta().Namespace, o.Meta().Name, ""); err != nil {
		t.Errorf("delete %s %s: %v", o.Type().Kind, o.Meta().Name, err)
	}
}

// pod is a pod namespace networked by the CNI plugin.
type pod struct {
	name string
	ns   ns.NetNS
	ip   string
}

// addPod registers the pod with the Kubernetes API (fake or real) and
// runs CNI ADD through libcni exactly as a container runtime does; DEL
// runs in cleanup.
func (n *node) addPod(t *testing.T, namespace, name, sa string, labels map[string]string, ports ...corev1.ContainerPort) *pod {
	t.Helper()
	k8sPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: nodeName, ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "c", Image: "none", Ports: ports}}},
	}
	n.registerPod(t, k8sPod)
	p, err := n.cniAdd(t, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	p.serve(t)
	return p
}

// registerPod makes the pod known to the Kubernetes API, fake or real, as
// it is when kubelet asks for its network.
func (n *node) registerPod(t testing.TB, p *corev1.Pod) {
	t.Helper()
	if n.kc != nil {
		n.createKubePod(t, p)
	} else {
		n.kube.addPod(p)
	}
}

// cniAdd runs CNI ADD for a pod in a new namespace as a container runtime
// does (container ID "ctr-<name>") and registers its DEL for cleanup,
// also when ADD fails, as a runtime cleans up a failed sandbox.
func (n *node) cniAdd(t *testing.T, namespace, name string) (*pod, error) {
	t.Helper()
	netNS, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create pod netns: %v", err)
	}
	id := "ctr-" + name
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: netNS.Path(), IfName: "eth0", Args: [][2]string{
		{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", namespace}, {"K8S_POD_NAME", name}, {"K8S_POD_INFRA_CONTAINER_ID", id}}}
	r, err := n.cni.AddNetworkList(n.ctx, n.conf, rt)
	t.Cleanup(func() {
		if err := n.cni.DelNetworkList(context.Background(), n.conf, rt); err != nil {
			t.Errorf("CNI DEL %s: %v", name, err)
		}
		netNS.Close()
		testutils.UnmountNS(netNS)
	})
	p := &pod{name: name, ns: netNS}
	if err != nil {
		return p, fmt.Errorf("CNI ADD %s/%s: %w", namespace, name, err)
	}
	res, err := types100.NewResultFromResult(r)
	if err != nil || len(res.IPs) == 0 {
		return p, fmt.Errorf("CNI ADD %s/%s: result %v: %v", namespace, name, r, err)
	}
	p.ip = res.IPs[0].Address.IP.String()
	return p, nil
}

// probePorts are where every pod (and the node) listens.
var probePorts = []int{8080, 9050}

// serve starts echo servers in the pod: TCP and UDP on probePorts.
func (p *pod) serve(t *testing.T) {
	t.Helper()
	err := p.ns.Do(func(ns.NetNS) error { return listenEcho(t, probePorts...) })
	if err != nil {
		t.Fatalf("listen in %s: %v", p.name, err)
	}
}

// listenEcho starts TCP and UDP echo servers in the calling thread's
// namespace (a socket keeps the namespace it was made in).
func listenEcho(t *testing.T, ports ...int) error {
	for _, port := range ports {
		l, err := net.Listen("tcp4", fmt.Sprintf(":%d", port))
		if err != nil {
			return err
		}
		netnstest.Serve(t, l, func(c net.Conn) { io.Copy(c, c) })
		u, err := net.ListenPacket("udp4", fmt.Sprintf(":%d", port))
		if err != nil {
			return err
		}
		t.Cleanup(func() { u.Close() })
		go func() {
			buf := make([]byte, 1500)
			for {
				k, addr, err := u.ReadFrom(buf)
				if err != nil {
					return
				}
				u.WriteTo(buf[:k], addr)
			}
		}()
	}
	return nil
}

const probeTimeout = 400 * time.Millisecond

// probe reports whether proto ("tcp", "udp", "icmp") traffic from the
// namespace src reaches dst (port ignored for icmp).
func probe(src ns.NetNS, proto, dst string, port int) bool {
	addr := net.JoinHostPort(dst, strconv.Itoa(port))
	switch proto {
	case "icmp":
		return pingOnce(src, dst)
	case "tcp":
		ok := false
		src.Do(func(ns.NetNS) error {
			c, err := net.DialTimeout("tcp4", addr, probeTimeout)
			if err == nil {
				ok = true
				c.Close()
			}
			return nil
		})
		return ok
	case "udp":
		var c net.Conn
		src.Do(func(ns.NetNS) error {
			var err error
			c, err = net.Dial("udp4", addr)
			return err
		})
		if c == nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(probeTimeout))
		if _, err := c.Write([]byte("ping")); err != nil {
			return false
		}
		buf := make([]byte, 16)
		k, err := c.Read(buf)
		return err == nil && string(buf[:k]) == "ping"
	}
	panic("unknown protocol " + proto)
}

var pingID atomic.Uint32

// pingOnce sends one ICMP echo request from src to dst and waits for the
// reply (a raw socket: the test runs as root; no ping binary needed).
func pingOnce(src ns.NetNS, dst string) bool {
	var c *icmp.PacketConn
	src.Do(func(ns.NetNS) error {
		var err error
		c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	})
	if c == nil {
		return false
	}
	defer c.Close()
	id := int(pingID.Add(1) & 0xffff)
	msg, _ := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: 1, Data: []byte("probe")}}).Marshal(nil)
	dstAddr := &net.IPAddr{IP: net.ParseIP(dst)}
	if _, err := c.WriteTo(msg, dstAddr); err != nil {
		return false
	}
	c.SetReadDeadline(time.Now().Add(probeTimeout))
	buf := make([]byte, 1500)
	for {
		k, from, err := c.ReadFrom(buf)
		if err != nil {
			return false
		}
		m, err := icmp.ParseMessage(1, buf[:k])
		if err != nil || m.Type != ipv4.ICMPTypeEchoReply || from.String() != dst {
			continue
		}
		if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id {
			return true
		}
	}
}

// caliRules is the cali part of iptables-save for table filter (and the
// hooks into it), without counters: what the agent owns.
func caliRules(t testing.TB) string {
	t.Helper()
	var keep []string
	for _, table := range []string{"filter", "nat", "mangle", "raw"} {
		for _, l := range strings.Split(run(t, "iptables-save", "-t", table), "\n") {
			if strings.Contains(l, "cali") {
				if strings.HasPrefix(l, ":") {
					l, _, _ = strings.Cut(l, " [")
				}
				keep = append(keep, table+": "+l)
			}
		}
	}
	return strings.Join(keep, "\n")
}

// proc is a process this test started, ended by its PID.
type proc struct{ *proctest.Proc }

// stop sends SIGTERM and waits; a process still running 15s later is
// killed and fails the test.
func (p proc) stop(t testing.TB) {
	t.Helper()
	if err := p.Stop(15 * time.Second); errors.Is(err, proctest.ErrKilled) {
		t.Error(err)
	}
}

// fakeKube serves the reads the CNI plugin makes (pods, namespaces) as
// kube-apiserver encodes them.
type fakeKube struct {
	srv    *httptest.Server
	caFile string
	mu     sync.Mutex
	objs   map[string]any // URL path -> object
}

func newFakeKube(t *testing.T) *fakeKube {
	f := &fakeKube{objs: map[string]any{}}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		obj, ok := f.objs[strings.TrimSuffix(r.URL.Path, "/")]
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: "Failure", Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound})
			return
		}
		json.NewEncoder(w).Encode(obj)
	}))
	t.Cleanup(f.srv.Close)
	f.caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := pkitest.WriteCert(f.caFile, f.srv.Certificate().Raw); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeKube) addNamespace(name string, labels map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objs["/api/v1/namespaces/"+name] = &corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func (f *fakeKube) addPod(p *corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	f.objs["/api/v1/namespaces/"+p.Namespace+"/pods/"+p.Name] = p
}

func (f *fakeKube) kubeconfig(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	data := "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: " + f.srv.URL +
		"\n    certificate-authority: " + f.caFile +
		"\nusers:\n- name: cni\n  user:\n    token: t0ken\ncontexts:\n- name: test\n  context: {cluster: test, user: cni}\ncurrent-context: test\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
