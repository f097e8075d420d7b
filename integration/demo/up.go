package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/projectcalico/calico-node/bgp"
	"github.com/projectcalico/calico-node/internal/cni/cnientry"
)

const (
	nodeCount  = 3
	bridgeAddr = "192.0.2.1"
	poolCIDR   = "198.51.100.0/24"
)

// k8sNamespaces are the Kubernetes namespaces with a pod on every node.
func k8sNamespaces() []string { return []string{"frontend", "backend"} }

// Kubernetes NetworkPolicy: backend pods accept connections only from
// pods of their own namespace.
const k8sPolicy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: backend-same-namespace-only
  namespace: backend
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector: {}
`

// Calico GlobalNetworkPolicy: frontend pods accept TCP only from frontend
// pods, whatever their namespace's own policies say.
const globalPolicy = `apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: frontend-from-frontend-only
spec:
  order: 100
  selector: projectcalico.org/namespace == 'frontend'
  types: [Ingress]
  ingress:
  - action: Allow
    protocol: TCP
    source:
      selector: projectcalico.org/namespace == 'frontend'
`

// cluster is one run of the demo.
type cluster struct {
	o     options
	out   io.Writer
	st    *state
	self  string
	pods  []*pod
	steps int
	total int
}

// pod is one pod: namespace <prefix>-<k8sNS>-<node>.
type pod struct {
	prefix string
	k8sNS  string
	node   int
	ip     string
}

func (p *pod) name() string   { return fmt.Sprintf("%s/pod-%d", p.k8sNS, p.node) }
func (p *pod) netns() string  { return fmt.Sprintf("%s-%s-%d", p.prefix, p.k8sNS, p.node) }
func (p *pod) nsPath() string { return "/var/run/netns/" + p.netns() }
func (p *pod) short() string  { return strings.ToUpper(p.k8sNS[:1]) + strconv.Itoa(p.node) }

func nodeName(i int) string            { return fmt.Sprintf("node-%d", i) }
func nodeAddr(i int) string            { return fmt.Sprintf("192.0.2.%d", 10+i) }
func (c *cluster) nodeNS(i int) string { return fmt.Sprintf("%s-node-%d", c.o.prefix, i) }
func (c *cluster) bridgeNS() string    { return c.o.prefix + "-br" }
func (c *cluster) etcdURL() string     { return "http://127.0.0.1:" + strconv.Itoa(c.o.etcdPort) }

// etcdUnix is the agents' and plugin's endpoint: etcd names a unix
// listener "host:port" relative to its working directory.
func (c *cluster) etcdUnix() string {
	return "unix://" + filepath.Join(c.o.stateDir, "localhost:"+strconv.Itoa(c.o.etcdPort))
}
func (c *cluster) nodeDir(i int) string   { return filepath.Join(c.o.stateDir, nodeName(i)) }
func (c *cluster) bgpSocket(i int) string { return filepath.Join(c.nodeDir(i), "bgp.sock") }
func (c *cluster) cniSocket(i int) string { return filepath.Join(c.nodeDir(i), "cni.sock") }
func (c *cluster) statusSocket(i int) string {
	return filepath.Join(c.nodeDir(i), "status.sock")
}

// statusSockets is the glob of every node's status socket.
func (c *cluster) statusSockets() string {
	return filepath.Join(c.o.stateDir, "node-*", "status.sock")
}

// cniFor is libcni as the runtime on node i has it: its plugins reach
// node i's agent (each simulated node has its own CNI socket; on a real
// node it is /var/run/calico/cni.sock).
func (c *cluster) cniFor(i int, cacheDir string, stderr io.Writer) *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir([]string{c.o.binDir}, cacheDir, &nodeExec{
		Exec: &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: stderr}},
		env:  cnientry.SocketEnv + "=" + c.cniSocket(i),
	})
}

// nodeExec runs plugins with one more environment variable.
type nodeExec struct {
	invoke.Exec
	env string
}

func (e *nodeExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	return e.Exec.ExecPlugin(ctx, pluginPath, stdinData, append(environ, e.env))
}
func (c *cluster) calicoctl() string { return filepath.Join(c.o.binDir, "calicoctl") }

// results is what `up --results` reports, for the end-to-end test.
type results struct {
	Datastore string              `json:"datastore"`
	Sessions  map[string][]string `json:"sessions"` // node -> established peers
	Pods      []podResult         `json:"pods"`
	Steps     []matrixStep        `json:"matrices"`
	// Timeline is `calicoctl node timeline` of the first pod.
	Timeline   string   `json:"timeline"`
	Namespaces []string `json:"namespaces"`
	Processes  []proc   `json:"processes"`
	Seconds    float64  `json:"seconds"`
}

type podResult struct {
	Name  string `json:"name"`
	Node  string `json:"node"`
	IP    string `json:"ip"`
	NetNS string `json:"netns"`
}

type matrixStep struct {
	Step string `json:"step"`
	Want matrix `json:"want"`
	Got  matrix `json:"got"`
}

// up removes a previous demo and brings a new one up. On error the
// partial cluster is left for inspection; `down` removes it.
func up(ctx context.Context, o options, out io.Writer) (*results, error) {
	start := time.Now()
	c := &cluster{o: o, out: out, total: 11}
	if c.kdd() {
		c.total = 13
	}
	res := &results{Datastore: o.datastore, Sessions: map[string][]string{}}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program: %w", err)
	}
	c.self = self

	fmt.Fprintf(out, "calico-demo: %d Calico nodes in network namespaces on this machine\n", nodeCount)
	if err := c.step("checking prerequisites", c.prerequisites); err != nil {
		return nil, err
	}
	if err := c.step("removing any previous demo", func() error { return down(o, io.Discard) }); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(o.stateDir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	c.st = &state{path: statePath(o.stateDir)}
	if err := c.st.save(); err != nil {
		return nil, err
	}

	type stepFunc struct {
		what string
		f    func() error
	}
	steps := []stepFunc{
		{"starting etcd on " + c.etcdURL() + " and a unix socket for the nodes", c.startEtcd},
		{fmt.Sprintf("creating %d node namespaces on a bridge (192.0.2.0/24)", nodeCount), c.fabric},
	}
	if c.kdd() {
		steps = []stepFunc{
			{"starting kube-apiserver on " + c.apiserverURL() + " (its etcd on " + c.etcdURL() + ")", func() error { return c.startAPIServer(ctx) }},
			{"installing Calico's CRDs (kubectl apply -f " + c.o.crds + ")", c.installCRDs},
			{fmt.Sprintf("creating %d node namespaces on a bridge (192.0.2.0/24), the API server on their loopback", nodeCount), c.fabric},
			{fmt.Sprintf("registering Kubernetes Nodes node-1..%d and namespaces %s (kubectl apply)", nodeCount, strings.Join(k8sNamespaces(), ", ")), c.registerNodes},
		}
	}
	steps = append(steps, []stepFunc{
		{"creating IP pool " + poolCIDR + " (calicoctl apply)", c.createPool},
		{"starting calico-node run on every node" + c.datastoreNote(), c.startAgents},
		{"waiting for the BGP full mesh", func() error { return c.waitMesh(ctx, res) }},
	}...)
	for _, s := range steps {
		if err := c.step(s.what, s.f); err != nil {
			return nil, err
		}
	}
	for i := 1; i <= nodeCount; i++ {
		fmt.Fprintf(out, "\n  $ calicoctl node status   # on %s\n", nodeName(i))
		c.show(c.calicoctl(), "node", "status", "--bgp-status-socket", c.bgpSocket(i))
	}
	fmt.Fprintln(out)

	if err := c.step(fmt.Sprintf("creating pods in namespaces %s on every node (CNI ADD via libcni)", strings.Join(k8sNamespaces(), ", ")), func() error { return c.createPods(ctx) }); err != nil {
		return nil, err
	}
	for _, p := range c.pods {
		res.Pods = append(res.Pods, podResult{Name: p.name(), Node: nodeName(p.node), IP: p.ip, NetNS: p.netns()})
		fmt.Fprintf(out, "    %-3s %-16s %-7s %-15s netns %s\n", p.short(), p.name(), nodeName(p.node), p.ip, p.netns())
	}
	fmt.Fprintln(out, "\n  $ calicoctl ipam show --show-blocks")
	c.show(c.calicoctl(), "ipam", "show", "--show-blocks")
	if c.kdd() {
		// What the pods became: endpoints computed from the Pods and the
		// annotations the CNI plugin wrote on them.
		fmt.Fprintln(out, "\n  $ calicoctl get workloadendpoints -A -o wide   # computed from the Pods the CNI plugin annotated")
		c.show(c.calicoctl(), "get", "workloadendpoints", "-A", "-o", "wide")
	}
	fmt.Fprintln(out)

	var mismatch []string
	var prev matrix
	measureStep := func(what string, allowed func(from, to *pod) bool) error {
		want := expected(c.pods, allowed)
		var got matrix
		err := c.step(what, func() error {
			got = awaitMatrix(ctx, c.pods, want, 30*time.Second)
			return ctx.Err()
		})
		if err != nil {
			return err
		}
		got.render(out, c.pods, prev)
		if !got.equal(want) {
			fmt.Fprintln(out, "    WARNING: this is not what the policies should give; see the logs in", filepath.Join(o.stateDir, "logs"))
			mismatch = append(mismatch, what)
		}
		fmt.Fprintln(out)
		res.Steps = append(res.Steps, matrixStep{Step: what, Want: want, Got: got})
		prev = got
		return nil
	}
	all := func(from, to *pod) bool { return true }
	if err := measureStep("TCP connectivity between every pair of pods (no policy)", all); err != nil {
		return nil, err
	}
	// Every step of the first pod's network, on its node and on the
	// others (each agent's status socket is in its node's directory).
	fmt.Fprintf(out, "  $ calicoctl node timeline %s --status-socket '%s'\n", c.pods[0].name(), c.statusSockets())
	var tl strings.Builder
	c.showTo(&tl, c.calicoctl(), "node", "timeline", c.pods[0].name(), "--status-socket", c.statusSockets())
	fmt.Fprint(out, tl.String())
	fmt.Fprintln(out)
	res.Timeline = tl.String()

	afterKNP := func(from, to *pod) bool { return to.k8sNS != "backend" || from.k8sNS == "backend" }
	if err := c.applyK8sPolicy("backend-knp.yaml", k8sPolicy, "Kubernetes NetworkPolicy: backend accepts only from backend"); err != nil {
		return nil, err
	}
	if c.kdd() {
		fmt.Fprintln(out, "  a networking.k8s.io NetworkPolicy, which Calico reads as NetworkPolicy backend/knp.default.backend-same-namespace-only")
	} else {
		fmt.Fprintln(out, "  stored as Calico NetworkPolicy backend/knp.default.backend-same-namespace-only")
	}
	if err := measureStep("connectivity with the Kubernetes NetworkPolicy", afterKNP); err != nil {
		return nil, err
	}
	afterGNP := func(from, to *pod) bool {
		return afterKNP(from, to) && (to.k8sNS != "frontend" || from.k8sNS == "frontend")
	}
	if err := c.applyPolicy(c.calicoctl(), "calicoctl", "frontend-gnp.yaml", globalPolicy, "GlobalNetworkPolicy: frontend accepts only from frontend"); err != nil {
		return nil, err
	}
	if err := measureStep("connectivity with the GlobalNetworkPolicy too", afterGNP); err != nil {
		return nil, err
	}

	res.Namespaces, res.Processes = c.st.Namespaces, c.st.Procs
	res.Seconds = time.Since(start).Seconds()
	if o.results != "" {
		data, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(o.results, data, 0o644); err != nil {
			return nil, fmt.Errorf("write results: %w", err)
		}
	}
	c.explore(time.Since(start))
	if len(mismatch) > 0 {
		return res, fmt.Errorf("unexpected connectivity in: %s", strings.Join(mismatch, "; "))
	}
	return res, nil
}

// step runs one numbered step with a progress line.
func (c *cluster) step(what string, f func() error) error {
	c.steps++
	fmt.Fprintf(c.out, "[%2d/%d] %s ... ", c.steps, c.total, what)
	t := time.Now()
	if err := f(); err != nil {
		fmt.Fprintln(c.out, "FAILED")
		return err
	}
	fmt.Fprintf(c.out, "done (%.1fs)\n", time.Since(t).Seconds())
	return nil
}

// show runs a command and indents its output.
func (c *cluster) show(name string, args ...string) { c.showTo(c.out, name, args...) }

// showTo runs a command and writes its output, indented, to w.
func (c *cluster) showTo(w io.Writer, name string, args ...string) {
	cmd := exec.Command(name, args...)
	cmd.Env = c.env()
	b, err := cmd.CombinedOutput()
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		fmt.Fprintln(w, "    "+l)
	}
	if err != nil {
		fmt.Fprintf(w, "    (%v)\n", err)
	}
}

// env is the environment of every command the demo runs: nothing of the
// caller's ETCD_*/CALICO_*/CNI_* settings may leak into the nodes.
// The first entry is PATH alone (spawn's environment).
func (c *cluster) env() []string {
	path := "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	if c.kdd() {
		return []string{path, "DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + c.kubeconfig()}
	}
	return []string{path, "ETCD_ENDPOINTS=" + c.etcdURL()}
}

// kdd reports whether this cluster keeps Calico's data in the Kubernetes
// API.
func (c *cluster) kdd() bool { return c.o.datastore == datastoreKube }

// datastoreNote names the datastore in the agents' step.
func (c *cluster) datastoreNote() string {
	if c.kdd() {
		return " (DATASTORE_TYPE=kubernetes)"
	}
	return ""
}

func (c *cluster) run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = c.env()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(b)))
	}
	return nil
}

func (c *cluster) prerequisites() error {
	var missing []string
	tools := []struct{ cmd, pkg string }{
		{"ip", "iproute2"}, {"iptables", "iptables"}, {"iptables-restore", "iptables"}, {"ipset", "ipset"},
	}
	if !c.kdd() {
		tools = append(tools, struct{ cmd, pkg string }{"etcd", "etcd-server"})
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool.cmd); err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", tool.cmd, tool.pkg))
		}
	}
	if c.kdd() {
		missing = append(missing, c.kubePrerequisites()...)
	}
	for _, b := range []string{"calico-node", "calicoctl", "calico", "calico-ipam"} {
		if _, err := os.Stat(filepath.Join(c.o.binDir, b)); err != nil {
			missing = append(missing, fmt.Sprintf("%s in %s (run make build)", b, c.o.binDir))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing prerequisites (make deps installs the packages):\n  %s", strings.Join(missing, "\n  "))
	}
	// Each port, the recorded process of a previous demo that may hold
	// it, and the flag that moves it.
	type portUse struct {
		port       int
		owner, flg string
	}
	ports := []portUse{{c.o.etcdPort, "etcd", "--etcd-port"}, {c.o.etcdPort + 1, "etcd", "--etcd-port"}}
	if c.kdd() {
		ports = append(ports, portUse{c.o.apiserverPort, apiserverProc, "--apiserver-port"})
	}
	for _, p := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p.port))
		if err != nil {
			if c.procIsOurs(p.owner) {
				continue // the previous demo's: removed next
			}
			return fmt.Errorf("port 127.0.0.1:%d is in use; choose another with %s (make demo DEMO_ARGS=%s=N)", p.port, p.flg, p.flg)
		}
		l.Close()
	}
	return nil
}

// procIsOurs reports whether a previous demo's recorded process of that
// name (etcd, kube-apiserver) is running: it holds its port until the
// previous demo is removed.
func (c *cluster) procIsOurs(name string) bool {
	data, err := os.ReadFile(statePath(c.o.stateDir))
	if err != nil {
		return false
	}
	var s state
	if json.Unmarshal(data, &s) != nil {
		return false
	}
	for _, p := range s.Procs {
		if p.Name == name && p.alive() {
			return true
		}
	}
	return false
}

// spawn starts a long-lived process in its own session (so that it
// outlives the demo and a Ctrl-C in the terminal does not reach it),
// logging to logs/<name>.log, and records it.
func (c *cluster) spawn(name, dir string, argv ...string) error {
	logf, err := os.OpenFile(filepath.Join(c.o.stateDir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(c.env()[:1], "HOSTNAME="+name)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	// Reap it should it exit while the demo runs; afterwards init does.
	go cmd.Wait()
	return c.st.addProc(name, cmd.Process.Pid)
}

func (c *cluster) startEtcd() error {
	port := strconv.Itoa(c.o.etcdPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(c.o.etcdPort+1)
	if err := c.spawn("etcd", c.o.stateDir, "etcd",
		"--name", "demo",
		"--data-dir", filepath.Join(c.o.stateDir, "etcd"),
		"--listen-client-urls", c.etcdURL()+",unix://localhost:"+port,
		"--advertise-client-urls", c.etcdURL(),
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "demo="+peer,
		"--heartbeat-interval", "10",
		"--election-timeout", "100",
		"--log-level", "warn",
	); err != nil {
		return err
	}
	return c.waitEtcd()
}

// waitEtcd waits until the demo's etcd says it is healthy.
func (c *cluster) waitEtcd() error {
	deadline := time.Now().Add(15 * time.Second)
	client := http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		if r, err := client.Get(c.etcdURL() + "/health"); err == nil {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if bytes.Contains(b, []byte(`"health":"true"`)) {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("etcd not healthy within 15s; see %s", filepath.Join(c.o.stateDir, "logs", "etcd.log"))
}

// newNS creates a namespace (recorded first, so that down removes it even
// if the creation half failed) with loopback up.
func (c *cluster) newNS(name string) error {
	if namespaceExists(name) {
		// Left by a demo whose state was lost: ours by its name.
		if err := c.run("ip", "netns", "del", name); err != nil {
			return err
		}
	}
	if err := c.st.addNamespace(name); err != nil {
		return err
	}
	if err := c.run("ip", "netns", "add", name); err != nil {
		return err
	}
	return c.run("ip", "-n", name, "link", "set", "lo", "up")
}

func (c *cluster) fabric() error {
	br := c.bridgeNS()
	if err := c.newNS(br); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "add", "br0", "type", "bridge"},
		{"addr", "add", bridgeAddr + "/24", "dev", "br0"},
		{"link", "set", "br0", "up"},
	} {
		if err := c.run("ip", append([]string{"-n", br}, args...)...); err != nil {
			return err
		}
	}
	for i := 1; i <= nodeCount; i++ {
		n := c.nodeNS(i)
		if err := c.newNS(n); err != nil {
			return err
		}
		veth := fmt.Sprintf("veth-node%d", i)
		for _, cmd := range [][]string{
			{"-n", br, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", n},
			{"-n", br, "link", "set", veth, "master", "br0", "up"},
			{"-n", n, "addr", "add", nodeAddr(i) + "/24", "dev", "eth0"},
			{"-n", n, "link", "set", "eth0", "up"},
			// A node's default route: the kernel answers proxy ARP for the
			// pods' gateway 169.254.1.1 only when it can route it.
			{"-n", n, "route", "add", "default", "via", bridgeAddr},
			// Nodes forward (kubelet insists on it); a new namespace does not.
			{"netns", "exec", n, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		} {
			if err := c.run("ip", cmd...); err != nil {
				return err
			}
		}
	}
	if c.kdd() {
		return c.startForwarder()
	}
	return nil
}

func (c *cluster) createPool() error {
	pool := fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  name: demo-pool
spec:
  cidr: %s
  blockSize: 28
  ipipMode: Never
  vxlanMode: Never
  natOutgoing: false
  nodeSelector: all()
`, poolCIDR)
	cmd := exec.Command(c.calicoctl(), "apply", "-f", "-")
	cmd.Env = c.env()
	cmd.Stdin = strings.NewReader(pool)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("calicoctl apply pool: %v: %s", err, b)
	}
	return nil
}

