package routetable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/agent/refresh"
	"github.com/projectcalico/calico-node/agent/routeproto"
	"github.com/projectcalico/calico-node/agent/routes"
)

// routeKey identifies a route in the kernel: its table and destination.
// A struct, not text: a burst of 10,000 routes looks keys up several
// times per route, and formatting each cost an allocation or three.
type routeKey struct {
	table int
	dst   netip.Prefix
}

func (k routeKey) String() string { return strconv.Itoa(k.table) + "/" + k.dst.String() }

// compare orders keys by table, then destination.
func (k routeKey) compare(o routeKey) int {
	if c := cmp.Compare(k.table, o.table); c != 0 {
		return c
	}
	if c := k.dst.Addr().Compare(o.dst.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(k.dst.Bits(), o.dst.Bits())
}

func key(r routes.Route) routeKey { return routeKey{table(r), r.Dst} }

func table(r routes.Route) int {
	if r.Table == 0 {
		return unix.RT_TABLE_MAIN
	}
	return r.Table
}

// Kernel is the netlink surface the table uses; *netlink.Handle implements it.
type Kernel interface {
	RouteListFiltered(family int, filter *netlink.Route, mask uint64) ([]netlink.Route, error)
	RouteReplace(route *netlink.Route) error
	RouteDel(route *netlink.Route) error
	LinkByName(name string) (netlink.Link, error)
	LinkByIndex(index int) (netlink.Link, error)
}

// Table is the route actor.
type Table struct {
	k   Kernel
	log *slog.Logger

	mu       sync.Mutex
	sources  map[string]map[routeKey]routes.Route // by source, then key
	expected map[string]bool                      // sources to wait for before the first write
	dirty    chan struct{}                        // 1-slot: coalesces wake-ups
	// touched are the keys Update changed since the last pass; all: a Set
	// did, so the next pass merges every source (under mu).
	touched map[routeKey]bool
	all     bool

	refresh *refresh.Ticker // full-resync period; 0: none

	applied chan struct{} // closed and replaced after each successful apply

	// last is what the previous successful reconcile left in the kernel
	// (owned by Run): changes between full resyncs are applied as a diff
	// against it, without listing the kernel's routes.
	last map[routeKey]routes.Route
	// relist: a pass failed, so last no longer says what the kernel has
	// and the next pass lists it (owned by Run). last is kept: it is
	// still what onApplied was last told.
	relist bool
	// skipped counts the wanted routes the last pass left out because
	// their device does not exist yet (owned by Run).
	skipped int

	// onApplied hears of every successful pass what it changed in last
	// (set before Run); appliedSet and appliedDel are that change, built
	// by the pass (owned by Run).
	onApplied              func(set, del []routes.Route)
	appliedSet, appliedDel []routes.Route

	// What the last pass left in the kernel and why it left some wanted
	// routes out, by key, for Inspect (under mu; replaced, never mutated).
	shown    map[routeKey]routes.Route
	problems map[routeKey]string
	passes   int

	m *metrics // nil: none

	// external are the workload interface prefixes whose routes of other
	// protocols than ours the full reconcile removes (Felix's
	// removeExternalRoutes); nil: none (under mu).
	external []string
}

// SetRemoveExternalRoutes makes the full reconcile also delete routes
// of other protocols than ours to interfaces named with one of prefixes
// (workload interfaces, interfacePrefix) that no source wants, as Felix
// does with removeExternalRoutes (its default). IPv6 link-local routes
// and the kernel's own (proto kernel) are left alone. nil turns it off:
// only protocol 80 routes are ever removed. Safe from any goroutine; it
// takes effect at the next full reconcile.
func (t *Table) SetRemoveExternalRoutes(prefixes []string) {
	t.mu.Lock()
	t.external = slices.Clone(prefixes)
	t.mu.Unlock()
	t.kick()
}

// externalRoutes are the routes to workload interfaces (names with one of
// prefixes) of other protocols than ours, by key, that the full reconcile
// removes unless wanted.
func (t *Table) externalRoutes(prefixes []string) (map[routeKey]netlink.Route, error) {
	out := map[routeKey]netlink.Route{}
	names := map[int]string{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := t.k.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range rs {
			if r.Protocol == routeproto.Calico || r.Protocol == unix.RTPROT_KERNEL || r.LinkIndex == 0 {
				continue
			}
			dst, ok := prefixOf(r.Dst, fam)
			if !ok || dst.Addr().IsLinkLocalUnicast() {
				continue
			}
			name, ok := names[r.LinkIndex]
			if !ok {
				if l, err := t.k.LinkByIndex(r.LinkIndex); err == nil {
					name = l.Attrs().Name
				}
				names[r.LinkIndex] = name
			}
			if name != "" && slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
				out[routeKey{r.Table, dst}] = r
			}
		}
	}
	return out, nil
}

