package confwatch

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/scaletest"
)

// The KDD scale harness: K simulated agents (kddscale_agent_test.go), each
// its own process with its own watches, against a real kube-apiserver
// holding a seeded cluster (kddscale_seed_test.go). For each K it measures
// what the API server carries (watches, CPU, RSS, events sent) and what the
// agents see (time to in-sync, time for a change to reach all of them).
// docs/benchmarks.md has the figures and the model built on them.

// scaleParams says what one run measures.
type scaleParams struct {
	shape   clusterShape
	agents  []int         // K values, one fleet each, in order
	modes   []string      // "direct" (each agent watches the API server), "fanout" (agents read one hub)
	perProc int           // agents per child process
	probes  int           // GlobalNetworkPolicy changes and pod label changes timed, each
	burst   int           // pods relabelled at once for the throughput figure
	idle    time.Duration // window for the API server's idle CPU with K agents
	// syncTimeout is how long a fleet may take to get in sync; one that
	// does not is reported as such and measured no further.
	syncTimeout time.Duration
}

// scaleParamsFromEnv is the benchmark's configuration: a 100-node cluster
// and fleets of 1, 10, 50 and 100 agents unless the environment says
// otherwise.
func scaleParamsFromEnv(tb testing.TB) scaleParams {
	p := scaleParams{
		shape:   clusterShape{nodes: 100, podsPerNode: 30, namespaces: 20, gnps: 50, netsets: 10},
		agents:  []int{1, 10, 50, 100},
		modes:   []string{"direct", "fanout"},
		perProc: 1,
		probes:  20,
		burst:   300,
		idle:    10 * time.Second,

		syncTimeout: 10 * time.Minute,
	}
	if v := os.Getenv("KDD_SCALE_SYNC_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			tb.Fatalf("KDD_SCALE_SYNC_TIMEOUT=%q: want a duration like 10m", v)
		}
		p.syncTimeout = d
	}
	for env, dst := range map[string]*int{
		"KDD_SCALE_NODES": &p.shape.nodes, "KDD_SCALE_PODS_PER_NODE": &p.shape.podsPerNode,
		"KDD_SCALE_PER_PROC": &p.perProc, "KDD_SCALE_PROBES": &p.probes, "KDD_SCALE_BURST": &p.burst,
	} {
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				tb.Fatalf("%s=%q: want a positive number", env, v)
			}
			*dst = n
		}
	}
	if v := os.Getenv("KDD_SCALE_AGENTS"); v != "" {
		p.agents = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				tb.Fatalf("KDD_SCALE_AGENTS=%q: want K values like 10,50,100", v)
			}
			p.agents = append(p.agents, n)
		}
	}
	if v := os.Getenv("KDD_SCALE_MODES"); v != "" {
		p.modes = strings.Split(v, ",")
		for _, m := range p.modes {
			if m != "direct" && m != "fanout" {
				tb.Fatalf("KDD_SCALE_MODES=%q: want direct, fanout or both", v)
			}
		}
	}
	return p
}

// BenchmarkKDDScale measures K simulated agents against a real
// kube-apiserver; see docs/benchmarks.md.
//
// Run: make bench-kdd-scale (KDD_SCALE_AGENTS, KDD_SCALE_MODES,
// KDD_SCALE_NODES, KDD_SCALE_PODS_PER_NODE, KDD_SCALE_PROBES,
// KDD_SCALE_BURST, KDD_SCALE_PER_PROC change it).
func BenchmarkKDDScale(b *testing.B) {
	p := scaleParamsFromEnv(b)
	c := startKDDCluster(b, p.shape)
	fmt.Printf("a list of all pods is %.1f MB of JSON (as every agent decodes it)\n", float64(c.rawListBytes(b, "/api/v1/pods"))/(1<<20))
	var runs []scaleRun
	for b.Loop() {
		for _, k := range p.agents {
			for _, mode := range p.modes {
				r := c.measure(b, k, p, mode)
				runs = append(runs, r)
				// Printed, not logged: a benchmark's log is cut to a few lines.
				fmt.Printf("K=%d, %s, %d nodes, %d pods\n%s\n", k, mode, p.shape.nodes, p.shape.pods()+1, r.table())
				r.report(b)
			}
		}
	}
	fmt.Printf("summary (%d nodes, %d pods):\n%s\n", p.shape.nodes, p.shape.pods()+1, summaryTable(runs))
}

// report adds the headline figures to the benchmark's result line.
func (r scaleRun) report(b *testing.B) {
	pre := fmt.Sprintf("K%d-%s-", r.k, r.mode)
	b.ReportMetric(r.watches, pre+"watches")
	b.ReportMetric(scaletest.Ms(r.syncAll), pre+"sync-all-ms")
	b.ReportMetric(scaletest.Ms(scaletest.Pct(r.gnpAll, 0.5)), pre+"gnp-p50-ms")
	b.ReportMetric(scaletest.Ms(scaletest.Pct(r.gnpAll, 0.99)), pre+"gnp-p99-ms")
	b.ReportMetric(scaletest.Ms(scaletest.Pct(r.podAll, 0.5)), pre+"pod-p50-ms")
	b.ReportMetric(scaletest.Ms(scaletest.Pct(r.podAll, 0.99)), pre+"pod-p99-ms")
	b.ReportMetric(r.burst.deliveredPerSec(r.k), pre+"labels-changes*agents/s")
	b.ReportMetric(r.churn.deliveredPerSec(r.k), pre+"churn-changes*agents/s")
	b.ReportMetric(float64(r.apiRSSAfter)/1024, pre+"apiserver-MB")
}

