package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/projectcalico/calico-node/agent/routetable"
	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/testkit/goldentest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
)

// recorder of the collectors registered, to describe every metric even
// before it has a value.
type recordingRegisterer struct {
	prometheus.Registerer
	cs []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.cs = append(r.cs, c)
	return r.Registerer.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var variableLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)

// touch gives every vector of c one child, so that it is gathered.
func touch(c prometheus.Collector) {
	descs := make(chan *prometheus.Desc, 10)
	go func() { c.Describe(descs); close(descs) }()
	var n int
	for d := range descs {
		if m := variableLabels.FindStringSubmatch(d.String()); m != nil && m[1] != "" {
			n = len(strings.Split(m[1], ","))
		}
	}
	vals := make([]string, n)
	for i := range vals {
		vals[i] = "x"
	}
	switch v := c.(type) {
	case *prometheus.GaugeVec:
		v.WithLabelValues(vals...)
	case *prometheus.CounterVec:
		v.WithLabelValues(vals...)
	case *prometheus.SummaryVec:
		v.WithLabelValues(vals...)
	case *prometheus.HistogramVec:
		v.WithLabelValues(vals...)
	}
}

// TestFelixMetricNames: the felix_* metrics the agent serves, each with
// its type, labels and help, are those of testdata/felix-metrics.golden:
// the names Felix v3.31 exports that calico-node's dashboards read. A
// metric renamed, retyped or relabelled fails here.
func TestFelixMetricNames(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	rec := &recordingRegisterer{Registerer: reg}
	NewPolicy(PolicyConfig{Node: "n1", Resync: time.Hour, Registerer: rec, Logger: quiet()}, nil, &countingApplier{}, nil)
	xtables.NewMetrics(rec)
	if err := routetable.New(nil, 0, quiet()).RegisterMetrics(rec); err != nil {
		t.Fatal(err)
	}
	for _, c := range rec.cs {
		touch(c)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "felix_") {
			continue
		}
		var labels []string
		if len(f.Metric) > 0 {
			for _, l := range f.Metric[0].Label {
				labels = append(labels, l.GetName())
			}
		}
		slices.Sort(labels)
		fmt.Fprintf(&b, "%s %s {%s} %s\n", f.GetName(), strings.ToLower(f.GetType().String()), strings.Join(labels, ","), f.GetHelp())
	}
	goldentest.Check(t, "testdata/felix-metrics.golden", []byte(b.String()))

	// docs/metrics.md lists each.
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if name := f.GetName(); strings.HasPrefix(name, "felix_") && !strings.Contains(string(doc), "`"+name) {
			t.Errorf("docs/metrics.md does not list %s", name)
		}
	}
}

// failingApplier counts applies and fails while fail is set.
type failingApplier struct {
	fail    atomic.Bool
	applies atomic.Int64
}

func (f *failingApplier) Apply(context.Context, *policy.Family) error {
	f.applies.Add(1)
	if f.fail.Load() {
		return errors.New("iptables-restore failed")
	}
	return nil
}

func (f *failingApplier) Invalidate() {}

// value is the one sample of a gathered metric family (0 if none).
func value(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		m := f.Metric[0]
		switch f.GetType() {
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue()
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue()
		case dto.MetricType_SUMMARY:
			return float64(m.GetSummary().GetSampleCount())
		}
	}
	return 0
}

