package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/kube"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Controller names, as ENABLED_CONTROLLERS spells them.
const (
	Namespace        = "namespace"
	ServiceAccount   = "serviceaccount"
	WorkloadEndpoint = "workloadendpoint"
	Policy           = "policy"
	Node             = "node"
	IPAMGC           = "ipamgc"
	LoadBalancer     = "loadbalancer"
)

// All is every controller, in the order they start.
var All = []string{Namespace, ServiceAccount, WorkloadEndpoint, Policy, Node, IPAMGC, LoadBalancer}

// aliases are other spellings Calico's ENABLED_CONTROLLERS accepts.
var aliases = map[string]string{"profile": Namespace, "pod": WorkloadEndpoint}

// computedOnKDD are the controllers with nothing to do on the Kubernetes
// datastore, and why: what they write is computed there from the
// Kubernetes objects themselves (and the datastore refuses writes of it).
var computedOnKDD = map[string]string{
	Namespace:        "namespace profiles (kns.*) are computed from Namespaces",
	ServiceAccount:   "service account profiles (ksa.*) are computed from ServiceAccounts",
	WorkloadEndpoint: "workload endpoints, their labels included, are computed from Pods",
	Policy:           "Kubernetes NetworkPolicies are read directly as knp.default.* policies",
}

// ForDatastore splits enabled into the controllers that run on a datastore
// of the given type (datastore.TypeEtcd or TypeKubernetes) and those that
// do not apply to it, with the reason for each: on the Kubernetes
// datastore only node, ipamgc and loadbalancer have work, as in Calico,
// whose KDD manifests enable node and loadbalancer.
func ForDatastore(enabled []string, datastoreType string) (run []string, skipped map[string]string) {
	if datastoreType != datastore.TypeKubernetes {
		return enabled, nil
	}
	for _, name := range enabled {
		if why, ok := computedOnKDD[name]; ok {
			if skipped == nil {
				skipped = map[string]string{}
			}
			skipped[name] = why
			continue
		}
		run = append(run, name)
	}
	return run, skipped
}

// ParseEnabled reads a comma-separated controller list ("" = none).
func ParseEnabled(s string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			continue
		}
		if a, ok := aliases[name]; ok {
			name = a
		}
		if !slices.Contains(All, name) {
			return nil, fmt.Errorf("unknown controller %q (known: %s)", name, strings.Join(All, ", "))
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// Defaults.
const (
	DefaultLeaseNamespace = "kube-system"
	DefaultLeaseName      = "calico-kube-controllers"
	DefaultLeaseDuration  = 15 * time.Second
	DefaultRenewDeadline  = 10 * time.Second
	DefaultRetryPeriod    = 2 * time.Second
	// DefaultResync is Calico's reconcilerPeriod.
	DefaultResync = 5 * time.Minute
	// DefaultNodeCleanupRetry is how soon a deleted node whose pods are
	// still in the API is looked at again.
	DefaultNodeCleanupRetry = 30 * time.Second
	// maxRetries bounds the backoff retries of one key; the next full
	// reconcile tries again.
	maxRetries = 10
)

// Config configures the controllers.
type Config struct {
	// Enabled names the controllers to run (see ParseEnabled).
	Enabled []string
	// LeaseNamespace/LeaseName locate the coordination.k8s.io Lease;
	// Identity is this instance's name in it (default: hostname).
	LeaseNamespace, LeaseName, Identity       string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Resync is the informers' resync period and the period of the full
	// reconcile against the datastore.
	Resync time.Duration
	// GCInterval is how often IPAM GC looks for leaks; 0 = half the leak
	// grace period, within [1s, 5m].
	GCInterval time.Duration
	// NodeCleanupRetry: see DefaultNodeCleanupRetry.
	NodeCleanupRetry time.Duration
	// Datastore is the store's type, datastore.TypeEtcd ("" = etcd) or
	// datastore.TypeKubernetes. (Given here, not asked of the store,
	// because the store may be a connection still being made.)
	Datastore string
	Logger    *slog.Logger
	// LogLevelFixed: the user fixed calico-node's log level (flag or
	// environment), and the controllers keep the level of Logger. Otherwise
	// they log at KubeControllersConfiguration's logSeverityScreen, as
	// Calico's kube-controllers process does.
	LogLevelFixed bool
	// Registerer receives the controllers' metrics; nil = none.
	Registerer prometheus.Registerer
}

// Store is the Calico datastore as the controllers use it;
// datastore.Store implements it.
type Store interface {
	Get(ctx context.Context, kind, namespace, name string) (api.Object, error)
	List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error)
	Create(ctx context.Context, obj api.Object) (api.Object, error)
	Update(ctx context.Context, obj api.Object) (api.Object, error)
	Delete(ctx context.Context, kind, namespace, name, resourceVersion string) (api.Object, error)
	Watch(ctx context.Context, kind string, fromRevision int64) <-chan datastore.Event
}