// metrics are Felix's route table metrics, with Felix's names, types,
// labels ("IPv4:254": family and table number) and help.
type metrics struct {
	resync         prometheus.Summary
	routes, ifaces *prometheus.GaugeVec
	tallies        map[famTable]*tally // of the routes in the kernel (owned by Run)
}

// RegisterMetrics makes the table keep Felix's route table metrics
// (felix_route_table_resync_seconds, felix_route_table_num_routes,
// felix_route_table_num_ifaces) in reg. Call it before Run.
func (t *Table) RegisterMetrics(reg prometheus.Registerer) error {
	m := &metrics{
		resync: prometheus.NewSummary(prometheus.SummaryOpts{
			Name: "felix_route_table_resync_seconds", Help: "Time taken to list all the routes during a resync.",
			Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001},
		}),
		routes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "felix_route_table_num_routes", Help: "Number of routes that Felix is managing in the particular routing table.",
		}, []string{"table"}),
		ifaces: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "felix_route_table_num_ifaces", Help: "Number of interfaces that Felix is monitoring for the particular routing table.",
		}, []string{"table"}),
	}
	for _, c := range []prometheus.Collector{m.resync, m.routes, m.ifaces} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register route table metrics: %w", err)
		}
	}
	t.m = m
	return nil
}

// count sets the gauges from the routes now in the kernel.
func (m *metrics) count(rs map[routeKey]routes.Route) {
	if m == nil {
		return
	}
	m.tallies = map[famTable]*tally{}
	for _, r := range rs {
		m.change(nil, &r)
	}
	m.flush()
}

// famTable is a gauge's label: IP family and table.
type famTable struct{ v6, table int }

// tally is what one label's gauges count: routes, and routes per device.
type tally struct {
	routes int
	devs   map[string]int
}

// change counts old out and new in (either may be nil), so that a pass
// that changes a few of 10,000 routes does not recount them all.
func (m *metrics) change(old, new *routes.Route) {
	if m == nil {
		return
	}
	if old != nil {
		m.add(old, -1)
	}
	if new != nil {
		m.add(new, 1)
	}
}

func (m *metrics) add(r *routes.Route, d int) {
	l := famTable{btoi(r.Dst.Addr().Is6()), table(*r)}
	tl := m.tallies[l]
	if tl == nil {
		tl = &tally{devs: map[string]int{}}
		m.tallies[l] = tl
	}
	tl.routes += d
	if r.Dev != "" {
		if tl.devs[r.Dev] += d; tl.devs[r.Dev] == 0 {
			delete(tl.devs, r.Dev)
		}
	}
}

