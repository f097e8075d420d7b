package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent/epstatus"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// demoRun is the demo binary with its own prefix, state dir and etcd
// ports, so that the test runs beside a user's `make demo`.
type demoRun struct {
	t        *testing.T
	bin      string
	binDir   string
	stateDir string
	prefix   string
	port     int
	// args are the datastore's flags of up (none: etcd).
	args []string
	// apiPort is the API server's port on the Kubernetes datastore,
	// kubeBinDir where its binaries are.
	apiPort    int
	kubeBinDir string
}

func newDemoRun(t *testing.T, datastore string) *demoRun {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end demo")
	}
	if os.Geteuid() != 0 {
		t.Skip("the demo needs root (network namespaces)")
	}
	var kubeBins kubetest.Binaries
	if datastore == datastoreKube {
		if os.Getenv("CALICO_KUBE_TESTS") == "skip" {
			t.Skip("CALICO_KUBE_TESTS=skip: not running kube-apiserver")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
		defer cancel()
		var err error
		if kubeBins, err = kubetest.EnsureBinaries(ctx, os.Stderr); err != nil {
			t.Fatal(err)
		}
	}
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(t.TempDir(), "calico-demo")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Dir(file)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the demo: %v\n%s", err, out)
	}
	d := &demoRun{
		t: t, bin: bin, binDir: testbin.Dir(t),
		stateDir: filepath.Join(t.TempDir(), "state"),
		prefix:   fmt.Sprintf("cdt%d", os.Getpid()%100000),
		port:     freePortPair(t),
	}
	if datastore == datastoreKube {
		// Its own namespaces, should the two tests ever run at once.
		d.prefix = fmt.Sprintf("cdk%d", os.Getpid()%100000)
		d.apiPort = freePortPair(t)
		d.kubeBinDir = filepath.Dir(kubeBins.APIServer)
		d.args = []string{"--datastore", datastoreKube, "--kube-bin-dir", d.kubeBinDir,
			"--apiserver-port", strconv.Itoa(d.apiPort), "--crds", filepath.Join(testbin.RepoRoot(), "deploy", "crds.yaml")}
	}
	// Whatever happens, nothing may stay behind.
	t.Cleanup(func() { d.run("down") })
	return d
}

// freePortPair finds a port p with p+1 also free on 127.0.0.1.
func freePortPair(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		l.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no free pair of ports")
	return 0
}

func (d *demoRun) run(verb string, extra ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append([]string{verb, "--bin-dir", d.binDir, "--state-dir", d.stateDir, "--prefix", d.prefix, "--etcd-port", strconv.Itoa(d.port)}, extra...)
	out, err := exec.CommandContext(ctx, d.bin, args...).CombinedOutput()
	return string(out), err
}

// up runs `up` and returns its report.
func (d *demoRun) up() (*results, string) {
	d.t.Helper()
	resFile := filepath.Join(d.t.TempDir(), "results.json")
	start := time.Now()
	out, err := d.run("up", append([]string{"--results", resFile}, d.args...)...)
	if err != nil {
		d.dumpLogs()
		d.t.Fatalf("calico-demo up: %v\n%s", err, out)
	}
	d.t.Logf("calico-demo up took %s", time.Since(start).Round(100*time.Millisecond))
	// The Kubernetes datastore starts an API server and installs CRDs first.
	budget := time.Minute
	if d.apiPort != 0 {
		budget = 2 * time.Minute
	}
	if took := time.Since(start); took > budget {
		d.t.Errorf("calico-demo up took %s, want under %s", took, budget)
	}
	data, err := os.ReadFile(resFile)
	if err != nil {
		d.t.Fatal(err)
	}
	var r results
	if err := json.Unmarshal(data, &r); err != nil {
		d.t.Fatal(err)
	}
	return &r, out
}

// dumpLogs shows the end of every log the demo wrote.
func (d *demoRun) dumpLogs() { dumpLogs(d.t, d.stateDir) }