// IPAM is the part of *ipam.Client the node, ipamgc and loadbalancer
// controllers use.
type IPAM interface {
	Check(ctx context.Context, liveNodes ...string) (*ipam.CheckReport, error)
	Release(ctx context.Context, opts ...ipam.ReleaseOptions) ([]netip.Addr, error)
	ReleaseHostAffinities(ctx context.Context, node string, mustBeEmpty bool) ([]netip.Prefix, error)
	AutoAssign(ctx context.Context, args ipam.AutoAssignArgs) (v4, v6 []netip.Prefix, err error)
	AssignIP(ctx context.Context, args ipam.AssignIPArgs) error
	IPsByHandle(ctx context.Context, handleID string) ([]netip.Addr, error)
	ReleaseByHandle(ctx context.Context, handleID string) error
	LoadBalancerAllocations(ctx context.Context) ([]ipam.VirtualAllocation, error)
}

// Controllers is the leader-elected controllers actor.
type Controllers struct {
	cfg     Config
	kube    *kube.Client
	elector *kube.Elector
	store   Store
	ipam    IPAM
	// kdd: the store is the Kubernetes datastore, where Calico Nodes are
	// the Kubernetes Nodes themselves.
	kdd bool
	log *slog.Logger
	// level follows logSeverityScreen; nil with Config.LogLevelFixed.
	level   *slog.LevelVar
	metrics *metrics
}

type metrics struct {
	leader       prometheus.Gauge
	ipam         *ipamMetrics
	nodesRemoved prometheus.Counter
	syncFailures *prometheus.CounterVec
}

// New checks cfg and builds the actor on the Kubernetes API client k. On
// the Kubernetes datastore the controllers that do not apply there (see
// ForDatastore) are left out, each with a warning, and the rest run.
func New(cfg Config, k *kube.Client, store Store, ipamc IPAM) (*Controllers, error) {
	for _, n := range cfg.Enabled {
		if !slices.Contains(All, n) {
			return nil, fmt.Errorf("unknown controller %q", n)
		}
	}
	if cfg.LeaseNamespace == "" {
		cfg.LeaseNamespace = DefaultLeaseNamespace
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = DefaultLeaseName
	}
	if cfg.Identity == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("leader election identity: %w", err)
		}
		cfg.Identity = h
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.NodeCleanupRetry == 0 {
		cfg.NodeCleanupRetry = DefaultNodeCleanupRetry
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var level *slog.LevelVar
	if !cfg.LogLevelFixed {
		level = new(slog.LevelVar) // Info until the configuration is read
		cfg.Logger = slog.New(levelHandler{h: cfg.Logger.Handler(), level: level})
	}
	log := cfg.Logger.With("component", "kube-controllers")
	kdd := cfg.Datastore == datastore.TypeKubernetes
	if kdd {
		run, skipped := ForDatastore(cfg.Enabled, datastore.TypeKubernetes)
		for _, name := range cfg.Enabled {
			if why, ok := skipped[name]; ok {
				log.Warn("controller does not apply to the Kubernetes datastore; not starting it",
					"controller", name, "reason", why)
			}
		}
		cfg.Enabled = run
	}
	m := &metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "calico_kube_controllers_leader", Help: "1 while this instance holds the controllers' lease."}),
		ipam:   newIPAMMetrics(),
		nodesRemoved: prometheus.NewCounter(prometheus.CounterOpts{Name: "calico_kube_controllers_nodes_removed_total",
			Help: "Calico nodes removed because their Kubernetes node was deleted."}),
		syncFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "calico_kube_controllers_sync_failures_total",
			Help: "Failed attempts to sync one object, per controller."}, []string{"controller"}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(m.leader, m.nodesRemoved, m.syncFailures)
		cfg.Registerer.MustRegister(m.ipam.collectors()...)
	}
	c := &Controllers{cfg: cfg, kube: k, store: store, ipam: ipamc, kdd: kdd, log: log, level: level, metrics: m}
	if len(cfg.Enabled) == 0 {
		return c, nil
	}
	if k == nil {
		return nil, errors.New("controllers enabled without a Kubernetes API client")
	}
	el, err := kube.NewElector(kube.ElectionConfig{
		Name:          cfg.LeaseName,
		Identity:      cfg.Identity,
		LeaseDuration: cfg.LeaseDuration,
		RenewDeadline: cfg.RenewDeadline,
		RetryPeriod:   cfg.RetryPeriod,
		Logger:        c.log,
		OnNewLeader: func(id string) {
			// "" is a released lease: nobody leads until the next attempt.
			if id != "" && id != cfg.Identity {
				c.log.Info("controllers are led by another instance", "leader", id)
			}
		},
	}, k.Leases(cfg.LeaseNamespace))
	if err != nil {
		return nil, err
	}
	c.elector = el
	return c, nil
}

