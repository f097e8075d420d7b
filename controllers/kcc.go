package controllers

import (
	"context"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Defaults of KubeControllersConfiguration, as Calico v3.31's
// kube-controllers fills them in (config.NewDefaultKubeControllersConfig).
const (
	DefaultReconcilerPeriod = 5 * time.Minute
	DefaultCompactionPeriod = 10 * time.Minute
)

// reconciled are the controllers whose full-reconcile period is
// spec.controllers.<name>.reconcilerPeriod.
var reconciled = []string{Namespace, ServiceAccount, WorkloadEndpoint, Policy}

// runConfig is what the controllers take from KubeControllersConfiguration
// "default" (Calico's mergeConfig with ENABLED_CONTROLLERS set, which is
// how its manifests run it: the environment names the controllers, the
// resource configures them).
type runConfig struct {
	// logLevel is logSeverityScreen (Info when unset).
	logLevel slog.Level
	// syncLabels: node.syncLabels is not Disabled, on etcd (on the
	// Kubernetes datastore the Calico Node shows the Kubernetes labels).
	syncLabels bool
	hep        hepConfig
	// reconcile is each reconciled controller's full-reconcile period:
	// its reconcilerPeriod, 5m when unset, 0 (none) when the resource has
	// no entry for the controller, as Calico's merge leaves it.
	reconcile map[string]time.Duration
	// compaction is etcdV3CompactionPeriod (10m when unset; 0 disables).
	compaction time.Duration
	// leakGrace is node.leakGracePeriod (15m when unset; 0 disables IPAM
	// garbage collection).
	leakGrace time.Duration
	// profilePort is debugProfilePort (0: no profiling server).
	profilePort int32
	// assignIPs is loadBalancer.assignIPs: AllServices (also when unset)
	// or RequestedServicesOnly.
	assignIPs api.AssignIPs
	// ignored are the settings calico-node does not honour that the
	// resource sets, as "field: reason".
	ignored []string
}

// hepConfig is node.hostEndpoint.
type hepConfig struct {
	autoCreate    bool
	createDefault bool
	templates     []api.Template
}

// defaultRunConfig is the configuration of Calico's default resource,
// which kube-controllers creates when there is none.
func defaultRunConfig(kdd bool) runConfig {
	rc := runConfig{logLevel: slog.LevelInfo, syncLabels: !kdd, hep: hepConfig{createDefault: true},
		reconcile: map[string]time.Duration{}, compaction: DefaultCompactionPeriod, leakGrace: DefaultLeakGracePeriod,
		assignIPs: api.AllServices}
	for _, n := range reconciled {
		rc.reconcile[n] = DefaultReconcilerPeriod
	}
	return rc
}

// runConfigFrom merges spec (nil: no resource) as Calico v3.31's
// kube-controllers does, for the datastore kind kdd.
func runConfigFrom(spec *api.KubeControllersConfigurationSpec, kdd bool) runConfig {
	rc := defaultRunConfig(kdd)
	if spec == nil {
		return rc
	}
	rc.logLevel = parseLevel(spec.LogSeverityScreen)
	if spec.EtcdV3CompactionPeriod != nil {
		rc.compaction = max(spec.EtcdV3CompactionPeriod.Duration, 0)
	}
	c := spec.Controllers
	periods := map[string]*api.Duration{}
	present := map[string]bool{}
	if c.Namespace != nil {
		periods[Namespace], present[Namespace] = c.Namespace.ReconcilerPeriod, true
	}
	if c.ServiceAccount != nil {
		periods[ServiceAccount], present[ServiceAccount] = c.ServiceAccount.ReconcilerPeriod, true
	}
	if c.WorkloadEndpoint != nil {
		periods[WorkloadEndpoint], present[WorkloadEndpoint] = c.WorkloadEndpoint.ReconcilerPeriod, true
	}
	if c.Policy != nil {
		periods[Policy], present[Policy] = c.Policy.ReconcilerPeriod, true
	}
	for _, n := range reconciled {
		switch {
		case !present[n]:
			rc.reconcile[n] = 0
		case periods[n] != nil:
			rc.reconcile[n] = max(periods[n].Duration, 0)
		}
	}
	if n := c.Node; n != nil {
		if n.SyncLabels == "Disabled" {
			rc.syncLabels = false
		}
		if h := n.HostEndpoint; h != nil {
			rc.hep = hepConfig{autoCreate: h.AutoCreate == "Enabled",
				createDefault: h.CreateDefaultHostEndpoint != api.DefaultHostEndpointsDisabled,
				templates:     h.Templates}
		}
		if n.LeakGracePeriod != nil {
			rc.leakGrace = max(n.LeakGracePeriod.Duration, 0)
		}
	}

	if spec.HealthChecks == "Disabled" {
		rc.ignored = append(rc.ignored, "healthChecks: Disabled: calico-node's own /liveness and /readiness cover the controllers")
	}
	if p := spec.DebugProfilePort; p != nil && *p > 0 && *p <= 65535 {
		rc.profilePort = *p
	}
	// As Calico's mergeLoadBalancer: the resource's mode when it has the
	// section, AllServices otherwise (and for a value validation would
	// refuse).
	if lb := c.LoadBalancer; lb != nil && lb.AssignIPs == api.RequestedServicesOnly {
		rc.assignIPs = api.RequestedServicesOnly
	}
	return rc
}

// describe is the configuration for the log.
func (rc runConfig) describe() []any {
	var periods []string
	for _, n := range reconciled {
		periods = append(periods, n+"="+rc.reconcile[n].String())
	}
	return []any{"logSeverityScreen", rc.logLevel.String(), "syncLabels", rc.syncLabels,
		"autoHostEndpoints", rc.hep.autoCreate, "defaultHostEndpoint", rc.hep.createDefault, "hostEndpointTemplates", len(rc.hep.templates),
		"reconcilerPeriods", strings.Join(periods, ","), "etcdV3CompactionPeriod", rc.compaction, "leakGracePeriod", rc.leakGrace,
		"loadBalancerAssignIPs", string(rc.assignIPs), "debugProfilePort", rc.profilePort}
}

// kccSource follows KubeControllersConfiguration "default" for one
// leadership term and hands its runConfig to the controllers.
//
// Thread safety: run owns the watch; current and changed may be called
// from any goroutine.
type kccSource struct {
	store Store
	kdd   bool
	log   *slog.Logger
	// level, when set, follows logSeverityScreen (nil: the level was
	// fixed by flag or environment).
	level *slog.LevelVar

	mu      sync.Mutex
	cur     runConfig
	have    bool
	changes chan struct{} // closed at the next change
	ready   chan struct{} // closed once the first configuration is known
}

func newKCCSource(store Store, kdd bool, level *slog.LevelVar, log *slog.Logger) *kccSource {
	return &kccSource{store: store, kdd: kdd, level: level, log: log, cur: defaultRunConfig(kdd),
		changes: make(chan struct{}), ready: make(chan struct{})}
}

// current is the configuration in effect and a channel closed when it
// changes.
func (s *kccSource) current() (runConfig, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, s.changes
}

// run lists and then watches the resource until ctx ends; a failed list
// is retried.
func (s *kccSource) run(ctx context.Context) {
	var spec *api.KubeControllersConfigurationSpec
	pick := func(objs []api.Object) {
		spec = nil
		for _, o := range objs {
			if k, ok := o.(*api.KubeControllersConfiguration); ok && k.Name == "default" {
				spec = &k.Spec
			}
		}
	}
	var rev int64
	for wait := time.Duration(0); ; wait = min(max(2*wait, time.Second), 30*time.Second) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		objs, r, err := s.store.List(ctx, "KubeControllersConfiguration", "")
		if err == nil {
			pick(objs)
			rev = r
			break
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("cannot read KubeControllersConfiguration; retrying", "err", err)
	}
	s.set(runConfigFrom(spec, s.kdd))
	for ev := range s.store.Watch(ctx, "KubeControllersConfiguration", rev+1) {
		switch ev.Type {
		case datastore.Reset:
			pick(ev.Objects)
		case datastore.Added, datastore.Modified:
			if k, ok := ev.Object.(*api.KubeControllersConfiguration); ok && k.Name == "default" {
				spec = &k.Spec
			}
		case datastore.Deleted:
			if ev.Object != nil && ev.Object.Meta().Name == "default" {
				spec = nil
			}
		default:
			continue
		}
		s.set(runConfigFrom(spec, s.kdd))
	}
}

func (s *kccSource) set(rc runConfig) {
	s.mu.Lock()
	old, had := s.cur, s.have
	s.cur, s.have = rc, true
	if had && equalRunConfig(old, rc) {
		s.mu.Unlock()
		return
	}
	close(s.changes)
	s.changes = make(chan struct{})
	if !had {
		close(s.ready)
	}
	s.mu.Unlock()

	if s.level != nil {
		s.level.Set(rc.logLevel)
	} else if rc.logLevel != slog.LevelInfo {
		s.log.Info("KubeControllersConfiguration logSeverityScreen ignored: the log level was fixed by flag or environment",
			"logSeverityScreen", rc.logLevel.String())
	}
	s.log.Info("KubeControllersConfiguration in effect", rc.describe()...)
	if !had || !slices.Equal(old.ignored, rc.ignored) {
		for _, i := range rc.ignored {
			s.log.Warn("KubeControllersConfiguration setting not honoured by calico-node", "setting", i)
		}
	}
}

// waitReady waits for the first configuration; false if ctx ended first.
func (s *kccSource) waitReady(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-s.ready:
		return true
	}
}