// dumpLogs shows the end of every log under stateDir/logs.
func dumpLogs(t testing.TB, stateDir string) {
	logs, _ := filepath.Glob(filepath.Join(stateDir, "logs", "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		t.Logf("--- %s (last lines)\n%s", filepath.Base(l), strings.Join(lines, "\n"))
	}
}

// ctlEnv is the environment that points calicoctl at the demo's datastore.
func (d *demoRun) ctlEnv() []string {
	if d.apiPort != 0 {
		return []string{"DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + filepath.Join(d.stateDir, "kubeconfig")}
	}
	return []string{"ETCD_ENDPOINTS=http://127.0.0.1:" + strconv.Itoa(d.port)}
}

// tcp connects from a pod namespace with bash's /dev/tcp (independent of
// the demo's own probe) and returns what the listener answered.
func tcp(netns, ip string) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", netns, "timeout", "2", "bash", "-c",
		fmt.Sprintf("cat </dev/tcp/%s/%d", ip, listenPort)).Output()
	return strings.TrimSpace(string(out)), err
}

// TestDemo runs the demo on etcd as a user would, twice in a row, checks
// what it showed against the expected BGP mesh and policy outcome, probes
// the running cluster itself, runs the README tour's commands on it
// (checkTour), then checks `down` leaves nothing behind.
func TestDemo(t *testing.T) {
	d := newDemoRun(t, datastoreEtcd)
	first, _ := d.up()
	r, out := d.up() // a second run replaces the first

	for _, p := range first.Processes {
		if p.alive() {
			t.Errorf("process %s (pid %d) of the first run survived the second", p.Name, p.PID)
		}
	}
	checkDemo(t, d, r, out, []string{"[11/11]", "Successfully applied 1 'NetworkPolicy'"})
	checkTour(t, d, r)
	checkDown(t, d, r)
}

// TestDemoKDD runs the demo on the Kubernetes datastore (`make demo-kdd`):
// a real kube-apiserver holds Calico's data; the same three-node BGP mesh
// and the same connectivity before and after the Kubernetes
// NetworkPolicy (a networking.k8s.io object) and the GlobalNetworkPolicy
// (a custom resource); the README tour's commands (checkTour); `down`
// also stops the API server and its etcd.
func TestDemoKDD(t *testing.T) {
	d := newDemoRun(t, datastoreKube)
	r, out := d.up()
	if r.Datastore != datastoreKube {
		t.Errorf("the demo ran on %q", r.Datastore)
	}
	checkDemo(t, d, r, out, []string{"[13/13]", "networkpolicy.networking.k8s.io/backend-same-namespace-only created",
		"Successfully applied 1 'GlobalNetworkPolicy'", "node--1-k8s-pod--1-eth0", "DATASTORE_TYPE=kubernetes"})

	t.Run("Calico's data in the Kubernetes API", func(t *testing.T) {
		kubectl := func(args ...string) string {
			t.Helper()
			cmd := exec.Command(filepath.Join(d.kubeBinDir, "kubectl"), append([]string{"--kubeconfig", filepath.Join(d.stateDir, "kubeconfig"),
				"--cache-dir", filepath.Join(t.TempDir(), "cache")}, args...)...)
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, b)
			}
			return string(b)
		}
		// The agents registered on the Kubernetes Nodes.
		for i := 1; i <= nodeCount; i++ {
			got := kubectl("get", "node", nodeName(i), "-o", "jsonpath={.metadata.annotations.projectcalico\\.org/IPv4Address}")
			if got != nodeAddr(i)+"/24" {
				t.Errorf("Node %s annotation projectcalico.org/IPv4Address %q, want %s/24", nodeName(i), got, nodeAddr(i))
			}
		}
		// The CNI plugin wrote each pod's address on it.
		for _, p := range r.Pods {
			k8sNS, name, _ := strings.Cut(p.Name, "/")
			got := kubectl("get", "pod", "-n", k8sNS, name, "-o", "jsonpath={.metadata.annotations.cni\\.projectcalico\\.org/podIP}")
			if got != p.IP+"/32" {
				t.Errorf("pod %s annotation cni.projectcalico.org/podIP %q, want %s/32", p.Name, got, p.IP)
			}
		}
		// IPAM is custom resources: one block per node, affine to it.
		affs := kubectl("get", "blockaffinities.crd.projectcalico.org", "-o", "jsonpath={range .items[*]}{.spec.node} {.spec.state}{\"\\n\"}{end}")
		for i := 1; i <= nodeCount; i++ {
			if !strings.Contains(affs, nodeName(i)+" confirmed") {
				t.Errorf("no confirmed block affinity of %s:\n%s", nodeName(i), affs)
			}
		}
		if got := kubectl("get", "ipamblocks.crd.projectcalico.org", "-o", "name"); strings.Count(got, "\n") != nodeCount {
			t.Errorf("IPAM blocks:\n%s\nwant %d", got, nodeCount)
		}
		if got := kubectl("get", "globalnetworkpolicies.crd.projectcalico.org", "-o", "name"); !strings.Contains(got, "frontend-from-frontend-only") {
			t.Errorf("GlobalNetworkPolicy custom resources: %s", got)
		}
	})
	checkTour(t, d, r)
	checkDown(t, d, r)
}

