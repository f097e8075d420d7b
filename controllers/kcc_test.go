package controllers

import (
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
)

func dur(d time.Duration) *api.Duration { return &api.Duration{Duration: d} }

// calicoDefaultKCC is the resource Calico's kube-controllers creates when
// there is none (config.NewDefaultKubeControllersConfig, v3.31).
func calicoDefaultKCC() *api.KubeControllersConfigurationSpec {
	five := dur(5 * time.Minute)
	return &api.KubeControllersConfigurationSpec{
		LogSeverityScreen: "Info", HealthChecks: "Enabled", EtcdV3CompactionPeriod: dur(10 * time.Minute),
		Controllers: api.ControllersConfig{
			Node: &api.NodeControllerConfig{ReconcilerPeriod: five, SyncLabels: "Enabled",
				HostEndpoint:    &api.AutoHostEndpointConfig{AutoCreate: "Disabled", CreateDefaultHostEndpoint: api.DefaultHostEndpointsEnabled},
				LeakGracePeriod: dur(15 * time.Minute)},
			Policy:           &api.PolicyControllerConfig{ReconcilerPeriod: five},
			WorkloadEndpoint: &api.WorkloadEndpointControllerConfig{ReconcilerPeriod: five},
			ServiceAccount:   &api.ServiceAccountControllerConfig{ReconcilerPeriod: five},
			Namespace:        &api.NamespaceControllerConfig{ReconcilerPeriod: five},
		},
	}
}