// Run takes part in leader election until ctx ends, running the enabled
// controllers whenever this instance leads.
func (c *Controllers) Run(ctx context.Context) error {
	if len(c.cfg.Enabled) == 0 {
		<-ctx.Done()
		return nil
	}
	c.log.Info("kube-controllers standing for election", "controllers", c.cfg.Enabled,
		"lease", c.cfg.LeaseNamespace+"/"+c.cfg.LeaseName, "identity", c.cfg.Identity)
	for {
		// One term: the elector stops the controllers when the lease is
		// lost or ctx ends, and releases the lease only after they have
		// stopped, so two leaders never write at once.
		c.elector.Lead(ctx, func(ctx context.Context) {
			c.metrics.leader.Set(1)
			defer c.metrics.leader.Set(0)
			c.log.Info("acquired the controllers' lease; starting controllers")
			c.lead(ctx)
			c.log.Info("controllers stopped")
		})
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("lost the controllers' lease; standing by")
	}
}

// runner is one controller of a leadership term.
type runner interface {
	run(ctx context.Context)
}

// lead runs the enabled controllers until ctx ends, configured by
// KubeControllersConfiguration "default", which it follows for the term.
func (c *Controllers) lead(ctx context.Context) {
	src := newKCCSource(c.store, c.kdd, c.level, c.log)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { src.run(ctx) })
	if !src.waitReady(ctx) {
		return
	}
	factory := newInformers(c.kube, c.cfg.Resync)
	var runners []runner
	for _, name := range c.cfg.Enabled {
		log := c.log.With("controller", name)
		var r runner
		var err error
		switch name {
		case Namespace:
			r, err = newNamespaceController(c, factory, src, log)
		case ServiceAccount:
			r, err = newServiceAccountController(c, factory, src, log)
		case WorkloadEndpoint:
			r, err = newWorkloadEndpointController(c, factory, src, log)
		case Policy:
			r, err = newPolicyController(c, factory, src, log)
		case Node:
			r, err = newNodeController(c, factory, src, log)
			if err == nil {
				// Automatic host endpoints are the node controller's,
				// as in Calico.
				runners = append(runners, newAutoHEPController(c, src, c.log.With("controller", "hostendpoint")))
			}
		case IPAMGC:
			r, err = newIPAMGC(c, factory, log)
		case LoadBalancer:
			r, err = newLoadBalancerController(c, factory, src, log)
		}
		if err != nil {
			c.log.Error("cannot start controller", "controller", name, "err", err)
			continue
		}
		runners = append(runners, r)
	}
	runners = append(runners, &profiler{src: src, log: c.log.With("controller", "profiler")})
	if ec, ok := c.store.(EtcdClienter); ok && !c.kdd {
		if client := ec.Etcd(); client != nil {
			runners = append(runners, &compactor{client: client, src: src, log: c.log.With("controller", "compaction")})
		}
	}
	factory.start(ctx)
	defer factory.wait()
	if !factory.synced(ctx, c.log) {
		return
	}
	for _, r := range runners {
		wg.Go(func() { r.run(ctx) })
	}
}