// checkDemo checks what a demo run showed and what its running cluster
// does.
func checkDemo(t *testing.T, d *demoRun, r *results, out string, more []string) {
	for _, want := range append([]string{"Established", "IPv4 BGP status", "198.51.100.0/24", "make demo-down"}, more...) {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}

	t.Run("BGP full mesh", func(t *testing.T) {
		want := map[string][]string{
			"node-1": {"192.0.2.12", "192.0.2.13"},
			"node-2": {"192.0.2.11", "192.0.2.13"},
			"node-3": {"192.0.2.11", "192.0.2.12"},
		}
		for node, peers := range want {
			got := slices.Sorted(slices.Values(r.Sessions[node]))
			if !slices.Equal(got, peers) {
				t.Errorf("%s established sessions %v, want %v", node, got, peers)
			}
		}
	})

	t.Run("connectivity before and after policy", func(t *testing.T) {
		if len(r.Pods) != 6 || len(r.Steps) != 3 {
			t.Fatalf("pods %d, matrices %d; want 6 and 3", len(r.Pods), len(r.Steps))
		}
		ns := func(i int) string { return strings.Split(r.Pods[i].Name, "/")[0] }
		rules := []func(from, to int) bool{
			func(int, int) bool { return true },
			func(f, to int) bool { return ns(to) != "backend" || ns(f) == "backend" },
			func(f, to int) bool { return ns(to) == ns(f) },
		}
		for s, step := range r.Steps {
			for i := range r.Pods {
				for j := range r.Pods {
					want := i == j || rules[s](i, j)
					if step.Got[i][j] != want {
						t.Errorf("%s: %s -> %s connected=%v, want %v", step.Step, r.Pods[i].Name, r.Pods[j].Name, step.Got[i][j], want)
					}
				}
			}
		}
	})

	t.Run("the first pod's timeline", func(t *testing.T) {
		t.Logf("calicoctl node timeline:\n%s", r.Timeline)
		// Every stage has a time: the ADD's on the pod's node, BGP, and
		// both other nodes.
		for _, stage := range []string{"ADD received", "IPAM done", "veth up", "endpoint written", "seen by the agent",
			"policy programmed", "routes programmed", "route advertised (BGP)", "ADD returned", "programmed on node-2", "programmed on node-3"} {
			if _, ok := timelineAfter(r.Timeline, stage); !ok {
				t.Errorf("no time for %q in the timeline", stage)
			}
		}
		ret, _ := timelineAfter(r.Timeline, "ADD returned")
		if pol, _ := timelineAfter(r.Timeline, "policy programmed"); pol > ret {
			t.Errorf("ADD returned (%v) before its policy was programmed (%v)", ret, pol)
		}
		if out := figures(t, d, r); out != "" {
			t.Logf("stage offsets from ADD received over the demo's pods (docs/benchmarks.md):\n%s", out)
		}
	})

	t.Run("the running cluster", func(t *testing.T) {
		byName := map[string]podResult{}
		for _, p := range r.Pods {
			byName[p.Name] = p
		}
		f1, f3, b2 := byName["frontend/pod-1"], byName["frontend/pod-3"], byName["backend/pod-2"]
		if got, err := tcp(f1.NetNS, f3.IP); err != nil || got != "frontend/pod-3" {
			t.Errorf("frontend/pod-1 -> frontend/pod-3 (across nodes): %q, %v", got, err)
		}
		if got, err := tcp(f1.NetNS, b2.IP); err == nil {
			t.Errorf("frontend/pod-1 -> backend/pod-2 connected (%q) despite the NetworkPolicy", got)
		}
		ctl := exec.Command(filepath.Join(d.binDir, "calicoctl"), "get", "networkpolicy", "knp.default.backend-same-namespace-only", "-n", "backend", "-o", "yaml")
		ctl.Env = d.ctlEnv()
		if b, err := ctl.CombinedOutput(); err != nil || !strings.Contains(string(b), "projectcalico.org/orchestrator == 'k8s'") {
			t.Errorf("the converted Kubernetes policy: %v\n%s", err, b)
		}
	})

}

