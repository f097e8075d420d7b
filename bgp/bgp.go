package bgp

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/confwatch"
	calicoapi "github.com/projectcalico/calico-node/internal/model/api"
)

// Kinds are the resource kinds the actor needs from confwatch.
func Kinds() []string { return []string{"Node", "BGPPeer", "BGPConfiguration", "IPPool", "BGPFilter"} }

// Updates is a confwatch subscription to Kinds(); *confwatch.Subscription
// implements it. The channel closes when ctx ends.
type Updates interface {
	Updates(ctx context.Context) <-chan []confwatch.Update
}

// RouteSink takes the complete set of routes a source wants in the kernel;
// *routetable.Table implements it.
type RouteSink interface {
	Set(source string, rs []routes.Route)
}

// routeUpdater is a RouteSink that also takes changes: set adds or
// replaces routes, del withdraws the routes to its destinations.
// *routetable.Table implements it. Between changes of configuration the
// actor hands it only the destinations whose best path changed, rather
// than recomputing, copying and having the table compare every route.
type routeUpdater interface {
	Update(source string, set, del []routes.Route)
}

// Reporter receives health reports; *health.Reporter implements it.
type Reporter interface {
	Report(live, ready bool, detail string)
}

// Route changes handed to the sink during a burst are spaced by
// publishCostPerRoute per route published (a change costs in proportion
// to its size, but a full set goes out after every configuration
// change), at most by maxPublishInterval: a node with a hundred routes
// passes every change on at once, one learning 10,000 routes at once
// hands them on in batches every few milliseconds. The explanations'
// copy of the published set (explainView.Published), made whole, is
// spaced by exposeCostPerRoute per route, at most by maxPublishInterval:
// copied after each batch of a 10,000-route burst it cost more than the
// batches did.
const (
	publishCostPerRoute = 500 * time.Nanosecond
	exposeCostPerRoute  = 10 * time.Microsecond
	maxPublishInterval  = 100 * time.Millisecond
)

// DefaultReadyThreshold is how long after start every session must be up
// for the node to be ready (calico-node's -threshold-time default).
const DefaultReadyThreshold = 30 * time.Second

// Config configures the actor.
type Config struct {
	NodeName string
	// StatusSocket is the unix socket answering `node status`; "" for none.
	StatusSocket string
	// ListenPort, when not 0, overrides BGPConfiguration's listenPort for
	// this node's own listener (peers still dial the configured port).
	ListenPort int
	// ReadyThreshold: see Readiness; 0 means DefaultReadyThreshold.
	ReadyThreshold time.Duration
	// Secrets resolves BGP passwords; nil when none can be read.
	Secrets Secrets
	Logger  *slog.Logger
	// Registerer, when set, gets the actor's metrics.
	Registerer prometheus.Registerer
	// Advertised, when set, is told after every reconcile every prefix
	// the speaker originates (so that an endpoint's timeline shows when
	// its address became reachable from the peers: agent/epstatus). It
	// runs on Run's goroutine and must be quick.
	Advertised func(prefixes []netip.Prefix)
	// Routes, when set, is the route table the learned routes go to, as
	// `calicoctl node bgp why` inspects it.
	Routes RouteInspector
	// Services, when set, supplies the Kubernetes Services whose
	// addresses this node advertises one by one (*ServiceWatcher).
	Services ServiceSource
}

// ServiceSource supplies Services for per-service advertisement;
// *ServiceWatcher implements it.
type ServiceSource interface {
	// Services returns the current Services; ok is false until they are
	// known.
	Services() (svcs []Service, ok bool)
	// Changed is signalled when Services may return something new.
	Changed() <-chan struct{}
	// Enable starts the watch; called once a service range is configured
	// (confd starts its route generator only then, and keeps it).
	Enable()
}

// Actor is the BGP speaker actor.
type Actor struct {
	cfg     Config
	log     *slog.Logger
	updates Updates
	kv      IPAMStore
	sink    RouteSink
	rep     Reporter
	now     func() time.Time

	book *statusBook
	bgp  *server.BgpServer
	sp   *speaker

	// learned is written by gobgp's event goroutine and read by Run.
	lmu          sync.Mutex
	learned      map[netip.Prefix]Learned
	learnedDirty chan struct{}
	// changed are the prefixes whose best path changed since the last
	// publish; reset: learned was cleared (under lmu).
	changed map[netip.Prefix]bool
	reset   bool

	// ipam is written by the IPAM watch goroutine and read by Run.
	imu       sync.Mutex
	ipam      *IPAMState
	ipamDirty chan struct{}

	metrics metrics

	// view is what Run last computed and published, for `node routes`
	// and `bgp why` (status socket); hist the prefixes lately lost.
	view   atomic.Pointer[explainView]
	hist   history
	kernel kernelReader
}

