package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// policyKinds are the resources the compiler reads.
var policyKinds = []string{
	"WorkloadEndpoint", "HostEndpoint", "NetworkPolicy", "GlobalNetworkPolicy", "Profile",
	"NetworkSet", "GlobalNetworkSet", "Tier", "IPPool", "FelixConfiguration", "Node",
	// The default BGPConfiguration's service ranges are what
	// serviceLoopPrevention guards.
	"BGPConfiguration",
}

// Applier programs one IP family's compiled policy into the kernel
// (internal/node wires in agent/xtables' iptables-restore programmer).
type Applier interface {
	// Apply makes the kernel match f. On error the kernel may be partly
	// updated; the actor retries.
	Apply(ctx context.Context, f *policy.Family) error
	// Invalidate makes the next Apply read the kernel back instead of
	// trusting what it last wrote: the periodic resync calls it, so that
	// drift made by others is found.
	Invalidate()
}

// IPSetSizer is an Applier whose IP sets follow FelixConfiguration's
// maxIpsetSize (xtables.Programmer).
type IPSetSizer interface {
	SetMaxIPSetSize(n int)
}

// HostInterfaces lists this host's interface addresses (for host endpoints
// that give expectedIPs but no interface name).
type HostInterfaces func() (map[string][]netip.Addr, error)

// Policy is the actor that keeps iptables and ipsets equal to the compiled
// policy of this node.
type Policy struct {
	// Overrides are FelixConfiguration settings from the environment
	// (FELIX_*); they outrank the datastore's, as in Felix. Set before Run.
	Overrides *api.FelixConfigurationSpec
	// Gate, if set, holds iptables and ipsets as they are while it is
	// closed (the datastore is locked). Set before Run.
	Gate Gate
	// Programmed, if set, hears of every snapshot programmed in full:
	// the workload endpoints (of every node) compiled into it, so that
	// CNI ADD can wait for its endpoint (agent/epstatus). Set before Run.
	Programmed func(weps []api.WorkloadEndpoint)

	node    string
	watch   Subscriber
	v4, v6  Applier // v6 nil: IPv6 policy not programmed
	ifaces  HostInterfaces
	resync  time.Duration
	log     *slog.Logger
	metrics *policyMetrics
	felix   *felixMetrics
	// NATRandomFully: iptables and the kernel support --random-fully,
	// which Felix then adds to natOutgoing's MASQUERADE and SNAT.
	natRandomFully bool

	objs map[confwatch.Key]api.Object // owned by Run
	// snap is the last snapshot and changed the kinds updated since:
	// the next snapshot shares snap's slices of the other kinds (a
	// change to one policy re-sorts and copies the policies, not the
	// thousand endpoints). Owned by Run.
	snap        *policy.Snapshot
	changed     map[string]bool
	compiler    *policy.Compiler // owned by Run: reuses unchanged chains
	pendingFrom time.Time        // first change not yet programmed
}

type policyMetrics struct {
	endpoints, policies, selectors prometheus.Gauge
	latency                        prometheus.Histogram
	failures                       prometheus.Counter
}

// PolicyConfig configures the policy actor.
type PolicyConfig struct {
	Node string
	// Resync is how often the kernel is read back and re-programmed when
	// FelixConfiguration's iptablesRefreshInterval does not say.
	Resync time.Duration
	// HostInterfaces, if set, resolves host endpoints that give
	// expectedIPs but no interface name.
	HostInterfaces HostInterfaces
	// Registerer, if set, gets the actor's metrics: calico-node's own
	// (calico_*) and Felix's calculation graph and dataplane ones
	// (felix_*).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// NATRandomFully adds --random-fully to natOutgoing's rules, as Felix
	// does when iptables and the kernel support it (xtables.RandomFully).
	NATRandomFully bool
}

// NewPolicy builds the policy actor, programming IPv4 through v4 and
// IPv6 through v6 (nil: IPv6 policy is not programmed).
func NewPolicy(cfg PolicyConfig, watch Subscriber, v4, v6 Applier) *Policy {
	m := &policyMetrics{
		endpoints: prometheus.NewGauge(prometheus.GaugeOpts{Name: "calico_active_local_endpoints", Help: "Workload and host endpoints on this node."}),
		policies:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "calico_active_policies", Help: "Network policies and global network policies known."}),
		selectors: prometheus.NewGauge(prometheus.GaugeOpts{Name: "calico_active_ipsets", Help: "IP sets (selectors, named ports, pools) programmed."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "calico_dataplane_apply_latency_seconds", Help: "Time from a datastore change reaching the agent to the dataplane being programmed.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "calico_dataplane_apply_failures_total", Help: "Failed attempts to program policy."}),
	}
	fm := newFelixMetrics(cfg.Node)
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(m.endpoints, m.policies, m.selectors, m.latency, m.failures)
		cfg.Registerer.MustRegister(fm.collectors()...)
	}
	return &Policy{
		node: cfg.Node, watch: watch, v4: v4, v6: v6, ifaces: cfg.HostInterfaces, resync: cfg.Resync,
		log: cfg.Logger.With("component", "policy"), metrics: m, felix: fm, natRandomFully: cfg.NATRandomFully,
		objs: map[confwatch.Key]api.Object{}, compiler: policy.NewCompiler(), changed: map[string]bool{},
	}
}

