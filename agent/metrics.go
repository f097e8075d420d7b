package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// DefaultFelixMetricsPort is Felix's prometheusMetricsPort.
const DefaultFelixMetricsPort = 9091

// MetricsConfig is a Prometheus endpoint as its configuration sets it:
// FelixConfiguration's prometheus* fields for Felix's (MetricsConfigFor),
// KubeControllersConfiguration's prometheusMetricsPort for
// kube-controllers'.
type MetricsConfig struct {
	Enabled bool
	// Addr is host:port; an empty host is every address, as in Felix.
	Addr string
	// GoMetrics and ProcessMetrics keep the go_* and process_* families.
	GoMetrics, ProcessMetrics bool
}

// MetricsConfigFor is Felix's metrics endpoint as spec (the merged
// FelixConfiguration) sets it, with Felix's defaults: off, port 9091 on
// every address, Go and process metrics on.
func MetricsConfigFor(s *api.FelixConfigurationSpec) MetricsConfig {
	c := MetricsConfig{Addr: net.JoinHostPort(s.PrometheusMetricsHost, strconv.Itoa(DefaultFelixMetricsPort)), GoMetrics: true, ProcessMetrics: true}
	if s.PrometheusMetricsEnabled != nil {
		c.Enabled = *s.PrometheusMetricsEnabled
	}
	if s.PrometheusMetricsPort != nil && *s.PrometheusMetricsPort > 0 {
		c.Addr = net.JoinHostPort(s.PrometheusMetricsHost, strconv.Itoa(*s.PrometheusMetricsPort))
	}
	if s.PrometheusGoMetricsEnabled != nil {
		c.GoMetrics = *s.PrometheusGoMetricsEnabled
	}
	if s.PrometheusProcessMetricsEnabled != nil {
		c.ProcessMetrics = *s.PrometheusProcessMetricsEnabled
	}
	return c
}

// MetricsServer is the actor serving /metrics on the address its
// configuration names, following every change at runtime: it listens
// while enabled, moves when the address changes and stops when disabled.
// A port it cannot bind is retried, not fatal: the agent's dataplane
// matters more than its metrics.
//
// Thread safety: SetMetricsConfig may be called from any goroutine;
// everything else belongs to Run.
type MetricsServer struct {
	name     string
	gatherer prometheus.Gatherer
	log      *slog.Logger
	next     chan MetricsConfig // 1 slot: the latest configuration wins

	mu    sync.Mutex
	bound string // the address listened on; "" when not listening
}

// NewMetricsServer serves g under name ("felix", "kube-controllers"),
// which only names it in the logs.
func NewMetricsServer(name string, g prometheus.Gatherer, logger *slog.Logger) *MetricsServer {
	return &MetricsServer{name: name, gatherer: g, log: logger.With("component", name+"-metrics"), next: make(chan MetricsConfig, 1)}
}

// SetMetricsConfig implements MetricsConfigurer: Run applies the latest
// configuration given.
func (s *MetricsServer) SetMetricsConfig(c MetricsConfig) {
	for {
		select {
		case s.next <- c:
			return
		default:
		}
		select {
		case <-s.next: // drop the stale one
		default:
		}
	}
}

// Addr is the address the server listens on, "" while it does not.
func (s *MetricsServer) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound
}

// Run serves as configured until ctx is done.
func (s *MetricsServer) Run(ctx context.Context) error {
	var (
		cur   MetricsConfig
		srv   *http.Server
		retry <-chan time.Time
	)
	stop := func() {
		if srv == nil {
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		srv = nil
		s.mu.Lock()
		s.bound = ""
		s.mu.Unlock()
		s.log.Info("metrics server stopped")
	}
	defer stop()
	start := func() {
		l, err := net.Listen("tcp", cur.Addr)
		if err != nil {
			s.log.Warn("cannot serve metrics, will retry", "addr", cur.Addr, "err", err)
			retry = time.After(10 * time.Second)
			return
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(filtered(s.gatherer, cur), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
		go func(srv *http.Server) {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Warn("metrics server failed", "err", err)
			}
		}(srv)
		s.mu.Lock()
		s.bound = l.Addr().String()
		s.mu.Unlock()
		s.log.Info("serving metrics", "addr", l.Addr().String(), "goMetrics", cur.GoMetrics, "processMetrics", cur.ProcessMetrics)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-s.next:
			if c == cur && (srv != nil || !c.Enabled) {
				continue
			}
			stop()
			cur, retry = c, nil
			if cur.Enabled {
				start()
			}
		case <-retry:
			retry = nil
			if cur.Enabled && srv == nil {
				start()
			}
		}
	}
}

// filtered leaves out of g's families the go_* and process_* ones c
// turns off.
func filtered(g prometheus.Gatherer, c MetricsConfig) prometheus.Gatherer {
	if c.GoMetrics && c.ProcessMetrics {
		return g
	}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		fams, err := g.Gather()
		out := fams[:0]
		for _, f := range fams {
			name := f.GetName()
			if (!c.GoMetrics && strings.HasPrefix(name, "go_")) || (!c.ProcessMetrics && strings.HasPrefix(name, "process_")) {
				continue
			}
			out = append(out, f)
		}
		return out, err
	})
}

// summaryObjectives are the quantiles of Felix's summaries (libcalico-go's
// prometheus.DefObjectives).
var summaryObjectives = map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001}