// flush sets the gauges from the tallies.
func (m *metrics) flush() {
	if m == nil {
		return
	}
	m.routes.Reset()
	m.ifaces.Reset()
	for l, tl := range m.tallies {
		if tl.routes == 0 {
			delete(m.tallies, l)
			continue
		}
		label := fmt.Sprintf("IPv%d:%d", 4+2*l.v6, l.table)
		m.routes.WithLabelValues(label).Set(float64(tl.routes))
		m.ifaces.WithLabelValues(label).Set(float64(len(tl.devs)))
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// New returns a table working through k (a netlink handle for the node's
// network namespace). period is the period of the full reconcile that
// re-reads the kernel's routes (FelixConfiguration routeRefreshInterval);
// 0 or less disables it.
func New(k Kernel, period time.Duration, logger *slog.Logger) *Table {
	return &Table{
		k: k, log: logger.With("component", "routes"), refresh: refresh.NewTicker(period),
		sources: map[string]map[routeKey]routes.Route{},
		dirty:   make(chan struct{}, 1),
		applied: make(chan struct{}),
	}
}

// SetRefreshInterval changes the period of the full reconcile; 0 or less
// disables it, so drift (a route deleted by hand) is only repaired when a
// source changes or a write fails. It may be called from any goroutine,
// before or during Run, and takes effect at once: the next full
// reconcile is d from now.
func (t *Table) SetRefreshInterval(d time.Duration) { t.refresh.Set(d) }

// Expect names a source that will publish. Until every expected source
// has published once, Run does not touch the kernel: a restarting agent
// must not delete the routes of a producer that simply has not caught up
// yet. Call before Run.
func (t *Table) Expect(sources ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.expected == nil {
		t.expected = map[string]bool{}
	}
	for _, s := range sources {
		t.expected[s] = true
	}
}

func (t *Table) ready() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for s := range t.expected {
		if _, ok := t.sources[s]; !ok {
			return false
		}
	}
	return true
}

// Set replaces the routes wanted by source. Of two routes to the same
// table and destination, the first counts.
func (t *Table) Set(source string, rs []routes.Route) {
	m := make(map[routeKey]routes.Route, len(rs))
	for _, r := range rs {
		if k := key(r); !hasKey(m, k) {
			m[k] = r
		}
	}
	t.mu.Lock()
	t.sources[source] = m
	t.all = true
	t.mu.Unlock()
	t.kick()
}

func hasKey(m map[routeKey]routes.Route, k routeKey) bool { _, ok := m[k]; return ok }

func (t *Table) kick() {
	select {
	case t.dirty <- struct{}{}:
	default:
	}
}

// OnApplied has f told, after every successful pass of Run, how the
// routes the table has installed changed since f was last called: set
// holds the routes installed or changed, del those removed (fresh slices f
// may keep; a table and destination is in at most one of them). The first
// call sets every installed route, so applying each call's changes in
// turn gives what the table has installed: so that CNI ADD can wait for a
// pod's route (agent/epstatus). f is called after every successful pass,
// changes or not. Changes rather than the whole set: a burst of BGP
// routes passes many times, and copying 10,000 routes for each pass cost
// more than the pass. Call before Run (a Reconcile called outside Run
// is not reported); f runs on Run's goroutine and must be quick.
func (t *Table) OnApplied(f func(set, del []routes.Route)) { t.onApplied = f }

// Applied returns a channel closed after the next successful reconcile.
func (t *Table) Applied() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.applied
}

// Run reconciles until ctx is done. Kernel errors are retried with backoff;
// they never stop the actor. Routes left out because their device is
// missing are retried with backoff too, so that a device appearing after
// its route is wanted does not depend on the periodic refresh (which may
// be disabled).
func (t *Table) Run(ctx context.Context) error {
	tickC := t.refresh.Start()
	defer t.refresh.Stop()
	backoff, pendingBackoff := time.Duration(0), time.Duration(0)
	t.kick()
	for {
		var retry, pending <-chan time.Time
		if backoff > 0 {
			retry = time.After(backoff)
		} else if pendingBackoff > 0 {
			pending = time.After(pendingBackoff)
		}
		full := false
		select {
		case <-ctx.Done():
			return nil
		case <-t.refresh.Changed():
			tickC = t.refresh.Start()
			t.log.Debug("route refresh interval", "interval", t.refresh.Period())
			continue
		case <-t.dirty:
		case <-tickC:
			full = true
		case <-retry:
			full = true
		case <-pending:
		}
		if !t.ready() {
			continue
		}
		if err := t.passAndReport(full); err != nil {
			backoff = min(max(backoff*2, 100*time.Millisecond), 10*time.Second)
			t.log.Warn("route reconcile failed, will retry", "err", err, "backoff", backoff)
			continue
		}
		backoff = 0
		if t.skipped > 0 {
			pendingBackoff = min(max(pendingBackoff*2, 200*time.Millisecond), 10*time.Second)
		} else {
			pendingBackoff = 0
		}
	}
}

// passAndReport is one pass of Run's and, when it succeeds, its report
// to onApplied.
func (t *Table) passAndReport(full bool) error {
	t.appliedSet, t.appliedDel = nil, nil // the pass notes its changes here
	if err := t.pass(full); err != nil {
		return err
	}
	if t.onApplied != nil {
		t.onApplied(t.appliedSet, t.appliedDel)
	}
	return nil
}

