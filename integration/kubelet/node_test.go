package kubelet

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

const (
	podCIDR = "10.244.0.0/16" // CALICO_IPV4POOL_CIDR
	ptpCIDR = "10.88.0.0/24"
	podWait = 60 * time.Second
)

// The DaemonSet's CNI template (deploy/calico-node.yaml: calico, then
// portmap and bandwidth) plus nodename_file, ipam_lock_file and
// endpoint_status_dir: the agent's data dir is a temporary one here, not
// the /var/lib/calico the plugin reads by default, and the IPAM lock and
// the agent's endpoint status files are the test's, not the machine's
// /var/run/calico.
const cniTemplate = `{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "calico",
      "etcd_endpoints": "__ETCD_ENDPOINTS__",
      "log_level": "info",
      "nodename_file": "%s",
      "ipam_lock_file": "%s",
      "endpoint_status_dir": "%s",
      "mtu": __CNI_MTU__,
      "ipam": {"type": "calico-ipam"},
      "policy": {"type": "k8s"},
      "kubernetes": {"kubeconfig": "__KUBECONFIG_FILEPATH__"}
    },
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}},
    {"type": "bandwidth", "capabilities": {"bandwidth": true}}
  ]
}`

// Ports and rates of the hostPort and bandwidth pods.
const (
	hostPort   = "18080"
	egressRate = 10_000_000 // kubernetes.io/egress-bandwidth: 10M (bit/s)
)

