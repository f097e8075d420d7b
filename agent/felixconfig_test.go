package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/projectcalico/calico-node/agent/routeproto"
	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/agent/routetable"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

func TestRouteRefreshInterval(t *testing.T) {
	tests := []struct {
		name string
		spec *api.FelixConfigurationSpec
		want time.Duration
	}{
		{"no configuration", nil, DefaultRefreshInterval},
		{"unset", &api.FelixConfigurationSpec{}, DefaultRefreshInterval},
		{"set", &api.FelixConfigurationSpec{RouteRefreshInterval: &api.Duration{Duration: 5 * time.Second}}, 5 * time.Second},
		{"zero disables", &api.FelixConfigurationSpec{RouteRefreshInterval: &api.Duration{}}, 0},
		{"negative keeps the default", &api.FelixConfigurationSpec{RouteRefreshInterval: &api.Duration{Duration: -time.Second}}, DefaultRefreshInterval},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := RouteRefreshInterval(tc.spec); got != tc.want {
				t.Errorf("RouteRefreshInterval = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestParseLogLevel(t *testing.T) {
	tests := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{in: "Debug", want: slog.LevelDebug},
		{in: "DEBUG", want: slog.LevelDebug},
		{in: "Trace", want: slog.LevelDebug},
		{in: "", want: slog.LevelInfo},
		{in: "info", want: slog.LevelInfo},
		{in: "Warning", want: slog.LevelWarn},
		{in: "warn", want: slog.LevelWarn},
		{in: "Error", want: slog.LevelError},
		{in: "Fatal", want: slog.LevelError},
		{in: "panic", want: slog.LevelError},
		{in: "verbose", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseLogLevel(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseLogLevel(%q) error %v, want error %v", tc.in, err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Errorf("ParseLogLevel(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

// recorder is a Refresher that remembers the last interval it was given.
type recorder struct {
	mu  sync.Mutex
	got []time.Duration
}

func (r *recorder) SetRefreshInterval(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, d)
}

func (r *recorder) last() (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) == 0 {
		return 0, false
	}
	return r.got[len(r.got)-1], true
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, 10*time.Second, what, cond)
}

func felixConfig(name string, spec api.FelixConfigurationSpec) *api.FelixConfiguration {
	f := &api.FelixConfiguration{Spec: spec}
	f.Kind, f.APIVersion, f.Name = "FelixConfiguration", api.GroupVersion, name
	return f
}

// startWatch connects a confwatch cache to a fresh real etcd and returns
// the store to write through.
func startWatch(t *testing.T) (datastore.Store, *confwatch.Watcher, context.Context) {
	t.Helper()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	store := storetest.Etcd(t, ctx, srv.Endpoints)
	w := confwatch.New(store, quiet(), nil)
	go w.Run(ctx)
	return store, w, ctx
}

// FelixConfiguration in the datastore steers the agent's log level and
// the route refresh at runtime: default for every node, node.<name> over
// it field by field, deletes fall back.
func TestFelixConfigFollowsDatastore(t *testing.T) {
	store, w, ctx := startWatch(t)
	logs := &proctest.Log{}
	level := new(slog.LevelVar)
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: level}))
	rec := &recorder{}
	fc := NewFelixConfig(FelixConfigOptions{Node: "n1", Level: level, RouteRefreshers: []Refresher{rec}}, w, logger)
	go fc.Run(ctx)

	// expect waits for the level and interval and then checks that a
	// debug line from elsewhere in the agent shows exactly when Debug is
	// in effect.
	expect := func(step string, lvl slog.Level, refresh time.Duration) {
		t.Helper()
		eventually(t, step, func() bool {
			d, ok := rec.last()
			return ok && d == refresh && level.Level() == lvl
		})
		probe := "probe " + step
		logger.With("component", "endpoints").Debug(probe)
		if shown := strings.Contains(logs.String(), probe); shown != (lvl == slog.LevelDebug) {
			t.Errorf("%s: debug line shown = %v at level %s\n%s", step, shown, lvl, logs.String())
		}
	}
	expect("no FelixConfiguration", slog.LevelInfo, DefaultRefreshInterval)
	if strings.Contains(logs.String(), "FelixConfiguration in effect") {
		t.Errorf("debug line logged at level Info:\n%s", logs.String())
	}

	if _, err := store.Apply(ctx, felixConfig("default", api.FelixConfigurationSpec{
		LogSeverityScreen: "Debug", RouteRefreshInterval: &api.Duration{Duration: 10 * time.Second},
	})); err != nil {
		t.Fatal(err)
	}
	expect("default Debug", slog.LevelDebug, 10*time.Second)
	if !strings.Contains(logs.String(), "FelixConfiguration in effect") {
		t.Errorf("the actor's own debug line missing after Debug:\n%s", logs.String())
	}

	// Another node's configuration changes nothing here.
	if _, err := store.Apply(ctx, felixConfig("node.n2", api.FelixConfigurationSpec{LogSeverityScreen: "Error"})); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(ctx, felixConfig("node.n1", api.FelixConfigurationSpec{
		LogSeverityScreen: "Warning", RouteRefreshInterval: &api.Duration{},
	})); err != nil {
		t.Fatal(err)
	}
	expect("node.n1 Warning and refresh 0", slog.LevelWarn, 0)

	// Only the level in node.n1: the refresh comes from default again.
	if _, err := store.Apply(ctx, felixConfig("node.n1", api.FelixConfigurationSpec{LogSeverityScreen: "Fatal"})); err != nil {
		t.Fatal(err)
	}
	expect("node.n1 Fatal", slog.LevelError, 10*time.Second)

	if _, err := store.Delete(ctx, "FelixConfiguration", "", "node.n1", ""); err != nil {
		t.Fatal(err)
	}
	expect("node.n1 deleted", slog.LevelDebug, 10*time.Second)

	if _, err := store.Apply(ctx, felixConfig("default", api.FelixConfigurationSpec{})); err != nil {
		t.Fatal(err)
	}
	expect("default emptied", slog.LevelInfo, DefaultRefreshInterval)
}

// FELIX_* settings outrank both FelixConfigurations; a level given by
// flag or environment (Level nil) is left alone.
func TestFelixConfigEnvironmentWins(t *testing.T) {
	ctx, cancel, src, w := runWatcher()
	defer cancel()
	logs := &proctest.Log{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	rec := &recorder{}
	env := &api.FelixConfigurationSpec{RouteRefreshInterval: &api.Duration{Duration: 5 * time.Second}}
	fc := NewFelixConfig(FelixConfigOptions{Node: "n1", Env: env}, w, logger)
	fc.AddRouteRefresher(rec)
	go fc.Run(ctx)

	eventually(t, "the environment's interval", func() bool { d, ok := rec.last(); return ok && d == 5*time.Second })
	fcv := felixConfig("node.n1", api.FelixConfigurationSpec{LogSeverityScreen: "Debug", RouteRefreshInterval: &api.Duration{Duration: time.Second}})
	fcv.ResourceVersion = "20"
	src.events <- datastore.Event{Type: datastore.Added, Object: fcv, Revision: 20}
	eventually(t, "the ignored level reported", func() bool {
		return strings.Contains(logs.String(), "logSeverityScreen ignored")
	})
	if d, _ := rec.last(); d != 5*time.Second {
		t.Errorf("refresh interval %s, want the environment's 5s over node.n1's 1s", d)
	}
}

// End to end on a kernel: with routeRefreshInterval left at its default
// a workload route deleted behind the agent's back stays deleted for the
// test's short wait; setting routeRefreshInterval in the datastore makes
// the route table repair it, and 0 turns the repair off again.
func TestRouteRefreshIntervalFromDatastore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	store, w, ctx := startWatch(t)
	ns := netnstest.New(t, "agent-refresh")
	ns.MustRun(t, "ip", "link", "add", "cali1", "type", "veth", "peer", "name", "cali1p")
	ns.MustRun(t, "ip", "link", "set", "cali1", "up")
	ns.MustRun(t, "ip", "link", "set", "cali1p", "up")
	nl := ns.Netlink(t)

	if _, err := store.Create(ctx, wep("n1", "a", "cali1", 0, "10.65.0.1/32")); err != nil {
		t.Fatal(err)
	}
	table := routetable.New(nl, DefaultRefreshInterval, quiet())
	table.Expect(routes.SourceWorkloads)
	ep := NewEndpoints("n1", w, table, func(string, string) error { return nil }, DefaultRefreshInterval, quiet())
	fc := NewFelixConfig(FelixConfigOptions{Node: "n1", RouteRefreshers: []Refresher{table, ep}}, w, quiet())
	go table.Run(ctx)
	go ep.Run(ctx)
	go fc.Run(ctx)

	dst := &netlink.Route{Dst: mustNet(t, "10.65.0.1/32"), Protocol: routeproto.Calico}
	present := func() bool {
		rs, err := nl.RouteListFiltered(netlink.FAMILY_V4, dst, netlink.RT_FILTER_DST|netlink.RT_FILTER_PROTOCOL)
		return err == nil && len(rs) == 1
	}
	remove := func() {
		t.Helper()
		rs, err := nl.RouteListFiltered(netlink.FAMILY_V4, dst, netlink.RT_FILTER_DST|netlink.RT_FILTER_PROTOCOL)
		if err != nil || len(rs) != 1 {
			t.Fatalf("workload route not there to delete: %v %v", rs, err)
		}
		if err := nl.RouteDel(&rs[0]); err != nil {
			t.Fatal(err)
		}
	}
	comesBack := func(within time.Duration) bool {
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if present() {
				return true
			}
		}
		return false
	}
	eventually(t, "the workload route", present)

	remove()
	if comesBack(700 * time.Millisecond) {
		t.Fatal("route repaired within 700ms with the default 90s refresh")
	}
	if _, err := store.Apply(ctx, felixConfig("node.n1", api.FelixConfigurationSpec{RouteRefreshInterval: &api.Duration{Duration: 100 * time.Millisecond}})); err != nil {
		t.Fatal(err)
	}
	if !comesBack(5 * time.Second) {
		t.Fatal("route not repaired after routeRefreshInterval 100ms was set")
	}

	if _, err := store.Apply(ctx, felixConfig("node.n1", api.FelixConfigurationSpec{RouteRefreshInterval: &api.Duration{}})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the change reaching the table
	remove()
	if comesBack(700 * time.Millisecond) {
		t.Error("route repaired with routeRefreshInterval 0")
	}
}

func mustNet(t *testing.T, s string) *net.IPNet {
	t.Helper()
	p := netip.MustParsePrefix(s)
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

type fakeRemover struct{ calls [][]string }

func (f *fakeRemover) SetRemoveExternalRoutes(p []string) { f.calls = append(f.calls, p) }

// TestRemoveExternalRoutesSetting: removeExternalRoutes (true when unset,
// as in Felix) hands the workload interface prefixes to the route table,
// false hands it none; it is passed on once per change.
func TestRemoveExternalRoutesSetting(t *testing.T) {
	r := &fakeRemover{}
	fc := NewFelixConfig(FelixConfigOptions{Node: "n1"}, nil, quiet())
	fc.AddExternalRouteRemover(r)
	off := false
	for _, spec := range []api.FelixConfigurationSpec{
		{},
		{LogSeverityScreen: "Info"}, // no change: not passed on again
		{InterfacePrefix: "cali,tap"},
		{InterfacePrefix: "cali,tap", RemoveExternalRoutes: &off},
	} {
		fc.apply(spec)
	}
	want := [][]string{{"cali"}, {"cali", "tap"}, nil}
	if fmt.Sprint(r.calls) != fmt.Sprint(want) || r.calls[2] != nil {
		t.Errorf("route table told %q, want %q", r.calls, want)
	}
}