// checkDown takes the demo down and checks nothing of it is left.
func checkDown(t *testing.T, d *demoRun, r *results) {
	out, err := d.run("down")
	if err != nil {
		t.Fatalf("calico-demo down: %v\n%s", err, out)
	}
	t.Run("down leaves nothing", func(t *testing.T) {
		nsList, _ := exec.Command("ip", "netns", "list").Output()
		for _, l := range strings.Split(string(nsList), "\n") {
			if strings.HasPrefix(l, d.prefix+"-") {
				t.Errorf("namespace left: %s", l)
			}
		}
		for _, n := range r.Namespaces {
			if namespaceExists(n) {
				t.Errorf("namespace %s left", n)
			}
		}
		links, _ := exec.Command("ip", "-o", "link").Output()
		if strings.Contains(string(links), "veth-node") || strings.Contains(string(links), d.prefix) {
			t.Errorf("host links left:\n%s", links)
		}
		for _, p := range r.Processes {
			if p.alive() {
				t.Errorf("process %s (pid %d) left", p.Name, p.PID)
			}
		}
		if _, err := os.Stat(d.stateDir); !os.IsNotExist(err) {
			t.Errorf("state dir %s left (%v)", d.stateDir, err)
		}
		ports := []int{d.port}
		if d.apiPort != 0 {
			ports = append(ports, d.apiPort)
		}
		for _, p := range ports {
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err != nil {
				t.Errorf("port %d (etcd or kube-apiserver) still in use: %v", p, err)
			} else {
				l.Close()
			}
		}
		if out, err := d.run("down"); err != nil || !strings.Contains(out, "no demo to remove") {
			t.Errorf("a second down: %v: %s", err, out)
		}
	})
}

// timelineAfter is a stage's AFTER column in `calicoctl node timeline`.
func timelineAfter(out, stage string) (time.Duration, bool) {
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		rest, ok := strings.CutPrefix(l, stage+"  ")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, false
		}
		d, err := time.ParseDuration(fields[0])
		return d, err == nil
	}
	return 0, false
}

// figures is each stage's offset from ADD received over every pod of the
// demo, as the agents recorded them: median and max per stage.
func figures(t *testing.T, d *demoRun, r *results) string {
	t.Helper()
	socks, _ := filepath.Glob(filepath.Join(d.stateDir, "node-*", "status.sock"))
	offsets := map[epstatus.Stage][]time.Duration{}
	for _, p := range r.Pods {
		ns, name, _ := strings.Cut(p.Name, "/")
		var start time.Time
		var remote []epstatus.Record
		for _, s := range socks {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			a, err := epstatus.Query(ctx, s, ns, name)
			cancel()
			if err != nil {
				t.Errorf("status socket %s: %v", s, err)
				continue
			}
			for _, rec := range a.Records {
				if rec.Node != rec.EndpointNode {
					remote = append(remote, rec)
					continue
				}
				var ok bool
				if start, ok = rec.At(epstatus.StageADDReceived); !ok {
					t.Errorf("%s: a timeline on %s without its ADD: %+v", p.Name, a.Node, rec)
					continue
				}
				for _, st := range rec.Stages {
					offsets[st.Stage] = append(offsets[st.Stage], st.At.Sub(start))
				}
			}
		}
		for _, rec := range remote {
			if at, ok := rec.At(epstatus.StageRemoteProgrammed); ok && !start.IsZero() {
				offsets[epstatus.StageRemoteProgrammed] = append(offsets[epstatus.StageRemoteProgrammed], at.Sub(start))
			}
		}
	}
	var b strings.Builder
	for _, st := range epstatus.Stages {
		ds := offsets[st]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		fmt.Fprintf(&b, "  %-20s n=%-2d median %-8v max %v\n", st, len(ds), ds[len(ds)/2].Round(100*time.Microsecond), ds[len(ds)-1].Round(100*time.Microsecond))
	}
	return b.String()
}
