package node

import (
	"testing"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// TestControllersMetricsConfig: kube-controllers' metrics port is
// KubeControllersConfiguration's prometheusMetricsPort, 9094 when unset,
// off at 0, as calico-kube-controllers reads it.
func TestControllersMetricsConfig(t *testing.T) {
	kcc := func(port *int) *api.KubeControllersConfiguration {
		return &api.KubeControllersConfiguration{Spec: api.KubeControllersConfigurationSpec{PrometheusMetricsPort: port}}
	}
	p := func(n int) *int { return &n }
	tests := []struct {
		name string
		kcc  *api.KubeControllersConfiguration
		want agent.MetricsConfig
	}{
		{"no resource", nil, agent.MetricsConfig{Enabled: true, Addr: ":9094", GoMetrics: true, ProcessMetrics: true}},
		{"unset", kcc(nil), agent.MetricsConfig{Enabled: true, Addr: ":9094", GoMetrics: true, ProcessMetrics: true}},
		{"set", kcc(p(9200)), agent.MetricsConfig{Enabled: true, Addr: ":9200", GoMetrics: true, ProcessMetrics: true}},
		{"0 disables", kcc(p(0)), agent.MetricsConfig{Addr: ":0", GoMetrics: true, ProcessMetrics: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := controllersMetricsConfig(tc.kcc); got != tc.want {
				t.Errorf("controllersMetricsConfig = %+v, want %+v", got, tc.want)
			}
		})
	}
}
