package node

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// dataplaneResync is how often the overlay re-reads the kernel and repairs
// drift even when nothing changed (Felix's default refresh interval).
const dataplaneResync = agent.DefaultRefreshInterval

// addDataplane adds the felix-replacement actors to g: the workload
// endpoints (host routes, veth sysctls) and policy (iptables, ipsets).
// They program the network namespace the process runs in. felixEnv are
// the FELIX_* settings (may be nil); fc applies routeRefreshInterval to
// the endpoints actor.
func addDataplane(g *run.Group, parent context.Context, node string, w *confwatch.Watcher, rt *routes.Table, fc *agent.FelixConfig, felixEnv *api.FelixConfigurationSpec, future *datastoreFuture, reg prometheus.Registerer, logger *slog.Logger) error {
	// Workload endpoints.
	{
		ep := agent.NewEndpoints(node, w, rt, agent.ProcSysctl, agent.RouteRefreshInterval(felixEnv), logger)
		fc.AddRouteRefresher(ep)
		ctx, cancel := context.WithCancel(parent)
		g.Add(func() error {
			err := ep.Run(ctx)
			logger.Info("endpoints stopped")
			return err
		}, func(error) { cancel() })
	}
	// Blackhole routes for this node's blocks.
	{
		ctx, cancel := context.WithCancel(parent)
		g.Add(func() error {
			store, err := future.wait(ctx)
			if err != nil {
				return nil
			}
			err = agent.NewBlackholes(node, ipam.WatchBlocks(ctx, store.IPAM(), logger), rt, logger).Run(ctx)
			logger.Info("blackholes stopped")
			return err
		}, func(error) { cancel() })
	}
	// Policy: iptables and ipsets. iptables missing is fatal: without it
	// no policy can be enforced, and running anyway would fail open.
	runner := xtables.ExecRunner{}
	b4, err := xtables.Detect(parent, runner, 4)
	if err != nil {
		return fmt.Errorf("dataplane: %w", err)
	}
	metrics := xtables.NewMetrics(reg)
	v4 := xtables.New(b4, runner, metrics, logger)
	var v6 agent.Applier
	if b6, err := xtables.Detect(parent, runner, 6); err == nil {
		v6 = xtables.New(b6, runner, metrics, logger)
	} else {
		logger.Warn("no ip6tables: IPv6 policy is not programmed", "err", err)
	}
	logger.Info("iptables backend", "mode", b4.Mode)
	{
		// iptablesRefreshInterval (how soon a rule deleted by hand is
		// restored) is read by the actor from the merged configuration:
		// the default applies when neither FELIX_* nor the datastore
		// sets it.
		pol := agent.NewPolicy(node, w, v4, v6, hostInterfaces, agent.DefaultRefreshInterval, reg, logger)
		pol.Overrides = felixEnv // FELIX_* env beats the datastore, as in felix
		ctx, cancel := context.WithCancel(parent)
		g.Add(func() error {
			err := pol.Run(ctx)
			logger.Info("policy stopped")
			return err
		}, func(error) { cancel() })
	}
	return nil
}

// hostInterfaces lists the addresses of this namespace's interfaces.
func hostInterfaces() (map[string][]netip.Addr, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := map[string][]netip.Addr{}
	for _, l := range links {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("list addresses of %s: %w", l.Attrs().Name, err)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				out[l.Attrs().Name] = append(out[l.Attrs().Name], ip.Unmap())
			}
		}
	}
	return out, nil
}