type metrics struct {
	sessions *prometheus.GaugeVec
	imported prometheus.Gauge
	exported prometheus.Gauge
}

// New builds the actor. updates must be a subscription to Kinds(); kv is
// the etcd client the IPAM keys are read from; sink gets the learned
// routes; rep, when not nil, gets readiness reports.
func New(cfg Config, updates Updates, kv IPAMStore, sink RouteSink, rep Reporter) *Actor {
	if cfg.ReadyThreshold == 0 {
		cfg.ReadyThreshold = DefaultReadyThreshold
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "bgp")
	a := &Actor{
		cfg: cfg, log: logger, updates: updates, kv: kv, sink: sink, rep: rep, now: time.Now,
		learned:      map[netip.Prefix]Learned{},
		changed:      map[netip.Prefix]bool{},
		learnedDirty: make(chan struct{}, 1),
		ipamDirty:    make(chan struct{}, 1),
		kernel:       netlinkKernel{},
	}
	a.book = newStatusBook(cfg.NodeName, a.now)
	a.metrics = metrics{
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "calico_bgp_sessions", Help: "Configured BGP sessions by state."}, []string{"state"}),
		imported: prometheus.NewGauge(prometheus.GaugeOpts{Name: "calico_bgp_routes_imported", Help: "Routes learned over BGP that the node wants in its kernel."}),
		exported: prometheus.NewGauge(prometheus.GaugeOpts{Name: "calico_bgp_routes_advertised", Help: "Routes this node originates."}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(a.metrics.sessions, a.metrics.imported, a.metrics.exported)
	}
	return a
}

// Status returns the current status (what the status socket serves).
func (a *Actor) Status() Status { return a.book.snapshot() }

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// datastore state, owned by Run.
type state struct {
	nodes   map[string]*calicoapi.Node
	peers   map[string]*calicoapi.BGPPeer
	configs map[string]*calicoapi.BGPConfiguration
	pools   map[string]calicoapi.Pool // parsed; a pool that does not parse is absent
	filters map[string]*calicoapi.BGPFilter
}

// apply folds confwatch updates into the state. An IPPool is parsed here,
// once per change, so that a broken one is logged once and then absent
// for export, import and blackholes alike.
func (st *state) apply(ups []confwatch.Update, log *slog.Logger) {
	for _, u := range ups {
		name, del := u.Key.Name, u.Type == confwatch.Delete
		switch o := u.Object.(type) {
		case *calicoapi.Node:
			setOrDelete(st.nodes, name, o, del)
		case *calicoapi.BGPPeer:
			setOrDelete(st.peers, name, o, del)
		case *calicoapi.BGPConfiguration:
			setOrDelete(st.configs, name, o, del)
		case *calicoapi.BGPFilter:
			setOrDelete(st.filters, name, o, del)
		case *calicoapi.IPPool:
			delete(st.pools, name)
			if del {
				continue
			}
			if p, err := calicoapi.ParsePool(o); err != nil {
				log.Warn("ignoring unusable IP pool", "err", err)
			} else {
				st.pools[name] = p
			}
		}
	}
}

func setOrDelete[T any](m map[string]*T, name string, v *T, del bool) {
	if del {
		delete(m, name)
	} else {
		m[name] = v
	}
}