// TestKDDScaleHarness runs the harness on a tiny cluster: every agent gets
// in sync, holds its watches on the API server, and sees every policy
// change, pod change and burst; the figures the benchmark reports are
// filled in.
func TestKDDScaleHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a kube-apiserver and agent processes")
	}
	p := scaleParams{
		shape:   clusterShape{nodes: 3, podsPerNode: 4, namespaces: 2, gnps: 3, netsets: 1},
		perProc: 2, // 3 agents in 2 processes: both ways of packing run
		probes:  2,
		burst:   5,

		syncTimeout: 2 * time.Minute,
	}
	c := startKDDCluster(t, p.shape)
	const k = 3
	for _, mode := range []string{"direct", "fanout"} {
		t.Run(mode, func(t *testing.T) {
			r := c.measure(t, k, p, mode)
			t.Logf("K=%d, %s\n%s", k, mode, r.table())
			checkHarnessRun(t, r, p, mode)
		})
	}
}

func checkHarnessRun(t *testing.T, r scaleRun, p scaleParams, mode string) {
	k := r.k
	// Every Calico kind is at least one collection watched by each agent,
	// or by the hub alone.
	watchers := k
	if mode == "fanout" {
		watchers = 1
		if r.hubRSS <= 0 || r.hubSync <= 0 || r.hubSnapshot <= 0 {
			t.Errorf("hub RSS %d KiB, in sync after %s, snapshot %v bytes: want all measured", r.hubRSS, r.hubSync, r.hubSnapshot)
		}
	} else if r.podListBytes <= 0 {
		t.Errorf("pod list size not measured")
	}
	if min := float64(watchers * len(api.Kinds())); r.watches < min {
		t.Errorf("API server holds %v more watches with %d agents, want at least %v", r.watches, k, min)
	}
	if r.watches != float64(watchers)*math.Round(r.watches/float64(watchers)) {
		t.Errorf("API server holds %v more watches with %d agents: not the same number per watcher", r.watches, k)
	}
	if len(r.gnpAll) != p.probes || len(r.podAll) != p.probes {
		t.Errorf("timed %d policy and %d pod changes, want %d each", len(r.gnpAll), len(r.podAll), p.probes)
	}
	if len(r.gnpEach) != k*p.probes || len(r.podEach) != k*p.probes {
		t.Errorf("%d/%d agent arrivals, want %d each", len(r.gnpEach), len(r.podEach), k*p.probes)
	}
	// Per agent: the probes, the relabelled pods, and for each started
	// pod at least its endpoint's creation and its block.
	if r.burst.all <= 0 || r.churn.all <= 0 || r.updates < int64(k*(2*p.probes+p.burst+2*p.burst)) {
		t.Errorf("bursts took %s and %s, agents received %d updates: want every agent to see at least %d", r.burst.all, r.churn.all, r.updates, 2*p.probes+3*p.burst)
	}
	if r.apiRSSAfter <= 0 || len(r.agentRSS) != 2 {
		t.Errorf("API server RSS %d KiB, %d agent process RSS figures: want both measured", r.apiRSSAfter, len(r.agentRSS))
	}
}

// scaleRun is what one fleet of K agents measured.
type scaleRun struct {
	k, procs int
	mode     string
	inSync   int // agents in sync; < k: the fleet never got there

	hubSync     time.Duration // fan-out: its start to in sync
	hubRSS      int           // KiB, once the agents are in sync
	hubStartCPU time.Duration // CPU while the agents started
	hubSnapshot float64       // bytes the hub wrote per agent at start-up

	// CPU of this test process, which runs the API server's etcd
	// (kubetest's embedded etcd) and the harness, mostly idle meanwhile.
	etcdStartCPU time.Duration

	podListBytes float64 // mean size of the agents' pod LIST responses

	watches      float64            // WATCH requests the API server holds for the fleet
	watchesByRes map[string]float64 // of which per resource
	lists        float64            // LIST requests while the fleet started

	syncAll   time.Duration   // launch of the fleet to its last agent in sync
	syncEach  []time.Duration // per agent: connect to in sync, in its process
	startCPU  time.Duration   // API server CPU from launch to the last agent in sync
	agentsCPU time.Duration   // all agents' CPU to that point

	apiRSSBefore, apiRSSAfter int     // KiB, before the fleet started and once it held its watches
	agentRSS                  []int   // KiB per process, once in sync
	agentHeap                 float64 // bytes: live heap per process after the burst
	apiGoroutines             float64 // the API server's goroutines added by the fleet
	apiHeapBefore, apiHeap    float64 // the API server's heap in use, bytes
	idleCPU                   float64

	gnpAll, podAll   []time.Duration // per change: write to the last agent having it
	gnpEach, podEach []time.Duration // per change and agent
	gnpWrite         []time.Duration // the Update call itself
	podWrite         []time.Duration

	burst, churn phase   // pods relabelled; pods started
	updates      int64   // updates all agents received after their snapshots
	warnings     int64   // warnings all agents logged (watch failures, relists)
	terminated   float64 // watchers the API server closed for being too slow

	// The machine's load average (1, 5, 15 min) when the fleet started
	// and when it was measured: the harness shares its cores.
	loadBefore, loadAfter string
}

