package agent

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/projectcalico/calico-node/agent/felixenv"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// DefaultRefreshInterval is Felix's default routeRefreshInterval and
// iptablesRefreshInterval.
const DefaultRefreshInterval = 90 * time.Second

// FelixSpec is the FelixConfiguration in effect on node, merged field by
// field as Felix does: FelixConfiguration "default", then
// "node.<node>", then env (the FELIX_* environment; may be nil). objs is
// an actor's cache of confwatch updates; other kinds in it are ignored.
func FelixSpec(objs map[confwatch.Key]api.Object, node string, env *api.FelixConfigurationSpec) api.FelixConfigurationSpec {
	return felixenv.ForNode(node, func(name string) *api.FelixConfiguration {
		c, _ := objs[confwatch.Key{Kind: "FelixConfiguration", Name: name}].(*api.FelixConfiguration)
		return c
	}, env)
}

// RouteRefreshInterval is how often routes and host veths are re-read and
// repaired: routeRefreshInterval, DefaultRefreshInterval when unset, and
// 0 (no periodic refresh) when set to 0, as in Felix. A negative value is
// nonsense and keeps the default rather than silently turning repairs off.
func RouteRefreshInterval(s *api.FelixConfigurationSpec) time.Duration {
	if s == nil || s.RouteRefreshInterval == nil || s.RouteRefreshInterval.Duration < 0 {
		return DefaultRefreshInterval
	}
	return s.RouteRefreshInterval.Duration
}

// ParseLogLevel maps a Calico log severity (logSeverityScreen,
// CALICO_LOG_LEVEL, --log-level) to slog's levels, in any case. slog has
// no Trace, Fatal or Panic: Trace logs as Debug, Fatal and Panic as Error
// (the agent never exits because of a log call).
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "trace", "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error", "fatal", "panic", "critical":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q (debug, info, warning, error, fatal, panic)", s)
}

// Refresher is a dataplane part whose periodic full resync follows
// routeRefreshInterval (*routetable.Table, *Endpoints). 0 disables it.
type Refresher interface {
	SetRefreshInterval(time.Duration)
}

// FelixConfigOptions configure the FelixConfig actor.
type FelixConfigOptions struct {
	// Node is this node's name (FelixConfiguration node.<Node>).
	Node string
	// Env are the FELIX_* settings; they outrank the datastore.
	Env *api.FelixConfigurationSpec
	// Level is the level of the agent's log handler. It follows
	// logSeverityScreen (Info when unset). Nil when the user gave a level
	// by flag or environment, which then wins over the datastore.
	Level *slog.LevelVar
	// RouteRefreshers follow routeRefreshInterval.
	RouteRefreshers []Refresher
	// Health, if set, shows in its detail the fields set to values
	// calico-node does not honour (felixenv.Unhonoured); it always
	// reports ready: such a field is news, not a fault.
	Health HealthReporter
	// Runtime, if set, follows goGCThreshold, goMemoryLimitMB and
	// goMaxProcs.
	Runtime GoRuntime
	// Metrics, if set, follows the prometheus* fields.
	Metrics MetricsConfigurer
	// ExternalRouteRemovers follow removeExternalRoutes and
	// interfacePrefix (the route table, when it owns workload routes).
	ExternalRouteRemovers []ExternalRouteRemover
}

// ExternalRouteRemover removes other software's routes to the workload
// interfaces named with prefixes (none: nil), as Felix does with
// removeExternalRoutes (routetable.Table).
type ExternalRouteRemover interface {
	SetRemoveExternalRoutes(prefixes []string)
}

// ExternalRoutePrefixes are the workload interface prefixes whose
// external routes are removed: interfacePrefix ("cali" when unset) while
// removeExternalRoutes is true or unset (Felix's default), nil when false.
func ExternalRoutePrefixes(s *api.FelixConfigurationSpec) []string {
	if s.RemoveExternalRoutes != nil && !*s.RemoveExternalRoutes {
		return nil
	}
	if s.InterfacePrefix == "" {
		return []string{"cali"}
	}
	return strings.Split(s.InterfacePrefix, ",")
}

// HealthReporter is one component's line in /readiness.
type HealthReporter interface {
	Report(live, ready bool, detail string)
}