// Run runs the speaker until ctx ends.
//
// Order of work: nothing is configured before both the datastore snapshot
// and the IPAM list are in; then the speaker starts, its export filter and
// originated routes are installed, and only then are sessions added, so
// that the first UPDATE a peer gets already holds everything (a restarted
// node's End-of-RIB must not make peers drop routes it is about to
// re-announce).
//
// On stop the sessions are cut without a NOTIFICATION, so that peers keep
// our routes for the graceful-restart time (see abortSessions). gobgp's
// server loop has no way to end; after Run returns it stays parked, with no
// sockets or timers, until the process exits.
func (a *Actor) Run(ctx context.Context) error {
	started := a.now()
	if a.rep != nil {
		a.rep.Report(true, false, "waiting for datastore")
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()

	confCh := a.updates.Updates(ctx)
	wg.Go(func() {
		newIPAMWatch(a.kv, a.cfg.NodeName, a.log, func(s IPAMState) {
			a.imu.Lock()
			a.ipam = &s
			a.imu.Unlock()
			kick(a.ipamDirty)
		}).Run(ctx)
	})

	a.bgp = server.NewBgpServer(server.LoggerOption(&gobgpLogger{log: a.log.With("gobgp", true), book: a.book}))
	go a.bgp.Serve() // never returns; see above
	if a.cfg.StatusSocket != "" {
		l, err := listenStatus(a.cfg.StatusSocket)
		if err != nil {
			// Status is a convenience; routing must not depend on it.
			a.log.Error("BGP status socket unavailable; `node status` will not work", "err", err)
		} else {
			wg.Go(func() { a.serveQueries(ctx, l) })
			wg.Go(func() { <-ctx.Done(); l.Close() })
		}
	}
	a.sp = newSpeaker(a.bgp, a.book, a.log)
	if err := a.bgp.WatchEvent(ctx, &api.WatchEventRequest{
		Peer:  &api.WatchEventRequest_Peer{},
		Table: &api.WatchEventRequest_Table{Filters: []*api.WatchEventRequest_Table_Filter{{Type: api.WatchEventRequest_Table_Filter_BEST}}},
	}, a.onEvent); err != nil {
		return err
	}
	defer func() {
		stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer stopCancel()
		a.sp.stop(stopCtx, true)
		a.log.Info("BGP speaker stopped")
	}()

	st := &state{
		nodes: map[string]*calicoapi.Node{}, peers: map[string]*calicoapi.BGPPeer{},
		configs: map[string]*calicoapi.BGPConfiguration{}, pools: map[string]calicoapi.Pool{},
		filters: map[string]*calicoapi.BGPFilter{},
	}
	var (
		haveConf, dirty, importDirty bool
		ipam                         *IPAMState
		backoff                      time.Duration
		retry, publishAt, exposeAt   <-chan time.Time
		lastPublish                  time.Time
		healthDue                    = true
		r                            = &reconciler{a: a}
	)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	var svcCh <-chan struct{}
	if a.cfg.Services != nil {
		svcCh = a.cfg.Services.Changed()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-svcCh:
			dirty = true
		case ups, ok := <-confCh:
			if !ok {
				return nil // ctx ended
			}
			st.apply(ups, a.log)
			haveConf, dirty = true, true
		case <-a.ipamDirty:
			a.imu.Lock()
			ipam = a.ipam
			a.imu.Unlock()
			dirty = true
		case <-a.learnedDirty:
			importDirty = true
		case <-a.book.changed:
			healthDue = true
		case <-tick.C:
			healthDue = true
			// Secrets are files nobody tells us about: re-read them now and
			// then, so that a rotated or newly mounted password takes effect.
			dirty = dirty || r.secrets
		case <-retry:
			retry = nil
		case <-publishAt:
			publishAt = nil
		case <-exposeAt:
			exposeAt = nil
			importDirty = true // the explanations' copy is due
		}
		if haveConf && ipam != nil && dirty && retry == nil {
			dirty = false
			if err := r.reconcile(ctx, st, *ipam); err != nil {
				backoff = min(max(2*backoff, 500*time.Millisecond), 30*time.Second)
				a.log.Warn("BGP configuration not fully applied; retrying", "err", err, "backoff", backoff)
				retry, dirty = time.After(backoff), true
			} else {
				backoff = 0
			}
			importDirty, healthDue = true, true
		}
		// gobgp reports best paths one destination at a time; a burst of
		// thousands must not turn into thousands of full route sets. The
		// first change after a quiet spell goes out at once.
		if importDirty && r.ready && publishAt == nil {
			interval := min(maxPublishInterval, time.Duration(len(r.last))*publishCostPerRoute)
			if wait := time.Until(lastPublish.Add(interval)); wait > 0 {
				publishAt = time.After(wait)
			} else {
				if wait := r.publish(); wait > 0 && exposeAt == nil {
					exposeAt = time.After(wait)
				}
				importDirty, lastPublish = false, time.Now()
			}
		}
		if healthDue {
			a.reportHealth(r, started)
			healthDue = false
		}
	}
}