// Run programs the snapshot once confwatch is in sync, then every change
// (coalesced), on a periodic resync, and retries failures with backoff.
func (p *Policy) Run(ctx context.Context) error {
	sub := p.watch.Subscribe(policyKinds...)
	updates := sub.Updates(ctx)
	interval := p.resync
	tick := time.NewTicker(interval)
	defer tick.Stop()
	synced, dirty := false, false
	open, gateC := gateState(p.Gate)
	backoff := time.Duration(0)
	// Felix's view of the datastore: a resync runs until confwatch's
	// first batch, the complete snapshot, arrives.
	p.felix.resyncsStarted.Inc()
	p.felix.resyncState.Set(resyncInProgress)
	start, programmed := time.Now(), false
	batch := 0
	for {
		var retry <-chan time.Time
		if dirty && backoff > 0 {
			retry = time.After(backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case ups, ok := <-updates:
			if !ok {
				return nil
			}
			p.apply(ups)
			batch += len(ups)
			synced, dirty = true, true
			p.felix.resyncState.Set(resyncInSync)
			// Coalesce a burst: take whatever else is already queued.
			for more := true; more; {
				select {
				case ups, ok := <-updates:
					if !ok {
						return nil
					}
					p.apply(ups)
					batch += len(ups)
				default:
					more = false
				}
			}
		case <-tick.C:
			// The periodic resync re-reads the kernel: between resyncs the
			// programmers diff against what they last wrote.
			p.invalidate()
			dirty = synced
		case <-retry:
		case <-gateC:
			open, gateC = gateState(p.Gate)
			if open {
				// Reopened: read the kernel back and program in full.
				p.invalidate()
				dirty = synced
			}
		}
		if !dirty || !open {
			continue
		}
		if batch > 0 {
			p.felix.batchSize.Observe(float64(batch))
			batch = 0
		}
		applyStart := time.Now()
		if err := p.program(ctx); err != nil {
			p.metrics.failures.Inc()
			p.felix.failures.Inc()
			backoff = min(max(2*backoff, 100*time.Millisecond), 10*time.Second)
			p.log.Warn("programming policy failed, will retry", "err", err, "backoff", backoff)
			continue
		}
		dirty, backoff = false, 0
		if programmed {
			p.felix.applyTime.Observe(time.Since(applyStart).Seconds())
		} else {
			programmed = true
			p.felix.initialApplyTime.Set(time.Since(start).Seconds())
		}
		// FelixConfiguration's iptablesRefreshInterval may have changed.
		if want := p.refreshInterval(); want != interval {
			interval = want
			tick.Reset(interval)
			p.log.Info("iptables refresh interval", "interval", interval)
		}
	}
}

// refreshInterval is iptablesRefreshInterval as merged by FelixSpec (the
// FELIX_* environment over node.<name> over default), else the
// constructor's value. Zero or less keeps the constructor's value (felix
// reads 0 as "never"; a periodic repair is kept here).
func (p *Policy) refreshInterval() time.Duration {
	spec := FelixSpec(p.objs, p.node, p.Overrides)
	if d := spec.IptablesRefreshInterval; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return p.resync
}

func (p *Policy) apply(ups []confwatch.Update) {
	if p.pendingFrom.IsZero() && len(ups) > 0 {
		p.pendingFrom = time.Now()
	}
	for _, u := range ups {
		start := time.Now()
		if u.Type == confwatch.Delete {
			delete(p.objs, u.Key)
		} else {
			p.objs[u.Key] = u.Object
		}
		p.changed[u.Key.Kind] = true
		p.felix.updateTime.Observe(time.Since(start).Seconds())
		p.felix.updates.WithLabelValues(updateType(u.Key.Kind)).Inc()
		p.felix.messages.WithLabelValues(messageType(u.Key.Kind, u.Type == confwatch.Delete)).Inc()
	}
}

// Snapshot assembles the compiler input from the cache: PolicySnapshot,
// rebuilding only the kinds changed since the last one.
func (p *Policy) Snapshot() *policy.Snapshot {
	s := snapshot(p.objs, p.node, p.Overrides, p.snap, p.changed)
	p.snap, p.changed = s, map[string]bool{}
	return s
}

// PolicyKinds are the resource kinds the policy compiler reads: what
// PolicySnapshot needs in its objects.
func PolicyKinds() []string { return slices.Clone(policyKinds) }

// PolicySnapshot is the compiler input of the policy actor on node: objs
// (a confwatch cache of PolicyKinds, or confwatch.Load of them) in key
// order, and the FelixConfiguration in effect on node (FelixSpec, with
// env the FELIX_* overrides; may be nil). It is pure, so that calicoctl
// policy explain and calico-node plan compile exactly what the agent
// would; CompleteSnapshot adds what only the node itself knows.
func PolicySnapshot(objs map[confwatch.Key]api.Object, node string, env *api.FelixConfigurationSpec) *policy.Snapshot {
	return snapshot(objs, node, env, nil, nil)
}

// snapshot is PolicySnapshot with prev's slices of every kind but those
// in changed (prev nil: none reused). Each kind's slice is in key order
// either way, so the result equals PolicySnapshot's.
func snapshot(objs map[confwatch.Key]api.Object, node string, env *api.FelixConfigurationSpec, prev *policy.Snapshot, changed map[string]bool) *policy.Snapshot {
	s := &policy.Snapshot{Node: node}
	if prev != nil {
		*s = *prev
		s.Node, s.HostInterfaces, s.Config = node, nil, policy.Config{}
		for kind := range changed {
			s.Clear(kind)
		}
	}
	// Each key's text once: a comparison of Key.String()s allocated two
	// strings, tens of thousands per snapshot of a large node.
	type keyed struct {
		text string
		obj  api.Object
	}
	sorted := make([]keyed, 0, len(objs))
	for k, o := range objs {
		if prev == nil || changed[k.Kind] {
			sorted = append(sorted, keyed{k.String(), o})
		}
	}
	slices.SortFunc(sorted, func(a, b keyed) int { return strings.Compare(a.text, b.text) })
	for _, k := range sorted {
		s.Add(k.obj)
	}
	felix := FelixSpec(objs, node, env)
	s.Config = policy.ConfigFromFelix(&felix)
	if bgp, ok := objs[confwatch.Key{Kind: "BGPConfiguration", Name: "default"}].(*api.BGPConfiguration); ok {
		s.Config.ServiceCIDRs = policy.ServiceCIDRs(&bgp.Spec)
	}
	return s
}

// CompleteSnapshot adds to s what the node knows and the datastore does
// not, as the actor does before compiling: the host's interface addresses
// (when host endpoints may need them to be placed; ifaces nil: unknown),
// no IPv6 policy when the node cannot program it, and whether its
// iptables and kernel support --random-fully.
func CompleteSnapshot(s *policy.Snapshot, ifaces HostInterfaces, ipv6, natRandomFully bool) error {
	if ifaces != nil && len(s.HostEndpoints) > 0 {
		ifs, err := ifaces()
		if err != nil {
			return err
		}
		s.HostInterfaces = ifs
	}
	if !ipv6 {
		s.Config.IPv6 = false
	}
	s.Config.NATRandomFully = natRandomFully
	return nil
}

// MaxIPSetSize is the maxelem of the IP sets the programmers create:
// FelixConfiguration's maxIpsetSize, else 0 (Felix's default).
func MaxIPSetSize(felix api.FelixConfigurationSpec) int {
	if felix.MaxIpsetSize != nil {
		return *felix.MaxIpsetSize
	}
	return 0
}

func (p *Policy) invalidate() {
	p.v4.Invalidate()
	if p.v6 != nil {
		p.v6.Invalidate()
	}
}

func (p *Policy) program(ctx context.Context) error {
	start := time.Now()
	s := p.Snapshot()
	if err := CompleteSnapshot(s, p.ifaces, p.v6 != nil, p.natRandomFully); err != nil {
		return err
	}
	snapshotted := time.Now()
	maxSize := MaxIPSetSize(FelixSpec(p.objs, p.node, p.Overrides))
	for _, a := range []Applier{p.v4, p.v6} {
		if sz, ok := a.(IPSetSizer); ok {
			sz.SetMaxIPSetSize(maxSize)
		}
	}
	res := p.compiler.Compile(s)
	compiled := time.Now()
	for _, msg := range res.Problems {
		p.log.Warn("policy not fully compiled", "problem", msg)
	}
	// Felix's debugSimulateDataplaneApplyDelay: a loaded node, for tests
	// of what waits on the dataplane (CNI ADD).
	if d := FelixSpec(p.objs, p.node, p.Overrides).DebugSimulateDataplaneApplyDelay; d != nil && d.Duration > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d.Duration):
		}
	}
	// The families have tables and sets of their own: programmed side
	// by side, a change (a new pod's endpoint, which its CNI ADD waits
	// for) costs one iptables-restore's time, not two in a row.
	var v6err error
	var wg sync.WaitGroup
	if p.v6 != nil && res.V6 != nil {
		wg.Go(func() { v6err = p.v6.Apply(ctx, res.V6) })
	}
	v4err := p.v4.Apply(ctx, res.V4)
	wg.Wait()
	if err := errors.Join(v4err, v6err); err != nil {
		return err
	}
	applied := time.Now()
	// Where a change's latency goes (bench-dataplane reads this line):
	// waiting is from the first change received to this program's start
	// (coalescing, a previous program still running, a backoff).
	waited := time.Duration(0)
	if !p.pendingFrom.IsZero() {
		waited = start.Sub(p.pendingFrom)
	}
	p.log.Debug("policy programmed", "waited", waited, "snapshot", snapshotted.Sub(start),
		"compile", compiled.Sub(snapshotted), "apply", applied.Sub(compiled))
	if p.Programmed != nil {
		p.Programmed(s.WorkloadEndpoints)
	}
	local := 0
	for _, w := range s.WorkloadEndpoints {
		if w.Spec.Node == p.node {
			local++
		}
	}
	for _, h := range s.HostEndpoints {
		if h.Spec.Node == p.node {
			local++
		}
	}
	p.metrics.endpoints.Set(float64(local))
	p.metrics.policies.Set(float64(len(s.NetworkPolicies) + len(s.GlobalNetworkPolicies)))
	p.metrics.selectors.Set(float64(len(res.V4.IPSets)))
	p.setFelixCounts(s, res, local)
	if !p.pendingFrom.IsZero() {
		p.metrics.latency.Observe(time.Since(p.pendingFrom).Seconds())
		p.pendingFrom = time.Time{}
	}
	return nil
}

