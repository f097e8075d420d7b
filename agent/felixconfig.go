package agent

import (
	"context"
	"fmt"
	"log/slog"
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
	ignored    string // logSeverityScreen last reported as overridden
}

// NewFelixConfig builds the actor.
func NewFelixConfig(opts FelixConfigOptions, watch Subscriber, logger *slog.Logger) *FelixConfig {
	return &FelixConfig{
		opts: opts, watch: watch,
		log:  logger.With("component", "felixconfig"),
		objs: map[confwatch.Key]api.Object{},
	}
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
