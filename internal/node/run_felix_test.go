package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
)

// TestLogLevelPrecedence: a level given by flag or environment is
// explicit (it outranks FelixConfiguration's logSeverityScreen); without
// one the agent starts at Info and follows the datastore.
func TestLogLevelPrecedence(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		want     slog.Level
		explicit bool
		wantErr  bool
	}{
		{name: "nothing given", want: slog.LevelInfo},
		{name: "flag", args: []string{"--log-level", "debug"}, want: slog.LevelDebug, explicit: true},
		{name: "CALICO_LOG_LEVEL", env: map[string]string{"CALICO_LOG_LEVEL": "Warning"}, want: slog.LevelWarn, explicit: true},
		{name: "FELIX_LOGSEVERITYSCREEN", env: map[string]string{"FELIX_LOGSEVERITYSCREEN": "DEBUG"}, want: slog.LevelDebug, explicit: true},
		{name: "explicit info still outranks the datastore", env: map[string]string{"CALICO_LOG_LEVEL": "info"}, want: slog.LevelInfo, explicit: true},
		{name: "Fatal logs errors", args: []string{"--log-level", "Fatal"}, want: slog.LevelError, explicit: true},
		{name: "unknown", args: []string{"--log-level", "loud"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseRun(t, tc.args, tc.env)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if cfg.logLevel != tc.want || cfg.logLevelSet != tc.explicit {
				t.Errorf("level %s (explicit %v), want %s (explicit %v)", cfg.logLevel, cfg.logLevelSet, tc.want, tc.explicit)
			}
		})
	}
}

// The agent's log level follows FelixConfiguration logSeverityScreen at
// runtime, unless a level was given explicitly.
func TestFelixConfigLogLevelAtRuntime(t *testing.T) {
	etcd := etcdtest.Start(t)
	eps := "ETCD_ENDPOINTS=" + strings.Join(etcd.Endpoints, ",")
	follows := startAgent(t, []string{"--data-dir", t.TempDir()}, eps, "NODENAME=follows", "IP=198.51.100.21")
	explicit := startAgent(t, []string{"--data-dir", t.TempDir()}, eps, "NODENAME=explicit", "IP=198.51.100.22", "CALICO_LOG_LEVEL=info")
	follows.waitReady(t)
	explicit.waitReady(t)
	for _, a := range []*nodeProc{follows, explicit} {
		if strings.Contains(a.logs.String(), "level=DEBUG msg=") {
			t.Fatalf("debug lines before any logSeverityScreen:\n%s", a.logs)
		}
	}

	store := connectStore(t, etcd.Endpoints)
	ctx := context.Background()
	apply := func(spec api.FelixConfigurationSpec) {
		t.Helper()
		fc := &api.FelixConfiguration{Spec: spec}
		fc.Kind, fc.APIVersion, fc.Name = "FelixConfiguration", api.GroupVersion, "default"
		if _, err := store.Apply(ctx, fc); err != nil {
			t.Fatal(err)
		}
	}
	waitLog := func(a *nodeProc, what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if strings.Contains(a.logs.String(), what) {
				return
			}
		}
		t.Fatalf("no %q in the agent's log:\n%s", what, a.logs)
	}

	apply(api.FelixConfigurationSpec{LogSeverityScreen: "Debug"})
	waitLog(follows, "level=DEBUG msg=")
	waitLog(explicit, "logSeverityScreen ignored")

	// Back to the default (Info): a later change is logged at Info, its
	// debug line is not.
	apply(api.FelixConfigurationSpec{RouteRefreshInterval: &api.Duration{Duration: 30 * time.Second}})
	waitLog(follows, "interval=30s")
	time.Sleep(200 * time.Millisecond)
	logs := follows.logs.String()
	_, after, _ := strings.Cut(logs, "logLevel=INFO previous=DEBUG")
	if after == "" || strings.Contains(after, "level=DEBUG msg=") {
		t.Errorf("debug lines after logSeverityScreen was removed:\n%s", logs)
	}
	if strings.Contains(explicit.logs.String(), "level=DEBUG msg=") {
		t.Errorf("explicit CALICO_LOG_LEVEL=info overridden by the datastore:\n%s", explicit.logs)
	}
	for _, a := range []*nodeProc{follows, explicit} {
		if err := a.stop(t); err != nil {
			t.Errorf("stop: %v", err)
		}
	}

}