// TestKubeletNode runs pods on a real kubelet with calico-node as CNI,
// IPAM, policy controllers and dataplane.
func TestKubeletNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: runs kubelet, containerd and the agent in a network namespace of its own")
	}
	// Registered first, so they run last: after the node and agent are
	// gone. The machine's Calico state (here a chain and a set the test
	// made in its namespace) is not the node's: it must survive untouched.
	foreign := newForeignState(t)
	t.Cleanup(func() { foreign.check(t) })
	kubetest.CheckHostRestored(t)

	kube := kubetest.Start(t, kubetest.WithAPIServerArgs(kubetest.NodeAPIServerArgs()...))
	etcd := etcdtest.Start(t)
	node := kubetest.StartNode(t, kube)

	// --- baseline: the reference ptp plugin ---
	ptpConf := filepath.Join(node.CNIConfDir, "05-ptp.conflist")
	writeFile(t, ptpConf, fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "ptp", "plugins": [{"type": "ptp", "mtu": 1400,
		"ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}}]}`, ptpCIDR, filepath.Join(node.Dir, "host-local")))
	node.WaitReady(t, 60*time.Second)
	// ptp-0 is the node's first pod: it also pays for unpacking the
	// images and the first sandbox, so it is reported apart.
	ptpFirst := kube.RunPod(t, "ptp-0", "app: ptp", []string{"sleep", "3600"}, podWait)
	ptpTimes := []time.Duration{
		kube.RunPod(t, "ptp-1", "app: ptp", []string{"sleep", "3600"}, podWait),
		kube.RunPod(t, "ptp-2", "app: ptp", []string{"sleep", "3600"}, podWait),
	}
	ptp2 := kube.PodIP(t, "ptp-2")
	if err := kube.Ping("ptp-1", ptp2); err != nil {
		t.Fatalf("ptp pods cannot talk: %v", err)
	}
	probeBaseline(t, kube) // ready_test.go
	kube.DeletePods(t, "ptp-0", "ptp-1", "ptp-2")
	os.Remove(ptpConf)

	// --- calico-node as the DaemonSet runs it ---
	kube.RunKubectl(nil, "-n", "kube-system", "create", "serviceaccount", "calico-node")
	if _, err := kube.RunKubectl(nil, "create", "clusterrolebinding", "calico-node", "--clusterrole=cluster-admin", "--serviceaccount=kube-system:calico-node"); err != nil {
		t.Fatal(err)
	}
	sa := t.TempDir()
	ca, _ := os.ReadFile(kube.CAFile)
	writeFile(t, filepath.Join(sa, "ca.crt"), string(ca))
	writeFile(t, filepath.Join(sa, "token"), kube.Token(t, "kube-system", "calico-node", time.Hour))
	dataDir := t.TempDir()
	bins := testbin.Dir(t)
	agentArgs := []string{"--data-dir", dataDir, "--cni-conf-dir", node.CNIConfDir, "--cni-bin-dir", node.CNIBinDir, "--service-account-dir", sa,
		"--bgp-status-socket", filepath.Join(dataDir, "bgp.sock")}
	agentEnv := []string{
		"ETCD_ENDPOINTS=" + strings.Join(etcd.Endpoints, ","),
		// The socket the plugins containerd runs find (TestMain).
		cnientry.SocketEnv + "=" + os.Getenv(cnientry.SocketEnv),
		"CALICO_STATUS_SOCKET=" + os.Getenv("CALICO_STATUS_SOCKET"),
		"FELIX_ENDPOINTSTATUSPATHPREFIX=" + os.Getenv("FELIX_ENDPOINTSTATUSPATHPREFIX"),
		"NODENAME=" + node.Name, "CALICO_K8S_NODE_REF=" + node.Name, "IP=autodetect",
		"CALICO_NETWORKING_BACKEND=none", "CALICO_IPV4POOL_CIDR=" + podCIDR,
		"KUBECONFIG=" + kube.Kubeconfig,
		"ENABLED_CONTROLLERS=namespace,serviceaccount,workloadendpoint,policy,node,ipamgc",
		"CNI_NETWORK_CONFIG=" + fmt.Sprintf(cniTemplate, filepath.Join(dataDir, "nodename"), filepath.Join(dataDir, "ipam.lock"), statusDir()),
		"CNI_MTU=1400",
		"KUBERNETES_SERVICE_HOST=" + kube.Host, "KUBERNETES_SERVICE_PORT=" + kube.Port,
		"FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT", "FELIX_IPV6SUPPORT=false",
	}
	agent := startAgent(t, filepath.Join(bins, "calico-node"), agentArgs, agentEnv...)
	agent.waitReady(t)
	polltest.Until(t, 30*time.Second, "10-calico.conflist installed", func() bool {
		_, err := os.Stat(filepath.Join(node.CNIConfDir, "10-calico.conflist"))
		return err == nil
	})
	node.WaitReady(t, 60*time.Second)

	calicoTimes := []time.Duration{
		kube.RunPod(t, "client", "app: client", []string{"sleep", "3600"}, podWait),
		kube.RunPod(t, "server", "app: server", kubetest.ServerCommand(), podWait),
	}
	// The pods' host ends are in the node's namespace, not the machine's.
	for _, pod := range []string{"client", "server"} {
		veth := hostVeth("default", pod)
		if !slices.Contains(kubetest.CaliLinks(t), veth) {
			t.Errorf("pod %s: no host veth %s in the node's namespace: %v", pod, veth, kubetest.CaliLinks(t))
		}
		if out, err := inMachineNS("ip", "link", "show", "dev", veth); err == nil {
			t.Errorf("pod %s: host veth %s in the machine's namespace:\n%s", pod, veth, out)
		}
	}
	// The figures of docs/benchmarks.md ("Kubernetes node").
	t.Logf("pod create->Running (kubectl apply to phase Running): node's first pod (ptp) %v; ptp %v; calico %v",
		ptpFirst.Round(time.Millisecond), round(ptpTimes), round(calicoTimes))

	calicoctl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(bins, "calicoctl"), args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATASTORE_TYPE=etcdv3", "ETCD_ENDPOINTS=" + strings.Join(etcd.Endpoints, ",")}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("calicoctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}

	// Addresses come from the Calico pool, assigned by calico-ipam.
	ips := kube.CalicoPodIPs(t, netip.MustParsePrefix(podCIDR), calicoctl, "client", "server")
	if out := calicoctl("ipam", "check"); !strings.Contains(out, "found 0 problems") {
		t.Errorf("ipam check with pods running:\n%s", out)
	}

	// Pod to pod, through the host's routes to the cali veths.
	polltest.Until(t, 30*time.Second, "client reaches server over HTTP", func() bool {
		return strings.Contains(kube.Fetch("client", ips["server"]), kubetest.ServerPage)
	})
	if err := kube.Ping("server", ips["client"]); err != nil {
		t.Errorf("server cannot ping client: %v", err)
	}

	// A Kubernetes NetworkPolicy, translated by the policy controller and
	// enforced by the dataplane.
	kube.CheckIngressPolicy(t, ips["client"], ips["server"])

	// hostPort (portmap) and the egress-bandwidth annotation (bandwidth),
	// chained after calico as in Calico's manifests.
	for _, p := range []string{"portmap", "bandwidth"} {
		if st, err := os.Stat(filepath.Join(node.CNIBinDir, p)); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("install-cni did not install %s: %v", p, err)
		}
	}
	checkHostPort(t, kube)
	checkEgressBandwidth(t, kube, node)

	// Deleting the pods releases every address (CNI DEL via kubelet).
	kube.DeletePods(t, "client", "server", "web", "shaped")
	for name, ip := range ips {
		polltest.Until(t, 30*time.Second, "address of "+name+" released", func() bool {
			return strings.Contains(calicoctl("ipam", "show", "--ip="+ip), "is not assigned")
		})
	}
	if out := calicoctl("ipam", "show"); !strings.Contains(out, "| 0 (0%)") {
		t.Errorf("addresses still in use after the pods are gone:\n%s", out)
	}
	if out := calicoctl("ipam", "check"); !strings.Contains(out, "found 0 problems") {
		t.Errorf("ipam check after delete:\n%s", out)
	}
	if links := kubetest.CaliLinks(t); len(links) != 0 {
		t.Errorf("cali links left after the pods are gone: %v", links)
	}
	// The plugin executions of containerd were handed to the running
	// agent over its CNI socket (package cnientry).
	if n := servedCNI(t, agent.health); n < 8 {
		t.Errorf("the agent served %d CNI commands, want at least the 4 ADDs and 4 DELs", n)
	}

	// Pods have their network at their first instruction (ready_test.go).
	agent = checkNetworkAtStart(t, kube, filepath.Join(bins, "calicoctl"), func(env ...string) *agentProc {
		// Every command of the probe pods' ADDs and of their deletion
		// reached the agent and was served: kubelet's DELs come twice or
		// more per pod, the later ones once containerd has removed the
		// namespace, and those too go to the agent (before, they ran in
		// plugin processes: 249 served in one run, 360 after).
		served, declined := servedCNI(t, agent.health), declinedCNI(t, agent.health)
		t.Logf("the agent served %d CNI commands and declined %v", served, declined)
		if len(declined) > 0 {
			t.Errorf("the agent declined CNI commands (by reason): %v; served %d", declined, served)
		}
		// kubelet's later DELs come on its own schedule (garbage
		// collection), so not every pod has had its second by now: an
		// ADD and a DEL of each pod is what must have been served.
		if served < 2*probePods {
			t.Errorf("the agent served %d CNI commands, want at least 2 per probe pod (%d): its ADD and its DEL", served, 2*probePods)
		}
		if err := agent.stop(); err != nil {
			t.Errorf("agent exit: %v", err)
		}
		return startAgent(t, filepath.Join(bins, "calico-node"), agentArgs, append(slices.Clone(agentEnv), env...)...)
	})
	if err := agent.stop(); err != nil {
		t.Errorf("agent exit: %v\n%s", err, agent.Log)
	}
}

