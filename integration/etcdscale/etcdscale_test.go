package etcdscale

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/bgp"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/connect"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/scaletest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// params says what one run measures.
type params struct {
	shape   shape
	perProc int     // simulated nodes per packed agent process
	calib   int     // nodes run one per process, for calibration
	rate    float64 // pods started per second, cluster-wide, at most
	// budget caps the rate at budget/nodes pods per second: the events
	// etcd sends and the simulated nodes decode grow with pods/s × nodes,
	// and this machine carries a few thousand (see docs/benchmarks.md).
	budget   float64
	lifetime time.Duration // of a churn pod
	churn    time.Duration // how long pods are started
	probes   int           // probe policy changes during the churn
	workers  int           // CNI workers (pods set up or torn down at once)
	// memPerNode is the packed agent processes' GOMEMLIMIT per node, MiB
	// (0: none).
	memPerNode int
	nice       int      // the agent processes' niceness
	modes      []string // "direct": nodes watch etcd; "fanout": they read a fan-out
	// killAt is when the etcd leader is killed (SIGKILL), from the churn's
	// start, and downFor how long it stays down before its restart.
	killAt, downFor time.Duration
	syncTimeout     time.Duration
	drainTimeout    time.Duration // after the churn, for every node to have everything
}

// outageSettle is how long after a killed member's restart writes still
// count as made during its outage.
const outageSettle = 5 * time.Second

// benchParams is the benchmark's configuration: fleets of 100, 500 and
// 1,000 nodes, 60 s of pod churn at 30 pods/s or 1,500 / nodes pods/s,
// whichever is less, unless the environment says otherwise.
func benchParams(tb testing.TB) ([]int, params) {
	nodes := []int{100, 500, 1000}
	p := params{
		shape:      shape{podsPerNode: 1, namespaces: 10, gnps: 20, reflectors: 3},
		perProc:    125,
		calib:      3,
		rate:       30,
		budget:     1500,
		lifetime:   20 * time.Second,
		churn:      60 * time.Second,
		probes:     30,
		workers:    32,
		memPerNode: 6,
		nice:       10,
		modes:      []string{"direct", "fanout"},
		killAt:     20 * time.Second,
		downFor:    10 * time.Second,

		syncTimeout:  10 * time.Minute,
		drainTimeout: 5 * time.Minute,
	}
	if v := os.Getenv("ETCD_SCALE_NODES"); v != "" {
		nodes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 4 {
				tb.Fatalf("ETCD_SCALE_NODES=%q: want node counts like 100,500,1000 (at least 4)", v)
			}
			nodes = append(nodes, n)
		}
	}
	for env, dst := range map[string]*int{"ETCD_SCALE_PER_PROC": &p.perProc, "ETCD_SCALE_PODS_PER_NODE": &p.shape.podsPerNode,
		"ETCD_SCALE_PROBES": &p.probes, "ETCD_SCALE_NICE": &p.nice} {
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || (n == 0 && env != "ETCD_SCALE_NICE") {
				tb.Fatalf("%s=%q: want a positive number", env, v)
			}
			*dst = n
		}
	}
	for env, dst := range map[string]*float64{"ETCD_SCALE_RATE": &p.rate, "ETCD_SCALE_BUDGET": &p.budget} {
		if v := os.Getenv(env); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 {
				tb.Fatalf("%s=%q: want a positive number", env, v)
			}
			*dst = f
		}
	}
	if v := os.Getenv("ETCD_SCALE_MODES"); v != "" {
		p.modes = strings.Split(v, ",")
		for _, m := range p.modes {
			if m != "direct" && m != "fanout" {
				tb.Fatalf("ETCD_SCALE_MODES=%q: want direct, fanout or both", v)
			}
		}
	}
	if v := os.Getenv("ETCD_SCALE_CHURN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 10*time.Second {
			tb.Fatalf("ETCD_SCALE_CHURN=%q: want a duration of at least 10s", v)
		}
		p.churn = d
		p.killAt, p.downFor = d/3, min(10*time.Second, d/6)
	}
	return nodes, p
}

// BenchmarkEtcdScale measures fleets of simulated nodes against a
// 3-member etcd cluster, writes the figures to ResultsFile (or
// ETCD_SCALE_OUT) and prints the tables docs/benchmarks.md quotes.
//
// Run: make bench-etcd-scale (ETCD_SCALE_NODES, ETCD_SCALE_RATE,
// ETCD_SCALE_BUDGET, ETCD_SCALE_CHURN, ETCD_SCALE_PODS_PER_NODE,
// ETCD_SCALE_PER_PROC, ETCD_SCALE_PROBES, ETCD_SCALE_NICE, ETCD_SCALE_MODES
// change it; ETCD_SCALE_CPUPROFILE
// names a directory for the agent processes' CPU profiles).
func BenchmarkEtcdScale(b *testing.B) {
	nodes, p := benchParams(b)
	res := Results{Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), Commit: commit()}
	for _, n := range nodes {
		for _, mode := range p.modes {
			b.Run(fmt.Sprintf("nodes=%d/%s", n, mode), func(b *testing.B) {
				var r Run
				for b.Loop() {
					r = measure(b, n, mode, p)
				}
				fmt.Printf("%d nodes, %s:\n%s\n", n, mode, r.table())
				res.Runs = append(res.Runs, r)
				b.ReportMetric(r.EtcdCPU, "etcd-cores")
				b.ReportMetric(r.WatchEventsPerS, "watch-events/s")
				b.ReportMetric(r.PolicyCachedAllP99, "policy-all-p99-ms")
				b.ReportMetric(r.PodAllP99, "pod-all-p99-ms")
				if !r.Correct {
					b.Errorf("%d nodes, %s: correctness checks failed (see the table)", n, mode)
				}
			})
		}
	}
	out := os.Getenv("ETCD_SCALE_OUT")
	if out == "" {
		out = filepath.Join(testbin.RepoRoot(), ResultsFile)
	}
	if err := WriteResults(out, res); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("summary:\n%s\nresults: %s\n", summaryTable(res.Runs), out)
}

