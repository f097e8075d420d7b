package epstatus

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// DefaultMaxRecords is how many endpoint timelines a tracker keeps.
const DefaultMaxRecords = 1000

// Key names a workload endpoint.
type Key struct{ Namespace, Name string }

// KeyOf is w's key.
func KeyOf(w *api.WorkloadEndpoint) Key { return Key{w.Namespace, w.Name} }

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Subscriber is the part of confwatch Run reads.
type Subscriber interface {
	Subscribe(kinds ...string) *confwatch.Subscription
}

// Config configures a Tracker.
type Config struct {
	// Node is this agent's node: its endpoints are the local ones.
	Node string
	// MaxRecords bounds the timelines kept; 0: DefaultMaxRecords.
	MaxRecords int
	// Env is the FELIX_* environment (may be nil): its
	// endpointStatusPathPrefix outranks the datastore's.
	Env *api.FelixConfigurationSpec
	// Registerer, if set, gets calico_node_endpoint_stage_seconds.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Tracker is the endpoint status actor; see the package doc.
type Tracker struct {
	node  string
	max   int
	env   *api.FelixConfigurationSpec
	watch Subscriber
	log   *slog.Logger
	now   func() time.Time
	stage *prometheus.HistogramVec

	mu sync.Mutex
	// The views, each as last reported. policy is nil, and routesKnown
	// false, until the first report.
	policy      map[Key]*api.WorkloadEndpoint
	installed   map[netip.Prefix]since // main-table unicast routes
	routesKnown bool
	adverts     map[netip.Prefix]since // originated over BGP
	bgp         bool                   // Advertised has been called
	// local is Run's view of this node's endpoints; seen the container of
	// every endpoint Run has seen (new sandboxes start new timelines).
	local map[Key]*api.WorkloadEndpoint
	seen  map[Key]string
	// Timelines: the latest per endpoint, and every one kept, oldest first.
	records map[Key]*entry
	order   []*entry
	changed chan struct{} // closed and replaced when a view changes
	dirty   chan struct{} // 1-slot: the status files need a pass
}

// since is a route or prefix and when it first appeared.
type since struct {
	route routes.Route
	at    time.Time
}

// entry is one timeline and what it takes to complete it.
type entry struct {
	key    Key
	rec    Record
	start  time.Time
	remote bool
	rev    int64 // of the first version seen; 0: not known yet
	// remote: when its policy and a covering route were first seen.
	policyAt, routeAt time.Time
}

// New builds the tracker; Run follows watch.
func New(cfg Config, watch Subscriber) *Tracker {
	if cfg.MaxRecords <= 0 {
		cfg.MaxRecords = DefaultMaxRecords
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	stage := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "calico_node_endpoint_stage_seconds",
		Help: "Time from a workload endpoint's CNI ADD reaching the agent (from the agent first seeing it, when the ADD ran elsewhere) to each stage of its setup.",
		// 1 ms to ~65 s.
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 17),
	}, []string{"stage"})
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(stage)
	}
	return &Tracker{
		node: cfg.Node, max: cfg.MaxRecords, env: cfg.Env, watch: watch, now: cfg.Now,
		log: cfg.Logger.With("component", "endpoint-status"), stage: stage,
		installed: map[netip.Prefix]since{}, adverts: map[netip.Prefix]since{},
		local: map[Key]*api.WorkloadEndpoint{}, seen: map[Key]string{},
		records: map[Key]*entry{},
		changed: make(chan struct{}), dirty: make(chan struct{}, 1),
	}
}

// Node is the node whose endpoints the tracker waits for.
func (t *Tracker) Node() string { return t.node }

// revision parses a resourceVersion; 0 when it is not a number.
func revision(s string) int64 {
	r, _ := strconv.ParseInt(s, 10, 64)
	return r
}

// --- reports from the dataplane ---

