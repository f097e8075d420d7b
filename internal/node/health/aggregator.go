// Package health aggregates the liveness and readiness of the agent's
// components and serves them, with Prometheus metrics, over HTTP (the
// endpoint calico-node's probes use, port 9099 by default).
//
// # API model
//
// Each component registers once with the Aggregator and gets a Reporter; it
// then calls Reporter.Report whenever its state changes, and periodically if
// it registered a timeout. The agent as a whole is live when every component
// that takes part in liveness is live, and ready when every component that
// takes part in readiness is ready (no components: live and ready). A
// component whose last report is older than its timeout counts as neither
// live nor ready: a wedged goroutine stops reporting, and the probe notices.
//
// A newly registered component counts as live (it has not had a chance to
// fail yet; its timeout still applies from registration) and not ready (it
// has not said it is). This is felix's behaviour, which operators' probe
// settings are tuned for.
//
// Server serves /liveness and /readiness (200 when good, 503 when not, with a
// plain-text table of the components, or JSON when the client accepts
// application/json) and /metrics from the Prometheus gatherer it is given.
//
// # Thread safety
//
// Aggregator and Reporter methods are safe for concurrent use. Aggregator's
// exported fields must be set before the first Register.
package health

import (
	"cmp"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Aggregator collects the reports of every registered component.
type Aggregator struct {
	// Now returns the current time; nil means time.Now. Tests inject a fake
	// clock here to drive the timeout logic.
	Now func() time.Time
	// Logger, when set, gets a line each time a component's reported state
	// or the overall state changes.
	Logger *slog.Logger

	mu          sync.Mutex
	components  map[string]*component
	lastOverall *[2]bool // live, ready at the previous Summary; nil before the first
}

type component struct {
	name       string
	checkLive  bool
	checkReady bool
	timeout    time.Duration

	live, ready bool
	detail      string
	at          time.Time
}

// Reporter is one component's handle for reporting its health.
type Reporter struct {
	agg *Aggregator
	c   *component
}

// NewAggregator returns an Aggregator with no components.
func NewAggregator() *Aggregator {
	return &Aggregator{components: make(map[string]*component)}
}

func (a *Aggregator) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Register adds a component. live and ready say whether it takes part in
// liveness and readiness; timeout (0: none) is how old its last report may be
// before it counts as neither live nor ready. Registering a name again
// replaces the earlier registration; reports through the earlier Reporter are
// then ignored.
func (a *Aggregator) Register(name string, live, ready bool, timeout time.Duration) *Reporter {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := &component{
		name:       name,
		checkLive:  live,
		checkReady: ready,
		timeout:    timeout,
		live:       true,
		at:         a.now(),
	}
	a.components[name] = c
	return &Reporter{agg: a, c: c}
}

// Report records the component's current state. detail is shown in the
// health endpoints' output; keep it short ("waiting for datastore sync").
func (r *Reporter) Report(live, ready bool, detail string) {
	a := r.agg
	a.mu.Lock()
	defer a.mu.Unlock()
	c := r.c
	changed := c.live != live || c.ready != ready || c.detail != detail
	c.live, c.ready, c.detail = live, ready, detail
	c.at = a.now()
	if changed && a.Logger != nil && a.components[c.name] == c {
		a.Logger.Info("component health changed", "component", c.name, "live", live, "ready", ready, "detail", detail)
	}
}

// Summary is the overall health at one moment.
type Summary struct {
	Live       bool
	Ready      bool
	Components []Component // sorted by name
}

// Component is one component's row in a Summary.
type Component struct {
	Name string
	// CheckLive and CheckReady say whether the component takes part in
	// liveness and readiness.
	CheckLive  bool
	CheckReady bool
	// Timeout is the registered report timeout; 0 means none.
	Timeout time.Duration
	// Live, Ready and Detail are the latest report.
	Live   bool
	Ready  bool
	Detail string
	// LastReport is when the component last reported (or registered).
	LastReport time.Time
	// Stale is true when the last report is older than Timeout; the
	// component then counts as neither live nor ready.
	Stale bool
}

// IsLive reports whether the component counts as live overall: true when it
// doesn't take part in liveness.
func (c Component) IsLive() bool { return !c.CheckLive || (c.Live && !c.Stale) }

// IsReady reports whether the component counts as ready overall: true when
// it doesn't take part in readiness.
func (c Component) IsReady() bool { return !c.CheckReady || (c.Ready && !c.Stale) }

// Summary computes the overall health now.
func (a *Aggregator) Summary() Summary {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	s := Summary{Live: true, Ready: true, Components: make([]Component, 0, len(a.components))}
	for _, c := range a.components {
		row := Component{
			Name:       c.name,
			CheckLive:  c.checkLive,
			CheckReady: c.checkReady,
			Timeout:    c.timeout,
			Live:       c.live,
			Ready:      c.ready,
			Detail:     c.detail,
			LastReport: c.at,
			Stale:      c.timeout > 0 && now.Sub(c.at) > c.timeout,
		}
		s.Live = s.Live && row.IsLive()
		s.Ready = s.Ready && row.IsReady()
		s.Components = append(s.Components, row)
	}
	slices.SortFunc(s.Components, func(x, y Component) int { return cmp.Compare(x.Name, y.Name) })

	overall := [2]bool{s.Live, s.Ready}
	if a.Logger != nil && (a.lastOverall == nil || *a.lastOverall != overall) {
		var notLive, notReady []string
		for _, c := range s.Components {
			if !c.IsLive() {
				notLive = append(notLive, c.Name)
			}
			if !c.IsReady() {
				notReady = append(notReady, c.Name)
			}
		}
		a.Logger.Info("overall health changed", "live", s.Live, "ready", s.Ready, "notLive", notLive, "notReady", notReady)
	}
	a.lastOverall = &overall
	return s
}