func (r scaleRun) watchesPerAgent() float64 { return r.watches / float64(r.k) }

func dist(ds []time.Duration) string {
	return fmt.Sprintf("p50 %.1f / p99 %.1f / max %.1f ms", scaletest.Ms(scaletest.Pct(ds, 0.5)), scaletest.Ms(scaletest.Pct(ds, 0.99)), scaletest.Ms(scaletest.Pct(ds, 1)))
}

func (r scaleRun) table() string {
	var sb strings.Builder
	row := func(k, v string, args ...any) { fmt.Fprintf(&sb, "| %s | %s |\n", k, fmt.Sprintf(v, args...)) }
	sumRSS := 0
	for _, v := range r.agentRSS {
		sumRSS += v
	}
	var byRes []string
	for res, n := range r.watchesByRes {
		byRes = append(byRes, fmt.Sprintf("%s %v", res, n))
	}
	slices.Sort(byRes)
	row("agents (processes)", "%d (%d), %s", r.k, r.procs, r.mode)
	row("load average (1/5/15 min)", "%s at the start, %s at the end", r.loadBefore, r.loadAfter)
	if r.inSync < r.k {
		row("**did not get in sync**", "%d of %d agents after %.0f s; %v LIST requests (%.1f per agent); API server CPU %.1f s, agents' %.1f s per agent",
			r.inSync, r.k, r.syncAll.Seconds(), r.lists, r.lists/float64(r.k), r.startCPU.Seconds(), r.agentsCPU.Seconds()/float64(r.k))
		return sb.String()
	}
	row("watches held", "%v (%.1f per agent): %s", r.watches, r.watchesPerAgent(), strings.Join(byRes, ", "))
	row("LIST requests at start", "%v (%.1f per agent); pod lists sent: %.1f MB each on average (gzip)", r.lists, r.lists/float64(r.k), r.podListBytes/(1<<20))
	row("launch → all in sync", "%.0f ms", scaletest.Ms(r.syncAll))
	row("per agent: connect → in sync", "%s", dist(r.syncEach))
	row("API server CPU, start-up", "%.2f s (%.1f ms per agent)", r.startCPU.Seconds(), scaletest.Ms(r.startCPU)/float64(r.k))
	row("agent CPU, start-up", "%.1f ms per agent", scaletest.Ms(r.agentsCPU)/float64(r.k))
	row("etcd (+ harness) CPU, start-up", "%.2f s (%.1f ms per agent)", r.etcdStartCPU.Seconds(), scaletest.Ms(r.etcdStartCPU)/float64(r.k))
	row("API server RSS", "%.0f MB before, %.0f MB with the agents (+%.1f MB, %.0f KB per agent)",
		float64(r.apiRSSBefore)/1024, float64(r.apiRSSAfter)/1024, float64(r.apiRSSAfter-r.apiRSSBefore)/1024, float64(r.apiRSSAfter-r.apiRSSBefore)/float64(r.k))
	row("API server heap in use, goroutines", "%.0f MB before, %.0f MB with the agents; +%v goroutines (%.1f per watch)",
		r.apiHeapBefore/(1<<20), r.apiHeap/(1<<20), r.apiGoroutines, r.apiGoroutines/max(r.watches, 1))
	row("agent process RSS, live heap", "%.1f MB RSS once in sync, %.1f MB live heap (%d agents per process)",
		float64(sumRSS)/float64(max(1, len(r.agentRSS)))/1024, r.agentHeap/(1<<20), (r.k+r.procs-1)/r.procs)
	row("API server CPU, idle with agents", "%.3f cores", r.idleCPU)
	row("GlobalNetworkPolicy update → all agents", "%s (%d changes; the write: %s)", dist(r.gnpAll), len(r.gnpAll), dist(r.gnpWrite))
	row("… → each agent", "%s", dist(r.gnpEach))
	row("pod label change → all agents", "%s (%d changes; the write: %s)", dist(r.podAll), len(r.podAll), dist(r.podWrite))
	row("… → each agent", "%s", dist(r.podEach))
	for _, ph := range []struct {
		name string
		phase
	}{{"labels: pods relabelled", r.burst}, {"churn: pods started (IPAM, create, status)", r.churn}} {
		row(ph.name, "%d by %d writers in %.0f ms; all agents have all after %.0f ms: %.0f changes/s × agents",
			ph.n, seedWorkers, scaletest.Ms(ph.write), scaletest.Ms(ph.all), ph.deliveredPerSec(r.k))
		row("… updates the agents received, watch events the API server sent", "%d (%.1f per change per agent), %v", ph.updates,
			float64(ph.updates)/float64(max(1, ph.n*r.k)), ph.events)
		row("… CPU: API server, etcd (+ writers), fan-out", "%.2f s (%.1f µs per update received), %.2f s, %.2f s (%.1f µs per update received)",
			ph.apiCPU.Seconds(), ph.perUpdate(ph.apiCPU), ph.etcd.Seconds(), ph.hub.Seconds(), ph.perUpdate(ph.hub))
		row("… CPU: agents", "%.1f ms per agent (%.0f µs per update)", scaletest.Ms(ph.agents)/float64(r.k), ph.perUpdate(ph.agents))
	}
	row("updates received / warnings / watchers terminated", "%d / %d / %v", r.updates, r.warnings, r.terminated)
	if r.mode == "fanout" {
		row("fan-out process: start → in sync, RSS", "%.0f ms, %.1f MB once the agents are in sync", scaletest.Ms(r.hubSync), float64(r.hubRSS)/1024)
		row("fan-out snapshot per agent", "%.1f MB", r.hubSnapshot/(1<<20))
		row("fan-out CPU, agents' start-up", "%.2f s (%.1f ms per agent)", r.hubStartCPU.Seconds(), scaletest.Ms(r.hubStartCPU)/float64(r.k))
	}
	return sb.String()
}