// PolicyApplied is the policy actor's report after it programmed a
// snapshot: every workload endpoint compiled into it (of every node).
// The slice is kept: the caller must not change it afterwards.
func (t *Tracker) PolicyApplied(weps []api.WorkloadEndpoint) {
	view := make(map[Key]*api.WorkloadEndpoint, len(weps))
	for i := range weps {
		view[KeyOf(&weps[i])] = &weps[i]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.policy = view
	t.progressLocked()
}

// RoutesApplied is the route table's report after a successful apply:
// the routes it installed or changed (set) and removed (del) since its
// previous report (routetable.Table.OnApplied). Only main-table unicast
// routes count: blackholes cover nothing, and other tables are not the
// pods' path. The first report, even an empty one, makes the routes known.
func (t *Tracker) RoutesApplied(set, del []routes.Route) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for _, r := range del {
		if inMainTable(r) {
			delete(t.installed, r.Dst)
		}
	}
	for _, r := range set {
		switch {
		case !inMainTable(r):
			// Another table's route to the same destination is not the
			// main table's.
		case r.Table != 0 || r.Type != routes.Unicast:
			// The main table's route to r.Dst is now one that does not
			// count.
			delete(t.installed, r.Dst)
		default:
			if s, ok := t.installed[r.Dst]; !ok || s.route != r {
				t.installed[r.Dst] = since{r, now}
			}
		}
	}
	t.routesKnown = true
	t.progressLocked()
}

// inMainTable reports whether r is in the kernel's main table (254,
// RT_TABLE_MAIN; 0 in a routes.Route means it too): the route table keys
// a route by its table and destination, so a change to the main table's
// route to a destination comes as a route to it in either spelling.
func inMainTable(r routes.Route) bool { return r.Table == 0 || r.Table == 254 }

// Advertised is the BGP speaker's report: every prefix it originates.
func (t *Tracker) Advertised(prefixes []netip.Prefix) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	next := make(map[netip.Prefix]since, len(prefixes))
	for _, p := range prefixes {
		s, ok := t.adverts[p]
		if !ok {
			s = since{at: now}
		}
		next[p] = s
	}
	t.adverts, t.bgp = next, true
	t.progressLocked()
}

// --- reports from CNI ADD (the agent's CNI server) ---

// ADDReceived starts the timeline of an ADD for the endpoint key (as ADD
// names it before writing it), of pod (may be "") and containerID.
func (t *Tracker) ADDReceived(key Key, pod, containerID string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := &entry{key: key, start: at, rec: Record{
		Node: t.node, EndpointNode: t.node, Namespace: key.Namespace, Endpoint: key.Name,
		Pod: pod, ContainerID: containerID,
	}}
	e.rec.set(StageADDReceived, at)
	t.addLocked(e)
}

// ADDProgress records a stage of the ADD begun with ADDReceived:
// StageIPAM, StageVeth or StageADDReturned.
func (t *Tracker) ADDProgress(key Key, containerID string, stage Stage, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.addEntryLocked(key, containerID); e != nil {
		t.setLocked(e, stage, at)
	}
}

// ADDWritten records that ADD wrote w (at w's revision).
func (t *Tracker) ADDWritten(w *api.WorkloadEndpoint, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.addEntryLocked(KeyOf(w), w.Spec.ContainerID)
	if e == nil {
		return
	}
	t.fillLocked(e, w)
	t.setLocked(e, StageEndpointWritten, at)
	t.progressLocked()
}

// ADDFailed records why the ADD failed.
func (t *Tracker) ADDFailed(key Key, containerID string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.addEntryLocked(key, containerID); e != nil {
		e.rec.Error = err.Error()
	}
}

// addEntryLocked is the ADD's timeline: the endpoint's latest, if it is
// of this container.
func (t *Tracker) addEntryLocked(key Key, containerID string) *entry {
	e := t.records[key]
	if e == nil || e.remote || e.rec.ContainerID != containerID {
		return nil
	}
	return e
}

// --- waiting ---

// NotProgrammedError says what of an endpoint the dataplane had not
// programmed when Wait gave up.
type NotProgrammedError struct {
	Node, Endpoint string
	Revision       int64
	Missing        string
}