// setFelixCounts sets Felix's gauges of what this node programs and of
// what the cluster holds.
func (p *Policy) setFelixCounts(s *policy.Snapshot, res *policy.Result, local int) {
	f := p.felix
	f.activeEndpoints.Set(float64(local))
	f.activePolicies.Set(float64(activePolicies(res)))
	f.activeSelectors.Set(float64(activeSelectors(res)))
	f.clusterHosts.Set(float64(len(s.Nodes)))
	f.clusterWorkloadEndpoints.Set(float64(len(s.WorkloadEndpoints)))
	f.clusterHostEndpoints.Set(float64(len(s.HostEndpoints)))
	f.clusterPolicies.Set(float64(len(s.NetworkPolicies) + len(s.GlobalNetworkPolicies)))
	f.clusterProfiles.Set(float64(len(s.Profiles)))
	f.clusterTiers.Set(float64(len(s.Tiers)))
}

// activePolicies counts the policies with chains on this node, that is
// those selecting a local endpoint: each policy chain's first rule
// carries the compiler's "Policy <name> ingress|egress" comment.
func activePolicies(res *policy.Result) int {
	seen := map[string]bool{}
	for _, fam := range []*policy.Family{res.V4, res.V6} {
		if fam == nil {
			continue
		}
		for _, t := range fam.Tables() {
			for _, c := range t.Chains {
				if len(c.Rules) == 0 {
					continue
				}
				for _, cm := range c.Rules[0].Comment {
					if name, ok := strings.CutPrefix(cm, "Policy "); ok {
						name = strings.TrimSuffix(strings.TrimSuffix(name, " ingress"), " egress")
						seen[name] = true
					}
				}
			}
		}
	}
	return len(seen)
}

// activeSelectors counts the IP sets of rule selectors and named ports
// (Felix's "s:" and "n:" sets) this node programs.
func activeSelectors(res *policy.Result) int {
	seen := map[string]bool{}
	for _, fam := range []*policy.Family{res.V4, res.V6} {
		if fam == nil {
			continue
		}
		for _, s := range fam.IPSets {
			if strings.HasPrefix(s.ID, "s:") || strings.HasPrefix(s.ID, "n:") {
				seen[s.ID] = true
			}
		}
	}
	return len(seen)
}