func equalRunConfig(a, b runConfig) bool {
	return a.logLevel == b.logLevel && a.syncLabels == b.syncLabels && a.compaction == b.compaction && a.assignIPs == b.assignIPs &&
		a.profilePort == b.profilePort &&
		a.leakGrace == b.leakGrace && equalHEPConfig(a.hep, b.hep) &&
		maps.Equal(a.reconcile, b.reconcile) && slices.Equal(a.ignored, b.ignored)
}

func equalHEPConfig(a, b hepConfig) bool {
	return a.autoCreate == b.autoCreate && a.createDefault == b.createDefault && reflect.DeepEqual(a.templates, b.templates)
}

// parseLevel maps logSeverityScreen to slog's levels (slog has no Trace,
// Fatal or Panic; nothing here exits on a log call). What does not parse
// is Info, as Calico falls back to.
func parseLevel(s string) slog.Level {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "trace", "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error", "fatal", "panic":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// levelHandler passes on the records at or above its own level, whatever
// the level of the handler it wraps: the controllers log at
// logSeverityScreen, as Calico's kube-controllers process does, while
// the rest of calico-node follows FelixConfiguration's.
type levelHandler struct {
	h     slog.Handler
	level slog.Leveler
}

func (l levelHandler) Enabled(_ context.Context, lv slog.Level) bool { return lv >= l.level.Level() }

func (l levelHandler) Handle(ctx context.Context, r slog.Record) error { return l.h.Handle(ctx, r) }

func (l levelHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return levelHandler{h: l.h.WithAttrs(as), level: l.level}
}

func (l levelHandler) WithGroup(name string) slog.Handler {
	return levelHandler{h: l.h.WithGroup(name), level: l.level}
}