func (c *cluster) startAgents() error {
	for i := 1; i <= nodeCount; i++ {
		if err := c.startAgent(i); err != nil {
			return err
		}
	}
	return nil
}

// startAgent starts `calico-node run` inside node i's namespace; the
// resilience tests call it again to restart a killed agent.
func (c *cluster) startAgent(i int) error {
	if err := os.MkdirAll(c.nodeDir(i), 0o755); err != nil {
		return fmt.Errorf("create node dir: %w", err)
	}
	return c.spawn(nodeName(i), c.nodeDir(i), c.agentArgv(i, "run")...)
}

// agentArgv is `calico-node VERB` in node i's namespace with the flags and
// environment of its agent: run starts it, plan (the tour's `calico-node
// plan`) plans for it.
func (c *cluster) agentArgv(i int, verb string) []string {
	datastore := []string{"--etcd-endpoints=" + c.etcdUnix()}
	if c.kdd() {
		datastore = []string{"--datastore-type=kubernetes", "--kubeconfig=" + c.kubeconfig()}
	}
	// The node's endpoint status files in its own directory, not the
	// machine's /var/run/calico (FELIX_* settings are environment only).
	argv := append([]string{"ip", "netns", "exec", c.nodeNS(i),
		"env", "FELIX_ENDPOINTSTATUSPATHPREFIX=" + c.nodeDir(i),
		filepath.Join(c.o.binDir, "calico-node"), verb}, datastore...)
	return append(argv,
		"--nodename="+nodeName(i),
		"--ip="+nodeAddr(i)+"/24",
		"--no-default-pools",
		"--data-dir="+c.nodeDir(i),
		"--bgp-status-socket="+c.bgpSocket(i),
		"--cni-socket="+c.cniSocket(i),
		"--status-socket="+c.statusSocket(i),
		"--health-addr=127.0.0.1:9099",
		"--log-level=info",
	)
}

