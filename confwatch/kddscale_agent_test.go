package confwatch

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/testkit/scaletest"
)

// The simulated agents of the KDD scale harness (kddscale_test.go) run in
// child processes: this test binary re-executed with agentEnv set, so that
// every agent has its own process, HTTP connection, watches and memory, as
// calico-node pods on real nodes do. Each child holds the datastore watches
// `calico-node run` holds on the Kubernetes API — confwatch over every kind
// (one watch per Kubernetes collection behind them) and the two IPAM watches
// (BGP's of the whole IPAM prefix, the overlay's of the blocks) — and no
// kernel work.
//
// Protocol: the parent passes the configuration in the environment and
// reads one line per fact from the child's stdout (times in Unix
// nanoseconds):
//
//	synced <agent> <start> <synced>     confwatch in sync (start: before connecting)
//	seen <agent> <gnp|wep> <gen> <t>    the probe object at generation gen is in the cache
//	burst <agent> <id> <t>              every pod of burst id has its label in the cache
//	stats <agent> <updates> <warnings> <heap>
//	                                    updates (resources and IPAM keys) received after
//	                                    the snapshots; logged
//	                                    warnings; live heap of the process (bytes)
//	error <agent> <message>             the agent could not start
//	hub <addr> <start> <synced>         (fan-out process) serving on addr, in sync
//	hubsent <bytes>                     (fan-out process, on "stats") bytes written to agents
//
// and writes commands to its stdin, one a line: "burst <id> <pods>" (expect
// that many pods labelled bench-burst=<id>), "stats". EOF on stdin stops
// the child.
//
// With the fan-out, one more child (agentEnv=hub) runs the Watcher and the
// IPAM watch over the Kubernetes API and serves them (Server), and the
// agents read it through a Remote at agentFanOutEnv (their Watcher's Source
// and their IPAM watches) instead of watching the API server themselves;
// their own kdd.Store is then only for reads and writes, as a real node's.
const (
	agentEnv       = "CALICO_KDD_SCALE_AGENT"  // index of the child's first agent, or "hub"
	agentFanOutEnv = "CALICO_KDD_SCALE_FANOUT" // the hub's address, for agents that read it
	agentAPIEnv    = "CALICO_KDD_SCALE_API"
	agentCAEnv     = "CALICO_KDD_SCALE_CA"
	agentTokensEnv = "CALICO_KDD_SCALE_TOKENS" // one per agent, comma-separated

	// probeLabel carries the generation of the probe objects; burstLabel
	// marks the pods changed by a burst.
	probeLabel = "bench-gen"
	burstLabel = "bench-burst"
)

// TestMain runs a simulated agent instead of the tests when the KDD scale
// harness started this binary as one.
func TestMain(m *testing.M) {
	if first := os.Getenv(agentEnv); first != "" {
		os.Exit(agentProcessMain(first))
	}
	os.Exit(m.Run())
}

func agentProcessMain(firstArg string) int {
	if firstArg == "hub" {
		return hubProcessMain()
	}
	first, err := strconv.Atoi(firstArg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: %v\n", agentEnv, firstArg, err)
		return 2
	}
	out := scaletest.Stdout()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var agents []*simAgent
	for i, token := range strings.Split(os.Getenv(agentTokensEnv), ",") {
		agents = append(agents, newSimAgent(first+i, out))
		cfg := datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{
			APIEndpoint: os.Getenv(agentAPIEnv), CAFile: os.Getenv(agentCAEnv), Token: token,
		}}
		go agents[i].run(ctx, cfg)
	}
	// Commands until the parent closes stdin.
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "burst":
			n, _ := strconv.Atoi(f[2])
			for _, a := range agents {
				a.expectBurst(f[1], n)
			}
		case len(f) == 1 && f[0] == "stats":
			// The live heap of the whole process, after a collection:
			// what its agents' caches hold, without garbage.
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			for _, a := range agents {
				a.report(ms.HeapAlloc)
			}
		}
	}
	return 0
}