// GoRuntime applies FelixConfiguration's Go runtime settings to the
// process; a nil value restores the process's own (GOGC, GOMEMLIMIT,
// GOMAXPROCS or Go's defaults). ProcessRuntime is the real one.
type GoRuntime interface {
	SetGoSettings(gcPercent, memoryLimitMB, maxProcs *int)
}

// MetricsConfigurer serves Felix's metrics endpoint as FelixConfiguration
// says (MetricsServer).
type MetricsConfigurer interface {
	SetMetricsConfig(MetricsConfig)
}

// FelixConfig is the actor that applies the FelixConfiguration settings
// owned by no single dataplane actor, at runtime: logSeverityScreen (the
// agent's log level) and routeRefreshInterval (the route table's and the
// endpoint actor's resync). Policy settings are read by the policy actor
// from the same merge (FelixSpec).
type FelixConfig struct {
	opts  FelixConfigOptions
	watch Subscriber
	log   *slog.Logger

	// Owned by Run.
	objs       map[confwatch.Key]api.Object
	refresh    time.Duration
	refreshSet bool
	external   []string          // ExternalRoutePrefixes last applied
	externalOK bool              // external was applied once
	ignored    string            // logSeverityScreen last reported as overridden
	reported   map[string]string // field -> value last reported as not honoured
	goSettings string            // the Go runtime settings last applied
}

// NewFelixConfig builds the actor.
func NewFelixConfig(opts FelixConfigOptions, watch Subscriber, logger *slog.Logger) *FelixConfig {
	return &FelixConfig{
		opts: opts, watch: watch,
		log:      logger.With("component", "felixconfig"),
		objs:     map[confwatch.Key]api.Object{},
		reported: map[string]string{},
		// Unset fields leave the process as it started.
		goSettings: goSettingsKey(nil, nil, nil),
	}
}

// AddExternalRouteRemover adds r to the parts that follow
// removeExternalRoutes. Call before Run.
func (f *FelixConfig) AddExternalRouteRemover(r ExternalRouteRemover) {
	f.opts.ExternalRouteRemovers = append(f.opts.ExternalRouteRemovers, r)
}

// AddRouteRefresher adds r to the parts that follow routeRefreshInterval.
// Call before Run.
func (f *FelixConfig) AddRouteRefresher(r Refresher) {
	f.opts.RouteRefreshers = append(f.opts.RouteRefreshers, r)
}

// Run applies the configuration from the first snapshot on, and again on
// every FelixConfiguration change, until ctx is done.
func (f *FelixConfig) Run(ctx context.Context) error {
	updates := f.watch.Subscribe("FelixConfiguration").Updates(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ups, ok := <-updates:
			if !ok {
				return nil
			}
			for _, u := range ups {
				if u.Type == confwatch.Delete {
					delete(f.objs, u.Key)
				} else {
					f.objs[u.Key] = u.Object
				}
			}
			f.apply(FelixSpec(f.objs, f.opts.Node, f.opts.Env))
		}
	}
}

func (f *FelixConfig) apply(spec api.FelixConfigurationSpec) {
	f.applyLogLevel(spec.LogSeverityScreen)
	if d := RouteRefreshInterval(&spec); !f.refreshSet || d != f.refresh {
		f.refresh, f.refreshSet = d, true
		for _, r := range f.opts.RouteRefreshers {
			r.SetRefreshInterval(d)
		}
		f.log.Info("route refresh interval", "interval", d, "disabled", d == 0)
	}
	if p := ExternalRoutePrefixes(&spec); !f.externalOK || !slices.Equal(p, f.external) {
		f.external, f.externalOK = p, true
		for _, r := range f.opts.ExternalRouteRemovers {
			r.SetRemoveExternalRoutes(p)
		}
		if len(f.opts.ExternalRouteRemovers) > 0 {
			f.log.Info("routes of other software to workload interfaces", "removed", p != nil, "prefixes", p)
		}
	}
	f.reportUnhonoured(spec)
	if f.opts.Runtime != nil {
		f.applyGoSettings(spec)
	}
	if f.opts.Metrics != nil {
		f.opts.Metrics.SetMetricsConfig(MetricsConfigFor(&spec))
	}
	// After the level change, so that this line shows exactly when Debug
	// is in effect.
	f.log.Debug("FelixConfiguration in effect", "logSeverityScreen", spec.LogSeverityScreen, "routeRefreshInterval", f.refresh)
}

