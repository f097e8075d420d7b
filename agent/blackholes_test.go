package agent

import (
	"context"
	"net/netip"
	"testing"

	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/internal/ipam"
)

func TestBlackholes(t *testing.T) {
	ch := make(chan ipam.BlockSnapshot, 2)
	s := &sink{got: map[string][]routes.Route{}, ch: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go NewBlackholes("n1", func(context.Context) <-chan ipam.BlockSnapshot { return ch }, s, quiet()).Run(ctx)
	ch <- ipam.BlockSnapshot{Affinity: map[netip.Prefix]string{
		netip.MustParsePrefix("10.0.1.0/26"): "n1",
		netip.MustParsePrefix("10.0.0.0/26"): "n1",
		netip.MustParsePrefix("10.0.2.0/26"): "n2",
		netip.MustParsePrefix("fd00::/122"):  "n1",
		netip.MustParsePrefix("10.0.3.0/26"): "",
	}}
	s.wait(t, routes.SourceBlackhole, "10.0.0.0/26 blackhole", "10.0.1.0/26 blackhole", "fd00::/122 blackhole")
}
