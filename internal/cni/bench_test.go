package cni_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/projectcalico/calico-node/agent/epstatus"
	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
)

// BenchmarkCNI measures what kubelet waits for: ADD and DEL of one pod,
// executed through libcni as a container runtime does, for calico +
// calico-ipam (against the real etcd binary) and, in the same run on the
// same node, the reference ptp + host-local plugins doing the same veth
// work. Sequentially, then with 8 pods at a time. The implementations
// take turns pod by pod (chunk by chunk when concurrent), each part beside
// its own ptp + host-local row. It prints a latency table and the ratios;
// run it with `make bench-cni`.
//
// Part 1, the node as deployed: `calico-node run` (startAgent: the
// iptables dataplane and BGP on, in this process's network namespace,
// which plays the node, with a run directory of its own) serves the
// plugin processes, which hand it each command (cnientry); ADD returns
// once the agent has programmed the pod's policy and routes. Resident
// pods (CNI_BENCH_RESIDENT, default 2) stay on the node throughout. The
// agent's own record of the ADDs (calico_node_endpoint_stage_seconds)
// and of its applies says where the time goes.
//
// Part 2, the agent stopped (as while it restarts): the plugin process
// does all the work itself; the same plugin code built alone
// (testdata/cnionly) shows what starting the full binary costs.
//
// Part 3, the Kubernetes datastore as deployed: `calico-node run` with
// DATASTORE_TYPE=kubernetes (startAgent again: iptables dataplane and
// BGP on, KUBECONFIG to a real kube-apiserver of package kubetest, on
// loopback) serves the same plugin with "datastore_type": "kubernetes",
// beside its own ptp + host-local row. Its pods are Kubernetes pods (a
// Pod object each, bound to the node, K8S_POD_* in CNI_ARGS, as kubelet
// runs it), fresh for each mode as a new pod's sandbox is: the agent
// reads the Pod, its Namespace and ClusterInformation, allocates from
// ipamblocks/blockaffinities/ipamhandles, writes the Pod's
// cni.projectcalico.org annotations and waits for its dataplane, as on
// etcd; resident pods stay on the node as in part 1. Every container ID
// is 64 hex digits, as a runtime makes them.
//
// It runs its own fixed number of operations (CNI_BENCH_N, default 200)
// whatever b.N is: percentiles need many samples of the same thing.
// CNI_BENCH_KDD=0 leaves the Kubernetes rows out.
func BenchmarkCNI(b *testing.B) {
	n := envInt("CNI_BENCH_N", 200)
	if n == 0 {
		n = 200
	}
	withKDD := os.Getenv("CNI_BENCH_KDD") != "0"
	const workers = 8
	e := newEnv(b)
	e.addPool("bench", "10.224.0.0/16", 26)
	// No agent marks this endpoint status directory: a plugin process
	// does not wait for a dataplane.
	calico := e.conf("1.0.0", map[string]any{"log_level": "error", "endpoint_status_dir": b.TempDir()})
	ptp := []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ptp-bench","type":"ptp","ipMasq":false,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.225.0.0/16"}]],"dataDir":%q}}`, e.dataDir))

	type sample struct{ add, del time.Duration }
	run := func(cni *libcni.CNIConfig, conf []byte, pods []*pod, workers int) []sample {
		net, err := libcni.ConfFromBytes(conf)
		if err != nil {
			b.Fatal(err)
		}
		out := make([]sample, len(pods))
		var wg sync.WaitGroup
		next := make(chan int)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					t0 := time.Now()
					if _, err := cni.AddNetwork(e.ctx, net, pods[i].rt); err != nil {
						b.Errorf("ADD: %v", err)
						return
					}
					t1 := time.Now()
					if err := cni.DelNetwork(e.ctx, net, pods[i].rt); err != nil {
						b.Errorf("DEL: %v", err)
						return
					}
					out[i] = sample{t1.Sub(t0), time.Since(t1)}
				}
			}()
		}
		for i := range pods {
			next <- i
		}
		close(next)
		wg.Wait()
		return out
	}

	// The plugin built alone, in a CNI bin dir of its own.
	leanDir := b.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(leanDir, "calico"), "./internal/cni/testdata/cnionly")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the plugin alone: %v\n%s", err, out)
	}
	if err := os.Symlink("calico", filepath.Join(leanDir, "calico-ipam")); err != nil {
		b.Fatal(err)
	}
	lean := libcni.NewCNIConfigWithCacheDir([]string{leanDir}, filepath.Join(leanDir, "cache"), nil)

	pods := make([]*pod, n)
	for i := range pods {
		pods[i] = newPod(b)
		pods[i].rt.ContainerID = runtimeID()
	}
	modes := []struct {
		name           string
		workers, chunk int
	}{{"sequential", 1, 1}, {"8-way", workers, 5 * workers}}

	// The Kubernetes datastore: its own API server, node, pool and Pods.
	var k *env
	kddPods := map[string][]*pod{} // by mode
	if withKDD {
		k = newKDDEnv(b)
		k.addNode(k.node)
		k.addPool("bench", "10.226.0.0/16", 26)
		for _, m := range []string{"warm-up", "resident", "sequential", "8-way"} {
			count := n
			switch m {
			case "warm-up":
				count = 8
			case "resident":
				count = envInt("CNI_BENCH_RESIDENT", 2)
			}
			for i := range count {
				name := fmt.Sprintf("bench-%s-%d", strings.ReplaceAll(m, "-", ""), i)
				k.addK8sPod("default", name, k.node)
				p := newPod(b, "default", name)
				p.rt.ContainerID = runtimeID()
				p.rt.Args = slices.DeleteFunc(p.rt.Args, func(a [2]string) bool { return a[0] == "K8S_POD_INFRA_CONTAINER_ID" })
				p.rt.Args = append(p.rt.Args, [2]string{"K8S_POD_INFRA_CONTAINER_ID", p.rt.ContainerID})
				kddPods[m] = append(kddPods[m], p)
			}
		}
	}

	// Warm up all (page cache, the datastores' first block claim).
	run(e.cni, calico, pods[:8], 1)
	run(lean, calico, pods[:8], 1)
	run(e.cni, ptp, pods[:8], 1)

	type row struct {
		impl, mode string
		s          []sample
	}
	type impl struct {
		name   string
		cni    *libcni.CNIConfig
		conf   []byte
		socket string
		kdd    bool // on the Kubernetes datastore's pods
	}
	var rows []row
	// measure runs impls on the same pods, sequentially then 8 at a time.
	measure := func(impls []impl, afterMode func(mode string)) {
		for _, mode := range modes {
			// The implementations take turns, a chunk of pods each, so
			// that the load of this shared machine drifting during the
			// run hits all of them alike (one pod at a time when
			// sequential).
			samples := make([][]sample, len(impls))
			for lo := 0; lo < len(pods); lo += mode.chunk {
				hi := min(lo+mode.chunk, len(pods))
				for i, im := range impls {
					chunk := pods[lo:hi]
					if im.kdd {
						chunk = kddPods[mode.name][lo:hi]
					}
					os.Setenv(cnientry.SocketEnv, im.socket)
					samples[i] = append(samples[i], run(im.cni, im.conf, chunk, mode.workers)...)
				}
			}
			for i, im := range impls {
				rows = append(rows, row{im.name, mode.name, samples[i]})
			}
			if afterMode != nil {
				afterMode(mode.name)
			}
		}
	}

	// Part 1: the node's agent, `calico-node run` as deployed (iptables
	// dataplane, BGP), serves the plugins; ADD returns once the pod's
	// policy and routes are programmed.
	agent := startAgent(b, e, "--etcd-endpoints="+strings.Join(e.etcd.Endpoints, ","))
	agentConf := e.conf("1.0.0", map[string]any{"log_level": "error", "endpoint_status_dir": agent.statusDir})
	os.Setenv(cnientry.SocketEnv, agent.socket)
	run(e.cni, agentConf, pods[:8], 1)
	// Pods that stay on the node throughout, on the same network, as a
	// node has them: the network's profile chains and IP sets then stay
	// programmed, and a new pod changes only its own chains and set
	// members. Without them (CNI_BENCH_RESIDENT=0) every ADD on the empty
	// node also recreates those, and every DEL removes them again.
	resident := make([]*pod, envInt("CNI_BENCH_RESIDENT", 2))
	for i := range resident {
		resident[i] = newPod(b)
		resident[i].rt.ContainerID = runtimeID()
		e.mustAdd(agentConf, resident[i])
	}
	// The agent's own account of the ADDs it served, per mode.
	var breakdown strings.Builder
	measure([]impl{
		{"calico, agent running", e.cni, agentConf, agent.socket, false},
		{"ptp+host-local", e.cni, ptp, "none", false},
	}, agent.breakdown(b, &breakdown, "etcd"))
	if b.Failed() {
		return
	}
	for _, p := range resident {
		e.mustDel(agentConf, p)
	}
	agent.stop(b)

	// Part 2: no agent on the node (stopped: its endpoints stay as they
	// are); the plugin process does all the work, and no marker in its
	// endpoint status directory says an agent would program the pod.
	impls := []impl{
		{"calico, no agent", e.cni, calico, "none", false},
		{"same, plugin built alone", lean, calico, "none", false},
		{"ptp+host-local, no agent", e.cni, ptp, "none", false},
	}
	measure(impls, nil)
	if b.Failed() {
		return
	}

	// Part 3: the Kubernetes datastore's agent, `calico-node run` as
	// deployed on KDD, serves the plugins; its own ptp+host-local beside
	// it.
	if withKDD {
		kagent := startAgent(b, k, "DATASTORE_TYPE=kubernetes", "KUBECONFIG="+k.kube.Kubeconfig)
		kddConf := k.conf("1.0.0", map[string]any{"log_level": "error", "endpoint_status_dir": kagent.statusDir})
		os.Setenv(cnientry.SocketEnv, kagent.socket)
		run(k.cni, kddConf, kddPods["warm-up"], 1)
		for _, p := range kddPods["resident"] {
			k.mustAdd(kddConf, p)
		}
		measure([]impl{
			{"calico KDD, agent running", k.cni, kddConf, kagent.socket, true},
			{"ptp+host-local, beside KDD", e.cni, ptp, "none", false},
		}, kagent.breakdown(b, &breakdown, "Kubernetes datastore"))
		if b.Failed() {
			return
		}
		for _, p := range kddPods["resident"] {
			k.mustDel(kddConf, p)
		}
		kagent.stop(b)
	}

	// The floor: starting each binary at all (VERSION does no work).
	floor := func(path string) time.Duration {
		var ds []time.Duration
		for range 50 {
			cmd := exec.Command(path)
			cmd.Env = []string{"CNI_COMMAND=VERSION"}
			cmd.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
			t0 := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%s VERSION: %v: %s", path, err, out)
			}
			ds = append(ds, time.Since(t0))
		}
		return pct(ds, 50)
	}
	calicoFloor := floor(filepath.Join(e.binDir, "calico"))
	ptpFloor := floor(filepath.Join(e.binDir, "ptp"))

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(os.Stdout, "\nCNI ADD/DEL latency, %d pods per run, through libcni (ms)\n", n)
	fmt.Fprintln(w, "plugins\tmode\top\tmin\tp50\tp99\t")
	p50, p99 := map[string]time.Duration{}, map[string]time.Duration{}
	for _, r := range rows {
		for _, op := range []string{"ADD", "DEL"} {
			var ds []time.Duration
			for _, s := range r.s {
				if op == "ADD" {
					ds = append(ds, s.add)
				} else {
					ds = append(ds, s.del)
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t\n", r.impl, r.mode, op, ms(pct(ds, 0)), ms(pct(ds, 50)), ms(pct(ds, 99)))
			p50[r.impl+r.mode+op] = pct(ds, 50)
			p99[r.impl+r.mode+op] = pct(ds, 99)
		}
	}
	w.Flush()
	ratio := func(m map[string]time.Duration, impl, ref, mode, op string) float64 {
		return float64(m[impl+mode+op]) / float64(m[ref+mode+op])
	}
	for _, mode := range []string{"sequential", "8-way"} {
		for _, op := range []string{"ADD", "DEL"} {
			agent := ratio(p50, "calico, agent running", "ptp+host-local", mode, op)
			agent99 := ratio(p99, "calico, agent running", "ptp+host-local", mode, op)
			direct := ratio(p50, "calico, no agent", "ptp+host-local, no agent", mode, op)
			direct99 := ratio(p99, "calico, no agent", "ptp+host-local, no agent", mode, op)
			alone := ratio(p50, "same, plugin built alone", "ptp+host-local, no agent", mode, op)
			fmt.Printf("%s %s: calico / ptp+host-local = %.2fx p50 (p99 %.2fx) with the agent running, %.2fx (p99 %.2fx) without (plugin built alone: %.2fx)\n",
				mode, op, agent, agent99, direct, direct99, alone)
			b.ReportMetric(agent, mode+"-"+op+"-p50-ratio")
			b.ReportMetric(direct, mode+"-"+op+"-p50-ratio-no-agent")
			if withKDD {
				kdd := ratio(p50, "calico KDD, agent running", "ptp+host-local, beside KDD", mode, op)
				kdd99 := ratio(p99, "calico KDD, agent running", "ptp+host-local, beside KDD", mode, op)
				fmt.Printf("    on the Kubernetes datastore, agent running: %.2fx (p99 %.2fx)\n", kdd, kdd99)
				b.ReportMetric(kdd, mode+"-"+op+"-p50-ratio-kdd")
			}
		}
	}
	fmt.Print(breakdown.String())
	os.Setenv(cnientry.SocketEnv, "none")
	fmt.Printf("process start (VERSION, p50): calico-node %.1f ms, plugin built alone %.1f ms, ptp %.1f ms\n",
		ms(calicoFloor), ms(floor(filepath.Join(leanDir, "calico"))), ms(ptpFloor))
}

// runtimeID is a container ID as container runtimes make them: 64 hex
// digits.
func runtimeID() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// envInt is the variable's value, or def when it is unset or not a
// number.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if p == 0 {
		return s[0]
	}
	i := (len(s)*p + 99) / 100
	return s[min(i, len(s))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchAgent is `calico-node run` on the benchmark's node.
type benchAgent struct {
	proc      *proctest.Proc
	socket    string // its CNI socket
	statusDir string // its endpoint status directory
	metrics   string // its /metrics URL
}

// startAgent runs `calico-node run` as the DaemonSet runs it (iptables
// dataplane, BGP) in this process's network namespace (the node's),
// against e's datastore as the given flags and environment (NAME=value)
// name it, with a run directory of its own (CNI socket, status sockets,
// endpoint status files), and waits until it is ready and serves CNI.
func startAgent(b *testing.B, e *env, datastore ...string) *benchAgent {
	b.Helper()
	run, err := os.MkdirTemp("", "cnibench") // short: unix socket paths are limited
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(run) })
	health := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(b))
	a := &benchAgent{socket: filepath.Join(run, "cni.sock"), statusDir: filepath.Join(run, epstatus.DirName),
		metrics: "http://" + health + "/metrics"}
	args := []string{"run",
		"--nodename=" + e.node, "--ip=" + nodeIPv4 + "/24", "--no-default-pools",
		"--data-dir=" + b.TempDir(), "--health-addr=" + health,
		"--cni-socket=" + a.socket, "--status-socket=" + filepath.Join(run, "status.sock"),
		"--bgp-status-socket=" + filepath.Join(run, "bgp.sock"), "--log-level=warning"}
	var env []string
	for _, d := range datastore {
		if strings.HasPrefix(d, "--") {
			args = append(args, d)
		} else {
			env = append(env, d)
		}
	}
	cmd := exec.Command(filepath.Join(e.binDir, "calico-node"), args...)
	cmd.Env = append(proctest.EnvWithout("CALICO_", "FELIX_", "ETCD_", "DATASTORE_TYPE=", "KUBECONFIG=", "NODENAME="),
		"FELIX_ENDPOINTSTATUSPATHPREFIX="+run, "CALICO_NETWORKING_BACKEND=bird", "CALICO_DATAPLANE=iptables",
		"FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT")
	cmd.Env = append(cmd.Env, env...)
	a.proc = proctest.Start(b, "calico-node", cmd)
	a.proc.WaitHTTP(b, 60*time.Second, "http://"+health+"/readiness")
	a.proc.WaitFor(b, 30*time.Second, "CNI socket", func() bool {
		c, err := net.Dial("unix", a.socket)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return a
}

func (a *benchAgent) stop(b *testing.B) {
	b.Helper()
	if err := a.proc.Stop(20 * time.Second); err != nil {
		b.Errorf("agent exit: %v", err)
	}
}

// breakdown returns measure's afterMode for the rows a serves: it writes
// to w, per mode, the agent's record of the ADDs it served
// (calico_node_endpoint_stage_seconds: its API work up to the endpoint
// written, then the wait for the dataplane) and of its applies.
func (a *benchAgent) breakdown(b *testing.B, w *strings.Builder, datastore string) func(mode string) {
	last := a.scrape(b)
	return func(mode string) {
		now := a.scrape(b)
		fmt.Fprintf(w, "agent-served ADD on the %s, %s: mean time from the agent receiving it to each stage (calico_node_endpoint_stage_seconds), ms:\n   ", datastore, mode)
		for _, st := range []epstatus.Stage{epstatus.StageIPAM, epstatus.StageVeth, epstatus.StageEndpointWritten, epstatus.StageAgentSeen,
			epstatus.StagePolicy, epstatus.StageRoutes, epstatus.StageADDReturned} {
			fmt.Fprintf(w, " %s %.1f", st, ms(now.mean(last, fmt.Sprintf("calico_node_endpoint_stage_seconds_%%s{stage=%q}", st))))
		}
		fmt.Fprintf(w, "\n    and meanwhile: %.0f policy applies of %.1f ms; iptables-restore %.0f calls of %.1f ms, ip6tables-restore %.0f of %.1f ms; ipset restore %.0f (IPv4) and %.0f (IPv6) calls\n",
			now.delta(last, "felix_int_dataplane_apply_time_seconds_count"), ms(now.mean(last, "felix_int_dataplane_apply_time_seconds_%s")),
			now.delta(last, `calico_iptables_restore_seconds_count{family="4"}`), ms(now.mean(last, `calico_iptables_restore_seconds_%s{family="4"}`)),
			now.delta(last, `calico_iptables_restore_seconds_count{family="6"}`), ms(now.mean(last, `calico_iptables_restore_seconds_%s{family="6"}`)),
			now.delta(last, `calico_ipset_restore_calls_total{family="4"}`), now.delta(last, `calico_ipset_restore_calls_total{family="6"}`))
		last = now
	}
}

// metrics is one scrape of the agent's /metrics: sample line → value.
type metrics map[string]float64

func (a *benchAgent) scrape(b *testing.B) metrics {
	b.Helper()
	resp, err := http.Get(a.metrics)
	if err != nil {
		b.Fatalf("agent metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatalf("agent metrics: %v", err)
	}
	m := metrics{}
	for _, line := range strings.Split(string(body), "\n") {
		if i := strings.LastIndexByte(line, ' '); i > 0 && !strings.HasPrefix(line, "#") {
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				m[line[:i]] = v
			}
		}
	}
	return m
}

func (m metrics) delta(since metrics, sample string) float64 { return m[sample] - since[sample] }

// mean is a histogram's mean since the earlier scrape; sample has %s
// where "sum" or "count" goes.
func (m metrics) mean(since metrics, sample string) time.Duration {
	n := m.delta(since, fmt.Sprintf(sample, "count"))
	if n == 0 {
		return 0
	}
	return time.Duration(m.delta(since, fmt.Sprintf(sample, "sum")) / n * float64(time.Second))
}