// TestEtcdScaleHarness runs the harness small (10 nodes, 15 s of churn,
// the leader killed and restarted in the middle) and asserts what must
// hold at any size: no address allocated twice, no acknowledged write
// lost, every node back in sync with etcd, every probe and pod reaching
// every node, and the route reflector topology as Calico documents it.
func TestEtcdScaleHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a 3-member etcd cluster and agent processes")
	}
	for _, tc := range []struct {
		mode  string
		churn time.Duration
	}{
		{"direct", 15 * time.Second},
		// The fan-out's own test is in confwatch; here: nodes reading it
		// hold no etcd watch and still get every change across the kill.
		{"fanout", 10 * time.Second},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			p := params{
				shape:    shape{podsPerNode: 1, namespaces: 3, gnps: 4, reflectors: 2},
				perProc:  4, // 10 nodes: 2 alone (calibration), then 4, 4
				calib:    2,
				rate:     15,
				budget:   1000,
				lifetime: 3 * time.Second,
				churn:    tc.churn,
				probes:   5,
				workers:  8,
				nice:     10,
				killAt:   tc.churn / 4,
				downFor:  tc.churn / 4,

				syncTimeout:  2 * time.Minute,
				drainTimeout: 2 * time.Minute,
			}
			const n = 10
			r := measure(t, n, tc.mode, p)
			t.Logf("%d nodes, %s:\n%s", n, tc.mode, r.table())
			checkHarnessRun(t, r, n, p)
			if tc.mode == "fanout" && (r.Watchers >= n || r.HubCPU <= 0 || r.HubRSS <= 0) {
				t.Errorf("fan-out: etcd holds %v watchers for %d nodes (want the fan-out's only), fan-out CPU %v, RSS %v",
					r.Watchers, n, r.HubCPU, r.HubRSS)
			}
			if tc.mode == "direct" && r.Watchers != 3*n {
				t.Errorf("etcd holds %v watchers for %d nodes, want 3 per node", r.Watchers, n)
			}
		})
	}
}

func checkHarnessRun(t *testing.T, r Run, n int, p params) {
	if r.PodsStarted < 50 || r.PodsDeleted < 20 {
		t.Errorf("churn started %d and deleted %d pods, want at least 50 and 20", r.PodsStarted, r.PodsDeleted)
	}
	if r.KilledMember == "" || r.LeaderChanges < 1 {
		t.Errorf("killed member %q, leader changes %v: want the leader killed and replaced", r.KilledMember, r.LeaderChanges)
	}
	if r.PolicyChanges != r.PolicyWritten || r.PolicyChanges < 3 || r.PolicyCachedAllP50 <= 0 || r.PolicyCompiledAllP50 <= 0 || r.CompilesPerNodeS <= 0 {
		t.Errorf("%d policy changes timed (p50 %.1f ms in every cache, %.1f ms compiled; %.1f compiles/s), want %d",
			r.PolicyChanges, r.PolicyCachedAllP50, r.PolicyCompiledAllP50, r.CompilesPerNodeS, r.PolicyWritten)
	}
	if r.PodsTimed+r.PodsMissed < r.PodsStarted || r.PodsTimed == 0 {
		t.Errorf("%d pods timed and %d missed of %d started", r.PodsTimed, r.PodsMissed, r.PodsStarted)
	}
	if r.LostWrites != 0 || r.DoubleAllocated != 0 || r.IPAMProblems != 0 || r.FailedOperations != 0 {
		t.Errorf("lost writes %d, double allocations %d, IPAM problems %d, failed operations %d: want none",
			r.LostWrites, r.DoubleAllocated, r.IPAMProblems, r.FailedOperations)
	}
	if r.NodesResynced != n {
		t.Errorf("%d of %d nodes' caches equal etcd at the end", r.NodesResynced, n)
	}
	if !r.RRTopologyOK || r.ClientPeers != p.shape.reflectors || r.ReflectorPeers != n-1 {
		t.Errorf("route reflector topology ok=%v: a client has %d sessions (want %d), a reflector %d (want %d)",
			r.RRTopologyOK, r.ClientPeers, p.shape.reflectors, r.ReflectorPeers, n-1)
	}
	if r.SessionsMesh != n*(n-1) || r.SessionsRR >= r.SessionsMesh {
		t.Errorf("sessions: %d with route reflectors, %d with the full mesh (want %d, and more than with reflectors)", r.SessionsRR, r.SessionsMesh, n*(n-1))
	}
	if r.WatchEventsPerS <= 0 || r.EtcdCPU <= 0 || r.AgentRSSCalib <= 0 || r.AgentHeapPerNode <= 0 || r.DBSize <= 0 {
		t.Errorf("figures not measured: watch events/s %v, etcd CPU %v, agent RSS %v, heap %v, db size %v",
			r.WatchEventsPerS, r.EtcdCPU, r.AgentRSSCalib, r.AgentHeapPerNode, r.DBSize)
	}
	if !r.Correct {
		t.Error("the run's own correctness verdict is false")
	}
}

