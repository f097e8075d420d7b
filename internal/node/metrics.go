package node

import (
	"context"
	"net"
	"strconv"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// DefaultControllersMetricsPort is KubeControllersConfiguration's default
// prometheusMetricsPort.
const DefaultControllersMetricsPort = 9094

// ctrlMetrics serves the kube-controllers' metrics where
// KubeControllersConfiguration "default" says, as calico-kube-controllers
// does: prometheusMetricsPort on every address, 9094 when the resource or
// the field is missing, off when it is 0. It follows changes at runtime.
type ctrlMetrics struct {
	server *agent.MetricsServer
	watch  agent.Subscriber
}

// controllersMetricsConfig is the endpoint kcc (nil: none) asks for.
func controllersMetricsConfig(kcc *api.KubeControllersConfiguration) agent.MetricsConfig {
	port := DefaultControllersMetricsPort
	if kcc != nil && kcc.Spec.PrometheusMetricsPort != nil {
		port = *kcc.Spec.PrometheusMetricsPort
	}
	return agent.MetricsConfig{Enabled: port > 0, Addr: net.JoinHostPort("", strconv.Itoa(port)), GoMetrics: true, ProcessMetrics: true}
}

// Run serves until ctx is done.
func (c *ctrlMetrics) Run(ctx context.Context) error {
	updates := c.watch.Subscribe("KubeControllersConfiguration").Updates(ctx)
	go func() {
		var kcc *api.KubeControllersConfiguration
		for ups := range updates {
			for _, u := range ups {
				if u.Key.Name != "default" {
					continue
				}
				kcc = nil
				if u.Type != confwatch.Delete {
					kcc, _ = u.Object.(*api.KubeControllersConfiguration)
				}
			}
			c.server.SetMetricsConfig(controllersMetricsConfig(kcc))
		}
	}()
	return c.server.Run(ctx)
}