// waitMesh waits until every node has an Established session with each
// of the others.
func (c *cluster) waitMesh(ctx context.Context, res *results) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		done := true
		var last []string
		for i := 1; i <= nodeCount; i++ {
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := bgp.QueryStatus(qctx, c.bgpSocket(i))
			cancel()
			var up []string
			if err == nil {
				for _, p := range st.Peers {
					if p.BGPState == bgp.StateEstablished {
						up = append(up, p.Address)
					}
				}
			}
			res.Sessions[nodeName(i)] = up
			if len(up) != nodeCount-1 {
				done = false
				last = append(last, fmt.Sprintf("%s: %d of %d sessions up", nodeName(i), len(up), nodeCount-1))
			}
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("BGP mesh not up within 60s (%s); see the logs in %s", strings.Join(last, ", "), filepath.Join(c.o.stateDir, "logs"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createPods creates each pod's namespace, runs CNI ADD from inside its
// node's namespace (where a runtime on that node runs plugins) and starts
// its listener.
func (c *cluster) createPods(ctx context.Context) error {
	cniCache := filepath.Join(c.o.stateDir, "cni-cache")
	// The plugins log to stderr, as under a runtime: into logs/cni.log.
	cniLog, err := os.OpenFile(filepath.Join(c.o.stateDir, "logs", "cni.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open CNI log: %w", err)
	}
	defer cniLog.Close()
	if c.kdd() {
		// What the API server holds before a runtime is asked for the
		// pod's network: the Pod, scheduled to its node.
		if err := c.createPodObjects(); err != nil {
			return err
		}
	}
	for i := 1; i <= nodeCount; i++ {
		cni := c.cniFor(i, cniCache, cniLog)
		list, err := c.cniList(i)
		if err != nil {
			return err
		}
		for _, k := range k8sNamespaces() {
			p := &pod{prefix: c.o.prefix, k8sNS: k, node: i}
			if err := c.newNS(p.netns()); err != nil {
				return err
			}
			rt := &libcni.RuntimeConf{
				ContainerID: p.netns(),
				NetNS:       p.nsPath(),
				IfName:      "eth0",
				Args: [][2]string{
					{"IgnoreUnknown", "1"},
					{"K8S_POD_NAMESPACE", k},
					{"K8S_POD_NAME", fmt.Sprintf("pod-%d", i)},
					{"K8S_POD_INFRA_CONTAINER_ID", p.netns()},
				},
			}
			var r types100.Result
			err := ns.WithNetNSPath("/var/run/netns/"+c.nodeNS(i), func(ns.NetNS) error {
				out, err := cni.AddNetworkList(ctx, list, rt)
				if err != nil {
					return err
				}
				res, err := types100.NewResultFromResult(out)
				if err != nil {
					return err
				}
				r = *res
				return nil
			})
			if err != nil {
				return fmt.Errorf("CNI ADD %s on %s: %w", p.name(), nodeName(i), err)
			}
			if len(r.IPs) == 0 {
				return fmt.Errorf("CNI ADD %s: no address in the result", p.name())
			}
			p.ip = r.IPs[0].Address.IP.String()
			c.pods = append(c.pods, p)
			if err := c.spawn("listener-"+p.netns(), c.o.stateDir, "ip", "netns", "exec", p.netns(),
				c.self, "serve", "0.0.0.0:"+strconv.Itoa(listenPort), p.name()); err != nil {
				return err
			}
		}
	}
	return nil
}

// cniList is the network configuration a runtime on node i hands the
// plugin.
func (c *cluster) cniList(i int) (*libcni.NetworkConfigList, error) {
	plugin := map[string]any{
		"type":           "calico",
		"etcd_endpoints": c.etcdUnix(),
		"nodename":       nodeName(i),
		"ipam_lock_file": filepath.Join(c.o.stateDir, "ipam.lock"),
		// Where node i's agent keeps its endpoint status files.
		"endpoint_status_dir": filepath.Join(c.nodeDir(i), "endpoint-status"),
		"mtu":                 1500,
		"log_level":           "info",
		"ipam":                map[string]any{"type": "calico-ipam"},
	}
	if c.kdd() {
		// As calico-node-kdd.yaml's CNI config: the API server is the
		// datastore and where the plugin reads the pod.
		delete(plugin, "etcd_endpoints")
		plugin["datastore_type"] = "kubernetes"
		plugin["kubernetes"] = map[string]any{"kubeconfig": c.kubeconfig()}
		plugin["policy"] = map[string]any{"type": "k8s"}
	}
	conf, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "k8s-pod-network",
		"plugins":    []any{plugin},
	})
	if err != nil {
		return nil, fmt.Errorf("encode CNI config: %w", err)
	}
	list, err := libcni.ConfListFromBytes(conf)
	if err != nil {
		return nil, fmt.Errorf("CNI config: %w", err)
	}
	return list, nil
}

// applyK8sPolicy applies a Kubernetes NetworkPolicy as its datastore
// takes it: on etcd calicoctl stores it (as knp.default.<name>), on the
// Kubernetes API it is an object of the API server's own, applied with
// kubectl.
func (c *cluster) applyK8sPolicy(file, doc, what string) error {
	if c.kdd() {
		return c.applyPolicy(c.kubectlPath(), "kubectl", file, doc, what, c.kubectlArgs()...)
	}
	return c.applyPolicy(c.calicoctl(), "calicoctl", file, doc, what)
}

// applyPolicy writes doc to policy/<file> and applies it with the command
// bin (shown as name), after its leading arguments.
func (c *cluster) applyPolicy(bin, name, file, doc, what string, lead ...string) error {
	dir := filepath.Join(c.o.stateDir, "policy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create policy dir: %w", err)
	}
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Fprintf(c.out, "  %s\n  $ %s apply -f %s\n", what, name, path)
	for _, l := range strings.Split(strings.TrimRight(doc, "\n"), "\n") {
		fmt.Fprintln(c.out, "    | "+l)
	}
	cmd := exec.Command(bin, append(lead, "apply", "-f", path)...)
	cmd.Env = c.env()
	b, err := cmd.CombinedOutput()
	fmt.Fprintf(c.out, "    %s", b)
	if err != nil {
		return fmt.Errorf("%s apply -f %s: %w", name, path, err)
	}
	return nil
}