// TestFelixMetricsFollowTheDataplane: Felix's gauges and counters move
// with what happens: a local workload endpoint added raises
// felix_active_local_endpoints, a remote one only the cluster count; a
// policy selecting local endpoints is active; a failed apply counts as a
// dataplane failure; each apply after the first is timed.
func TestFelixMetricsFollowTheDataplane(t *testing.T) {
	ctx, cancel, src, w := runWatcher()
	defer cancel()
	reg := prometheus.NewPedanticRegistry()
	v4 := &failingApplier{}
	p := NewPolicy(PolicyConfig{Node: "n1", Resync: time.Hour, Registerer: reg, Logger: quiet()}, w, v4, nil)
	go p.Run(ctx)

	waitFor := func(what, name string, want float64) {
		t.Helper()
		eventually(t, fmt.Sprintf("%s: %s = %v", what, name, want), func() bool { return value(t, reg, name) == want })
	}
	// The snapshot: workload a on n1, x on n2.
	waitFor("snapshot", "felix_active_local_endpoints", 1)
	waitFor("snapshot", "felix_cluster_num_workload_endpoints", 2)
	waitFor("snapshot", "felix_resync_state", 3)
	if got := value(t, reg, "felix_resyncs_started"); got != 1 {
		t.Errorf("felix_resyncs_started = %v, want 1", got)
	}
	if got := value(t, reg, "felix_int_dataplane_initial_resync_time_seconds"); got <= 0 {
		t.Errorf("felix_int_dataplane_initial_resync_time_seconds = %v after the first apply", got)
	}

	src.events <- datastore.Event{Type: datastore.Added, Object: wep("n1", "b", "cali2", 10, "10.0.0.2/32"), Revision: 10}
	waitFor("a local endpoint added", "felix_active_local_endpoints", 2)
	src.events <- datastore.Event{Type: datastore.Added, Object: wep("n3", "y", "cali8", 11, "10.0.8.1/32"), Revision: 11}
	waitFor("a remote endpoint added", "felix_cluster_num_workload_endpoints", 4)
	if got := value(t, reg, "felix_active_local_endpoints"); got != 2 {
		t.Errorf("felix_active_local_endpoints = %v after a remote endpoint was added, want 2", got)
	}
	if got := value(t, reg, "felix_int_dataplane_apply_time_seconds"); got < 2 {
		t.Errorf("felix_int_dataplane_apply_time_seconds has %v observations after two incremental applies", got)
	}

	gnp := &api.GlobalNetworkPolicy{}
	gnp.Kind, gnp.APIVersion, gnp.Name, gnp.ResourceVersion = "GlobalNetworkPolicy", api.GroupVersion, "web", "12"
	gnp.Spec = api.GlobalNetworkPolicySpec{Selector: "all()", Ingress: []api.Rule{{Action: api.Allow, Source: api.EntityRule{Selector: "app == 'db'"}}}}
	gnp.Default()
	src.events <- datastore.Event{Type: datastore.Added, Object: gnp, Revision: 12}
	waitFor("a policy selecting local endpoints", "felix_active_local_policies", 1)
	waitFor("its rule's selector", "felix_active_local_selectors", 1)
	waitFor("the policy", "felix_cluster_num_policies", 1)

	v4.fail.Store(true)
	src.events <- datastore.Event{Type: datastore.Deleted, Object: wep("n1", "b", "cali2", 13, "10.0.0.2/32"), Revision: 13}
	eventually(t, "a failed apply counted", func() bool { return value(t, reg, "felix_int_dataplane_failures") >= 1 })
	if got := value(t, reg, "felix_active_local_endpoints"); got != 2 {
		t.Errorf("felix_active_local_endpoints = %v while the change is not programmed, want the programmed 2", got)
	}
	v4.fail.Store(false)
	waitFor("the endpoint removed once programmed", "felix_active_local_endpoints", 1)
}

// TestMetricsServerFollowsConfiguration: the Felix metrics port listens
// while enabled, leaves out Go and process metrics when told, moves and
// stops with the configuration.
func TestMetricsServerFollowsConfiguration(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "felix_active_local_endpoints", Help: "h"})
	g.Set(3)
	reg.MustRegister(g)
	s := NewMetricsServer("felix", reg, quiet())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	scrape := func(addr string) (string, error) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	listening := func(step string, cfg MetricsConfig) string {
		t.Helper()
		old := s.Addr()
		s.SetMetricsConfig(cfg)
		var addr string
		eventually(t, step, func() bool { addr = s.Addr(); return addr != "" && addr != old })
		return addr
	}

	addr := listening("enabled", MetricsConfig{Enabled: true, Addr: "127.0.0.1:0", GoMetrics: true, ProcessMetrics: true})
	body, err := scrape(addr)
	if err != nil || !strings.Contains(body, "felix_active_local_endpoints 3") || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_") {
		t.Fatalf("scrape: %v\n%.500s", err, body)
	}
	addr2 := listening("without Go metrics", MetricsConfig{Enabled: true, Addr: "127.0.0.1:0", ProcessMetrics: true})
	body, err = scrape(addr2)
	if err != nil || strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_") || !strings.Contains(body, "felix_active_local_endpoints 3") {
		t.Fatalf("scrape without Go metrics: %v\n%.500s", err, body)
	}
	if _, err := scrape(addr); err == nil {
		t.Errorf("the old address %s still serves after the move", addr)
	}
	s.SetMetricsConfig(MetricsConfig{Addr: "127.0.0.1:0"})
	eventually(t, "disabled", func() bool { return s.Addr() == "" })
	if _, err := scrape(addr2); err == nil {
		t.Errorf("%s still serves after prometheusMetricsEnabled false", addr2)
	}
}