func summaryTable(runs []scaleRun) string {
	var sb strings.Builder
	sb.WriteString("| K | mode | watches | sync all (ms) | API CPU start (s) | agent RSS (MB) | GNP→all p50/p99 (ms) | pod→all p50/p99 (ms) | labels: changes/s × agents | API / fan-out µs per update | churn: changes/s × agents | API / fan-out µs per update |\n")
	for _, r := range runs {
		if r.inSync < r.k {
			fmt.Fprintf(&sb, "| %d | %s | — | %d of %d in sync after %.0f s | %.2f | — | — | — | — | — | — | — |\n",
				r.k, r.mode, r.inSync, r.k, r.syncAll.Seconds(), r.startCPU.Seconds())
			continue
		}
		sum := 0
		for _, v := range r.agentRSS {
			sum += v
		}
		fmt.Fprintf(&sb, "| %d | %s | %v | %.0f | %.2f | %.1f | %.1f / %.1f | %.1f / %.1f | %.0f | %.1f / %.1f | %.0f | %.1f / %.1f |\n",
			r.k, r.mode, r.watches, scaletest.Ms(r.syncAll), r.startCPU.Seconds(),
			float64(sum)/float64(max(1, len(r.agentRSS)))/1024,
			scaletest.Ms(scaletest.Pct(r.gnpAll, 0.5)), scaletest.Ms(scaletest.Pct(r.gnpAll, 0.99)), scaletest.Ms(scaletest.Pct(r.podAll, 0.5)), scaletest.Ms(scaletest.Pct(r.podAll, 0.99)),
			r.burst.deliveredPerSec(r.k), r.burst.perUpdate(r.burst.apiCPU), r.burst.perUpdate(r.burst.hub),
			r.churn.deliveredPerSec(r.k), r.churn.perUpdate(r.churn.apiCPU), r.churn.perUpdate(r.churn.hub))
	}
	return sb.String()
}