// measure runs one fleet of n simulated nodes from a fresh etcd cluster.
func measure(tb testing.TB, n int, mode string, p params) Run {
	tb.Helper()
	s := p.shape
	s.nodes = n
	rate := min(p.rate, p.budget/float64(n))
	r := Run{Nodes: n, Reflectors: s.reflectors, TargetPodRate: rate, Calibration: min(p.calib, n), Nice: p.nice, Budget: p.budget, Mode: mode}
	cluster := etcdtest.StartCluster(tb, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The CNI role: a few connections, as many plugins on many nodes.
	var clients []cni
	for range 4 {
		store, err := connect.New(ctx, datastore.Config{Endpoints: cluster.Endpoints})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { store.Close() })
		clients = append(clients, cni{store: store, ipam: ipam.New(store.IPAM(), store, nil)})
	}
	admin := clients[0]
	seedStart := time.Now()
	seeded := seedCluster(tb, ctx, admin, s)
	r.SeededPods = len(seeded)
	tb.Logf("%d nodes: seeded %d pods in %.1f s", n, len(seeded), time.Since(seedStart).Seconds())

	mon := newMonitor(cluster)
	monCtx, monStop := context.WithCancel(ctx)
	defer monStop()
	go mon.run(monCtx)

	// The fleet.
	names := make([]string, n)
	for i := range names {
		names[i] = nodeName(i)
	}
	r.LoadBefore = scaletest.LoadAverage()
	e0 := mon.read()
	f := newFleet()
	if mode == "fanout" {
		f.startHub(tb, cluster.Endpoints)
	}
	f.launch(tb, names, cluster.Endpoints, p.calib, p.perProc, p.memPerNode, p.nice, p.syncTimeout)
	r.Processes = len(f.Procs)
	mon.setAgents(f.cpu)
	if !f.Wait(p.syncTimeout, func() bool { return len(f.synced) == n }) {
		tb.Fatalf("%d of %d nodes in sync after %s%s", len(f.synced), n, p.syncTimeout, f.Problems())
	}
	each, all := f.syncedTimes()
	r.SyncAll, r.SyncEachP50, r.SyncEachP99 = scaletest.Ms(all), scaletest.Ms(scaletest.Pct(each, 0.5)), scaletest.Ms(scaletest.Pct(each, 0.99))
	e1 := mon.read()
	r.EtcdCPUStart = delta(e0, e1, "cpu")
	// A node reports in sync with confwatch; its IPAM watches may open a
	// moment later: the watchers are counted once the count holds still.
	for range 30 {
		time.Sleep(time.Second)
		e := mon.read()
		w := gaugeSum(e, "etcd_debugging_mvcc_watcher_total")
		if w == r.Watchers {
			break
		}
		r.Watchers, r.WatchStreams = w, gaugeSum(e, "etcd_debugging_mvcc_watch_stream_total")
	}

	// Churn, probes, and the leader's death.
	st0 := f.collectStats(tb)
	mon.resetMaxSlow()
	c0, cal0, h0 := f.cpu(), calibCPU(f, p.calib), f.hubCPU()
	e2 := mon.read()
	churnCtx, stopChurn := context.WithCancel(ctx)
	ch := newChurner(clients, s, rate, p.lifetime, p.workers)
	churnDone := make(chan struct{})
	go func() { ch.run(churnCtx); close(churnDone) }()
	probeDone := make(chan probeResult, 1)
	go func() { probeDone <- runProbes(churnCtx, admin.store, f, p.probes, p.churn) }()
	start := time.Now()
	time.Sleep(p.killAt)
	leader := cluster.Leader(ctx, cluster.Client(tb))
	if leader == nil {
		tb.Fatal("no etcd leader to kill")
	}
	r.KilledMember, r.KillSeconds = leader.Name, time.Since(start).Seconds()
	r.WatchersOnKilled = mon.read().gauges[leader.Name]["etcd_debugging_mvcc_watcher_total"]
	killedAt := time.Now()
	leader.Kill()
	time.Sleep(p.downFor)
	leader.Restart(tb)
	r.DownSeconds = time.Since(start).Seconds() - r.KillSeconds
	// Writes made from the kill until settle after the restart are timed
	// apart: the outage's cost, not the steady state.
	outage := func(t0 time.Time) bool {
		return !t0.Before(killedAt) && t0.Before(killedAt.Add(p.downFor+outageSettle))
	}
	time.Sleep(time.Until(start.Add(p.churn)))
	stopChurn()
	<-churnDone
	churnSecs := time.Since(start).Seconds()
	pr := <-probeDone
	r.PolicyWritten = pr.gens
	e3 := mon.read()
	c1, cal1, h1 := f.cpu(), calibCPU(f, p.calib), f.hubCPU()
	r.HubCPU = (h1 - h0).Seconds() / time.Since(start).Seconds()
	r.HubRSS = f.hubRSS()
	r.LoadAfter = scaletest.LoadAverage()
	r.ChurnSeconds = churnSecs

	// etcd during the churn.
	r.EtcdCPU = delta(e2, e3, "cpu") / churnSecs
	for _, v := range memberDelta(cluster, e2, e3, "cpu") {
		r.EtcdCPUPerMember = append(r.EtcdCPUPerMember, v/churnSecs)
	}
	r.WatchEventsPerS = delta(e2, e3, "etcd_debugging_mvcc_events_total") / churnSecs
	if r.WatchEventsPerS > 0 {
		r.EtcdUsPerEvent = r.EtcdCPU * 1e6 / r.WatchEventsPerS
	}
	r.SentMBPerS = delta(e2, e3, "etcd_network_client_grpc_sent_bytes_total") / churnSecs / (1 << 20)
	r.TxnPerS = delta(e2, e3, "etcd_mvcc_txn_total") / churnSecs
	r.LeaderChanges = delta(e2, e3, "etcd_server_leader_changes_seen_total")
	r.SlowWatchersMax = e3.maxSlow
	for _, mem := range cluster.Members {
		r.EtcdRSSPerMember = append(r.EtcdRSSPerMember, e3.gauges[mem.Name]["rss"]/(1<<20))
	}
	r.EtcdRSS = slices.Max(r.EtcdRSSPerMember)
	r.AgentCPU = (c1 - c0).Seconds() / churnSecs
	if packed := n - r.Calibration; packed > 0 {
		r.AgentCPUPerNode = ((c1 - c0) - (cal1 - cal0)).Seconds() * 1000 / churnSecs / float64(packed)
	}
	if r.Calibration > 0 {
		r.CalibCPUPerNode = (cal1 - cal0).Seconds() * 1000 / churnSecs / float64(r.Calibration)
	}

	// Churn figures.
	ch.mu.Lock()
	r.PodsStarted, r.PodsDeleted = ch.started, len(ch.deleted)
	r.PodRate = float64(ch.started) / churnSecs
	r.CNIAddP50, r.CNIAddP99 = scaletest.Ms(scaletest.Pct(ch.addLat, 0.5)), scaletest.Ms(scaletest.Pct(ch.addLat, 0.99))
	r.CNIRetries = ch.retries + pr.retries
	r.FailedOperations = len(ch.failed) + pr.failed
	for _, e := range ch.failed {
		tb.Logf("CNI operation failed: %s", e)
	}
	t0s := ch.t0s
	ch.mu.Unlock()

	// Every node has every probe and every pod (or saw it go).
	if !f.Wait(p.drainTimeout, func() bool {
		for g := 1; g <= pr.gens; g++ {
			if a := f.gnp[g]; a == nil || a.procs < len(f.Procs) {
				return false
			}
			if a := f.gnpc[g]; r.Calibration > 0 && (a == nil || a.procs < r.Calibration) {
				return false
			}
		}
		for key := range t0s {
			if a := f.pods[key]; a == nil || a.procs < len(f.Procs) {
				return false
			}
		}
		return true
	}) {
		tb.Errorf("not every node had every probe and pod %s after the churn%s", p.drainTimeout, f.Problems())
	}
	var gnpAll, gnpcAll, podAll, gnpOut, podOut []time.Duration
	f.Lock()
	for g := 1; g <= pr.gens; g++ {
		t0 := pr.t0[g]
		if a := f.gnp[g]; a != nil && a.procs == len(f.Procs) {
			if outage(t0) {
				gnpOut = append(gnpOut, a.last.Sub(t0))
			} else {
				gnpAll = append(gnpAll, a.last.Sub(t0))
			}
		}
		if a := f.gnpc[g]; a != nil && a.procs == r.Calibration && !outage(t0) {
			gnpcAll = append(gnpcAll, a.last.Sub(t0))
		}
	}
	for key, t0 := range t0s {
		a := f.pods[key]
		switch {
		case f.podMiss[key] > 0:
			r.PodsMissed++
		case a != nil && a.procs == len(f.Procs) && outage(t0):
			podOut = append(podOut, a.last.Sub(t0))
		case a != nil && a.procs == len(f.Procs):
			podAll = append(podAll, a.last.Sub(t0))
		}
	}
	if os.Getenv("ETCD_SCALE_DEBUG") != "" {
		fmt.Print(mon.cpuTimeline(start, start.Add(p.churn+20*time.Second)))
		for g := 1; g <= pr.gens; g++ {
			if a := f.gnp[g]; a != nil {
				var per []string
				for i := range f.Procs {
					per = append(per, fmt.Sprintf("%.0f", scaletest.Ms(f.gnpByProc[g][i].Sub(pr.t0[g]))))
				}
				fmt.Printf("probe %d written at %.1f s: every cache after %.0f ms; per process %s\n", g, pr.t0[g].Sub(start).Seconds(), scaletest.Ms(a.last.Sub(pr.t0[g])), strings.Join(per, " "))
			}
		}
	}
	f.Unlock()
	r.PolicyChanges, r.PodsTimed = len(gnpAll)+len(gnpOut), len(podAll)+len(podOut)
	r.PolicyOutageN, r.PolicyOutageMax = len(gnpOut), scaletest.Ms(scaletest.Pct(gnpOut, 1))
	r.PodOutageN, r.PodOutageMax = len(podOut), scaletest.Ms(scaletest.Pct(podOut, 1))
	r.PolicyCachedAllP50, r.PolicyCachedAllP99 = scaletest.Ms(scaletest.Pct(gnpAll, 0.5)), scaletest.Ms(scaletest.Pct(gnpAll, 0.99))
	r.PolicyCompiledAllP50, r.PolicyCompiledAllP99 = scaletest.Ms(scaletest.Pct(gnpcAll, 0.5)), scaletest.Ms(scaletest.Pct(gnpcAll, 0.99))
	if len(gnpcAll)+len(gnpOut) != r.PolicyChanges {
		tb.Errorf("%d probe generations compiled by every policy node, %d in every cache", len(gnpcAll), len(gnpAll))
	}
	r.PodAllP50, r.PodAllP99 = scaletest.Ms(scaletest.Pct(podAll, 0.5)), scaletest.Ms(scaletest.Pct(podAll, 0.99))

	// The agents' own figures.
	st1 := f.collectStats(tb)
	var gh, ph histogram
	var upd, kve, comp, warn, packedEvents int64
	var heapPacked, heapCalib float64
	nodesPacked := 0
	for i := range f.Procs {
		s1, s0 := st1[i], st0[i]
		upd += s1.updates - s0.updates
		kve += s1.kvEvents - s0.kvEvents
		comp += s1.compiles - s0.compiles
		warn += s1.warnings
		gh.merge(s1.gnpHist)
		ph.merge(s1.podHist)
		if i < r.Calibration {
			heapCalib += float64(s1.heap)
		} else {
			heapPacked += float64(s1.heap)
			nodesPacked += len(f.nodes[i])
			packedEvents += s1.updates - s0.updates + s1.kvEvents - s0.kvEvents
		}
	}
	r.PolicyCachedEachP50, r.PolicyCachedEachP99 = scaletest.Ms(gh.quantile(0.5)), scaletest.Ms(gh.quantile(0.99))
	r.PodEachP50, r.PodEachP99 = scaletest.Ms(ph.quantile(0.5)), scaletest.Ms(ph.quantile(0.99))
	r.UpdatesPerNodeS = float64(upd) / float64(n) / churnSecs
	r.KVEventsPerNodeS = float64(kve) / float64(n) / churnSecs
	if r.Calibration > 0 {
		r.CompilesPerNodeS = float64(comp) / float64(r.Calibration) / churnSecs
	}
	if packedEvents > 0 {
		packedCPU := (c1 - c0) - (cal1 - cal0)
		r.AgentUsPerEvent = float64(packedCPU.Microseconds()) / float64(packedEvents)
	}
	r.AgentWarnings = warn
	rss, counts := f.rss()
	var rssPacked, rssCalib float64
	for i, kb := range rss {
		if i < r.Calibration {
			rssCalib += float64(kb) / 1024
		} else {
			rssPacked += float64(kb) / 1024
		}
	}
	_ = counts
	if r.Calibration > 0 {
		r.AgentRSSCalib = rssCalib / float64(r.Calibration)
		r.AgentHeapCalib = heapCalib / float64(r.Calibration) / (1 << 20)
	}
	if nodesPacked > 0 {
		r.AgentRSSPerNode = rssPacked / float64(nodesPacked)
		r.AgentHeapPerNode = heapPacked / float64(nodesPacked) / (1 << 20)
	} else {
		r.AgentRSSPerNode, r.AgentHeapPerNode = r.AgentRSSCalib, r.AgentHeapCalib
	}

	// Correctness: writes, addresses, every node's view.
	check(tb, ctx, admin, ch, &r)
	verifyNodes(tb, ctx, admin, f, s, &r)
	sessionCounts(tb, ctx, admin.store, s, &r)
	r.CompileMs = compileTime(tb, ctx, admin.store, nodeName(0))

	e4 := mon.read()
	r.DBSize = gaugeMax(e4, "etcd_mvcc_db_total_size_in_bytes") / (1 << 20)
	r.DBSizeInUse = gaugeMax(e4, "etcd_mvcc_db_total_size_in_use_in_bytes") / (1 << 20)
	r.Correct = r.LostWrites == 0 && r.DoubleAllocated == 0 && r.IPAMProblems == 0 && r.NodesResynced == n &&
		r.FailedOperations == 0 && r.RRTopologyOK
	if os.Getenv("ETCD_SCALE_DEBUG") != "" {
		tb.Logf("agents-0 stderr:\n%s", f.Procs[0].Stderr.Tail(40))
	}
	f.stop()
	return r
}