// newFelixSummary is a summary with Felix's quantiles.
func newFelixSummary(name, help string) prometheus.Summary {
	return prometheus.NewSummary(prometheus.SummaryOpts{Name: name, Help: help, Objectives: summaryObjectives})
}

// felixMetrics are the metrics Felix's calculation graph and internal
// dataplane export, with Felix's names, types, labels and help, kept by
// the policy actor (which plays both parts).
type felixMetrics struct {
	host prometheus.Gauge

	activeEndpoints, activePolicies, activeSelectors prometheus.Gauge

	clusterHosts, clusterWorkloadEndpoints, clusterHostEndpoints prometheus.Gauge
	clusterPolicies, clusterProfiles, clusterTiers               prometheus.Gauge

	resyncState    prometheus.Gauge
	resyncsStarted prometheus.Counter
	updateTime     prometheus.Summary
	updates        *prometheus.CounterVec

	applyTime        prometheus.Summary
	initialApplyTime prometheus.Gauge
	failures         prometheus.Counter
	messages         *prometheus.CounterVec
	batchSize        prometheus.Summary
}

// Felix's felix_resync_state values.
const (
	resyncWaitForDatastore = 1
	resyncInProgress       = 2
	resyncInSync           = 3
)

func newFelixMetrics(node string) *felixMetrics {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := &felixMetrics{
		host: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "felix_host",
			Help:        "Configured Felix hostname (as a label), typically used in grouping/aggregating stats; the label defaults to the hostname of the host but can be overridden by configuration. The value of the gauge is always set to 1.",
			ConstLabels: prometheus.Labels{"host": node},
		}),
		activeEndpoints:          gauge("felix_active_local_endpoints", "Number of active endpoints on this host."),
		activePolicies:           gauge("felix_active_local_policies", "Number of active policies on this host."),
		activeSelectors:          gauge("felix_active_local_selectors", "Number of active selectors on this host."),
		clusterHosts:             gauge("felix_cluster_num_hosts", "Total number of calico hosts in the cluster."),
		clusterWorkloadEndpoints: gauge("felix_cluster_num_workload_endpoints", "Total number of workload endpoints cluster-wide."),
		clusterHostEndpoints:     gauge("felix_cluster_num_host_endpoints", "Total number of host endpoints cluster-wide."),
		clusterPolicies:          gauge("felix_cluster_num_policies", "Total number of policies cluster-wide."),
		clusterProfiles:          gauge("felix_cluster_num_profiles", "Total number of profiles cluster-wide."),
		clusterTiers:             gauge("felix_cluster_num_tiers", "Total number of tiers cluster-wide."),
		resyncState:              gauge("felix_resync_state", "Current datastore state."),
		resyncsStarted:           prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_resyncs_started", Help: "Current datastore state."}),
		updateTime:               newFelixSummary("felix_calc_graph_update_time_seconds", "Seconds to update calculation graph for each datastore OnUpdate call."),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "felix_calc_graph_updates_processed", Help: "Number of datastore updates processed by the calculation graph.",
		}, []string{"type"}),
		applyTime: newFelixSummary("felix_int_dataplane_apply_time_seconds",
			"Time in seconds for each incremental update to the dataplane (after the initial resync)."),
		initialApplyTime: gauge("felix_int_dataplane_initial_resync_time_seconds",
			"Time in seconds that it took to do the initial resync with the dataplane and bring the dataplane into sync for the first time."),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_int_dataplane_failures", Help: "Number of times dataplane updates failed and will be retried."}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_int_dataplane_messages", Help: "Number dataplane messages by type."}, []string{"type"}),
		batchSize: newFelixSummary("felix_int_dataplane_msg_batch_size",
			"Number of messages processed in each batch. Higher values indicate we're doing more batching to try to keep up."),
	}
	m.host.Set(1)
	m.resyncState.Set(resyncWaitForDatastore)
	return m
}

func (m *felixMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.host, m.activeEndpoints, m.activePolicies, m.activeSelectors,
		m.clusterHosts, m.clusterWorkloadEndpoints, m.clusterHostEndpoints, m.clusterPolicies, m.clusterProfiles, m.clusterTiers,
		m.resyncState, m.resyncsStarted, m.updateTime, m.updates,
		m.applyTime, m.initialApplyTime, m.failures, m.messages, m.batchSize,
	}
}

// messageType is the felix_int_dataplane_messages type of an update of
// kind: Felix's dataplane message names (WorkloadEndpointUpdate,
// ActivePolicyRemove, ...), after the resource the message is about.
func messageType(kind string, remove bool) string {
	switch kind {
	case "NetworkPolicy", "GlobalNetworkPolicy":
		kind = "ActivePolicy"
	case "Profile":
		kind = "ActiveProfile"
	case "Node":
		kind = "HostMetadata"
	case "IPPool":
		kind = "IPAMPool"
	case "BGPConfiguration":
		kind = "GlobalBGPConfig"
	}
	if remove {
		return kind + "Remove"
	}
	return kind + "Update"
}

// updateType is the felix_calc_graph_updates_processed type of an update
// of kind: the name of the datastore key type Felix would have seen.
func updateType(kind string) string {
	switch kind {
	case "NetworkPolicy", "GlobalNetworkPolicy":
		return "PolicyKey"
	case "Profile", "BGPConfiguration":
		return "ResourceKey"
	case "Node":
		return "HostIPKey"
	case "IPPool":
		return "IPPoolKey"
	case "FelixConfiguration":
		return "GlobalConfigKey"
	}
	return kind + "Key"
}
