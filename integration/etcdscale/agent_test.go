package etcdscale

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/overlay"
	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/bgp"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/connect"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/testkit/scaletest"
)

// The simulated nodes run in child processes: this test binary re-executed
// with agentEnv set, each process holding one or more nodes as goroutine
// sets. A simulated node is the agent's control plane on the real code, with
// no kernel behind it:
//
//   - its own datastore connection (connect.New: an etcd client of all three
//     members, as a node's etcd_endpoints lists them) and confwatch.Watcher
//     over every kind;
//   - BGP's IPAM watch (bgp.WatchIPAM: the speaker's own, of every IPAM key)
//     and from it and the cache the speaker's pure computations: sessions
//     (bgp.Compute, what configures gobgp), originated routes (bgp.Adverts);
//   - the overlay's block watch (ipam.WatchBlocks) and its route computation
//     (overlay.Compute): the routes to every other node's blocks, through
//     which a new pod on another node is reached;
//   - in processes started with policyEnv (the one-node calibration
//     processes), the policy actor (agent.Policy, the one `calico-node run`
//     runs) with an Applier that records what it would program instead of
//     calling iptables-restore: it compiles (policy.Compile) every change.
//     Every node compiling every change is more CPU than this machine has
//     (see docs/benchmarks.md), so the compile is measured on those nodes.
//
// Protocol: the parent passes the configuration in the environment and
// reads one line per fact from stdout (times in Unix nanoseconds):
//
//	synced <node> <start> <synced>   confwatch in sync
//	gnp <gen> <agents> <last>        every agent of the process has probe generation gen in its cache;
//	                                 last: the latest arrival
//	gnpc <gen> <agents> <last>       ... has compiled it (policy processes)
//	pod <ns/name> <agents> <last>    every agent routes the pod (its own node: has its endpoint)
//	podmiss <ns/name> <agents>       that many agents saw the pod deleted before they routed it
//	stats <updates> <kvEvents> <warnings> <heap> <compiles> <routeNs> <bgpNs> <gnp hist> <gnpc hist> <pod hist>
//	verify <node> <ok|bad> <sessions> <rrClients> <mesh> <rrPeers> <problem>
//	error <node> <message>
//
// and writes commands to stdin: "gnp <gen> <t0>" (the write time of probe
// generation gen), "stats", "verify <resources> <digest> <blocks> <digest>
// <rr-cluster-id> <timeout>". EOF on stdin stops the process.
const (
	agentEnv     = "CALICO_ETCD_SCALE_AGENT"  // the process's index
	nodesEnv     = "CALICO_ETCD_SCALE_NODES"  // its nodes, comma-separated
	policyEnv    = "CALICO_ETCD_SCALE_POLICY" // non-empty: its nodes run the policy actor
	profileEnv   = "CALICO_ETCD_SCALE_PROFILE_DIR"
	fanoutEnv    = "CALICO_ETCD_SCALE_FANOUT" // the fan-out's address, for nodes that read it
	endpointsEnv = "CALICO_ETCD_SCALE_ENDPOINTS"

	// probeLabel on a churn pod's endpoint carries the time its write
	// started; probePortBase + gen is the port of the probe policy's rule.
	probeLabel    = "bench-t0"
	probePortBase = 20000
)

// TestMain runs simulated nodes instead of the tests when the harness
// started this binary as an agent process.
func TestMain(m *testing.M) {
	if v := os.Getenv(agentEnv); v != "" {
		os.Exit(agentProcessMain())
	}
	os.Exit(m.Run())
}