// hubProcessMain runs the fan-out: one Watcher over the Kubernetes API,
// served on a loopback port, until stdin closes.
func hubProcessMain() int {
	out := scaletest.Stdout()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("hub", true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	store, err := connectKDD(ctx, datastore.Config{Type: datastore.TypeKubernetes, Logger: logger, Kube: datastore.KubeConfig{
		APIEndpoint: os.Getenv(agentAPIEnv), CAFile: os.Getenv(agentCAEnv), Token: os.Getenv(agentTokensEnv),
	}})
	if err != nil {
		out.Printf("error -1 %s", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	defer store.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		out.Printf("error -1 %v", err)
		return 1
	}
	reg := prometheus.NewRegistry()
	w := New(store, logger, nil)
	srv := NewServer(w, l, ServerConfig{KV: store.IPAM(), KVPrefix: "/calico/ipam/v2/", Logger: logger, Registerer: reg})
	go w.Run(ctx)
	go srv.Run(ctx)
	<-w.Synced()
	out.Printf("hub %s %d %d", l.Addr(), start.UnixNano(), time.Now().UnixNano())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "stats" {
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				if mf.GetName() == "calico_confwatch_server_sent_bytes_total" {
					out.Printf("hubsent %.0f", mf.GetMetric()[0].GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

// connectKDD retries kdd.New until the API server answers, as
// `calico-node run` does at start; configuration errors end it.
func connectKDD(ctx context.Context, cfg datastore.Config) (*kdd.Store, error) {
	return scaletest.Connect(ctx, cfg.Logger, "Kubernetes API", func(ctx context.Context) (*kdd.Store, error) { return kdd.New(ctx, cfg) })
}

// simAgent is one simulated calico-node: its own kdd.Store (HTTP
// connection, watches) and confwatch.Watcher.
type simAgent struct {
	id  int
	out *scaletest.LineWriter

	mu        sync.Mutex
	updates   int64
	gens      map[string]int             // probe kind -> newest generation reported
	expect    map[string]int             // burst id -> pods it changes
	burst     map[string]map[string]bool // burst id -> pods seen with its label
	reported  map[string]bool            // bursts reported complete
	warnings  atomic.Int64               // records logged at Warn or above
	kvUpdates atomic.Int64               // IPAM puts and deletes received
}

func newSimAgent(id int, out *scaletest.LineWriter) *simAgent {
	return &simAgent{id: id, out: out, gens: map[string]int{}, expect: map[string]int{},
		burst: map[string]map[string]bool{}, reported: map[string]bool{}}
}

func (a *simAgent) run(ctx context.Context, cfg datastore.Config) {
	logger := scaletest.CountingLogger(&a.warnings).With("agent", a.id)
	cfg.Logger = logger
	start := time.Now()
	store, err := connectKDD(ctx, cfg)
	if err != nil {
		a.out.Printf("error %d %s", a.id, strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	defer store.Close()
	var src Source = store
	kv := store.IPAM()
	if addr := os.Getenv(agentFanOutEnv); addr != "" {
		remote := NewRemote(func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}, logger)
		src, kv = remote, remote.KV(kv)
	}
	w := New(src, logger, nil)
	go w.Run(ctx)
	// The IPAM watches a node holds beside confwatch's: BGP's of every IPAM
	// key (its own affinities, borrowed addresses) and the overlay's of the
	// blocks (routes to other nodes' blocks).
	go func() {
		for ev := range kv.Watch(ctx, "/calico/ipam/v2/") {
			if ev.Type == datastore.KVPut || ev.Type == datastore.KVDelete {
				a.kvUpdates.Add(1)
			}
		}
	}()
	// WatchBlocks hands out coalesced snapshots: its events are counted
	// on their way in.
	go func() {
		for range ipam.WatchBlocks(ctx, scaletest.CountingKV{KV: kv, N: &a.kvUpdates}, logger) {
		}
	}()
	// One subscription to every kind: what the agent's consumers (policy,
	// endpoints, BGP, overlay, FelixConfiguration) subscribe to together.
	sub := w.Subscribe()
	select {
	case <-w.Synced():
	case <-ctx.Done():
		return
	}
	a.out.Printf("synced %d %d %d", a.id, start.UnixNano(), time.Now().UnixNano())
	snapshot := true
	for {
		ups, err := sub.Next(ctx)
		if err != nil {
			return
		}
		now := time.Now()
		a.apply(ups, !snapshot, now)
		snapshot = false
	}
}

// apply looks for the probe generations and burst labels in a batch.
func (a *simAgent) apply(ups []Update, count bool, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if count {
		a.updates += int64(len(ups))
	}
	for _, u := range ups {
		if u.Type != Set {
			continue
		}
		labels := u.Object.Meta().Labels
		var probe string
		switch u.Key.Kind {
		case "GlobalNetworkPolicy":
			probe = "gnp"
		case "WorkloadEndpoint":
			probe = "wep"
			if id, ok := labels[burstLabel]; ok {
				if a.burst[id] == nil {
					a.burst[id] = map[string]bool{}
				}
				a.burst[id][u.Key.Namespace+"/"+u.Key.Name] = true
				a.checkBurstLocked(id, now)
			}
		}
		if g, ok := labels[probeLabel]; ok && probe != "" {
			if gen, err := strconv.Atoi(g); err == nil && gen > a.gens[probe] {
				a.gens[probe] = gen
				a.out.Printf("seen %d %s %d %d", a.id, probe, gen, now.UnixNano())
			}
		}
	}
}

func (a *simAgent) expectBurst(id string, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expect[id] = n
	a.checkBurstLocked(id, time.Now())
}

func (a *simAgent) checkBurstLocked(id string, now time.Time) {
	n, ok := a.expect[id]
	if ok && !a.reported[id] && len(a.burst[id]) >= n {
		a.reported[id] = true
		a.out.Printf("burst %d %s %d", a.id, id, now.UnixNano())
	}
}

func (a *simAgent) report(heap uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.out.Printf("stats %d %d %d %d", a.id, a.updates+a.kvUpdates.Load(), a.warnings.Load(), heap)
}