// TestFelixMetricsPortAndUnhonouredReport: FelixConfiguration's
// prometheusMetrics* fields open Felix's metrics port at runtime (here on
// a free loopback port, without the go_* metrics), and a field set to a
// value calico-node does not honour is named in /readiness and the log.
func TestFelixMetricsPortAndUnhonouredReport(t *testing.T) {
	etcd := etcdtest.Start(t)
	a := startAgent(t, []string{"--data-dir", t.TempDir()}, "ETCD_ENDPOINTS="+strings.Join(etcd.Endpoints, ","), "NODENAME=metrics", "IP=198.51.100.23")
	a.waitReady(t)
	port := proctest.FreePort(t)
	tru, fals := true, false
	fc := &api.FelixConfiguration{Spec: api.FelixConfigurationSpec{
		PrometheusMetricsEnabled: &tru, PrometheusMetricsHost: "127.0.0.1", PrometheusMetricsPort: &port,
		PrometheusGoMetricsEnabled: &fals, BPFEnabled: &tru,
	}}
	fc.Kind, fc.APIVersion, fc.Name = "FelixConfiguration", api.GroupVersion, "default"
	if _, err := connectStore(t, etcd.Endpoints).Apply(context.Background(), fc); err != nil {
		t.Fatal(err)
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var body string
	polltest.Until(t, 10*time.Second, "Felix's metrics port", func() bool {
		var code int
		code, body = get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		return code == http.StatusOK
	})
	if !strings.Contains(body, "process_cpu_seconds_total") || strings.Contains(body, "go_goroutines") || !strings.Contains(body, "calico_") {
		t.Errorf("metrics on Felix's port, want process_* and calico_* but no go_*:\n%.2000s", body)
	}
	code, ready := get("http://" + a.health + "/readiness")
	if code != http.StatusOK || !regexp.MustCompile(`(?m)^felixconfig .*not honoured: bpfEnabled=true$`).MatchString(ready) {
		t.Errorf("/readiness (%d) lacks the felixconfig report:\n%s", code, ready)
	}
	if !strings.Contains(a.logs.String(), "field=bpfEnabled") {
		t.Errorf("bpfEnabled not reported in the log:\n%s", a.logs)
	}
	if err := a.stop(t); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// TestFelixMetricsWithDataplane scrapes Felix's metrics port (9091, with
// prometheusMetricsEnabled from the FELIX_* environment) of an agent with
// the iptables dataplane in a namespace of its own, before and after a
// pod is added and deleted through the CNI plugin: the felix_* values
// follow what the agent did (one local endpoint while the pod exists;
// iptables-restore calls and dataplane applies counted; its chains
// gauged).
func TestFelixMetricsWithDataplane(t *testing.T) {
	n := newFullNode(t)
	p := n.start(t, nil, []string{"FELIX_PROMETHEUSMETRICSENABLED=true"})
	p.WaitFor(t, 60*time.Second, "the node's registration and the CNI socket", func() bool {
		logs := p.Log.String()
		return strings.Contains(logs, "node registered") && strings.Contains(logs, "serving CNI commands")
	})
	const felixPort = 9091
	scrape := func() (string, bool) {
		resp, err := n.ns.HTTPClient().Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", felixPort))
		if err != nil {
			return err.Error(), false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), resp.StatusCode == http.StatusOK
	}
	metric := func(sample string) float64 { return n.metric(t, felixPort, sample) }
	polltest.Until(t, 60*time.Second, "felix_* on port 9091 with the dataplane programmed", func() bool {
		_, ok := scrape()
		return ok && metric("felix_iptables_restore_calls") > 0
	})
	if got := metric("felix_active_local_endpoints"); got != 0 {
		t.Errorf("felix_active_local_endpoints %v before any pod, want 0", got)
	}
	restores := metric("felix_iptables_restore_calls")
	applies := metric("felix_int_dataplane_apply_time_seconds_count")

	pod := netnstest.New(t, "felixpod")
	if out, err := n.cni(t, "calico", "ADD", "/var/run/netns/"+pod.Name, "felix-metrics-1"); err != nil {
		t.Fatalf("calico ADD: %v\n%s\n%s", err, out, p.Log.Tail(40))
	}
	polltest.Until(t, 30*time.Second, "one local endpoint counted", func() bool {
		return metric("felix_active_local_endpoints") == 1
	})
	for sample, check := range map[string]func(float64) bool{
		"felix_cluster_num_workload_endpoints":                        func(v float64) bool { return v == 1 },
		"felix_iptables_restore_calls":                                func(v float64) bool { return v > restores },
		"felix_int_dataplane_apply_time_seconds_count":                func(v float64) bool { return v > applies },
		`felix_iptables_chains{ip_version="4",table="filter"}`:        func(v float64) bool { return v > 0 },
		`felix_iptables_rules{ip_version="4",table="filter"}`:         func(v float64) bool { return v > 0 },
		"felix_iptables_restore_errors":                               func(v float64) bool { return v == 0 },
		"felix_cluster_num_hosts":                                     func(v float64) bool { return v == 1 },
		`felix_int_dataplane_messages{type="WorkloadEndpointUpdate"}`: func(v float64) bool { return v >= 1 },
	} {
		if v := metric(sample); !check(v) {
			t.Errorf("%s = %v after the pod's ADD", sample, v)
		}
	}
	// The workload's chains are in the kernel, as the metrics say.
	if save := n.ns.MustRun(t, "iptables-save", "-t", "filter"); !strings.Contains(save, ":cali-tw-") {
		t.Errorf("no workload chain in the kernel after ADD:\n%s", save)
	}

	if out, err := n.cni(t, "calico", "DEL", "/var/run/netns/"+pod.Name, "felix-metrics-1"); err != nil {
		t.Fatalf("calico DEL: %v\n%s", err, out)
	}
	polltest.Until(t, 30*time.Second, "no local endpoint after DEL", func() bool {
		return metric("felix_active_local_endpoints") == 0 && metric("felix_cluster_num_workload_endpoints") == 0
	})
	if t.Failed() {
		body, _ := scrape()
		t.Logf("felix metrics:\n%s", body)
	}
	if err := p.Stop(15 * time.Second); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}