func (a *Actor) onEvent(ev *api.WatchEventResponse) {
	if p := ev.GetPeer(); p != nil {
		if p.Type != api.WatchEventResponse_PeerEvent_STATE || p.Peer == nil || p.Peer.State == nil {
			return
		}
		addr, err := netip.ParseAddr(p.Peer.State.NeighborAddress)
		if err != nil {
			return
		}
		a.book.setState(addr.Unmap(), sessionState(p.Peer.State.SessionState))
		return
	}
	t := ev.GetTable()
	if t == nil || len(t.Paths) == 0 {
		return
	}
	a.lmu.Lock()
	changed := false
	for _, p := range t.Paths {
		l, withdrawn, local, err := decodeBest(p)
		if err != nil {
			continue
		}
		if withdrawn || local {
			if old, ok := a.learned[l.Prefix]; ok {
				delete(a.learned, l.Prefix)
				a.changed[l.Prefix] = true
				changed = true
				if withdrawn {
					// Why stays empty: reason() words it when asked, not
					// for each of a burst of withdrawals.
					a.hist.add(l.Prefix, withdrawal{At: a.now(), Peer: old.Peer, NextHop: old.NextHop})
				}
			}
			if local {
				a.hist.del(l.Prefix)
			}
			continue
		}
		a.hist.del(l.Prefix)
		if old, ok := a.learned[l.Prefix]; !ok || old != l {
			a.learned[l.Prefix] = l
			a.changed[l.Prefix] = true
			changed = true
		}
	}
	a.lmu.Unlock()
	if changed {
		kick(a.learnedDirty)
	}
}

func sessionState(s api.PeerState_SessionState) string {
	switch s {
	case api.PeerState_CONNECT:
		return StateConnect
	case api.PeerState_ACTIVE:
		return StateActive
	case api.PeerState_OPENSENT:
		return StateOpenSent
	case api.PeerState_OPENCONFIRM:
		return StateOpenConfirm
	case api.PeerState_ESTABLISHED:
		return StateEstablished
	}
	return StateIdle
}

func (a *Actor) reportHealth(r *reconciler, started time.Time) {
	st := a.book.snapshot()
	var ready bool
	var detail string
	switch {
	case !r.ready:
		detail = "waiting for datastore and IPAM"
	case !r.enabled:
		ready, detail = true, "BGP not configured on this node"
	default:
		ready, detail = Readiness(st.Peers, a.now().Sub(started), a.cfg.ReadyThreshold)
	}
	a.book.setReady(ready, detail)
	if a.rep != nil {
		a.rep.Report(true, ready, detail)
	}
	counts := map[string]int{}
	for _, p := range st.Peers {
		counts[strings.ToLower(p.BGPState)]++
	}
	a.metrics.sessions.Reset()
	for s, n := range counts {
		a.metrics.sessions.WithLabelValues(s).Set(float64(n))
	}
}

// reconciler holds what Run last computed.
type reconciler struct {
	a        *Actor
	ready    bool // a configuration has been computed
	enabled  bool // this node runs BGP
	in       RoutingInput
	adverts  []Advert
	problems map[string]bool
	// filterProblems are the BGPFilter rules last found unusable.
	filterProblems map[string]bool
	last           []routes.Route
	// What the last full publish was computed from, kept so that a
	// change of best paths is published as a change: the importer (of
	// in and adverts), the imported routes by prefix and the blackholes.
	// full: the configuration changed since, so the next publish is full.
	imp     importer
	cur     map[netip.Prefix]routes.Route
	holes   []routes.Route
	isHole  map[netip.Prefix]bool
	full    bool
	stale   bool      // last lags cur
	exposed time.Time // when last was last copied from cur
	secrets bool      // some session has a password (or a missing one)
	view    explainView
}