// measure starts a fleet of k agents (in mode "fanout" behind one hub),
// measures it, and stops it.
func (c *kddCluster) measure(tb testing.TB, k int, p scaleParams, mode string) (r scaleRun) {
	tb.Helper()
	ctx := context.Background()
	r = scaleRun{k: k, mode: mode, loadBefore: scaletest.LoadAverage()}
	defer func() { r.loadAfter = scaletest.LoadAverage() }()
	apiPID := c.kc.APIServerPID
	// The fleet's own share of the API server: watches, goroutines and
	// memory counted from before the hub (if any) started; requests and CPU
	// from the agents' launch.
	before := c.scrape(tb)
	r.apiRSSBefore = mustRSS(tb, apiPID)

	tokens := make([]string, k)
	for i := range tokens {
		tokens[i] = c.kc.Token(tb, "kube-system", "calico-node", 2*time.Hour)
	}
	f := newFleet()
	defer f.stop()
	var hubPID int
	if mode == "fanout" {
		hub := c.startHub(tb, f, c.kc.Token(tb, "kube-system", "calico-node", 2*time.Hour))
		hubPID = hub.Proc.Cmd.Process.Pid
		r.hubSync = f.hubSynced[1].Sub(f.hubSynced[0])
		c.settledWatches(tb, before, 1)
	}
	hubCPU := func() time.Duration {
		if hubPID == 0 {
			return 0
		}
		return mustCPU(tb, hubPID)
	}
	launch := c.scrape(tb)
	self := os.Getpid()
	cpu0, hub0, etcd0 := mustCPU(tb, apiPID), hubCPU(), mustCPU(tb, self)
	c.startAgents(tb, f, tokens, p.perProc)
	r.procs = len(f.Procs)
	converged := f.Wait(p.syncTimeout, func() bool { return len(f.synced) == k })
	r.startCPU, r.hubStartCPU, r.etcdStartCPU = mustCPU(tb, apiPID)-cpu0, hubCPU()-hub0, mustCPU(tb, self)-etcd0
	if !converged {
		broken := f.Broken()
		f.Lock()
		r.inSync = len(f.synced)
		f.Unlock()
		if broken {
			tb.Fatalf("%d of %d agents in sync when one failed%s", r.inSync, k, f.Problems())
		}
		// Measured as far as it got: the start-up's cost, and what
		// the agents logged about it.
		r.syncAll, r.agentsCPU = time.Since(f.launched), f.cpu(tb)
		r.lists = c.scrape(tb).Sum("apiserver_request_total", "verb", "LIST") - launch.Sum("apiserver_request_total", "verb", "LIST")
		f.stop()
		tb.Logf("K=%d %s: %d of %d agents in sync after %s; the first agent's log ends:\n%s", k, mode, r.inSync, k, p.syncTimeout, f.Procs[0].Stderr.Tail(5))
		return r
	}
	r.inSync = k
	if f.Hub != nil {
		r.hubSnapshot = f.hubBytes(tb) / float64(k)
	}
	var last time.Time
	for _, s := range f.synced {
		r.syncEach = append(r.syncEach, s[1].Sub(s[0]))
		if s[1].After(last) {
			last = s[1]
		}
	}
	r.syncAll = last.Sub(f.launched)
	r.agentsCPU = f.cpu(tb)

	watchers := k
	if mode == "fanout" {
		watchers = 1
	}
	after := c.settledWatches(tb, before, watchers)
	r.watches = after.Sum("apiserver_longrunning_requests", "verb", "WATCH") - before.Sum("apiserver_longrunning_requests", "verb", "WATCH")
	r.watchesByRes = map[string]float64{}
	for res, n := range after.By("apiserver_longrunning_requests", "resource", "verb", "WATCH") {
		if d := n - before.By("apiserver_longrunning_requests", "resource", "verb", "WATCH")[res]; d != 0 {
			r.watchesByRes[res] = d
		}
	}
	r.lists = after.Sum("apiserver_request_total", "verb", "LIST") - launch.Sum("apiserver_request_total", "verb", "LIST")
	podLists := func(p scaletest.Samples, name string) float64 {
		return p.Sum(name, "resource", "pods", "verb", "LIST", "group", "")
	}
	if n := podLists(after, "apiserver_response_sizes_count") - podLists(launch, "apiserver_response_sizes_count"); n > 0 {
		r.podListBytes = (podLists(after, "apiserver_response_sizes_sum") - podLists(launch, "apiserver_response_sizes_sum")) / n
	}
	r.apiRSSAfter = mustRSS(tb, apiPID)
	r.apiGoroutines = after.Sum("go_goroutines") - before.Sum("go_goroutines")
	r.apiHeapBefore, r.apiHeap = before.Sum("go_memstats_heap_inuse_bytes"), after.Sum("go_memstats_heap_inuse_bytes")
	for _, p := range f.Procs {
		r.agentRSS = append(r.agentRSS, mustRSS(tb, p.Proc.Cmd.Process.Pid))
	}
	if hubPID != 0 {
		r.hubRSS = mustRSS(tb, hubPID)
	}
	if p.idle > 0 {
		c0 := mustCPU(tb, apiPID)
		time.Sleep(p.idle)
		r.idleCPU = (mustCPU(tb, apiPID) - c0).Seconds() / p.idle.Seconds()
	}

	// Latency: one change at a time until every agent has it.
	for range p.probes {
		c.gen++
		gen := c.gen
		obj, err := c.store.Get(ctx, "GlobalNetworkPolicy", "", probeGNP)
		if err != nil {
			tb.Fatal(err)
		}
		gnp := obj.(*api.GlobalNetworkPolicy)
		gnp.Labels[probeLabel] = strconv.Itoa(gen)
		gnp.Spec.Order = new(float64(50 + gen%7))
		t0 := time.Now()
		if _, err := c.store.Update(ctx, gnp); err != nil {
			tb.Fatal(err)
		}
		r.gnpWrite = append(r.gnpWrite, time.Since(t0))
		all, each := f.arrivals(tb, "gnp", gen, t0, k)
		r.gnpAll, r.gnpEach = append(r.gnpAll, all), append(r.gnpEach, each...)
	}
	for range p.probes {
		c.gen++
		gen := c.gen
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"%d"}}}`, probeLabel, gen)
		t0 := time.Now()
		if _, err := c.kc.Client.CoreV1().Pods(probeNamespace).Patch(ctx, probePod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			tb.Fatal(err)
		}
		r.podWrite = append(r.podWrite, time.Since(t0))
		all, each := f.arrivals(tb, "wep", gen, t0, k)
		r.podAll, r.podEach = append(r.podAll, all), append(r.podEach, each...)
	}

	// Throughput, twice. Labels: p.burst pods relabelled by concurrent
	// writers, one pod update each. Churn: p.burst pods started as on
	// real nodes — an address from Calico IPAM (a block update), the pod
	// created with it, its status written — the work behind every pod
	// start. Every agent must receive every change.
	r.burst = c.throughput(tb, f, k, p.burst, "b", hubCPU, func(id string, i int) error {
		ns, name := c.podName(i)
		patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, burstLabel, id))
		_, err := c.kc.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	ipc := c.ipam()
	var churned []string // namespace/name/containerID
	var churnMu sync.Mutex
	r.churn = c.throughput(tb, f, k, p.burst, "c", hubCPU, func(id string, i int) error {
		ns, name := fmt.Sprintf("ns-%02d", i%c.shape.namespaces), fmt.Sprintf("churn-%s-%04d", id, i)
		cid := fmt.Sprintf("%064x", 1<<40+c.gen*100_000+i)
		churnMu.Lock()
		churned = append(churned, ns+"/"+name+"/"+cid)
		churnMu.Unlock()
		return c.createPod(ctx, ipc, ns, name, fmt.Sprintf("app%d", i%20), i%c.shape.nodes, cid, map[string]string{burstLabel: id})
	})
	r.terminated = c.scrape(tb).Sum("apiserver_terminated_watchers_total") - before.Sum("apiserver_terminated_watchers_total")
	r.updates, r.warnings, r.agentHeap = f.stats(tb, k)
	if r.warnings > 0 {
		tb.Logf("agents logged %d warnings; the first process's log ends:\n%s", r.warnings, f.Procs[0].Stderr.Tail(20))
	}

	// The started pods go away after the fleet, so that the next fleet
	// finds the cluster as seeded.
	f.stop()
	parallel(tb, len(churned), func(i int) error {
		parts := strings.Split(churned[i], "/")
		if err := c.kc.Client.CoreV1().Pods(parts[0]).Delete(ctx, parts[1], kubetest.ForceDelete()); err != nil {
			return fmt.Errorf("delete pod %s/%s: %w", parts[0], parts[1], err)
		}
		return ipc.ReleaseByHandle(ctx, "k8s-pod-network."+parts[2])
	})
	return r
}

// phase is what one throughput measurement saw.
type phase struct {
	n       int           // changes written
	write   time.Duration // the writers' time
	all     time.Duration // writers' start to the last agent having all n
	apiCPU  time.Duration
	agents  time.Duration // all agents' CPU
	hub     time.Duration
	etcd    time.Duration // this process: the API server's etcd, the writers
	events  float64       // watch events the API server sent
	updates int64         // updates (resources and IPAM keys) the agents received
}

// throughput writes n changes (write(id, 0..n-1), on seedWorkers
// goroutines), each of which gives every agent a WorkloadEndpoint labelled
// burstLabel=id, and measures until every agent has all n.
func (c *kddCluster) throughput(tb testing.TB, f *fleet, k, n int, prefix string, hubCPU func() time.Duration, write func(id string, i int) error) phase {
	tb.Helper()
	c.gen++
	id := prefix + strconv.Itoa(c.gen)
	apiPID, self := c.kc.APIServerPID, os.Getpid()
	u0, _, _ := f.stats(tb, k)
	f.Command(tb, fmt.Sprintf("burst %s %d", id, n))
	m0, api0, ag0, hb0, etcd0 := c.scrape(tb), mustCPU(tb, apiPID), f.cpu(tb), hubCPU(), mustCPU(tb, self)
	t0 := time.Now()
	parallel(tb, n, func(i int) error { return write(id, i) })
	ph := phase{n: n, write: time.Since(t0)}
	if !f.Wait(5*time.Minute, func() bool { return len(f.bursts[id]) == k }) {
		tb.Fatalf("%d of %d agents had all %d changes of %s%s", len(f.bursts[id]), k, n, id, f.Problems())
	}
	for _, t := range f.bursts[id] {
		ph.all = max(ph.all, t.Sub(t0))
	}
	// What does not carry the label (a block, a pod's later status) may
	// still be on its way: the figures include a second's grace.
	time.Sleep(time.Second)
	ph.apiCPU, ph.agents, ph.hub, ph.etcd = mustCPU(tb, apiPID)-api0, f.cpu(tb)-ag0, hubCPU()-hb0, mustCPU(tb, self)-etcd0
	ph.events = c.scrape(tb).Sum("apiserver_watch_events_total") - m0.Sum("apiserver_watch_events_total")
	u1, _, _ := f.stats(tb, k)
	ph.updates = u1 - u0
	return ph
}

// deliveredPerSec is the changes times the agents that all received
// them, over the time until the last one had them.
func (ph phase) deliveredPerSec(k int) float64 {
	if ph.all <= 0 {
		return 0
	}
	return float64(k*ph.n) / ph.all.Seconds()
}

// perUpdate is d per update the agents received, in µs.
func (ph phase) perUpdate(d time.Duration) float64 {
	return float64(d.Microseconds()) / float64(max(1, ph.updates))
}

// settledWatches waits until every one of watchers more than at base
// watches pods — which each Watcher does exactly once, and among its last,
// being its largest list — and the API server's total has not changed for
// a second: a Watcher is in sync once it has listed, and opens its watches
// after that (resuming from the lists' revision).
func (c *kddCluster) settledWatches(tb testing.TB, base scaletest.Samples, watchers int) scaletest.Samples {
	tb.Helper()
	total := func(p scaletest.Samples) float64 { return p.Sum("apiserver_longrunning_requests", "verb", "WATCH") }
	pods := func(p scaletest.Samples) float64 {
		return p.Sum("apiserver_longrunning_requests", "verb", "WATCH", "resource", "pods", "group", "")
	}
	prev, stable := -1.0, 0
	for range 480 {
		time.Sleep(250 * time.Millisecond)
		now := c.scrape(tb)
		w := total(now) - total(base)
		if w == prev && pods(now)-pods(base) >= float64(watchers) {
			if stable++; stable == 4 {
				return now
			}
		} else {
			stable = 0
		}
		prev = w
	}
	tb.Fatalf("API server watches did not settle with %d more watchers of pods within two minutes", watchers)
	return nil
}

// podName is the namespace and name of the i-th seeded pod.
func (c *kddCluster) podName(i int) (string, string) {
	app := fmt.Sprintf("app%d", i%20)
	return fmt.Sprintf("ns-%02d", i%c.shape.namespaces), fmt.Sprintf("%s-%s-%05d", app, "7d9f8b6c5", i)
}

// fleet is a set of agent processes and what they reported; the fields
// below the Fleet are guarded by its lock.
type fleet struct {
	*scaletest.Fleet
	launched time.Time // of the agents

	synced map[int][2]time.Time
	seen   map[string]map[int]time.Time // "gnp 3" -> agent -> arrival
	bursts map[string]map[int]time.Time
	stat   map[int][3]int64 // updates, warnings, process heap

	hubAddr   string
	hubSynced [2]time.Time // start, in sync
	hubSent   float64      // bytes, as last reported (-1: asked, not answered)
}

func newFleet() *fleet {
	f := &fleet{synced: map[int][2]time.Time{}, seen: map[string]map[int]time.Time{},
		bursts: map[string]map[int]time.Time{}, stat: map[int][3]int64{}}
	f.Fleet = scaletest.NewFleet(f.report)
	return f
}

// childEnv is the environment of a child of role first (an agent index,
// or "hub") with extra: the test's without the harness's own settings,
// plus the API server's address and CA.
func (c *kddCluster) childEnv(first string, extra ...string) []string {
	return append(proctest.EnvWithout("KUBECONFIG=", "CALICO_KDD_SCALE_", "FELIX_"),
		append([]string{agentEnv + "=" + first, agentAPIEnv + "=" + c.kc.URL, agentCAEnv + "=" + c.kc.CAFile}, extra...)...)
}

// startHub starts the fan-out and waits until it serves.
func (c *kddCluster) startHub(tb testing.TB, f *fleet, token string) *scaletest.Proc {
	tb.Helper()
	f.StartHub(tb, "agent-hub", 0, c.childEnv("hub", agentTokensEnv+"="+token))
	if !f.Wait(5*time.Minute, func() bool { return f.hubAddr != "" }) {
		tb.Fatalf("fan-out not serving after 5 minutes%s", f.Problems())
	}
	return f.Hub
}

// startAgents starts len(tokens) agents, perProc to a process, reading
// the hub if f has one.
//
// Agents run at the lowest CPU priority (nice 19): on a real cluster each
// has its own node, so they must not take the CPU the API server and etcd
// need here; what they use is measured either way.
func (c *kddCluster) startAgents(tb testing.TB, f *fleet, tokens []string, perProc int) {
	tb.Helper()
	var extra []string
	if f.Hub != nil {
		extra = append(extra, agentFanOutEnv+"="+f.hubAddr)
	}
	f.launched = time.Now()
	for first := 0; first < len(tokens); first += perProc {
		n := min(perProc, len(tokens)-first)
		f.StartAgent(tb, "agent-"+strconv.Itoa(first), 19, c.childEnv(strconv.Itoa(first),
			append(extra, agentTokensEnv+"="+strings.Join(tokens[first:first+n], ","))...))
	}
}

// report reads an agent's line, under the Fleet's lock; the agent's
// index is in the line.
func (f *fleet) report(_ int, fs []string) bool {
	if len(fs) < 2 {
		return true
	}
	agent, _ := strconv.Atoi(fs[1])
	unixNano := scaletest.UnixNano
	switch {
	case fs[0] == "hubsent" && len(fs) == 2:
		f.hubSent, _ = strconv.ParseFloat(fs[1], 64)
	case fs[0] == "hub" && len(fs) == 4:
		f.hubAddr, f.hubSynced = fs[1], [2]time.Time{unixNano(fs[2]), unixNano(fs[3])}
	case fs[0] == "synced" && len(fs) == 4:
		f.synced[agent] = [2]time.Time{unixNano(fs[2]), unixNano(fs[3])}
	case fs[0] == "seen" && len(fs) == 5:
		key := fs[2] + " " + fs[3]
		if f.seen[key] == nil {
			f.seen[key] = map[int]time.Time{}
		}
		f.seen[key][agent] = unixNano(fs[4])
	case fs[0] == "burst" && len(fs) == 4:
		if f.bursts[fs[2]] == nil {
			f.bursts[fs[2]] = map[int]time.Time{}
		}
		f.bursts[fs[2]][agent] = unixNano(fs[3])
	case fs[0] == "stats" && len(fs) == 5:
		var st [3]int64
		for i := range st {
			st[i], _ = strconv.ParseInt(fs[2+i], 10, 64)
		}
		f.stat[agent] = st
	default:
		return false
	}
	return true
}

// arrivals waits until all k agents have generation gen of the probe and
// returns the latency to the last of them and to each.
func (f *fleet) arrivals(tb testing.TB, probe string, gen int, t0 time.Time, k int) (time.Duration, []time.Duration) {
	tb.Helper()
	key := probe + " " + strconv.Itoa(gen)
	if !f.Wait(time.Minute, func() bool { return len(f.seen[key]) == k }) {
		tb.Fatalf("%s generation %d reached %d of %d agents within a minute%s", probe, gen, len(f.seen[key]), k, f.Problems())
	}
	f.Lock()
	defer f.Unlock()
	var all time.Duration
	var each []time.Duration
	for _, t := range f.seen[key] {
		d := t.Sub(t0)
		each = append(each, d)
		all = max(all, d)
	}
	return all, each
}

// stats asks every agent for its counters; heap is the mean live heap of
// the processes.
func (f *fleet) stats(tb testing.TB, k int) (updates, warnings int64, heap float64) {
	tb.Helper()
	f.Lock()
	clear(f.stat)
	f.Unlock()
	f.Command(tb, "stats")
	if !f.Wait(time.Minute, func() bool { return len(f.stat) == k }) {
		tb.Fatalf("stats from %d of %d agents%s", len(f.stat), k, f.Problems())
	}
	f.Lock()
	defer f.Unlock()
	heaps := map[int64]bool{} // one figure per process, reported by each of its agents
	perProc := max(1, (k+len(f.Procs)-1)/len(f.Procs))
	for agent, s := range f.stat {
		updates += s[0]
		warnings += s[1]
		if int64(agent)%int64(perProc) == 0 {
			heap += float64(s[2])
			heaps[int64(agent)] = true
		}
	}
	return updates, warnings, heap / float64(max(1, len(heaps)))
}

// hubBytes asks the fan-out how many bytes it has written to agents.
func (f *fleet) hubBytes(tb testing.TB) float64 {
	tb.Helper()
	f.Lock()
	f.hubSent = -1
	f.Unlock()
	if _, err := io.WriteString(f.Hub.Stdin, "stats\n"); err != nil {
		tb.Fatal(err)
	}
	if !f.Wait(time.Minute, func() bool { return f.hubSent >= 0 }) {
		tb.Fatalf("fan-out did not report its bytes%s", f.Problems())
	}
	f.Lock()
	defer f.Unlock()
	return f.hubSent
}

// cpu is the CPU time all agent processes have used.
func (f *fleet) cpu(tb testing.TB) time.Duration {
	tb.Helper()
	d, err := f.CPU()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// stop closes every child's stdin (they return) and waits for them, the
// hub last. Stopping again does nothing.
func (f *fleet) stop() { f.Stop(10 * time.Second) }

func mustCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	d, err := scaletest.ProcCPU(pid)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

func mustRSS(tb testing.TB, pid int) int {
	tb.Helper()
	n, err := scaletest.ProcRSS(pid)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// rawListBytes is the size of a list as JSON, uncompressed.
func (c *kddCluster) rawListBytes(tb testing.TB, path string) int {
	tb.Helper()
	c.scrape(tb) // makes the client
	req, err := http.NewRequest(http.MethodGet, c.kc.URL+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	// Asking for an encoding turns off the transport's transparent gzip.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.metrics.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return int(n)
}

// scrape reads the API server's /metrics as admin.
func (c *kddCluster) scrape(tb testing.TB) scaletest.Samples {
	tb.Helper()
	if c.metrics == nil {
		hc, err := rest.HTTPClientFor(c.kc.Config)
		if err != nil {
			tb.Fatal(err)
		}
		c.metrics = hc
	}
	resp, err := c.metrics.Get(c.kc.URL + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("API server /metrics: HTTP %d, %v", resp.StatusCode, err)
	}
	return scaletest.ParseProm(string(body))
}