// explore prints how to reach the running cluster.
func (c *cluster) explore(took time.Duration) {
	w := c.out
	ctl := c.calicoctl()
	if rel, err := filepath.Rel(mustGetwd(), ctl); err == nil && !strings.HasPrefix(rel, "..") {
		ctl = rel
	}
	fmt.Fprintf(w, "The demo cluster is up (%.1fs) and stays running. Explore it (as root):\n\n", took.Seconds())
	if c.kdd() {
		kubectl := c.kubectlPath()
		fmt.Fprintf(w, "  export DATASTORE_TYPE=kubernetes KUBECONFIG=%s\n", c.kubeconfig())
		fmt.Fprintf(w, "  alias kubectl=%s\n", kubectl)
		fmt.Fprintf(w, "  kubectl get nodes -o yaml | grep projectcalico.org        # what the agents wrote on their Nodes\n")
		fmt.Fprintf(w, "  kubectl get pods -A -o yaml | grep cni.projectcalico.org   # what the CNI plugin wrote on the pods\n")
		fmt.Fprintf(w, "  kubectl get ipamblocks,blockaffinities,ipamhandles         # Calico's IPAM as custom resources\n")
		fmt.Fprintf(w, "  kubectl get networkpolicies -A; kubectl get globalnetworkpolicies.crd.projectcalico.org\n")
	} else {
		fmt.Fprintf(w, "  export ETCD_ENDPOINTS=%s\n", c.etcdURL())
	}
	fmt.Fprintf(w, "  %s get nodes -o wide\n", ctl)
	fmt.Fprintf(w, "  %s get workloadendpoints -A -o wide\n", ctl)
	fmt.Fprintf(w, "  %s get networkpolicies -A; %s get globalnetworkpolicies\n", ctl, ctl)
	fmt.Fprintf(w, "  %s ipam show --show-blocks\n", ctl)
	for i := 1; i <= nodeCount; i++ {
		fmt.Fprintf(w, "  %s node status --bgp-status-socket %s   # %s\n", ctl, c.bgpSocket(i), nodeName(i))
	}
	fmt.Fprintf(w, "  %s node timeline %s --status-socket '%s'   # each step of a pod's network, on every node\n", ctl, c.pods[1].name(), c.statusSockets())
	fmt.Fprintf(w, "\n  ip netns exec %s ip route                      # BGP routes (proto 80) to the other nodes' blocks\n", c.nodeNS(1))
	fmt.Fprintf(w, "  ip netns exec %s iptables-save | grep cali-     # the compiled policy\n", c.nodeNS(1))
	fmt.Fprintf(w, "  ip netns exec %s bash -c 'cat </dev/tcp/%s/%d'   # from a pod: answered with the pod's name\n", c.pods[0].netns(), c.pods[1].ip, listenPort)
	fmt.Fprintf(w, "  ip netns list | grep %s-                        # every namespace: nodes, bridge, pods\n", c.o.prefix)
	fmt.Fprintf(w, "  logs: %s\n\n", filepath.Join(c.o.stateDir, "logs"))
	fmt.Fprintln(w, "Remove everything with: sudo make demo-down")
}

func mustGetwd() string {
	wd, err := os.Getwd()
	if err != nil {
		return "/"
	}
	return wd
}