func agentProcessMain() int {
	if os.Getenv(agentEnv) == "hub" {
		return hubProcessMain()
	}
	// ETCD_SCALE_CPUPROFILE (passed on as profileEnv): where the agents'
	// CPU goes, one profile per process.
	if dir := os.Getenv(profileEnv); dir != "" {
		f, err := os.Create(filepath.Join(dir, "agents-"+os.Getenv(agentEnv)+".prof"))
		if err == nil {
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	out := scaletest.Stdout()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names := strings.Split(os.Getenv(nodesEnv), ",")
	endpoints := strings.Split(os.Getenv(endpointsEnv), ",")
	withPolicy := os.Getenv(policyEnv) != ""
	policyAgents := 0
	if withPolicy {
		policyAgents = len(names)
	}
	agg := newAggregator(out, len(names), policyAgents)
	var nodes []*simNode
	for _, name := range names {
		n := newSimNode(name, agg, withPolicy)
		nodes = append(nodes, n)
		go n.run(ctx, endpoints)
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "gnp":
			gen, _ := strconv.Atoi(f[1])
			t0, _ := strconv.ParseInt(f[2], 10, 64)
			agg.gnpWritten(gen, time.Unix(0, t0))
		case len(f) == 1 && f[0] == "stats":
			agg.report(nodes)
			if dir := os.Getenv(profileEnv); dir != "" {
				if f, err := os.Create(filepath.Join(dir, "agents-"+os.Getenv(agentEnv)+".heap")); err == nil {
					pprof.WriteHeapProfile(f)
					f.Close()
				}
			}
		case len(f) == 7 && f[0] == "verify":
			resN, _ := strconv.Atoi(f[1])
			blkN, _ := strconv.Atoi(f[3])
			timeout, _ := time.ParseDuration(f[6])
			req := verifyReq{resources: resN, resDigest: f[2], blocks: blkN, blkDigest: f[4], rrCluster: f[5],
				deadline: time.Now().Add(timeout)}
			for _, n := range nodes {
				n.verify <- req
			}
		}
	}
	return 0
}

// hubProcessMain runs the fan-out, what `calico-node fanout` runs: one
// Watcher over etcd and the IPAM keys, served on a loopback port, until
// stdin closes. It reports "hub <addr> <start> <synced>".
func hubProcessMain() int {
	out := scaletest.Stdout()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("hub", true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	store, err := connectEtcd(ctx, datastore.Config{Endpoints: strings.Split(os.Getenv(endpointsEnv), ","), Logger: logger})
	if err != nil {
		out.Printf("error hub %s", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	defer store.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		out.Printf("error hub %v", err)
		return 1
	}
	w := confwatch.New(store, logger, nil)
	srv := confwatch.NewServer(w, l, confwatch.ServerConfig{KV: store.IPAM(), KVPrefix: ipam.Prefix, Logger: logger})
	go w.Run(ctx)
	go srv.Run(ctx)
	<-w.Synced()
	out.Printf("hub %s %d %d", l.Addr(), start.UnixNano(), time.Now().UnixNano())
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// aggregator collects the process's agents' arrivals and reports a probe
// or pod once all of them have it, with the latest arrival: the parent
// takes the latest over its processes.
type aggregator struct {
	out *scaletest.LineWriter
	// agents in the process; policyAgents of them run the policy actor.
	agents, policyAgents int

	mu       sync.Mutex
	seen     *probeArrivals // probe generations in the nodes' caches
	compiled *probeArrivals // ... in what the policy actor compiled
	pods     map[string]*podArrivals
	podHist  histogram // per agent: endpoint write -> routed
	warnings atomic.Int64
}

// probeArrivals are the arrivals of the probe policy's generations at
// the agents: reported once the write time (sent by the parent after the
// write returned) is known and every agent has the generation.
type probeArrivals struct {
	verb   string // the report line's first word
	agents int
	t0     map[int]time.Time
	at     map[int][]time.Time
	hist   histogram // per agent: write -> arrival
}

func newProbeArrivals(verb string, agents int) *probeArrivals {
	return &probeArrivals{verb: verb, agents: agents, t0: map[int]time.Time{}, at: map[int][]time.Time{}}
}

func (p *probeArrivals) flush(out *scaletest.LineWriter, gen int) {
	t0, ok := p.t0[gen]
	at := p.at[gen]
	if !ok || p.agents == 0 || len(at) < p.agents {
		return
	}
	for _, a := range at {
		p.hist.add(a.Sub(t0))
	}
	out.Printf("%s %d %d %d", p.verb, gen, len(at), slices.MaxFunc(at, time.Time.Compare).UnixNano())
	delete(p.at, gen)
}

type podArrivals struct {
	n, missed int
	last      time.Time
}

func newAggregator(out *scaletest.LineWriter, agents, policyAgents int) *aggregator {
	return &aggregator{out: out, agents: agents, policyAgents: policyAgents,
		seen: newProbeArrivals("gnp", agents), compiled: newProbeArrivals("gnpc", policyAgents),
		pods: map[string]*podArrivals{}}
}

func (a *aggregator) gnpWritten(gen int, t0 time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range []*probeArrivals{a.seen, a.compiled} {
		p.t0[gen] = t0
		p.flush(a.out, gen)
	}
}

// gnpArrived records generations (from, to] at one agent: a node whose
// changes were coalesced (it was busy) has every generation up to the
// newest in effect at once.
func (a *aggregator) gnpArrived(p *probeArrivals, from, to int, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for gen := from + 1; gen <= to; gen++ {
		p.at[gen] = append(p.at[gen], at)
		p.flush(a.out, gen)
	}
}

func (a *aggregator) podRouted(key string, t0, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.podHist.add(at.Sub(t0))
	p := a.pods[key]
	if p == nil {
		p = &podArrivals{}
		a.pods[key] = p
	}
	p.n++
	if at.After(p.last) {
		p.last = at
	}
	a.flushPodLocked(key, p)
}

func (a *aggregator) podMissed(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.pods[key]
	if p == nil {
		p = &podArrivals{}
		a.pods[key] = p
	}
	p.missed++
	a.flushPodLocked(key, p)
}

func (a *aggregator) flushPodLocked(key string, p *podArrivals) {
	if p.n+p.missed < a.agents {
		return
	}
	if p.missed > 0 {
		a.out.Printf("podmiss %s %d", key, p.missed)
	} else {
		a.out.Printf("pod %s %d %d", key, p.n, p.last.UnixNano())
	}
	delete(a.pods, key)
}

// report writes the process's counters: the sums over its agents, and the
// live heap of the whole process after a collection.
func (a *aggregator) report(nodes []*simNode) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var updates, kvEvents, compiles, routeNs, bgpNs int64
	for _, n := range nodes {
		updates += n.updates.Load()
		kvEvents += n.kvEvents.Load()
		compiles += n.app.compiles.Load()
		routeNs += n.routeNs.Load()
		bgpNs += n.bgpNs.Load()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.out.Printf("stats %d %d %d %d %d %d %d %s %s %s", updates, kvEvents, a.warnings.Load(), ms.HeapAlloc,
		compiles, routeNs, bgpNs, a.seen.hist.encode(), a.compiled.hist.encode(), a.podHist.encode())
}

// simNode is one simulated calico-node.
type simNode struct {
	name       string
	agg        *aggregator
	app        *probeApplier
	verify     chan verifyReq
	withPolicy bool // runs the policy actor

	updates  atomic.Int64 // confwatch updates after the snapshot
	kvEvents atomic.Int64 // IPAM keys received by the two IPAM watches
	routeNs  atomic.Int64 // CPU-bound time in overlay.Compute
	bgpNs    atomic.Int64 // ... in bgp.Compute and bgp.Adverts
}

func newSimNode(name string, agg *aggregator, withPolicy bool) *simNode {
	return &simNode{name: name, agg: agg, app: &probeApplier{agg: agg}, verify: make(chan verifyReq, 1), withPolicy: withPolicy}
}

// connectEtcd retries connect.New until the cluster answers, as `calico-node
// run` does at start; configuration errors end it.
func connectEtcd(ctx context.Context, cfg datastore.Config) (datastore.Store, error) {
	return scaletest.Connect(ctx, cfg.Logger, "etcd", func(ctx context.Context) (datastore.Store, error) { return connect.New(ctx, cfg) })
}

func (n *simNode) run(ctx context.Context, endpoints []string) {
	logger := scaletest.CountingLogger(&n.agg.warnings).With("node", n.name)
	start := time.Now()
	store, err := connectEtcd(ctx, datastore.Config{Endpoints: endpoints, Logger: logger})
	if err != nil {
		n.agg.out.Printf("error %s %s", n.name, strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	defer store.Close()
	// With a fan-out (`calico-node run` with CALICO_FANOUT_ADDR), the
	// watches are the fan-out's; the node's own connection only reads and
	// writes.
	var src confwatch.Source = store
	var ipamKV datastore.KV = store.IPAM()
	if addr := os.Getenv(fanoutEnv); addr != "" {
		remote := confwatch.NewRemote(func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}, logger)
		src, ipamKV = remote, remote.KV(ipamKV)
	}
	w := confwatch.New(src, logger, nil)
	go w.Run(ctx)

	kv := scaletest.CountingKV{KV: ipamKV, N: &n.kvEvents}
	ipamStates := make(chan bgp.IPAMState, 1)
	go bgp.WatchIPAM(ctx, kv, n.name, logger, func(st bgp.IPAMState) {
		// Latest wins, as the speaker's own wake-up channel does.
		select {
		case <-ipamStates:
		default:
		}
		ipamStates <- st
	})
	blocks := ipam.WatchBlocks(ctx, kv, logger)

	// The policy actor, resync off: it compiles on every change only.
	if n.withPolicy {
		pol := agent.NewPolicy(agent.PolicyConfig{Node: n.name, Resync: 24 * time.Hour, Logger: logger}, w, n.app, nil)
		go pol.Run(ctx)
	}

	sub := w.Subscribe()
	select {
	case <-w.Synced():
	case <-ctx.Done():
		return
	}
	n.agg.out.Printf("synced %s %d %d", n.name, start.UnixNano(), time.Now().UnixNano())
	r := newRouting(n)
	updates := sub.Updates(ctx)
	tick := time.NewTicker(time.Second) // verify's polling

	defer tick.Stop()
	snapshot := true
	for {
		select {
		case <-ctx.Done():
			return
		case ups, ok := <-updates:
			if !ok {
				return
			}
			if !snapshot {
				n.updates.Add(int64(len(ups)))
			}
			snapshot = false
			r.apply(ups)
		case s := <-blocks:
			r.blocks, r.haveBlocks, r.routesDirty = s, true, true
		case st := <-ipamStates:
			r.ipamState, r.haveIPAM, r.advertsDirty = st, true, true
		case req := <-n.verify:
			r.pending = &req
		case <-tick.C:
		}
		r.recompute()
		if r.pending != nil {
			r.tryVerify()
		}
	}
}

// probeApplier is the policy actor's Applier: instead of programming
// iptables it looks for the probe policy's rule in what was compiled.
type probeApplier struct {
	agg      *aggregator
	gen      int // newest probe generation compiled
	compiles atomic.Int64
}

func (p *probeApplier) Apply(_ context.Context, f *policy.Family) error {
	now := time.Now()
	p.compiles.Add(1)
	gen := 0
	for _, c := range f.Filter.Chains {
		for _, r := range c.Rules {
			for _, m := range r.Match {
				if mp, ok := m.(policy.MatchPorts); ok {
					for _, pr := range mp.Ports {
						if g := int(pr.First) - probePortBase; pr.First == pr.Last && g > 0 && g < 10000 {
							gen = max(gen, g)
						}
					}
				}
			}
		}
	}
	if gen > p.gen {
		p.agg.gnpArrived(p.agg.compiled, p.gen, gen, now)
		p.gen = gen
	}
	return nil
}

func (p *probeApplier) Invalidate() {}

// routing is the simulated node's routing state, owned by run's loop: the
// cache as a consumer sees it, and what the BGP speaker and the overlay
// compute from it.
type routing struct {
	n *simNode

	objs       map[confwatch.Key]api.Object
	nodes      map[string]*api.Node
	peers      map[string]*api.BGPPeer
	bgpConfigs map[string]*api.BGPConfiguration
	pools      map[string]api.Pool

	blocks     ipam.BlockSnapshot
	haveBlocks bool
	ipamState  bgp.IPAMState
	haveIPAM   bool

	bgpDirty, advertsDirty, routesDirty bool
	desired                             bgp.Desired
	adverts                             []bgp.Advert
	routes                              map[netip.Prefix]routes.Route

	probeGen int                   // newest probe policy generation in the cache
	waiting  map[string]waitingPod // churn pods not routed yet
	routed   map[string]bool
	pending  *verifyReq
}

type waitingPod struct {
	ip   netip.Addr
	node string
	t0   time.Time
}

func newRouting(n *simNode) *routing {
	return &routing{n: n, objs: map[confwatch.Key]api.Object{}, nodes: map[string]*api.Node{},
		peers: map[string]*api.BGPPeer{}, bgpConfigs: map[string]*api.BGPConfiguration{}, pools: map[string]api.Pool{},
		routes: map[netip.Prefix]routes.Route{}, waiting: map[string]waitingPod{}, routed: map[string]bool{}}
}

func (r *routing) apply(ups []confwatch.Update) {
	for _, u := range ups {
		del := u.Type == confwatch.Delete
		if del {
			delete(r.objs, u.Key)
		} else {
			r.objs[u.Key] = u.Object
		}
		switch o := u.Object.(type) {
		case *api.Node:
			setOrDelete(r.nodes, u.Key.Name, o, del)
			r.bgpDirty, r.routesDirty = true, true
		case *api.BGPPeer:
			setOrDelete(r.peers, u.Key.Name, o, del)
			r.bgpDirty = true
		case *api.BGPConfiguration:
			setOrDelete(r.bgpConfigs, u.Key.Name, o, del)
			r.bgpDirty = true
		case *api.IPPool:
			delete(r.pools, u.Key.Name)
			if !del {
				if p, err := api.ParsePool(o); err == nil {
					r.pools[u.Key.Name] = p
				}
			}
			r.advertsDirty, r.routesDirty = true, true
		case *api.FelixConfiguration:
			r.routesDirty = true
		case *api.WorkloadEndpoint:
			r.endpoint(u.Key, o, del)
		case *api.GlobalNetworkPolicy:
			if gen := probeGen(o); u.Key.Name == probeGNP && !del && gen > r.probeGen {
				r.n.agg.gnpArrived(r.n.agg.seen, r.probeGen, gen, time.Now())
				r.probeGen = gen
			}
		}
	}
}

// probeGen is the generation of the probe policy: its rule's port.
func probeGen(p *api.GlobalNetworkPolicy) int {
	if len(p.Spec.Ingress) == 0 || len(p.Spec.Ingress[0].Destination.Ports) == 0 {
		return 0
	}
	return int(p.Spec.Ingress[0].Destination.Ports[0].MinPort) - probePortBase
}

func setOrDelete[T any](m map[string]*T, name string, v *T, del bool) {
	if del {
		delete(m, name)
	} else {
		m[name] = v
	}
}

// endpoint follows the churn pods: each is timed from its write (the
// probe label) until this node routes it.
func (r *routing) endpoint(key confwatch.Key, w *api.WorkloadEndpoint, del bool) {
	id := key.Namespace + "/" + key.Name
	if del {
		if _, ok := r.waiting[id]; ok {
			r.n.agg.podMissed(id)
		}
		delete(r.waiting, id)
		delete(r.routed, id)
		return
	}
	t0s, ok := w.Labels[probeLabel]
	if !ok || r.routed[id] || len(w.Spec.IPNetworks) == 0 {
		return
	}
	ns, err := strconv.ParseInt(t0s, 10, 64)
	if err != nil {
		return
	}
	p, err := netip.ParsePrefix(w.Spec.IPNetworks[0])
	if err != nil {
		return
	}
	r.waiting[id] = waitingPod{ip: p.Addr(), node: w.Spec.Node, t0: time.Unix(0, ns)}
	r.checkWaiting(id)
}

// reaches reports whether this node's routes take traffic for ip to node:
// a local pod is reached through its own veth route (the endpoints
// actor's, from the endpoint alone); a remote one through the overlay
// route of its block (or, if borrowed, its /32) via that node's VTEP.
func (r *routing) reaches(ip netip.Addr, node string) bool {
	if node == r.n.name {
		return true
	}
	remote := r.nodes[node]
	if remote == nil {
		return false
	}
	vtep, ok := overlay.VTEPOf(remote, 4)
	if !ok {
		return false
	}
	for bits := ip.BitLen(); bits >= 8; bits-- {
		p, _ := ip.Prefix(bits)
		if rt, ok := r.routes[p]; ok {
			return rt.Via == vtep.TunnelAddr
		}
	}
	return false
}

func (r *routing) checkWaiting(id string) {
	w := r.waiting[id]
	if !r.haveBlocks || !r.reaches(w.ip, w.node) {
		return
	}
	r.n.agg.podRouted(id, w.t0, time.Now())
	r.routed[id] = true
	delete(r.waiting, id)
}

// recompute runs the computations whose inputs changed, as the speaker
// and the overlay actor do on each batch.
func (r *routing) recompute() {
	if r.bgpDirty {
		start := time.Now()
		r.desired = bgp.Compute(bgp.Snapshot{NodeName: r.n.name, Nodes: r.nodes, Peers: r.peers, BGPConfigs: r.bgpConfigs})
		r.n.bgpNs.Add(int64(time.Since(start)))
		r.bgpDirty, r.advertsDirty = false, true
	}
	if r.advertsDirty && r.haveIPAM && r.desired.OK {
		start := time.Now()
		pools := make([]api.Pool, 0, len(r.pools))
		for _, p := range r.pools {
			pools = append(pools, p)
		}
		r.adverts = bgp.Adverts(bgp.RoutingInput{Identity: r.desired.Identity, Pools: pools,
			Global: r.bgpConfigs["default"], NodeConfig: r.bgpConfigs["node."+r.n.name], IPAM: r.ipamState})
		r.n.bgpNs.Add(int64(time.Since(start)))
		r.advertsDirty = false
	}
	if r.routesDirty && r.haveBlocks {
		start := time.Now()
		pools := make([]api.Pool, 0, len(r.pools))
		for _, p := range r.pools {
			pools = append(pools, p)
		}
		d := overlay.Compute(overlay.Input{NodeName: r.n.name, Nodes: r.nodes, Pools: pools, Blocks: r.blocks,
			Settings: overlay.SettingsFor(agent.FelixSpec(r.objs, r.n.name, nil))})
		clear(r.routes)
		for _, rt := range d.Routes {
			r.routes[rt.Dst] = rt
		}
		r.n.routeNs.Add(int64(time.Since(start)))
		r.routesDirty = false
		for id := range r.waiting {
			r.checkWaiting(id)
		}
	}
}

// verifyReq asks a node to compare its view with the datastore's.
type verifyReq struct {
	resources, blocks    int
	resDigest, blkDigest string
	rrCluster            string
	deadline             time.Time
}

// tryVerify answers the pending verify request once this node's cache and
// block view equal the datastore's as the parent read it (or at the
// deadline), with its BGP sessions for the topology check.
func (r *routing) tryVerify() {
	req := r.pending
	resN, resD := resourceDigest(r.objs)
	blkN, blkD := blockDigest(r.blocks.Affinity)
	problem := ""
	switch {
	case resN != req.resources || resD != req.resDigest:
		problem = fmt.Sprintf("cache-has-%d-resources-datastore-%d-or-digests-differ", resN, req.resources)
	case blkN != req.blocks || blkD != req.blkDigest:
		problem = fmt.Sprintf("blocks-%d-datastore-%d-or-digests-differ", blkN, req.blocks)
	case !r.advertsMatchBlocks():
		problem = "bgp-adverts-differ-from-own-blocks"
	}
	if problem != "" && time.Now().Before(req.deadline) {
		return
	}
	r.pending = nil
	status := "ok"
	if problem != "" {
		status = "bad"
	} else {
		problem = "-"
	}
	rrClients, mesh, rrPeers := 0, 0, 0
	for _, s := range r.desired.Sessions {
		if s.RRClient {
			rrClients++
		}
		if s.Type == bgp.PeerMesh {
			mesh++
		}
		if n := r.nodes[s.PeerNode]; n != nil && n.Spec.BGP != nil && n.Spec.BGP.RouteReflectorClusterID == req.rrCluster {
			rrPeers++
		}
	}
	r.n.agg.out.Printf("verify %s %s %d %d %d %d %s", r.n.name, status, len(r.desired.Sessions), rrClients, mesh, rrPeers, problem)
}

// advertsMatchBlocks: the blocks the speaker originates (from BGP's IPAM
// watch) are the blocks the overlay's watch says are affine to this node.
func (r *routing) advertsMatchBlocks() bool {
	var own []netip.Prefix
	for cidr, node := range r.blocks.Affinity {
		if node == r.n.name {
			own = append(own, cidr)
		}
	}
	var adv []netip.Prefix
	for _, a := range r.adverts {
		adv = append(adv, a.Prefix)
	}
	cmp := func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) }
	slices.SortFunc(own, cmp)
	slices.SortFunc(adv, cmp)
	return slices.Equal(own, adv)
}

// resourceDigest names every resource of a cache with its revision, hashed
// in order: two caches with the same digest hold the same versions.
func resourceDigest(objs map[confwatch.Key]api.Object) (int, string) {
	lines := make([]string, 0, len(objs))
	for k, o := range objs {
		lines = append(lines, k.Kind+"/"+k.Namespace+"/"+k.Name+"@"+o.Meta().ResourceVersion)
	}
	return len(lines), digest(lines)
}

// blockDigest is the same over block affinities.
func blockDigest(aff map[netip.Prefix]string) (int, string) {
	lines := make([]string, 0, len(aff))
	for cidr, node := range aff {
		lines = append(lines, cidr.String()+"="+node)
	}
	return len(lines), digest(lines)
}

func digest(lines []string) string {
	slices.Sort(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}