func (r *reconciler) reconcile(ctx context.Context, st *state, ipam IPAMState) error {
	a := r.a
	defer a.reportAdvertised()
	d := Compute(Snapshot{NodeName: a.cfg.NodeName, Nodes: st.nodes, Peers: st.peers, BGPConfigs: st.configs, Secrets: a.cfg.Secrets})
	probs := map[string]bool{}
	for _, p := range d.Problems {
		probs[p] = true
		if !r.problems[p] {
			a.log.Warn("BGP configuration problem", "problem", p)
		}
	}
	r.problems = probs
	r.ready = true
	r.full = true // in and adverts may change
	if !d.OK {
		if r.enabled || !a.sp.running {
			a.log.Info("this node has no BGP address (Node spec.bgp); BGP is off")
		}
		r.enabled = false
		a.sp.stop(ctx, false)
		a.book.setIdentity(false, Identity{})
		a.book.setPeers(nil)
		r.in, r.adverts = RoutingInput{}, nil
		a.clearLearned()
		r.expose(explainView{})
		return nil
	}
	r.enabled = true
	r.secrets = false
	for _, s := range d.Sessions {
		if s.Password != "" || s.PasswordError != "" {
			r.secrets = true
		}
	}
	pools := make([]calicoapi.Pool, 0, len(st.pools))
	for _, p := range st.pools {
		pools = append(pools, p)
	}
	r.in = RoutingInput{
		Identity: d.Identity, Pools: pools,
		Global: st.configs["default"], NodeConfig: st.configs["node."+a.cfg.NodeName],
		IPAM: ipam,
	}
	if a.cfg.Services != nil {
		if g := r.in.Global; g != nil &&
			len(g.Spec.ServiceClusterIPs)+len(g.Spec.ServiceExternalIPs)+len(g.Spec.ServiceLoadBalancerIPs) > 0 {
			a.cfg.Services.Enable()
		}
		r.in.Services, _ = a.cfg.Services.Services()
	}
	g := globalConf{routerID: d.Identity.RouterID, as: d.Identity.AS, port: d.Identity.Port()}
	if a.cfg.ListenPort != 0 {
		g.port = uint16(a.cfg.ListenPort)
	}
	if d.Identity.ListenOnNodeIP {
		var ls []string
		for _, ip := range []netip.Addr{d.Identity.IPv4, d.Identity.IPv6} {
			if ip.IsValid() {
				ls = append(ls, ip.String())
			}
		}
		g.listen = strings.Join(ls, ",")
	}
	restarted, err := a.sp.ensureGlobal(ctx, g)
	if err != nil {
		return err
	}
	if restarted {
		a.clearLearned()
	}
	a.book.setIdentity(true, d.Identity)
	prev := r.adverts
	r.adverts = Adverts(r.in)
	r.noteWithdrawn(prev)
	a.metrics.exported.Set(float64(len(r.adverts)))
	var errs []error
	f := Filter(r.in, d.Sessions, d.PeerFilters, st.filters)
	fprobs := map[string]bool{}
	for _, p := range f.Problems {
		if !r.filterProblems[p] {
			a.log.Warn("BGP configuration problem", "problem", p)
		}
		fprobs[p] = true
	}
	r.filterProblems = fprobs
	errs = append(errs, a.sp.syncFilter(ctx, f))
	errs = append(errs, a.sp.syncPaths(ctx, r.adverts))
	errs = append(errs, a.sp.syncPeers(ctx, d.Sessions))
	r.expose(explainView{Enabled: true, In: r.in, Adverts: r.adverts, Filter: f, Sessions: d.Sessions})
	return errors.Join(errs...)
}

// reportAdvertised tells cfg.Advertised what the speaker originates.
func (a *Actor) reportAdvertised() {
	if a.cfg.Advertised == nil {
		return
	}
	out := []netip.Prefix{}
	if a.sp.running {
		for p := range a.sp.paths {
			out = append(out, p)
		}
	}
	a.cfg.Advertised(out)
}

// expose publishes v (with the routes last handed to the sink) for the
// status socket's explanations.
func (r *reconciler) expose(v explainView) {
	r.view = v
	v.Published = r.last
	r.a.view.Store(&v)
}

// noteWithdrawn records the prefixes this node stopped originating, with
// the reason adverts gives, for `bgp why`.
func (r *reconciler) noteWithdrawn(prev []Advert) {
	now := make(map[netip.Prefix]bool, len(r.adverts))
	for _, ad := range r.adverts {
		now[ad.Prefix] = true
		r.a.hist.del(ad.Prefix)
	}
	var gone []Advert
	for _, ad := range prev {
		if !now[ad.Prefix] {
			gone = append(gone, ad)
		}
	}
	if len(gone) == 0 {
		return
	}
	why := map[netip.Prefix]string{}
	adverts(r.in, func(p netip.Prefix, w string) { why[p.Masked()] = w })
	for _, ad := range gone {
		w := "this node stopped originating it (it was: " + ad.Why + ")"
		if s, ok := why[ad.Prefix]; ok {
			w = "this node stopped originating it: " + s
		}
		r.a.hist.add(ad.Prefix, withdrawal{At: r.a.now(), NextHop: ad.NextHop, Why: w})
	}
}

