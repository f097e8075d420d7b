package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

// BenchmarkDataplane measures the policy dataplane at scale (make
// bench-dataplane; figures in docs/benchmarks.md): 1,000 local endpoints
// and 500 policies compiled, programmed into a fresh namespace, the same
// payload given to iptables-restore alone, and the latency from a policy
// change in etcd to the kernel (the mix: a rule's port, a
// selector, a pod's label, a new policy, a deleted one), and the memory
// of a real `calico-node run` idle and with the same objects programmed.
// DATAPLANE_BENCH_EPS, DATAPLANE_BENCH_POLICIES and
// DATAPLANE_BENCH_CHANGES scale it; DATAPLANE_BENCH_CPUPROFILE writes a
// CPU profile of the changes; DATAPLANE_BENCH_AGENT_ENV adds
// variables to the agent's environment (e.g. "GOGC=100");
// DATAPLANE_BENCH_AGENT_PROFILE=dir saves the agent's heap profiles
// (measureAgentMemory).
func BenchmarkDataplane(b *testing.B) {
	if os.Getenv(nodeNetNSEnv) == "" {
		b.Skip("needs root: runs in private network namespaces")
	}
	nEP, nPol, nChange := envInt("DATAPLANE_BENCH_EPS", 1000), envInt("DATAPLANE_BENCH_POLICIES", 500), envInt("DATAPLANE_BENCH_CHANGES", 50)
	objs := benchObjects(b, nEP, nPol)
	snap := &policy.Snapshot{Node: nodeName, Config: policy.ConfigFromFelix(nil)}
	for _, o := range objs {
		snap.Add(o)
	}
	snap.Config.IPv6 = false
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	for b.Loop() {
		// 1. Compile (pure).
		const compiles = 5
		start := time.Now()
		var res *policy.Result
		for range compiles {
			res = policy.Compile(snap)
		}
		compile := time.Since(start) / compiles
		rules := 0
		for _, t := range []*policy.Table{&res.V4.Filter, &res.V4.NAT} {
			for _, c := range t.Chains {
				rules += len(c.Rules)
			}
		}

		// 2. First full program into an empty namespace.
		first := newRecRunner(b)
		be, err := xtables.Detect(ctx, first, 4)
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if _, err := xtables.New(be, first, nil, logger).Apply(ctx, res.V4); err != nil {
			b.Fatalf("first program: %v", err)
		}
		program := time.Since(start)
		iptPayload, setPayload := first.payload(be.Restore), first.payload("ipset")

		// 3. The same payloads given to the tools alone, in another empty
		// namespace (same `ip netns exec` overhead as above).
		raw := newRecRunner(b)
		start = time.Now()
		if _, err := raw.Run(ctx, "ipset", []string{"restore"}, setPayload); err != nil {
			b.Fatalf("ipset restore alone: %v", err)
		}
		ipsetAlone := time.Since(start)
		start = time.Now()
		if _, err := raw.Run(ctx, be.Restore, []string{"--noflush", "--wait"}, iptPayload); err != nil {
			b.Fatalf("iptables-restore alone: %v", err)
		}
		restoreAlone := time.Since(start)

		// 4. Change-to-kernel latency through etcd, confwatch and the
		// policy actor, programming the namespace of step 2.
		var rss int64
		lat := changeLatency(b, first, be, objs, nChange, logger, &rss)
		// The last change's payload restored alone into the same, fully
		// programmed namespace: what iptables-restore itself needs for
		// one changed chain next to 31k rules (iptables-nft reads the
		// whole ruleset back before applying any change).
		lastChange := first.payload(be.Restore)
		var alone []time.Duration
		for range 20 {
			start := time.Now()
			if _, err := first.Run(ctx, be.Restore, []string{"--noflush", "--wait"}, lastChange); err != nil {
				b.Fatalf("change payload alone: %v", err)
			}
			alone = append(alone, time.Since(start))
		}
		slices.Sort(alone)

		// 5. The real agent's memory, in its own process.
		var agentEnv []string
		if v := os.Getenv("DATAPLANE_BENCH_AGENT_ENV"); v != "" {
			agentEnv = strings.Fields(v)
		}
		mem := measureAgentMemory(b, objs, agentEnv...)

		b.ReportMetric(float64(compile.Milliseconds()), "compile-ms")
		b.ReportMetric(mib(mem.idle.rss), "agent-idle-rss-MiB")
		b.ReportMetric(mib(mem.loaded.rss), "agent-rss-MiB")
		b.ReportMetric(mib(mem.loaded.hwm), "agent-hwm-MiB")
		b.ReportMetric(float64(len(iptPayload)), "restore-bytes")
		b.ReportMetric(float64(program.Milliseconds()), "first-program-ms")
		b.ReportMetric(float64(restoreAlone.Milliseconds()), "restore-alone-ms")
		b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "change-p50-ms")
		b.ReportMetric(float64(lat[(len(lat)*99-1)/100].Milliseconds()), "change-p99-ms")
		b.ReportMetric(float64(alone[len(alone)/2].Milliseconds()), "change-restore-alone-p50-ms")
		b.Logf("%d local endpoints, %d policies: %d rules in %d chains, %d IP sets", nEP, nPol, rules, len(res.V4.Filter.Chains)+len(res.V4.NAT.Chains), len(res.V4.IPSets))
		b.Logf("compile %s; iptables-restore payload %d bytes, ipset payload %d bytes", compile.Round(time.Millisecond), len(iptPayload), len(setPayload))
		b.Logf("first full program (Programmer.Apply, %s) %s; alone: ipset restore %s + iptables-restore %s = %s",
			be.Mode, program.Round(time.Millisecond), ipsetAlone.Round(time.Millisecond), restoreAlone.Round(time.Millisecond), (ipsetAlone + restoreAlone).Round(time.Millisecond))
		b.Logf("policy change in etcd -> rule in kernel, %d changes: p50 %s, p99 %s, max %s",
			len(lat), lat[len(lat)/2].Round(time.Millisecond), lat[(len(lat)*99-1)/100].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
		b.Logf("benchmark process RSS after the changes (policy actor, programmer and confwatch in-process, plus this harness's own copies of the objects and results): %d MiB", rss>>20)
		b.Logf("calico-node run (env %q): idle RSS %.1f MiB (anon %.1f, file %.1f; peak %.1f); with %d endpoints / %d policies programmed (%s after the first write) RSS %.1f MiB (anon %.1f, file %.1f; peak %.1f), Go heap in use %.1f MiB",
			agentEnv, mib(mem.idle.rss), mib(mem.idle.anon), mib(mem.idle.file), mib(mem.idle.hwm), nEP, nPol, mem.programLoaded.Round(time.Millisecond),
			mib(mem.loaded.rss), mib(mem.loaded.anon), mib(mem.loaded.file), mib(mem.loaded.hwm), mib(mem.loadedHeap))
		b.Logf("the last change's payload (%d bytes) restored alone, 20 times: p50 %s", len(lastChange), alone[len(alone)/2].Round(time.Millisecond))
	}
}