// queue is the work queue of one controller with its worker and full
// reconcile loop.
type queue struct {
	name string
	q    workqueue.TypedRateLimitingInterface[string]
	sync func(ctx context.Context, key string) error
	keys func(ctx context.Context) ([]string, error)
	// period is the full-reconcile period in effect (0: none after the
	// first) and a channel closed when it may have changed.
	period func() (time.Duration, <-chan struct{})
	// reconcileOnChange: a configuration change brings the next full
	// reconcile forward to now (the node controller's syncLabels).
	reconcileOnChange bool
	log               *slog.Logger
	fails             prometheus.Counter
}

// retryAfter asks for a key to be looked at again after d, without
// counting as a failure (e.g. a deleted node whose pods are still there).
type retryAfter time.Duration

func (r retryAfter) Error() string { return fmt.Sprintf("retry after %s", time.Duration(r)) }

// newQueue makes a controller's queue; src, when set, gives its
// full-reconcile period (reconcilerPeriod), else it is Config.Resync.
func (c *Controllers) newQueue(name string, log *slog.Logger, src *kccSource, sync func(context.Context, string) error, keys func(context.Context) ([]string, error)) *queue {
	period := func() (time.Duration, <-chan struct{}) { return c.cfg.Resync, nil }
	if src != nil && slices.Contains(reconciled, name) {
		period = func() (time.Duration, <-chan struct{}) {
			rc, changed := src.current()
			return rc.reconcile[name], changed
		}
	}
	return &queue{
		name: name,
		q: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name}),
		sync:   sync,
		keys:   keys,
		period: period,
		log:    log,
		fails:  c.metrics.syncFailures.WithLabelValues(name),
	}
}

func (q *queue) add(key string) { q.q.Add(key) }

// handler enqueues the namespace/name key of every event.
func (q *queue) handler() cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			q.add(key)
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		// The initial list is covered by the full reconcile.
		AddFunc: func(obj any, initial bool) {
			if !initial {
				enqueue(obj)
			}
		},
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}
}

// run reconciles everything, then processes the queue, reconciling
// everything again every full-reconcile period.
func (q *queue) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		for q.next(ctx) {
		}
	})
	defer func() {
		q.q.ShutDown()
		wg.Wait()
	}()
	var last time.Time // of the last full reconcile; zero: due now
	var backoff time.Duration
	for {
		period, changed := q.period()
		var due <-chan time.Time
		switch {
		case backoff > 0:
			due = time.After(backoff)
		case last.IsZero():
			due = time.After(0)
		case period > 0:
			due = time.After(time.Until(last.Add(period)))
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			if q.reconcileOnChange {
				last = time.Time{}
			}
			continue // the period may have changed: wait anew
		case <-due:
		}
		keys, err := q.keys(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// Retry soon: the datastore may be coming up.
			backoff = min(max(2*backoff, time.Second), max(period, time.Second), DefaultReconcilerPeriod)
			q.log.Warn("full reconcile failed, will retry", "err", err, "in", backoff)
			continue
		}
		backoff, last = 0, time.Now()
		for _, k := range keys {
			q.add(k)
		}
	}
}

// next processes one key; false once the queue is shut down.
func (q *queue) next(ctx context.Context) bool {
	key, quit := q.q.Get()
	if quit {
		return false
	}
	defer q.q.Done(key)
	err := q.sync(ctx, key)
	var after retryAfter
	switch {
	case err == nil:
		q.q.Forget(key)
	case errors.As(err, &after):
		q.q.Forget(key)
		q.q.AddAfter(key, time.Duration(after))
	case ctx.Err() != nil:
		q.q.Forget(key)
	case q.q.NumRequeues(key) < maxRetries:
		q.fails.Inc()
		q.log.Warn("sync failed, will retry", "key", key, "err", err)
		q.q.AddRateLimited(key)
	default:
		q.fails.Inc()
		q.log.Error("sync failed repeatedly; leaving it to the next full reconcile", "key", key, "err", err)
		q.q.Forget(key)
	}
	return true
}

// splitKey splits "namespace/name".
func splitKey(key string) (namespace, name string) {
	ns, n, ok := strings.Cut(key, "/")
	if !ok {
		return "", key
	}
	return ns, n
}
