package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func wep(node, pod, iface string, rev int, nets ...string) *api.WorkloadEndpoint {
	w := &api.WorkloadEndpoint{}
	w.Kind, w.APIVersion, w.Namespace = "WorkloadEndpoint", api.GroupVersion, "default"
	w.Spec = api.WorkloadEndpointSpec{Orchestrator: "k8s", Node: node, Pod: pod, Endpoint: "eth0", InterfaceName: iface, IPNetworks: nets}
	w.Default()
	w.ResourceVersion = strconv.Itoa(rev)
	return w
}

func TestWorkloadRoutes(t *testing.T) {
	got := WorkloadRoutes([]*api.WorkloadEndpoint{
		wep("n1", "a", "cali1", 1, "10.0.0.1/32", "fd00::1/128"),
		wep("n1", "b", "", 1, "10.0.0.2/32"),  // no interface yet: no route
		wep("n1", "c", "cali3", 1, "garbage"), // bad value: skipped, logged
	}, DeviceRouteSource{}, quiet())
	want := []routes.Route{
		{Dst: netip.MustParsePrefix("10.0.0.1/32"), Dev: "cali1"},
		{Dst: netip.MustParsePrefix("fd00::1/128"), Dev: "cali1"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

// TestDeviceRouteSource: deviceRouteSourceAddress and
// deviceRouteSourceAddressIPv6 become the src of the routes to workloads
// of their family, as Felix programs them; a node's FelixConfiguration
// outranks the default one, and the FELIX_* environment both.
func TestDeviceRouteSource(t *testing.T) {
	felix := func(name string, spec api.FelixConfigurationSpec) api.Object {
		fc := &api.FelixConfiguration{Spec: spec}
		fc.Kind, fc.Name = "FelixConfiguration", name
		return fc
	}
	objs := map[confwatch.Key]api.Object{
		{Kind: "FelixConfiguration", Name: "default"}: felix("default", api.FelixConfigurationSpec{
			DeviceRouteSourceAddress: "192.0.2.1", DeviceRouteSourceAddressIPv6: "2001:db8::1"}),
		{Kind: "FelixConfiguration", Name: "node.n1"}: felix("node.n1", api.FelixConfigurationSpec{DeviceRouteSourceAddress: "192.0.2.7"}),
	}
	weps := []*api.WorkloadEndpoint{wep("n1", "a", "cali1", 1, "10.0.0.1/32", "fd00::1/128")}
	show := func(rs []routes.Route) string { return fmt.Sprint(rs) }
	got := show(WorkloadRoutes(weps, DeviceRouteSourceFor(FelixSpec(objs, "n1", nil)), quiet()))
	if want := "[10.0.0.1/32 dev cali1 src 192.0.2.7 fd00::1/128 dev cali1 src 2001:db8::1]"; got != want {
		t.Errorf("node n1: %s, want %s", got, want)
	}
	got = show(WorkloadRoutes(weps, DeviceRouteSourceFor(FelixSpec(objs, "n2", &api.FelixConfigurationSpec{DeviceRouteSourceAddressIPv6: "2001:db8::9"})), quiet()))
	if want := "[10.0.0.1/32 dev cali1 src 192.0.2.1 fd00::1/128 dev cali1 src 2001:db8::9]"; got != want {
		t.Errorf("node n2 with FELIX_DEVICEROUTESOURCEADDRESSIPV6: %s, want %s", got, want)
	}
	// An address of the wrong family is no source.
	if d := DeviceRouteSourceFor(api.FelixConfigurationSpec{DeviceRouteSourceAddress: "2001:db8::1"}); d.V4.IsValid() || d.V6.IsValid() {
		t.Errorf("IPv6 address as deviceRouteSourceAddress: %+v", d)
	}
}

type fakeSource struct{ events chan datastore.Event }

// runWatcher runs a confwatch.Watcher over a fakeSource until cancel.
func runWatcher() (context.Context, context.CancelFunc, *fakeSource, *confwatch.Watcher) {
	src := &fakeSource{events: make(chan datastore.Event, 10)}
	w := confwatch.New(src, quiet(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	return ctx, cancel, src, w
}

func (f *fakeSource) List(ctx context.Context, kind, ns string) ([]api.Object, int64, error) {
	if kind == "WorkloadEndpoint" {
		return []api.Object{wep("n1", "a", "cali1", 2, "10.0.0.1/32"), wep("n2", "x", "cali9", 3, "10.0.9.1/32")}, 5, nil
	}
	return nil, 5, nil
}

func (f *fakeSource) Watch(ctx context.Context, kind string, from int64) <-chan datastore.Event {
	return f.events
}

type sink struct {
	mu  sync.Mutex
	got map[string][]routes.Route
	ch  chan struct{}
}

func (s *sink) Set(src string, rs []routes.Route) {
	s.mu.Lock()
	s.got[src] = rs
	s.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// wait waits until the routes of source are want (as Route.String shows
// them).
func (s *sink) wait(t *testing.T, source string, want ...string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		s.mu.Lock()
		var got []string
		for _, r := range s.got[source] {
			got = append(got, r.String())
		}
		s.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		select {
		case <-s.ch:
		case <-deadline:
			t.Fatalf("%s routes %q, want %q", source, got, want)
		}
	}
}

// Only this node's endpoints become routes; updates and deletes follow;
// sysctls are written for each local interface that exists.
func TestEndpointsActor(t *testing.T) {
	ctx, cancel, src, w := runWatcher()
	defer cancel()
	s := &sink{got: map[string][]routes.Route{}, ch: make(chan struct{}, 1)}
	var mu sync.Mutex
	written := map[string]string{}
	sysctl := func(path, value string) error {
		mu.Lock()
		defer mu.Unlock()
		if path == "net/ipv4/conf/cali2/proxy_arp" {
			return os.ErrNotExist // interface not there yet
		}
		written[path] = value
		return nil
	}
	e := NewEndpoints("n1", w, s, sysctl, time.Hour, quiet())
	go e.Run(ctx)

	s.wait(t, routes.SourceWorkloads, "10.0.0.1/32 dev cali1")
	src.events <- datastore.Event{Type: datastore.Added, Object: wep("n1", "b", "cali2", 10, "10.0.0.2/32"), Revision: 10}
	s.wait(t, routes.SourceWorkloads, "10.0.0.1/32 dev cali1", "10.0.0.2/32 dev cali2")
	src.events <- datastore.Event{Type: datastore.Deleted, Object: wep("n1", "a", "cali1", 2, "10.0.0.1/32"), Revision: 11}
	s.wait(t, routes.SourceWorkloads, "10.0.0.2/32 dev cali2")

	mu.Lock()
	defer mu.Unlock()
	if written["net/ipv4/conf/cali1/proxy_arp"] != "1" || written["net/ipv4/conf/cali1/rp_filter"] != "0" || written["net/ipv4/neigh/cali1/proxy_delay"] != "0" {
		t.Errorf("sysctls for cali1: %v", written)
	}
	for p := range written {
		if p == "net/ipv4/conf/cali9/proxy_arp" {
			t.Errorf("sysctl written for another node's endpoint")
		}
	}
}

// The endpoints actor re-asserts host veth sysctls on its refresh
// (routeRefreshInterval), not at all when the refresh is 0, and follows a
// change of the interval at runtime. A veth that appears after its
// endpoint gets its sysctls whether or not the refresh runs.
func TestEndpointsRefresh(t *testing.T) {
	tests := []struct {
		name     string
		initial  time.Duration
		later    time.Duration // set at runtime; -1: no change
		reassert bool          // cali1's sysctls written again after the first pass
	}{
		{"short refresh re-asserts", 50 * time.Millisecond, -1, true},
		{"zero never re-asserts", 0, -1, false},
		{"turned on at runtime", 0, 50 * time.Millisecond, true},
		{"turned off at runtime", 50 * time.Millisecond, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel, src, w := runWatcher()
			defer cancel()
			var mu sync.Mutex
			writes := map[string]int{}
			vethUp := false
			sysctl := func(path, value string) error {
				mu.Lock()
				defer mu.Unlock()
				if path == "net/ipv4/conf/cali2/proxy_arp" && !vethUp {
					return os.ErrNotExist
				}
				writes[path]++
				return nil
			}
			count := func(path string) int {
				mu.Lock()
				defer mu.Unlock()
				return writes[path]
			}
			s := &sink{got: map[string][]routes.Route{}, ch: make(chan struct{}, 1)}
			e := NewEndpoints("n1", w, s, sysctl, tc.initial, quiet())
			go e.Run(ctx)
			s.wait(t, routes.SourceWorkloads, "10.0.0.1/32 dev cali1")
			if tc.later >= 0 {
				e.SetRefreshInterval(tc.later)
			}
			// The endpoint of a veth that is not there yet.
			src.events <- datastore.Event{Type: datastore.Added, Object: wep("n1", "b", "cali2", 10, "10.0.0.2/32"), Revision: 10}
			s.wait(t, routes.SourceWorkloads, "10.0.0.1/32 dev cali1", "10.0.0.2/32 dev cali2")
			time.Sleep(100 * time.Millisecond) // a change in flight settles
			before := count("net/ipv4/conf/cali1/proxy_arp")
			mu.Lock()
			vethUp = true
			mu.Unlock()
			time.Sleep(500 * time.Millisecond)
			if got := count("net/ipv4/conf/cali1/proxy_arp") > before; got != tc.reassert {
				t.Errorf("cali1 sysctls re-asserted within 500ms = %v, want %v", got, tc.reassert)
			}
			deadline := time.Now().Add(3 * time.Second)
			for count("net/ipv4/conf/cali2/proxy_arp") == 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if count("net/ipv4/conf/cali2/proxy_arp") == 0 {
				t.Error("sysctls of a late veth never written")
			}
		})
	}
}