// statusDir is the agent's endpoint status directory, in the node's
// private run directory (TestMain).
func statusDir() string {
	return filepath.Join(os.Getenv("FELIX_ENDPOINTSTATUSPATHPREFIX"), "endpoint-status")
}

func round(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// hostVeth is the host end's name of a pod's veth: "cali" + 11 hex
// digits of sha1("<namespace>.<pod>"), as Calico names it.
func hostVeth(namespace, pod string) string {
	sum := sha1.Sum([]byte(namespace + "." + pod))
	return "cali" + hex.EncodeToString(sum[:])[:11]
}

// inMachineNS runs a command in the machine's network namespace: that of
// the parent test process, which netnstest.Reexec left there.
func inMachineNS(name string, args ...string) (string, error) {
	ns := fmt.Sprintf("/proc/%d/ns/net", os.Getppid())
	self, _ := os.Readlink("/proc/self/ns/net")
	if parent, err := os.Readlink(ns); err != nil || parent == self {
		return "", fmt.Errorf("the parent process is not in another network namespace (%s: %v): not re-executed by TestMain", ns, err)
	}
	out, err := exec.Command("nsenter", append([]string{"--net=" + ns, "--", name}, args...)...).CombinedOutput()
	return string(out), err
}

// foreignState is Calico-looking state in the machine's namespace that the
// node must not touch: an iptables chain with a rule and an ipset with a
// member, as a Calico node or an earlier `make run` leaves there. The test
// makes them (named after its PID) and removes them at the end.
type foreignState struct {
	chain, set string
	saved      string // their listing at the start
}

func newForeignState(t *testing.T) *foreignState {
	t.Helper()
	f := &foreignState{chain: fmt.Sprintf("cali-foreign-%d", os.Getpid()), set: fmt.Sprintf("cali40foreign-%d", os.Getpid())}
	t.Cleanup(func() {
		inMachineNS("iptables", "-F", f.chain)
		inMachineNS("iptables", "-X", f.chain)
		inMachineNS("ipset", "destroy", f.set)
	})
	for _, cmd := range [][]string{
		{"iptables", "-N", f.chain},
		{"iptables", "-A", f.chain, "-s", "198.51.100.7/32", "-m", "comment", "--comment", "not the node's", "-j", "RETURN"},
		{"ipset", "create", f.set, "hash:ip"},
		{"ipset", "add", f.set, "198.51.100.7"},
	} {
		if out, err := inMachineNS(cmd[0], cmd[1:]...); err != nil {
			t.Fatalf("in the machine's namespace: %v: %v\n%s", cmd, err, out)
		}
	}
	f.saved = f.listing(t)
	return f
}

func (f *foreignState) listing(t *testing.T) string {
	t.Helper()
	rules, err1 := inMachineNS("iptables", "-S", f.chain)
	set, err2 := inMachineNS("ipset", "save", f.set)
	return fmt.Sprintf("%s(%v)\n%s(%v)", rules, err1, set, err2)
}

func (f *foreignState) check(t *testing.T) {
	t.Helper()
	if now := f.listing(t); now != f.saved {
		t.Errorf("the machine's own Calico state was changed:\nbefore:\n%s\nafter:\n%s", f.saved, now)
	}
}

// agentProc is `calico-node run`.
type agentProc struct {
	*proctest.Proc
	health string
}

func startAgent(t *testing.T, bin string, args []string, env ...string) *agentProc {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	health := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, append([]string{"run", "--health-addr", health}, args...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	before := kubetest.TakeAgentState()
	a := &agentProc{Proc: proctest.Start(t, "calico-node", cmd), health: health}
	// Runs before proctest's kill: the agent gets its SIGTERM first.
	t.Cleanup(func() {
		a.stop()
		before.RemoveSince()
	})
	return a
}

func (a *agentProc) waitReady(t *testing.T) {
	t.Helper()
	a.WaitHTTP(t, 60*time.Second, "http://"+a.health+"/readiness")
}

// stop sends SIGTERM and waits (SIGKILL after 20s); idempotent.
func (a *agentProc) stop() error { return a.Stop(20 * time.Second) }

// servedCNI reads the agent's calico_cni_server_requests_total{reason="",result="served"}.
func servedCNI(t *testing.T, health string) int {
	t.Helper()
	return int(proctest.Metric(t, "http://"+health+"/metrics", `calico_cni_server_requests_total{reason="",result="served"}`))
}

// declinedCNI reads the agent's declined CNI commands by reason.
func declinedCNI(t *testing.T, health string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, reason := range []string{"bad_request", "other_netns", "command", "env", "config", "ipam_delegated", "file_unreadable", "netns_not_visible"} {
		if n := proctest.Metric(t, "http://"+health+"/metrics", fmt.Sprintf(`calico_cni_server_requests_total{reason=%q,result="declined"}`, reason)); n > 0 {
			out[reason] = int(n)
		}
	}
	return out
}

// applyPod applies a pod manifest and waits for it to run.
func applyPod(t *testing.T, kube *kubetest.Cluster, name, manifest string) {
	t.Helper()
	if _, err := kube.RunKubectl(strings.NewReader(manifest), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, podWait, "pod "+name+" Running", func() bool {
		p, err := kube.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
}

// checkHostPort: a pod's hostPort answers on the node's address, from the
// node itself and from another pod (portmap's DNAT, chained after
// calico with the portMappings capability kubelet fills in).
func checkHostPort(t *testing.T, kube *kubetest.Cluster) {
	t.Helper()
	applyPod(t, kube, "web", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir -p /www && echo hello-hostport > /www/index.html && exec httpd -f -p %s -h /www"]
    ports: [{containerPort: %s, hostPort: %s}]
`, kubetest.NodeName, kubetest.TestImage, kubetest.ServerPort, kubetest.ServerPort, hostPort))
	nodeIP, _, _ := strings.Cut(netnstest.NodeUplinkAddr, "/")
	fromNode := func() string {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(nodeIP, hostPort), 2*time.Second)
		if err != nil {
			return err.Error()
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprint(c, "GET / HTTP/1.0\r\n\r\n")
		b := make([]byte, 4096)
		n, _ := io.ReadFull(c, b)
		return string(b[:n])
	}
	polltest.Until(t, 30*time.Second, "hostPort "+hostPort+" answers on the node", func() bool {
		return strings.Contains(fromNode(), "hello-hostport")
	})
	out, _ := kube.RunKubectl(nil, "exec", "client", "--", "sh", "-c",
		`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 `+nodeIP+" "+hostPort)
	if !strings.Contains(out, "hello-hostport") {
		t.Errorf("hostPort %s from another pod: %q", hostPort, out)
	}
}

// checkEgressBandwidth: a pod annotated kubernetes.io/egress-bandwidth
// gets bandwidth's token bucket at that rate on its ifb device, and what
// it sends (iperf3 in its namespace, to the node) is held to about the
// rate.
func checkEgressBandwidth(t *testing.T, kube *kubetest.Cluster, node *kubetest.Node) {
	t.Helper()
	applyPod(t, kube, "shaped", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: shaped, namespace: default, annotations: {kubernetes.io/egress-bandwidth: "%dM"}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: %s, imagePullPolicy: Never, command: ["sleep", "3600"]}
`, egressRate/1_000_000, kubetest.NodeName, kubetest.TestImage))
	qdiscs, err := exec.Command("tc", "qdisc", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("tc qdisc show: %v\n%s", err, qdiscs)
	}
	var tbf string
	for _, l := range strings.Split(string(qdiscs), "\n") {
		if strings.Contains(l, "tbf") && strings.Contains(l, " dev bwp") {
			tbf = l
		}
	}
	if want := fmt.Sprintf("rate %dMbit", egressRate/1_000_000); !strings.Contains(tbf, want) {
		t.Fatalf("no tbf qdisc with %s on a bandwidth ifb device:\n%s", want, qdiscs)
	}

	// iperf3 from the pod's namespace (the host's binary: only the
	// network namespace is the pod's) to a server in the node's.
	podNS := podNetNS(t, node, kube.PodIP(t, "shaped"))
	nodeIP, _, _ := strings.Cut(netnstest.NodeUplinkAddr, "/")
	l, err := net.Listen("tcp", nodeIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	// A server left running for the whole test (proctest stops it): the
	// readiness probe's bare connection does not end it.
	server := proctest.Start(t, "iperf3 server", exec.Command("iperf3", "-s", "-B", nodeIP, "-p", port))
	server.WaitFor(t, 10*time.Second, "iperf3 listening", func() bool {
		c, err := net.Dial("tcp", nodeIP+":"+port)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	time.Sleep(200 * time.Millisecond)
	out, err := exec.Command("nsenter", "--net="+podNS, "--", "iperf3", "-c", nodeIP, "-p", port, "-t", "4", "-O", "1", "-J").Output()
	if err != nil {
		t.Fatalf("iperf3 from the pod: %v\n%s", err, out)
	}
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("iperf3 output: %v\n%s", err, out)
	}
	got := res.End.SumReceived.BitsPerSecond
	t.Logf("egress of a pod annotated %d bit/s: %.0f bit/s measured", egressRate, got)
	if got < 0.5*egressRate || got > 1.5*egressRate {
		t.Errorf("pod egress %.0f bit/s, want about %d (the annotation)", got, egressRate)
	}
}

// podNetNS finds the network namespace containerd mounted for the pod
// with address ip (under the node's containerd state directory).
func podNetNS(t *testing.T, node *kubetest.Node, ip string) string {
	t.Helper()
	var found string
	filepath.WalkDir(filepath.Join(node.Dir, "containerd"), func(path string, d os.DirEntry, err error) error {
		if err != nil || found != "" || d.IsDir() || filepath.Base(filepath.Dir(path)) != "netns" {
			return nil
		}
		out, _ := exec.Command("nsenter", "--net="+path, "--", "ip", "-o", "-4", "addr", "show").Output()
		if strings.Contains(string(out), " "+ip+"/") {
			found = path
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no network namespace of the node's containerd has %s", ip)
	}
	return found
}