func TestMetricsConfigFor(t *testing.T) {
	tru, fals, port := true, false, 9200
	tests := []struct {
		name string
		spec api.FelixConfigurationSpec
		want MetricsConfig
	}{
		{"Felix's defaults", api.FelixConfigurationSpec{}, MetricsConfig{Addr: ":9091", GoMetrics: true, ProcessMetrics: true}},
		{"enabled", api.FelixConfigurationSpec{PrometheusMetricsEnabled: &tru}, MetricsConfig{Enabled: true, Addr: ":9091", GoMetrics: true, ProcessMetrics: true}},
		{"host, port, no Go or process metrics", api.FelixConfigurationSpec{PrometheusMetricsEnabled: &tru, PrometheusMetricsHost: "10.0.0.5",
			PrometheusMetricsPort: &port, PrometheusGoMetricsEnabled: &fals, PrometheusProcessMetricsEnabled: &fals},
			MetricsConfig{Enabled: true, Addr: "10.0.0.5:9200"}},
		{"IPv6 host", api.FelixConfigurationSpec{PrometheusMetricsHost: "::1"}, MetricsConfig{Addr: "[::1]:9091", GoMetrics: true, ProcessMetrics: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MetricsConfigFor(&tc.spec); got != tc.want {
				t.Errorf("MetricsConfigFor = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// fakeHealth records the reports of one component.
type fakeHealth struct {
	mu      sync.Mutex
	details []string
}

func (h *fakeHealth) Report(live, ready bool, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !live || !ready {
		detail = "NOT LIVE OR READY: " + detail
	}
	h.details = append(h.details, detail)
}

func (h *fakeHealth) last() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.details) == 0 {
		return "<none>"
	}
	return h.details[len(h.details)-1]
}

type fakeMetrics struct {
	mu  sync.Mutex
	cfg *MetricsConfig
}

func (m *fakeMetrics) SetMetricsConfig(c MetricsConfig) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cfg = &c
}

func (m *fakeMetrics) get() *MetricsConfig {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

type fakeRuntime struct {
	mu    sync.Mutex
	calls []string
}

func (r *fakeRuntime) SetGoSettings(gc, mem, procs *int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, goSettingsKey(gc, mem, procs))
}

func (r *fakeRuntime) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// TestFelixConfigReportsUnhonouredFields: a field set to a value
// calico-node does not honour is logged once, by name, and shown in the
// felixconfig health detail until it is removed; the metrics port and Go
// runtime settings follow the datastore.
func TestFelixConfigReportsUnhonouredFields(t *testing.T) {
	ctx, cancel, src, w := runWatcher()
	defer cancel()
	logs := &proctest.Log{}
	health, metrics, rt := &fakeHealth{}, &fakeMetrics{}, &fakeRuntime{}
	fc := NewFelixConfig(FelixConfigOptions{Node: "n1", Health: health, Metrics: metrics, Runtime: rt}, w, slog.New(slog.NewTextHandler(logs, nil)))
	go fc.Run(ctx)
	eventually(t, "first report", func() bool { return health.last() == "" })
	if m := metrics.get(); m == nil || m.Enabled {
		t.Errorf("metrics with no FelixConfiguration: %+v, want Felix's default (off)", m)
	}
	if got := rt.get(); len(got) != 0 {
		t.Errorf("Go runtime changed with nothing set: %v", got)
	}

	tru, gc, port := true, 60, 9555
	rev := 20
	apply := func(spec api.FelixConfigurationSpec) {
		rev++
		f := felixConfig("default", spec)
		f.ResourceVersion = fmt.Sprint(rev)
		src.events <- datastore.Event{Type: datastore.Modified, Object: f, Revision: int64(rev)}
	}
	spec := api.FelixConfigurationSpec{BPFEnabled: &tru, WireguardEnabled: &tru, BPFLogLevel: "Debug",
		PrometheusMetricsEnabled: &tru, PrometheusMetricsPort: &port, GoGCThreshold: &gc}
	apply(spec)
	const want = "not honoured: bpfEnabled=true, wireguardEnabled=true"
	eventually(t, "the report", func() bool { return health.last() == want })
	if m := metrics.get(); m == nil || !m.Enabled || m.Addr != ":9555" {
		t.Errorf("metrics config %+v, want enabled on :9555", m)
	}
	if got := rt.get(); !slices.Equal(got, []string{"60/default/default"}) {
		t.Errorf("Go runtime settings %v, want goGCThreshold 60", got)
	}
	// The same configuration again, with an honoured field changed: no
	// new warning.
	spec.LogSeverityScreen = "Info"
	apply(spec)
	time.Sleep(200 * time.Millisecond)
	for _, field := range []string{"bpfEnabled", "wireguardEnabled"} {
		if n := strings.Count(logs.String(), "field="+field); n != 1 {
			t.Errorf("%s reported %d times, want once:\n%s", field, n, logs.String())
		}
	}
	if strings.Contains(logs.String(), "field=bpfLogLevel") {
		t.Errorf("bpfLogLevel (not applicable without eBPF) reported:\n%s", logs.String())
	}
	// Fixed: the detail clears.
	apply(api.FelixConfigurationSpec{})
	eventually(t, "the report cleared", func() bool { return health.last() == "" })
	if got := rt.get(); len(got) != 2 || got[1] != "default/default/default" {
		t.Errorf("Go runtime settings %v, want the process's own back", got)
	}
}