// calibCPU is the CPU time of the one-node processes.
func calibCPU(f *fleet, calib int) time.Duration {
	var sum time.Duration
	for i, pid := range f.pids() {
		if i < calib {
			d, _ := scaletest.ProcCPU(pid)
			sum += d
		}
	}
	return sum
}

// probeResult is the probe policy's generations and their write times.
type probeResult struct {
	gens            int
	t0              map[int]time.Time
	retries, failed int
}

// runProbes changes the probe policy probes times, evenly over the churn,
// and tells the agent processes when each generation was written.
func runProbes(ctx context.Context, store datastore.Store, f *fleet, probes int, churn time.Duration) probeResult {
	res := probeResult{t0: map[int]time.Time{}}
	interval := churn / time.Duration(probes+1)
	for gen := 1; gen <= probes; gen++ {
		select {
		case <-ctx.Done():
			return res
		case <-time.After(interval):
		}
		var t0 time.Time
		for attempt := 0; ; attempt++ {
			t0 = time.Now()
			wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := store.Apply(wctx, probePolicy(gen))
			cancel()
			if err == nil {
				break
			}
			res.retries++
			if attempt == 100 {
				res.failed++
				return res
			}
			time.Sleep(opBackoff)
		}
		res.t0[gen] = t0
		res.gens = gen
		for _, p := range f.Procs {
			fmt.Fprintf(p.Stdin, "gnp %d %d\n", gen, t0.UnixNano())
		}
	}
	return res
}