// changeLatency stores objs in a fresh etcd, runs confwatch and the policy
// actor against the namespace of r, and times n changes (mixed, see the
// loop) from the etcd write to the end of the Apply carrying them. Port
// changes and new policies are checked in the kernel (iptables-save)
// after they are timed; rss gets the process RSS after the last.
func changeLatency(b *testing.B, r *recRunner, be xtables.Backend, objs []api.Object, n int, logger *slog.Logger, rss *int64) []time.Duration {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := etcdtest.Start(b)
	store := storetest.Etcd(b, ctx, srv.Endpoints)
	var target *api.NetworkPolicy
	for _, o := range objs {
		if _, err := store.Create(ctx, o); err != nil {
			b.Fatalf("store %s %s: %v", o.Type().Kind, o.Meta().Name, err)
		}
		if np, ok := o.(*api.NetworkPolicy); ok && target == nil {
			target = np
		}
	}
	w := confwatch.New(store, logger, nil)
	applied := make(chan time.Time, 16)
	ap := &notifyApplier{p: xtables.New(be, r, nil, logger), done: applied}
	pol := agent.NewPolicy(agent.PolicyConfig{Node: nodeName, Resync: time.Hour, Logger: logger}, w, ap, nil)
	pol.Overrides = &api.FelixConfigurationSpec{IPv6Support: new(bool)}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.Run(ctx) }()
	go func() { defer wg.Done(); pol.Run(ctx) }()
	defer wg.Wait()
	defer cancel()
	select {
	case <-applied: // the snapshot, already in the kernel from step 2
	case <-time.After(2 * time.Minute):
		b.Fatal("policy actor did not program the snapshot")
	}
	if path := os.Getenv("DATAPLANE_BENCH_CPUPROFILE"); path != "" {
		// The change path's CPU (this process: confwatch, the policy
		// actor, the programmer; the kernel tools are other processes).
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	var lat []time.Duration
	origSel := target.Spec.Selector
	for i := range n {
		// The mix, in turn: a rule's port, a policy's selector,
		// a label on one pod, a new policy, that policy deleted.
		var write func() error
		port := 0 // checked in the kernel afterwards when set
		switch i % 5 {
		case 0:
			port = 20000 + i
			write = func() error {
				np, err := getNP(ctx, store, target)
				if err != nil {
					return err
				}
				np.Spec.Ingress[0].Destination.Ports = []api.Port{api.SinglePort(uint16(port))}
				_, err = store.Update(ctx, np)
				return err
			}
		case 1:
			write = func() error {
				np, err := getNP(ctx, store, target)
				if err != nil {
					return err
				}
				if np.Spec.Selector == origSel {
					// Still selecting its own pods (the port changes
					// are checked in them), and ten more.
					np.Spec.Selector = "(" + origSel + ") || app == 'app" + strconv.Itoa(10*(1+i%9)) + "'"
				} else {
					np.Spec.Selector = origSel
				}
				_, err = store.Update(ctx, np)
				return err
			}
		case 2:
			pod := (i * 7) % max(1, countKind(objs, "WorkloadEndpoint"))
			write = func() error {
				o, err := store.Get(ctx, "WorkloadEndpoint", "ns"+strconv.Itoa(pod%10), nodeName+"-k8s-pod"+strconv.Itoa(pod)+"-eth0")
				if err != nil {
					return err
				}
				w := o.(*api.WorkloadEndpoint)
				w.Labels["app"] = "app" + strconv.Itoa((i/5)%100)
				_, err = store.Update(ctx, w)
				return err
			}
		case 3:
			port = 30000 + i
			write = func() error {
				np := &api.NetworkPolicy{TypeMeta: target.TypeMeta,
					ObjectMeta: api.ObjectMeta{Name: "bench-new", Namespace: target.Namespace},
					Spec: api.NetworkPolicySpec{Order: new(0.5), Selector: target.Spec.Selector,
						Ingress: []api.Rule{{Action: api.Allow, Protocol: new(api.ProtocolFromString("TCP")),
							Destination: api.EntityRule{Ports: []api.Port{api.SinglePort(uint16(port))}}}}}}
				_, err := store.Create(ctx, np)
				return err
			}
		case 4:
			write = func() error {
				_, err := store.Delete(ctx, "NetworkPolicy", target.Namespace, "bench-new", "")
				return err
			}
		}
		start := time.Now()
		if err := write(); err != nil {
			b.Fatalf("change %d: %v", i, err)
		}
		select {
		case done := <-applied:
			lat = append(lat, done.Sub(start))
		case <-time.After(time.Minute):
			b.Fatalf("change %d not programmed within a minute", i)
		}
		if port == 0 {
			continue
		}
		save, err := r.Run(ctx, be.Save, []string{"-t", "filter"}, "")
		if err != nil {
			b.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^-A cali-pi-.*\b` + strconv.Itoa(port) + `\b`).MatchString(save) {
			b.Fatalf("change %d: no rule for port %d in the kernel", i, port)
		}
	}
	*rss = procMemory(b, os.Getpid()).rss
	slices.Sort(lat)
	return lat
}

func getNP(ctx context.Context, store interface {
	Get(ctx context.Context, kind, namespace, name string) (api.Object, error)
}, target *api.NetworkPolicy) (*api.NetworkPolicy, error) {
	o, err := store.Get(ctx, "NetworkPolicy", target.Namespace, target.Name)
	if err != nil {
		return nil, err
	}
	return o.(*api.NetworkPolicy), nil
}

func countKind(objs []api.Object, kind string) int {
	n := 0
	for _, o := range objs {
		if o.Type().Kind == kind {
			n++
		}
	}
	return n
}

// notifyApplier reports the end of every successful Apply.
type notifyApplier struct {
	p    *xtables.Programmer
	done chan<- time.Time
}

func (a *notifyApplier) Apply(ctx context.Context, f *policy.Family) error {
	_, err := a.p.Apply(ctx, f)
	if err == nil {
		a.done <- time.Now()
	}
	return err
}

func (a *notifyApplier) Invalidate() { a.p.Invalidate() }

// recRunner runs commands inside its own fresh network namespace and keeps
// the last stdin given to each program.
type recRunner struct {
	ns    string
	mu    sync.Mutex
	stdin map[string]string
}

func newRecRunner(b *testing.B) *recRunner {
	b.Helper()
	name := fmt.Sprintf("dpbench-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		b.Fatalf("ip netns add: %v: %s", err, out)
	}
	b.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return &recRunner{ns: name, stdin: map[string]string{}}
}

func (r *recRunner) Run(ctx context.Context, name string, args []string, stdin string) (string, error) {
	if stdin != "" {
		r.mu.Lock()
		r.stdin[name] = stdin
		r.mu.Unlock()
	}
	return xtables.ExecRunner{}.Run(ctx, "ip", append([]string{"netns", "exec", r.ns, name}, args...), stdin)
}

func (r *recRunner) payload(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stdin[name]
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchObjects is a node with nEP local pods in 10 namespaces and nPol
// policies mixing selectors, named and numbered ports, ranges, nets and
// namespace selectors (one in five global).
func benchObjects(b *testing.B, nEP, nPol int) []api.Object {
	b.Helper()
	var y strings.Builder
	y.WriteString("apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: pool}\nspec: {cidr: 10.96.0.0/12, blockSize: 26}\n")
	for ns := range 10 {
		y.WriteString(storetest.NamespaceProfile(fmt.Sprint("ns", ns), map[string]string{"team": fmt.Sprint("t", ns%3)}))
	}
	for i := range nEP {
		fmt.Fprintf(&y, `---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: %s-k8s-pod%d-eth0, namespace: ns%d, labels: {app: app%d, tier: t%d, projectcalico.org/namespace: ns%d, projectcalico.org/orchestrator: k8s}}
spec:
  orchestrator: k8s
  node: %s
  pod: pod%d
  endpoint: eth0
  interfaceName: cali%011x
  ipNetworks: [10.%d.%d.%d/32]
  profiles: [kns.ns%d]
  ports: [{name: http, protocol: TCP, port: 8080}]
`, nodeName, i, i%10, i%100, i%20, i%10, nodeName, i, i, 96+i/65536, (i/256)%256, i%256, i%10)
	}
	for k := range nPol {
		rules := fmt.Sprintf(`  ingress:
  - action: Allow
    protocol: TCP
    source: {selector: tier == 't%d'}
    destination: {ports: [%d, http, "9000:9100"]}
  - action: Allow
    protocol: UDP
    source: {nets: [172.%d.0.0/16], notNets: [172.%d.1.0/24]}
  - action: Deny
    source: {namespaceSelector: team == 't%d'}
  egress:
  - action: Allow
    protocol: TCP
    destination: {selector: app == 'app%d', ports: [5432]}
  - action: Allow
    destination: {nets: [192.168.%d.0/24]}
`, k%20, 80+k%50, 16+k%16, 16+k%16, k%3, (k+1)%100, k%256)
		if k%5 == 4 {
			fmt.Fprintf(&y, "---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: gnp%d}\nspec:\n  order: %d\n  selector: app == 'app%d' && has(tier)\n  namespaceSelector: team == 't%d'\n%s", k, k, k%100, k%3, rules)
		} else {
			fmt.Fprintf(&y, "---\napiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: np%d, namespace: ns%d}\nspec:\n  order: %d\n  selector: app == 'app%d'\n%s", k, k%10, k, k%100, rules)
		}
	}
	return storetest.Objects(b, y.String())
}