func (a *Actor) clearLearned() {
	a.lmu.Lock()
	clear(a.learned)
	clear(a.changed)
	a.reset = true
	a.lmu.Unlock()
	kick(a.learnedDirty)
}

// publish hands the kernel routes to the sink when they changed: after a
// configuration change (or to a sink that only takes whole sets) the
// whole set, otherwise the routes of the prefixes whose best path changed.
// It returns when to call it again for the explanations' copy, which it
// put off; 0: not needed.
func (r *reconciler) publish() time.Duration {
	a := r.a
	up, canUpdate := a.sink.(routeUpdater)
	a.lmu.Lock()
	changed, reset := a.changed, a.reset
	a.changed, a.reset = map[netip.Prefix]bool{}, false
	full := r.full || reset || !canUpdate || !r.enabled || r.last == nil
	for p := range changed {
		if full {
			break
		}
		full = r.isHole[p] // a blackhole and a learned route to one prefix: let the full set decide
	}
	if full {
		learned := make([]Learned, 0, len(a.learned))
		for _, l := range a.learned {
			learned = append(learned, l)
		}
		a.lmu.Unlock()
		r.publishAll(learned)
		return 0
	}
	type change struct {
		p     netip.Prefix
		l     Learned
		known bool // false: withdrawn
	}
	changes := make([]change, 0, len(changed))
	for p := range changed {
		l, ok := a.learned[p]
		changes = append(changes, change{p, l, ok})
	}
	a.lmu.Unlock()
	var set, del []routes.Route
	for _, c := range changes {
		nr, ok := routes.Route{}, false
		if c.known {
			var why string
			nr, why = r.imp.route(c.l)
			ok = why == ""
		}
		old, had := r.cur[c.p]
		switch {
		case ok && (!had || old != nr):
			r.cur[c.p] = nr
			set = append(set, nr)
		case !ok && had:
			delete(r.cur, c.p)
			del = append(del, old)
		}
	}
	if len(set)+len(del) > 0 {
		up.Update(routes.SourceBGP, set, del)
		a.metrics.imported.Set(float64(len(r.cur)))
		r.stale = true
	}
	a.lmu.Lock()
	more := len(a.changed) > 0
	a.lmu.Unlock()
	if !r.stale || more {
		// Copying 10,000 routes for every change of a burst would cost
		// more than the changes: the explanations catch up when it ends
		// (more changes mean another publish is due).
		return 0
	}
	// Nor for every batch of one: gobgp's events come in spurts, and
	// between two a batch finds nothing more to do.
	now := time.Now()
	if wait := r.exposed.Add(min(maxPublishInterval, time.Duration(len(r.cur))*exposeCostPerRoute)).Sub(now); wait > 0 {
		return wait
	}
	r.stale, r.exposed = false, now
	// The explanations' copy: in no particular order (they look routes
	// up), and a new slice, since the status socket may be reading the old.
	last := make([]routes.Route, 0, len(r.cur)+len(r.holes))
	for _, rt := range r.cur {
		last = append(last, rt)
	}
	r.last = append(last, r.holes...)
	r.expose(r.view)
	return 0
}

// publishAll computes the whole set from learned and hands it over.
func (r *reconciler) publishAll(learned []Learned) {
	a := r.a
	r.full, r.stale = false, false
	r.imp = newImporter(r.in, r.adverts)
	r.cur, r.holes, r.isHole = map[netip.Prefix]routes.Route{}, nil, map[netip.Prefix]bool{}
	var want []routes.Route
	if r.enabled {
		want = KernelRoutes(learned, r.in, r.adverts)
		for _, rt := range want {
			r.cur[rt.Dst] = rt
		}
		a.metrics.imported.Set(float64(len(want)))
		r.holes = Blackholes(r.in)
		for _, rt := range r.holes {
			r.isHole[rt.Dst] = true
		}
		want = append(want, r.holes...)
		slices.SortFunc(want, func(x, y routes.Route) int { return comparePrefix(x.Dst, y.Dst) })
	}
	if r.last != nil && slices.Equal(r.last, want) {
		return
	}
	r.last = want
	if r.last == nil {
		r.last = []routes.Route{}
	}
	a.sink.Set(routes.SourceBGP, want)
	r.expose(r.view)
}