func (f *FelixConfig) applyLogLevel(severity string) {
	if f.opts.Level == nil {
		if severity != "" && severity != f.ignored {
			f.log.Info("logSeverityScreen ignored: the log level was set by flag or environment", "logSeverityScreen", severity)
		}
		f.ignored = severity
		return
	}
	want, err := ParseLogLevel(severity)
	if err != nil {
		f.log.Warn("bad logSeverityScreen, logging at Info", "err", err)
		want = slog.LevelInfo
	}
	if old := f.opts.Level.Level(); old != want {
		f.opts.Level.Set(want)
		f.log.Info("log level set by FelixConfiguration", "logLevel", want.String(), "previous", old.String())
	}
}

// reportUnhonoured logs each field set to a value calico-node does not
// honour once (again when its value changes) and lists them all in the
// health detail.
func (f *FelixConfig) reportUnhonoured(spec api.FelixConfigurationSpec) {
	findings := felixenv.Unhonoured(spec, f.opts.Env)
	now := make(map[string]string, len(findings))
	var names []string
	for _, fd := range findings {
		now[fd.Field] = fd.Value
		names = append(names, fd.Field+"="+fd.Value)
		if old, ok := f.reported[fd.Field]; ok && old == fd.Value {
			continue
		}
		f.log.Warn("FelixConfiguration field not honoured by calico-node", "field", fd.Field, "value", fd.Value,
			"status", string(fd.Status), "note", fd.Note)
	}
	f.reported = now
	if f.opts.Health == nil {
		return
	}
	detail := ""
	if len(names) > 0 {
		detail = "not honoured: " + strings.Join(names, ", ")
	}
	f.opts.Health.Report(true, true, detail)
}

func (f *FelixConfig) applyGoSettings(spec api.FelixConfigurationSpec) {
	key := goSettingsKey(spec.GoGCThreshold, spec.GoMemoryLimitMB, spec.GoMaxProcs)
	if key == f.goSettings {
		return
	}
	f.goSettings = key
	f.opts.Runtime.SetGoSettings(spec.GoGCThreshold, spec.GoMemoryLimitMB, spec.GoMaxProcs)
	f.log.Info("Go runtime settings", "goGCThreshold", optInt(spec.GoGCThreshold),
		"goMemoryLimitMB", optInt(spec.GoMemoryLimitMB), "goMaxProcs", optInt(spec.GoMaxProcs))
}

func goSettingsKey(gc, mem, procs *int) string {
	return optInt(gc) + "/" + optInt(mem) + "/" + optInt(procs)
}

// optInt shows an optional number; "default" when unset.
func optInt(p *int) string {
	if p == nil {
		return "default"
	}
	return strconv.Itoa(*p)
}

// ProcessRuntime is GoRuntime for this process. It remembers the
// settings the process started with, to return to them when a field is
// unset again.
type ProcessRuntime struct {
	gc       int
	memLimit int64
	procs    int // GOMAXPROCS from the environment; 0: Go's default
}

// NewProcessRuntime captures the process's current Go settings.
func NewProcessRuntime() *ProcessRuntime {
	gc := debug.SetGCPercent(100)
	debug.SetGCPercent(gc)
	r := &ProcessRuntime{gc: gc, memLimit: debug.SetMemoryLimit(-1)}
	if os.Getenv("GOMAXPROCS") != "" {
		r.procs = runtime.GOMAXPROCS(0)
	}
	return r
}

// SetGoSettings applies the settings as Felix does: a negative GC
// threshold turns the collector off, a negative memory limit means none,
// a maxProcs of 0 or less is Go's default.
func (r *ProcessRuntime) SetGoSettings(gcPercent, memoryLimitMB, maxProcs *int) {
	switch {
	case gcPercent == nil:
		debug.SetGCPercent(r.gc)
	case *gcPercent < 0:
		debug.SetGCPercent(-1)
	default:
		debug.SetGCPercent(*gcPercent)
	}
	switch {
	case memoryLimitMB == nil:
		debug.SetMemoryLimit(r.memLimit)
	case *memoryLimitMB < 0:
		debug.SetMemoryLimit(math.MaxInt64)
	default:
		debug.SetMemoryLimit(int64(*memoryLimitMB) << 20)
	}
	switch {
	case maxProcs != nil && *maxProcs > 0:
		runtime.GOMAXPROCS(*maxProcs)
	case r.procs > 0:
		runtime.GOMAXPROCS(r.procs)
	default:
		runtime.SetDefaultGOMAXPROCS()
	}
}