// check compares etcd with what the churn was told: every pod set up and
// not torn down has its endpoint, with its address; every pod torn down
// has none; IPAM's own check (calicoctl ipam check's) finds no address
// allocated twice, no leak and no missing handle, and every live pod's
// address is allocated to its handle.
func check(tb testing.TB, ctx context.Context, c cni, ch *churner, r *Run) {
	tb.Helper()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	objs, _, err := c.store.List(ctx, "WorkloadEndpoint", "")
	if err != nil {
		tb.Fatal(err)
	}
	have := map[string]*api.WorkloadEndpoint{}
	for _, o := range objs {
		w := o.(*api.WorkloadEndpoint)
		have[w.Namespace+"/"+w.Name] = w
	}
	for key, lp := range ch.live {
		w := have[key]
		if w == nil || len(w.Spec.IPNetworks) != 1 || w.Spec.IPNetworks[0] != netip.PrefixFrom(lp.ip, 32).String() {
			r.LostWrites++
			tb.Errorf("lost write: pod %s set up with %s, etcd has %v", key, lp.ip, w)
		}
	}
	for key := range ch.deleted {
		if have[key] != nil {
			r.LostWrites++
			tb.Errorf("lost write: pod %s torn down, its endpoint is still in etcd", key)
		}
	}
	rep, err := c.ipam.Check(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	for ip, allocs := range rep.Allocations {
		if len(allocs) > 1 {
			r.DoubleAllocated++
			tb.Errorf("address %s allocated %d times", ip, len(allocs))
		}
	}
	r.IPAMProblems = rep.Problems()
	if r.IPAMProblems > 0 {
		b, _ := json.Marshal(rep)
		tb.Errorf("ipam check found %d problems: %s", r.IPAMProblems, b)
	}
	owner := map[netip.Addr]string{}
	for key, lp := range ch.live {
		if prev, dup := owner[lp.ip]; dup {
			r.DoubleAllocated++
			tb.Errorf("pods %s and %s both hold %s", prev, key, lp.ip)
		}
		owner[lp.ip] = key
		allocs := rep.Allocations[lp.ip.String()]
		if len(allocs) != 1 || allocs[0].Handle != lp.handle() {
			r.DoubleAllocated++
			tb.Errorf("pod %s's address %s: IPAM holds %v, want one allocation to %s", key, lp.ip, allocs, lp.handle())
		}
	}
	r.Blocks = rep.Stats.Blocks
}

// verifyNodes has every node compare its cache and block view with etcd's
// (waiting for it to catch up) and report its BGP sessions.
func verifyNodes(tb testing.TB, ctx context.Context, c cni, f *fleet, s shape, r *Run) {
	tb.Helper()
	var lines []string
	for _, info := range api.Kinds() {
		objs, _, err := c.store.List(ctx, info.Kind, "")
		if err != nil {
			tb.Fatal(err)
		}
		for _, o := range objs {
			k := confwatch.KeyOf(o)
			lines = append(lines, k.Kind+"/"+k.Namespace+"/"+k.Name+"@"+o.Meta().ResourceVersion)
		}
	}
	r.Resources = len(lines)
	resD := digest(lines)
	kvs, _, err := c.store.IPAM().List(ctx, "/calico/ipam/v2/assignment/", false)
	if err != nil {
		tb.Fatal(err)
	}
	aff := map[netip.Prefix]string{}
	for _, kv := range kvs {
		var b struct {
			CIDR     string  `json:"cidr"`
			Affinity *string `json:"affinity"`
		}
		if err := json.Unmarshal(kv.Value, &b); err != nil {
			tb.Fatalf("block %s: %v", kv.Key, err)
		}
		cidr, err := netip.ParsePrefix(b.CIDR)
		if err != nil {
			tb.Fatalf("block %s: %v", kv.Key, err)
		}
		host := ""
		if b.Affinity != nil {
			host, _ = strings.CutPrefix(*b.Affinity, "host:")
			if host == *b.Affinity {
				host = ""
			}
		}
		aff[cidr.Masked()] = host
	}
	blkN, blkD := blockDigest(aff)
	f.Lock()
	clear(f.verify)
	f.Unlock()
	f.Command(tb, fmt.Sprintf("verify %d %s %d %s %s %s", len(lines), resD, blkN, blkD, rrClusterID, time.Minute))
	if !f.Wait(2*time.Minute, func() bool { return len(f.verify) == s.nodes }) {
		tb.Errorf("verify answered by %d of %d nodes%s", len(f.verify), s.nodes, f.Problems())
	}
	f.Lock()
	defer f.Unlock()
	r.RRTopologyOK = len(f.verify) == s.nodes
	for i := range s.nodes {
		name := nodeName(i)
		v, ok := f.verify[name]
		if !ok {
			continue
		}
		if v.ok {
			r.NodesResynced++
		} else {
			tb.Errorf("node %s out of sync with etcd at the end: %s", name, v.problem)
		}
		var good bool
		if isReflector(s, i) {
			r.ReflectorPeers = v.sessions
			good = v.sessions == s.nodes-1 && v.rrClients == s.nodes-s.reflectors && v.mesh == 0
		} else {
			r.ClientPeers = v.sessions
			good = v.sessions == s.reflectors && v.rrPeers == s.reflectors && v.rrClients == 0 && v.mesh == 0
		}
		if !good {
			r.RRTopologyOK = false
			tb.Errorf("node %s (reflector %v): %d sessions, %d as reflector of clients, %d mesh, %d to reflectors",
				name, isReflector(s, i), v.sessions, v.rrClients, v.mesh, v.rrPeers)
		}
	}
}

// sessionCounts computes every node's sessions with bgp.Compute (the code
// that configures gobgp) on the datastore as it is (route reflectors) and
// as it would be with the default full mesh, and times one node's
// computation for each.
func sessionCounts(tb testing.TB, ctx context.Context, store datastore.Store, s shape, r *Run) {
	tb.Helper()
	snap := bgp.Snapshot{Nodes: map[string]*api.Node{}, Peers: map[string]*api.BGPPeer{}, BGPConfigs: map[string]*api.BGPConfiguration{}}
	list := func(kind string) []api.Object {
		objs, _, err := store.List(ctx, kind, "")
		if err != nil {
			tb.Fatal(err)
		}
		return objs
	}
	for _, o := range list("Node") {
		snap.Nodes[o.Meta().Name] = o.(*api.Node)
	}
	for _, o := range list("BGPPeer") {
		snap.Peers[o.Meta().Name] = o.(*api.BGPPeer)
	}
	for _, o := range list("BGPConfiguration") {
		snap.BGPConfigs[o.Meta().Name] = o.(*api.BGPConfiguration)
	}
	count := func(snap bgp.Snapshot) (int, float64) {
		total := 0
		var took time.Duration
		for name := range snap.Nodes {
			snap.NodeName = name
			start := time.Now()
			d := bgp.Compute(snap)
			took += time.Since(start)
			total += len(d.Sessions)
		}
		return total, scaletest.Ms(took) / float64(len(snap.Nodes))
	}
	r.SessionsRR, r.ComputeRRMs = count(snap)
	// The same cluster as Calico installs it: the default full mesh, no
	// reflectors, no BGPPeers.
	t := true
	mesh := bgp.Snapshot{Nodes: map[string]*api.Node{}, Peers: map[string]*api.BGPPeer{}, BGPConfigs: map[string]*api.BGPConfiguration{}}
	for name, n := range snap.Nodes {
		c := *n
		bgpSpec := *n.Spec.BGP
		bgpSpec.RouteReflectorClusterID = ""
		c.Spec.BGP = &bgpSpec
		mesh.Nodes[name] = &c
	}
	for name, bc := range snap.BGPConfigs {
		c := *bc
		c.Spec.NodeToNodeMeshEnabled = &t
		mesh.BGPConfigs[name] = &c
	}
	r.SessionsMesh, r.ComputeMeshMs = count(mesh)
}

// compileTime is how long one node's policy.Compile of the cluster as it
// is takes (the median of five): the work every node repeats for each
// change it sees.
func compileTime(tb testing.TB, ctx context.Context, store datastore.Store, node string) float64 {
	tb.Helper()
	s := &policy.Snapshot{Node: node}
	for _, kind := range []string{"WorkloadEndpoint", "HostEndpoint", "NetworkPolicy", "GlobalNetworkPolicy", "Profile",
		"NetworkSet", "GlobalNetworkSet", "Tier", "IPPool", "Node"} {
		objs, _, err := store.List(ctx, kind, "")
		if err != nil {
			tb.Fatal(err)
		}
		for _, o := range objs {
			s.Add(o)
		}
	}
	var took []time.Duration
	for range 5 {
		start := time.Now()
		res := policy.Compile(s)
		took = append(took, time.Since(start))
		if len(res.Problems) > 0 {
			tb.Errorf("compiling node %s's policy: %v", node, res.Problems)
		}
	}
	return scaletest.Ms(scaletest.Pct(took, 0.5))
}

func machine() string {
	mem := "?"
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 2 {
			kb, _ := strconv.Atoi(f[1])
			mem = fmt.Sprintf("%.0f GB", float64(kb)/(1<<20))
		}
	}
	ver := "?"
	if out, err := exec.Command("/usr/bin/etcd", "--version").Output(); err == nil {
		ver = strings.TrimPrefix(strings.Split(string(out), "\n")[0], "etcd Version: ")
	}
	return fmt.Sprintf("%d CPUs, %s RAM, etcd %s, %s", runtime.NumCPU(), mem, ver, runtime.Version())
}