func (e *NotProgrammedError) Error() string {
	return fmt.Sprintf("the calico-node agent of node %s has not programmed workload endpoint %s (revision %d): %s",
		e.Node, e.Endpoint, e.Revision, e.Missing)
}

// Wait returns once the endpoint namespace/name is programmed at revision
// (a resourceVersion; "" or not a number: any), or with a
// *NotProgrammedError when ctx ends first.
func (t *Tracker) Wait(ctx context.Context, namespace, name, rev string) error {
	key, want := Key{namespace, name}, revision(rev)
	for {
		t.mu.Lock()
		missing := t.missingLocked(key, want)
		ch := t.changed
		t.mu.Unlock()
		if missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return &NotProgrammedError{Node: t.node, Endpoint: key.String(), Revision: want, Missing: missing}
		case <-ch:
		}
	}
}

// missingLocked says what is not programmed of key at revision want, or
// "" when it all is.
func (t *Tracker) missingLocked(key Key, want int64) string {
	w := t.policy[key]
	var missing []string
	switch {
	case t.policy == nil:
		missing = append(missing, "the policy dataplane has not been programmed yet")
	case w == nil:
		missing = append(missing, "its policy is not programmed (the endpoint is not in the policy dataplane yet)")
	case revision(w.ResourceVersion) < want:
		missing = append(missing, fmt.Sprintf("its policy is programmed for revision %s only", w.ResourceVersion))
	}
	if w != nil {
		if bad := t.routesMissingLocked(w); bad != "" {
			missing = append(missing, bad)
		}
	}
	return strings.Join(missing, "; ")
}

// routesMissingLocked names the routes of w not installed, or "".
func (t *Tracker) routesMissingLocked(w *api.WorkloadEndpoint) string {
	if !t.routesKnown {
		return "the route table has not been programmed yet"
	}
	var bad []string
	for _, n := range w.Spec.IPNetworks {
		p, err := netip.ParsePrefix(n)
		if err != nil || w.Spec.InterfaceName == "" {
			continue // nothing the agent would route
		}
		if s, ok := t.installed[p.Masked()]; !ok || s.route.Dev != w.Spec.InterfaceName {
			bad = append(bad, p.Masked().String()+" dev "+w.Spec.InterfaceName)
		}
	}
	if len(bad) > 0 {
		return "route " + strings.Join(bad, ", ") + " not installed"
	}
	return ""
}

// Programmed lists this node's endpoints programmed in full, each at the
// revision its policy was programmed for: what the status files say.
func (t *Tracker) Programmed() map[Key]*api.WorkloadEndpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.policy == nil || !t.routesKnown {
		return nil
	}
	out := map[Key]*api.WorkloadEndpoint{}
	for k, w := range t.policy {
		if w.Spec.Node == t.node && t.routesMissingLocked(w) == "" {
			out[k] = w
		}
	}
	return out
}

// --- Run's view ---

// observeLocked takes confwatch updates of workload endpoints. After the
// snapshot, an endpoint or container not seen before starts a timeline.
func (t *Tracker) observeLocked(ups []confwatch.Update, snapshot bool) {
	now := t.now()
	for _, u := range ups {
		w, ok := u.Object.(*api.WorkloadEndpoint)
		if !ok {
			continue
		}
		key := KeyOf(w)
		if u.Type == confwatch.Delete {
			delete(t.local, key)
			delete(t.seen, key)
			continue
		}
		if w.Spec.Node == t.node {
			t.local[key] = w
		} else {
			delete(t.local, key)
		}
		if w.Spec.ContainerID == "" && len(w.Spec.IPNetworks) == 0 {
			// A pod the datastore knows before its ADD (the Kubernetes
			// datastore computes endpoints from every Pod): its network
			// has not begun.
			continue
		}
		prev, known := t.seen[key]
		t.seen[key] = w.Spec.ContainerID
		if snapshot {
			continue
		}
		e := t.records[key]
		if e == nil || e.rec.ContainerID != w.Spec.ContainerID {
			if known && prev == w.Spec.ContainerID {
				continue // an update of an endpoint whose timeline is gone
			}
			e = &entry{key: key, start: now, remote: w.Spec.Node != t.node, rec: Record{
				Node: t.node, Namespace: key.Namespace, Endpoint: key.Name,
				Pod: w.Spec.Pod, ContainerID: w.Spec.ContainerID,
			}}
			t.addLocked(e)
		}
		t.fillLocked(e, w)
		t.setLocked(e, StageAgentSeen, now)
	}
	t.progressLocked()
}