// pass is one reconcile of Run's: full lists the kernel; otherwise only
// what changed since the last pass is written, merging every source after
// a Set and looking only at the touched destinations after Updates.
func (t *Table) pass(full bool) error {
	if full || t.last == nil || t.relist {
		return t.Reconcile()
	}
	if keys, all := t.takeTouched(); !all {
		return t.applyDelta(keys)
	}
	return t.applyDiff()
}

// desired merges the sources; earlier sources win conflicts.
func (t *Table) desired() map[routeKey]routes.Route {
	t.mu.Lock()
	out := map[routeKey]routes.Route{}
	for _, n := range t.sourceOrder() {
		for _, r := range t.sources[n] {
			k := key(r)
			if prev, ok := out[k]; ok {
				if !sameRoute(prev, r) {
					t.log.Debug("route wanted by two sources; keeping the first", "dst", r.Dst, "kept", prev.Dev, "dropped", r.Dev, "source", n)
				}
				continue
			}
			out[k] = r
		}
	}
	t.mu.Unlock()
	return out
}

// sourceOrder is the sources' names in priority order (caller holds mu).
func (t *Table) sourceOrder() []string {
	names := make([]string, 0, len(t.sources))
	for n := range t.sources {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func sameRoute(a, b routes.Route) bool {
	return a.Dst == b.Dst && a.Type == b.Type && a.Dev == b.Dev && a.Via == b.Via && table(a) == table(b) && a.Scope == b.Scope && a.Metric == b.Metric
}

// Reconcile makes the kernel match the desired routes once.
func (t *Table) Reconcile() error {
	t.takeTouched() // this pass merges everything
	d, err := t.diff()
	if err != nil {
		return err
	}
	var errs []error
	// Delete what nobody wants, then replace what is missing or
	// different, in batches.
	ops := make([]Op, 0, len(d.del)+len(d.replace))
	for i := range d.del {
		ops = append(ops, Op{Del: true, Route: &d.del[i]})
	}
	for _, nr := range d.replace {
		ops = append(ops, Op{Route: nr})
	}
	keys := make([]routeKey, len(d.del), len(ops)) // a delete records no problem
	for _, r := range d.changed {
		keys = append(keys, key(r))
	}
	errs = append(errs, t.writeReporting(ops, keys, d.problems)...)
	t.record(d.want, d.problems)
	if err := errors.Join(errs...); err != nil {
		t.relist = true
		return err
	}
	t.replaceLast(d.want)
	t.m.count(d.want)
	t.signalApplied()
	return nil
}

// routeDiff is what a full reconcile changes.
type routeDiff struct {
	del     []netlink.Route  // ours in the kernel, wanted by nobody
	replace []*netlink.Route // wanted, missing or different
	changed []routes.Route   // the wanted routes of replace, in order
	isNew   []bool           // for each of replace: not in the kernel at all
	skipped []routes.Route   // wanted, but their device does not exist
	want    map[routeKey]routes.Route
	same    int // wanted and already in the kernel as wanted
	// problems says, by key, why a wanted route is not written (Inspect).
	problems map[routeKey]string
}

// diff lists our routes in the kernel and compares them with the desired
// ones. It only reads.
func (t *Table) diff() (routeDiff, error) {
	d := routeDiff{want: t.desired(), problems: map[routeKey]string{}}
	t.skipped = 0
	actual := map[routeKey]netlink.Route{}
	listStart := time.Now()
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := t.k.RouteListFiltered(fam, &netlink.Route{Protocol: routeproto.Calico, Table: unix.RT_TABLE_UNSPEC},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		if err != nil {
			return d, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range rs {
			dst, ok := prefixOf(r.Dst, fam)
			if !ok {
				continue
			}
			actual[routeKey{r.Table, dst}] = r
		}
	}
	t.mu.Lock()
	prefixes := t.external
	t.mu.Unlock()
	if len(prefixes) > 0 {
		ext, err := t.externalRoutes(prefixes)
		if err != nil {
			return d, err
		}
		for k, r := range ext {
			if _, ok := d.want[k]; !ok {
				d.del = append(d.del, r)
			}
			// A wanted one is replaced by ours (same destination and
			// table) below.
		}
	}
	if t.m != nil {
		t.m.resync.Observe(time.Since(listStart).Seconds())
	}
	for k, r := range actual {
		if _, ok := d.want[k]; !ok {
			d.del = append(d.del, r)
		}
	}
	keys := make([]routeKey, 0, len(d.want))
	for k := range d.want {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, routeKey.compare)
	for _, k := range keys {
		w := d.want[k]
		nr, err := t.toNetlink(w)
		if err != nil {
			// The device may not exist yet (pod being created): Run
			// retries it with backoff.
			t.log.Debug("skip route", "dst", w.Dst, "err", err)
			delete(d.want, k)
			if cur, ok := actual[k]; ok {
				// The kernel keeps its old route to k; last says so, so
				// that a withdrawal between full passes deletes it.
				d.want[k] = t.describe(cur)
			}
			d.skipped = append(d.skipped, w)
			t.skipped++
			d.problems[k] = "not written: " + err.Error()
			continue
		}
		cur, ok := actual[k]
		if ok && matches(cur, nr) {
			d.same++
			continue
		}
		d.replace, d.changed, d.isNew = append(d.replace, nr), append(d.changed, w), append(d.isNew, !ok)
	}
	sort.Slice(d.del, func(i, j int) bool { return d.del[i].Dst.String() < d.del[j].Dst.String() })
	return d, nil
}

// Plan is what a full reconcile would change now.
type Plan struct {
	// Add are wanted routes the kernel lacks; Replace wanted ones it has
	// otherwise; Delete our (protocol 80) routes nobody wants, as the
	// kernel has them.
	Add, Replace, Delete []routes.Route
	// Skipped are wanted routes whose device does not exist.
	Skipped []routes.Route
	// Unchanged counts the wanted routes already in place.
	Unchanged int
}

// Plan compares the routes the sources want with the kernel's, as
// Reconcile does, and writes nothing (`calico-node plan`).
func (t *Table) Plan() (Plan, error) {
	d, err := t.diff()
	if err != nil {
		return Plan{}, err
	}
	p := Plan{Skipped: d.skipped, Unchanged: d.same}
	for i, w := range d.changed {
		if d.isNew[i] {
			p.Add = append(p.Add, w)
		} else {
			p.Replace = append(p.Replace, w)
		}
	}
	for _, r := range d.del {
		p.Delete = append(p.Delete, t.describe(r))
	}
	return p, nil
}

// describe is a kernel route as a routes.Route.
func (t *Table) describe(r netlink.Route) routes.Route {
	fam := netlink.FAMILY_V4
	if r.Dst != nil && r.Dst.IP.To4() == nil {
		fam = netlink.FAMILY_V6
	}
	dst, _ := prefixOf(r.Dst, fam)
	rr := routes.Route{Dst: dst, Metric: r.Priority, OnLink: r.Flags&int(netlink.FLAG_ONLINK) != 0}
	switch r.Type {
	case unix.RTN_BLACKHOLE:
		rr.Type = routes.Blackhole
	case unix.RTN_UNREACHABLE:
		rr.Type = routes.Unreachable
	}
	if r.Table != unix.RT_TABLE_MAIN {
		rr.Table = r.Table
	}
	if a, ok := netip.AddrFromSlice(r.Gw); ok {
		rr.Via = a.Unmap()
	}
	if a, ok := netip.AddrFromSlice(r.Src); ok {
		rr.Src = a.Unmap()
	}
	if r.LinkIndex != 0 {
		if l, err := t.k.LinkByIndex(r.LinkIndex); err == nil {
			rr.Dev = l.Attrs().Name
		} else {
			rr.Dev = fmt.Sprintf("if%d", r.LinkIndex)
		}
	}
	return rr
}

// applyDiff writes only what changed since the last reconcile. Routes
// changed behind our back are repaired by the next full Reconcile.
func (t *Table) applyDiff() error {
	want := t.desired()
	t.skipped = 0
	var errs []error
	var ops []Op
	var keys []routeKey // of ops, for their problems
	for k, r := range t.last {
		if _, ok := want[k]; ok {
			continue
		}
		nr, err := t.toNetlink(r)
		if err != nil {
			continue // its device is gone, and the route with it
		}
		ops, keys = append(ops, Op{Del: true, Route: nr}), append(keys, k)
	}
	problems := map[routeKey]string{}
	for k, w := range want {
		if prev, ok := t.last[k]; ok && prev == w {
			continue
		}
		nr, err := t.toNetlink(w)
		if err != nil {
			t.log.Debug("skip route", "dst", w.Dst, "err", err)
			// Not written: retried (Run's pending backoff). The kernel
			// keeps what was there, and so does last, so that a
			// withdrawal still deletes it.
			if prev, ok := t.last[k]; ok {
				want[k] = prev
			} else {
				delete(want, k)
			}
			t.skipped++
			problems[k] = "not written: " + err.Error()
			continue
		}
		ops, keys = append(ops, Op{Route: nr}), append(keys, k)
	}
	errs = append(errs, t.writeReporting(ops, keys, problems)...)
	t.record(want, problems)
	if err := errors.Join(errs...); err != nil {
		t.relist = true
		return err
	}
	t.replaceLast(want)
	t.m.count(want)
	t.signalApplied()
	return nil
}

// replaceLast makes next what the kernel holds after a pass that
// computed it whole, noting for onApplied what changed against last.
func (t *Table) replaceLast(next map[routeKey]routes.Route) {
	if t.onApplied != nil {
		for k, r := range t.last {
			if _, ok := next[k]; !ok {
				t.appliedDel = append(t.appliedDel, r)
			}
		}
		for k, r := range next {
			if prev, ok := t.last[k]; !ok || prev != r {
				t.appliedSet = append(t.appliedSet, r)
			}
		}
	}
	t.last, t.relist = next, false
}

func (t *Table) signalApplied() {
	t.mu.Lock()
	close(t.applied)
	t.applied = make(chan struct{})
	t.mu.Unlock()
}

func prefixOf(n *net.IPNet, fam int) (netip.Prefix, bool) {
	if n == nil {
		// Default route.
		if fam == netlink.FAMILY_V4 {
			return netip.MustParsePrefix("0.0.0.0/0"), true
		}
		return netip.MustParsePrefix("::/0"), true
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func (t *Table) toNetlink(r routes.Route) (*netlink.Route, error) {
	nr := &netlink.Route{
		Dst:      &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
		Protocol: routeproto.Calico,
		Table:    table(r),
		Scope:    netlink.Scope(r.Scope),
		Priority: r.Metric,
	}
	switch r.Type {
	case routes.Blackhole:
		nr.Type = unix.RTN_BLACKHOLE
		return nr, nil
	case routes.Unreachable:
		nr.Type = unix.RTN_UNREACHABLE
		return nr, nil
	}
	if r.Dev != "" {
		l, err := t.k.LinkByName(r.Dev)
		if err != nil {
			return nil, fmt.Errorf("link %s: %w", r.Dev, err)
		}
		nr.LinkIndex = l.Attrs().Index
	}
	if r.Via.IsValid() {
		nr.Gw = r.Via.AsSlice()
		if r.OnLink {
			nr.Flags = int(netlink.FLAG_ONLINK)
		}
	} else if r.Dev != "" && r.Scope == 0 {
		nr.Scope = netlink.SCOPE_LINK
	}
	if r.Src.IsValid() {
		nr.Src = r.Src.AsSlice()
	}
	return nr, nil
}

// matches reports whether the kernel route already is what we want.
func matches(cur netlink.Route, want *netlink.Route) bool {
	typ := func(t int) int {
		if t == 0 {
			return unix.RTN_UNICAST
		}
		return t
	}
	scopeOK, prio := cur.Scope == want.Scope, want.Priority
	if want.Dst.IP.To4() == nil {
		// IPv6 routes have no scope, and metric 0 means the kernel's 1024.
		scopeOK = true
		if prio == 0 {
			prio = 1024
		}
	}
	return typ(cur.Type) == typ(want.Type) &&
		// A route given only a gateway gets its device from the kernel.
		(want.LinkIndex == 0 || cur.LinkIndex == want.LinkIndex) &&
		cur.Gw.Equal(want.Gw) &&
		scopeOK &&
		cur.Priority == prio &&
		// A src the route should no longer have is a difference too
		// (deviceRouteSourceAddress unset): no other route of ours has one.
		cur.Src.Equal(want.Src)
}