// TestRunConfigFrom: KubeControllersConfiguration merged as Calico's
// kube-controllers merges it with ENABLED_CONTROLLERS set.
func TestRunConfigFrom(t *testing.T) {
	five := 5 * time.Minute
	all := map[string]time.Duration{Namespace: five, ServiceAccount: five, WorkloadEndpoint: five, Policy: five}
	port := 9094
	var profilePort int32 = 6060
	tests := []struct {
		name string
		spec *api.KubeControllersConfigurationSpec
		kdd  bool
		want runConfig
	}{
		{"no resource: Calico's defaults", nil, false, runConfig{logLevel: slog.LevelInfo, syncLabels: true,
			hep: hepConfig{createDefault: true}, reconcile: all, compaction: 10 * time.Minute, leakGrace: 15 * time.Minute}},
		{"Calico's default resource is the same", calicoDefaultKCC(), false, runConfig{logLevel: slog.LevelInfo, syncLabels: true,
			hep: hepConfig{createDefault: true}, reconcile: all, compaction: 10 * time.Minute, leakGrace: 15 * time.Minute}},
		{"no label sync on the Kubernetes datastore", calicoDefaultKCC(), true, runConfig{logLevel: slog.LevelInfo,
			hep: hepConfig{createDefault: true}, reconcile: all, compaction: 10 * time.Minute, leakGrace: 15 * time.Minute}},
		{"everything set", func() *api.KubeControllersConfigurationSpec {
			s := calicoDefaultKCC()
			s.LogSeverityScreen, s.HealthChecks, s.EtcdV3CompactionPeriod = "Debug", "Disabled", dur(0)
			s.PrometheusMetricsPort, s.DebugProfilePort = &port, &profilePort
			s.Controllers.Node.SyncLabels = "Disabled"
			s.Controllers.Node.LeakGracePeriod = dur(time.Minute)
			s.Controllers.Node.HostEndpoint = &api.AutoHostEndpointConfig{AutoCreate: "Enabled", CreateDefaultHostEndpoint: api.DefaultHostEndpointsDisabled,
				Templates: []api.Template{{GenerateName: "t", InterfaceCIDRs: []string{"10.0.0.0/8"}}}}
			s.Controllers.Policy.ReconcilerPeriod = dur(30 * time.Second)
			s.Controllers.Namespace.ReconcilerPeriod = nil
			s.Controllers.ServiceAccount = nil
			s.Controllers.LoadBalancer = &api.LoadBalancerControllerConfig{AssignIPs: api.AllServices}
			return s
		}(), false, runConfig{logLevel: slog.LevelDebug,
			hep:        hepConfig{autoCreate: true, templates: []api.Template{{GenerateName: "t", InterfaceCIDRs: []string{"10.0.0.0/8"}}}},
			reconcile:  map[string]time.Duration{Namespace: five, ServiceAccount: 0, WorkloadEndpoint: five, Policy: 30 * time.Second},
			compaction: 0, leakGrace: time.Minute, profilePort: 6060,
			ignored: []string{
				"healthChecks: Disabled: calico-node's own /liveness and /readiness cover the controllers",
			}}},
		{"loadBalancer RequestedServicesOnly", func() *api.KubeControllersConfigurationSpec {
			s := calicoDefaultKCC()
			s.Controllers.LoadBalancer = &api.LoadBalancerControllerConfig{AssignIPs: api.RequestedServicesOnly}
			return s
		}(), false, runConfig{logLevel: slog.LevelInfo, syncLabels: true, hep: hepConfig{createDefault: true}, reconcile: all,
			compaction: 10 * time.Minute, leakGrace: 15 * time.Minute, assignIPs: api.RequestedServicesOnly}},
		{"hostEndpoint without createDefaultHostEndpoint makes the default one", &api.KubeControllersConfigurationSpec{
			Controllers: api.ControllersConfig{Node: &api.NodeControllerConfig{HostEndpoint: &api.AutoHostEndpointConfig{AutoCreate: "Enabled"}}},
		}, false, runConfig{logLevel: slog.LevelInfo, syncLabels: true, hep: hepConfig{autoCreate: true, createDefault: true},
			reconcile:  map[string]time.Duration{Namespace: 0, ServiceAccount: 0, WorkloadEndpoint: 0, Policy: 0},
			compaction: 10 * time.Minute, leakGrace: 15 * time.Minute}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := runConfigFrom(tc.spec, tc.kdd)
			if tc.want.assignIPs == "" {
				tc.want.assignIPs = api.AllServices
			}
			if !equalRunConfig(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func hepNode(name string, labels map[string]string, mod func(*api.Node)) *api.Node {
	n := calicoNode(name, "", labels)
	n.Spec.BGP = &api.NodeBGPSpec{IPv4Address: "192.0.2.21/24", IPv6Address: "2001:db8::21/64", IPv4IPIPTunnelAddr: "10.50.0.1"}
	n.Spec.IPv4VXLANTunnelAddr = "10.60.0.1"
	n.Spec.Addresses = []api.NodeAddress{
		{Address: "192.0.2.21", Type: api.NodeAddressInternalIP},
		{Address: "192.0.2.22", Type: api.NodeAddressInternalIP},
		{Address: "198.51.100.7", Type: api.NodeAddressExternalIP},
	}
	n.Spec.Interfaces = []api.NodeInterface{
		{Name: "eth0", Addresses: []string{"192.0.2.21", "2001:db8::21"}},
		{Name: "eth1", Addresses: []string{"203.0.113.9"}},
		{Name: "eth2", Addresses: []string{"not-an-ip"}},
	}
	if mod != nil {
		mod(n)
	}
	return n
}

// TestAutoHostEndpoints: the host endpoints Calico's controller makes for
// a node, by configuration.
func TestAutoHostEndpoints(t *testing.T) {
	node := hepNode("n1", map[string]string{"rack": "r1"}, nil)
	other := hepNode("n2", map[string]string{"rack": "r2"}, func(n *api.Node) {
		n.Spec = api.NodeSpec{Addresses: []api.NodeAddress{{Address: "192.0.2.30", Type: api.NodeAddressInternalIP}}}
	})
	allIPs := []string{"192.0.2.21", "2001:db8::21", "10.50.0.1", "10.60.0.1", "192.0.2.22", "203.0.113.9"}
	type hep struct {
		iface  string
		ips    []string
		labels map[string]string
	}
	created := func(l map[string]string) map[string]string {
		out := maps.Clone(l)
		out[AutoHEPCreatedByLabel] = AutoHEPCreatedByValue
		return out
	}
	tests := []struct {
		name string
		cfg  hepConfig
		want map[string]hep
	}{
		{"autoCreate off: none", hepConfig{createDefault: true}, map[string]hep{}},
		{"the default host endpoint per node", hepConfig{autoCreate: true, createDefault: true}, map[string]hep{
			"n1-auto-hep": {"*", allIPs, created(map[string]string{"rack": "r1"})},
			"n2-auto-hep": {"*", []string{"192.0.2.30"}, created(map[string]string{"rack": "r2"})},
		}},
		{"templates", hepConfig{autoCreate: true, templates: []api.Template{
			{GenerateName: "tunnels", InterfaceCIDRs: []string{"10.0.0.0/8"}, NodeSelector: "rack == 'r1'", Labels: map[string]string{"role": "tunnel", "rack": "override"}},
			{GenerateName: "uplink", InterfacePattern: "^eth[01]$", InterfaceCIDRs: []string{"192.0.2.22/32"}},
			{GenerateName: "nomatch", InterfaceCIDRs: []string{"172.16.0.0/12"}},
			{GenerateName: "badcidr", InterfaceCIDRs: []string{"10.0.0.1"}},
		}}, map[string]hep{
			"n1-tunnels-auto-hep":     {"", []string{"10.50.0.1", "10.60.0.1"}, created(map[string]string{"rack": "override", "role": "tunnel"})},
			"n1-uplink-eth0-auto-hep": {"eth0", []string{"192.0.2.22", "192.0.2.21", "2001:db8::21"}, created(map[string]string{"rack": "r1"})},
			"n1-uplink-eth1-auto-hep": {"eth1", []string{"192.0.2.22", "203.0.113.9"}, created(map[string]string{"rack": "r1"})},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := autoHostEndpoints([]*api.Node{node, other}, tc.cfg)
			gotSimple := map[string]hep{}
			for name, h := range got {
				if h.Name != name || !slices.Equal(h.Spec.Profiles, []string{"projectcalico-default-allow"}) || h.Kind != "HostEndpoint" {
					t.Errorf("%s: name %q, profiles %v, kind %q", name, h.Name, h.Spec.Profiles, h.Kind)
				}
				gotSimple[name] = hep{h.Spec.InterfaceName, h.Spec.ExpectedIPs, h.Labels}
			}
			if !reflect.DeepEqual(gotSimple, tc.want) {
				t.Errorf("got  %+v\nwant %+v", gotSimple, tc.want)
			}
		})
	}
	if got := autoHEPName(strings.Repeat("n", 250)); len(got) > 253 || !strings.HasSuffix(got, "-auto-hep") || got == autoHEPName(strings.Repeat("m", 250)) {
		t.Errorf("long name hashed to %q", got)
	}
}