// fillLocked completes e's identity from w.
func (t *Tracker) fillLocked(e *entry, w *api.WorkloadEndpoint) {
	e.rec.EndpointNode = w.Spec.Node
	if e.rec.Pod == "" {
		e.rec.Pod = w.Spec.Pod
	}
	if e.rev == 0 {
		e.rev = revision(w.ResourceVersion)
		e.rec.Revision = w.ResourceVersion
	}
	if len(e.rec.Addresses) == 0 {
		e.rec.Addresses = slices.Clone(w.Spec.IPNetworks)
	}
}

// addLocked keeps e as key's latest timeline, dropping the oldest past
// the bound.
func (t *Tracker) addLocked(e *entry) {
	t.records[e.key] = e
	t.order = append(t.order, e)
	for len(t.order) > t.max {
		old := t.order[0]
		t.order[0] = nil
		t.order = t.order[1:]
		if t.records[old.key] == old {
			delete(t.records, old.key)
		}
	}
}

// setLocked records a stage and observes its histogram.
func (t *Tracker) setLocked(e *entry, stage Stage, at time.Time) {
	if !e.rec.set(stage, at) {
		return
	}
	if stage != StageADDReceived && !(stage == StageAgentSeen && e.start.Equal(at)) {
		t.stage.WithLabelValues(string(stage)).Observe(max(at.Sub(e.start), 0).Seconds())
	}
}

// progressLocked takes what the views now show into the timelines, wakes
// the waiters and asks for a status file pass.
func (t *Tracker) progressLocked() {
	now := t.now()
	for _, e := range t.order {
		if e == nil || t.records[e.key] != e {
			continue // superseded by a newer sandbox
		}
		if e.remote {
			t.progressRemoteLocked(e, now)
		} else {
			t.progressLocalLocked(e, now)
		}
	}
	close(t.changed)
	t.changed = make(chan struct{})
	select {
	case t.dirty <- struct{}{}:
	default:
	}
}

// current is the version of e's endpoint the stages are judged on: the
// given one when it is e's sandbox at e's revision or later.
func (e *entry) current(w *api.WorkloadEndpoint) bool {
	return w != nil && (e.rec.ContainerID == "" || w.Spec.ContainerID == e.rec.ContainerID) &&
		(e.rev == 0 || revision(w.ResourceVersion) >= e.rev)
}

func (t *Tracker) progressLocalLocked(e *entry, now time.Time) {
	_, policy := e.rec.At(StagePolicy)
	_, routed := e.rec.At(StageRoutes)
	_, advertised := e.rec.At(StageAdvertised)
	if policy && routed && (advertised || !t.bgp) {
		return
	}
	pw := t.policy[e.key]
	if e.current(pw) {
		t.setLocked(e, StagePolicy, now)
	}
	// Routes are judged on the newest version known: the route table may
	// have them before the policy actor has the endpoint.
	w := t.local[e.key]
	if !e.current(w) {
		w = pw
	}
	if e.current(w) && t.routesKnown && t.routesMissingLocked(w) == "" && len(w.Spec.IPNetworks) > 0 {
		t.setLocked(e, StageRoutes, now)
	}
	if t.bgp && len(e.rec.Addresses) > 0 {
		if at, ok := covered(t.adverts, e.rec.Addresses); ok {
			// A block advertised before the pod existed covers it from
			// the moment it had its address.
			from := e.start
			if ipam, ok := e.rec.At(StageIPAM); ok {
				from = ipam
			}
			t.setLocked(e, StageAdvertised, laterOf(at, from))
		}
	}
}