func commit() string {
	out, err := exec.Command("git", "-C", testbin.RepoRoot(), "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// table is one run's figures as a markdown table.
func (r Run) table() string {
	var sb strings.Builder
	row := func(k, v string, args ...any) { fmt.Fprintf(&sb, "| %s | %s |\n", k, fmt.Sprintf(v, args...)) }
	row("nodes (agent processes, of which one-node)", "%d, %s (%d, %d; nice %d); %d route reflectors; %d pods seeded", r.Nodes, r.Mode, r.Processes, r.Calibration, r.Nice, r.Reflectors, r.SeededPods)
	if r.Mode == "fanout" {
		row("fan-out (`calico-node fanout`)", "%.2f cores during churn, %.0f MB RSS", r.HubCPU, r.HubRSS)
	}
	row("load average (1/5/15 min)", "%s before the fleet, %s after the churn", r.LoadBefore, r.LoadAfter)
	row("start (one process after the other)", "all nodes in sync %.1f s after the first launch; one node connect → in sync p50 %.0f / p99 %.0f ms; etcd CPU %.1f s", r.SyncAll/1000, r.SyncEachP50, r.SyncEachP99, r.EtcdCPUStart)
	row("etcd watchers / watch streams", "%.0f / %.0f (%.1f / %.1f per node)", r.Watchers, r.WatchStreams, r.Watchers/float64(r.Nodes), r.WatchStreams/float64(r.Nodes))
	row("churn", "%.0f s: %d pods started (%.1f/s, target %.0f), %d torn down; %d policy changes; %s (the leader, serving %.0f watchers) killed at %.0f s, back %.0f s later",
		r.ChurnSeconds, r.PodsStarted, r.PodRate, r.TargetPodRate, r.PodsDeleted, r.PolicyChanges, r.KilledMember, r.WatchersOnKilled, r.KillSeconds, r.DownSeconds)
	row("etcd CPU during churn", "%.2f cores (members %s)", r.EtcdCPU, floats(r.EtcdCPUPerMember, "%.2f"))
	row("etcd RSS, db size", "%.0f MB largest member (%s); db %.1f MB (%.1f MB in use)", r.EtcdRSS, floats(r.EtcdRSSPerMember, "%.0f"), r.DBSize, r.DBSizeInUse)
	row("watch events sent", "%.0f/s (%.1f MB/s to clients; etcd CPU %.0f µs per event); %.0f txn/s; slow watchers at most %.0f; leader changes seen %.0f", r.WatchEventsPerS, r.SentMBPerS, r.EtcdUsPerEvent, r.TxnPerS, r.SlowWatchersMax, r.LeaderChanges)
	row("agent CPU", "%.2f cores for all: %.1f ms/s per node, %.0f µs per watch event (one-node processes, with the policy actor: %.1f ms/s)", r.AgentCPU, r.AgentCPUPerNode, r.AgentUsPerEvent, r.CalibCPUPerNode)
	row("agent memory per node", "%.1f MB RSS, %.1f MB live heap (packed); one-node processes %.1f MB RSS, %.1f MB heap", r.AgentRSSPerNode, r.AgentHeapPerNode, r.AgentRSSCalib, r.AgentHeapCalib)
	row("per node per second", "%.1f confwatch updates, %.1f IPAM watch events; %.1f policy compiles (policy nodes), one compile %.1f ms", r.UpdatesPerNodeS, r.KVEventsPerNodeS, r.CompilesPerNodeS, r.CompileMs)
	row("policy change → in every node's cache", "p50 %.0f / p99 %.0f ms (each node, outage included: p50 %.0f / p99 %.0f ms); written during the outage: %d, the slowest %.0f ms",
		r.PolicyCachedAllP50, r.PolicyCachedAllP99, r.PolicyCachedEachP50, r.PolicyCachedEachP99, r.PolicyOutageN, r.PolicyOutageMax)
	row("policy change → compiled (one-node processes)", "p50 %.0f / p99 %.0f ms", r.PolicyCompiledAllP50, r.PolicyCompiledAllP99)
	row("new pod's endpoint write → all nodes route it", "p50 %.0f / p99 %.0f ms over %d pods (each node, outage included: p50 %.0f / p99 %.0f ms); written during the outage: %d, the slowest %.0f ms; %d deleted before all had them",
		r.PodAllP50, r.PodAllP99, r.PodsTimed-r.PodOutageN, r.PodEachP50, r.PodEachP99, r.PodOutageN, r.PodOutageMax, r.PodsMissed)
	row("CNI ADD (IPAM + endpoint)", "p50 %.0f / p99 %.0f ms; %d retries", r.CNIAddP50, r.CNIAddP99, r.CNIRetries)
	row("BGP sessions (both ends)", "%d with %d reflectors (a client %d, a reflector %d), %d with the full mesh; bgp.Compute per node %.2f vs %.2f ms",
		r.SessionsRR, r.Reflectors, r.ClientPeers, r.ReflectorPeers, r.SessionsMesh, r.ComputeRRMs, r.ComputeMeshMs)
	row("correctness", "lost writes %d, double allocations %d, IPAM problems %d, failed operations %d, nodes in sync %d/%d, reflector topology ok %v; %d agent warnings",
		r.LostWrites, r.DoubleAllocated, r.IPAMProblems, r.FailedOperations, r.NodesResynced, r.Nodes, r.RRTopologyOK, r.AgentWarnings)
	return sb.String()
}

func floats(vs []float64, format string) string {
	var parts []string
	for _, v := range vs {
		parts = append(parts, fmt.Sprintf(format, v))
	}
	return strings.Join(parts, "/")
}

func summaryTable(runs []Run) string {
	var sb strings.Builder
	sb.WriteString("| nodes | mode | etcd CPU (cores) | etcd RSS (MB) | db (MB) | watch events/s | agent CPU per node (ms/s) | agent RSS per node (MB) | policy → every cache p50/p99 (ms) | pod → all p50/p99 (ms) | sessions RR / mesh | correct |\n")
	sb.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range runs {
		fmt.Fprintf(&sb, "| %d | %s | %.2f | %.0f | %.1f | %.0f | %.1f | %.1f | %.0f / %.0f | %.0f / %.0f | %d / %d | %v |\n",
			r.Nodes, r.Mode, r.EtcdCPU, r.EtcdRSS, r.DBSize, r.WatchEventsPerS, r.AgentCPUPerNode, r.AgentRSSPerNode,
			r.PolicyCachedAllP50, r.PolicyCachedAllP99, r.PodAllP50, r.PodAllP99, r.SessionsRR, r.SessionsMesh, r.Correct)
	}
	return sb.String()
}