func (t *Tracker) progressRemoteLocked(e *entry, now time.Time) {
	if _, done := e.rec.At(StageRemoteProgrammed); done {
		return
	}
	if e.policyAt.IsZero() && e.current(t.policy[e.key]) {
		e.policyAt = now
	}
	if e.routeAt.IsZero() && len(e.rec.Addresses) > 0 {
		if at, ok := covered(t.installed, e.rec.Addresses); ok {
			e.routeAt = laterOf(at, e.start)
		}
	}
	if !e.policyAt.IsZero() && !e.routeAt.IsZero() {
		t.setLocked(e, StageRemoteProgrammed, laterOf(e.policyAt, e.routeAt))
	}
}

// covered reports whether a prefix of set covers one of addrs, and since
// when (the earliest such).
func covered(set map[netip.Prefix]since, addrs []string) (time.Time, bool) {
	var best time.Time
	found := false
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			continue
		}
		ip := p.Addr()
		for bits := ip.BitLen(); bits >= 0; bits-- {
			s, ok := set[netip.PrefixFrom(ip, bits).Masked()]
			if !ok {
				continue
			}
			if !found || s.at.Before(best) {
				best, found = s.at, true
			}
			break
		}
	}
	return best, found
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Timeline is every kept timeline of the pod (or endpoint, or container)
// name in namespace, oldest first.
func (t *Tracker) Timeline(namespace, name string) []Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Record
	for _, e := range t.order {
		if e != nil && e.rec.Matches(namespace, name) {
			out = append(out, e.rec.clone())
		}
	}
	return out
}

// fileResync is how often the status directory is re-read and repaired
// (felix re-applies its files every 10 s; a file removed by hand only
// matters to an ADD waiting for it).
const fileResync = 30 * time.Second

// Run follows this node's workload endpoints (for the timelines) and
// FelixConfiguration (for endpointStatusPathPrefix) and keeps the status
// files, until ctx is done. The marker is written as soon as the
// directory is known; status files once both the policy and the route
// views have been reported.
func (t *Tracker) Run(ctx context.Context) error {
	updates := t.watch.Subscribe("WorkloadEndpoint", "FelixConfiguration").Updates(ctx)
	felix := map[confwatch.Key]api.Object{}
	tick := time.NewTicker(fileResync)
	defer tick.Stop()
	var fw *fileWriter
	snapshot, backoff := true, time.Duration(0)
	for {
		var retry <-chan time.Time
		if backoff > 0 {
			retry = time.After(backoff)
		}
		full := false
		select {
		case <-ctx.Done():
			return nil
		case ups, ok := <-updates:
			if !ok {
				return nil
			}
			for _, u := range ups {
				if u.Key.Kind != "FelixConfiguration" {
					continue
				}
				if u.Type == confwatch.Delete {
					delete(felix, u.Key)
				} else {
					felix[u.Key] = u.Object
				}
			}
			t.mu.Lock()
			t.observeLocked(ups, snapshot)
			t.mu.Unlock()
			snapshot = false
			spec := agent.FelixSpec(felix, t.node, t.env)
			if dir := statusDir(spec.EndpointStatusPathPrefix); fw == nil || fw.dir != dir {
				fw, full = nil, true
				if dir != "" {
					fw = &fileWriter{dir: dir, node: t.node}
					t.log.Info("endpoint status files", "dir", dir)
				} else {
					t.log.Info("endpoint status files off (endpointStatusPathPrefix none)")
				}
			}
		case <-t.dirty:
		case <-tick.C:
			full = true
		case <-retry:
			full = true
		}
		if fw == nil {
			continue
		}
		var err error
		if prog := t.Programmed(); prog == nil {
			err = fw.mark()
		} else {
			err = fw.sync(prog, full)
		}
		if err != nil {
			backoff = min(max(2*backoff, 100*time.Millisecond), 10*time.Second)
			t.log.Warn("endpoint status files, will retry", "err", err, "backoff", backoff)
			continue
		}
		backoff = 0
	}
}
