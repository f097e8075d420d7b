package node

import (
	"context"
	"fmt"
	"os"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/overlay"
	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// dataplaneResync is how often the overlay re-reads the kernel and repairs
// drift even when nothing changed (Felix's default refresh interval).
const dataplaneResync = agent.DefaultRefreshInterval

// dataplane are the felix-replacement actors. They program the network
// namespace the process runs in.
type dataplane struct {
	ready      *agent.DatastoreReady // ClusterInformation's datastoreReady: gates the others
	endpoints  *agent.Endpoints      // workload host routes, veth sysctls
	blackholes *agent.Blackholes     // blackhole routes for this node's blocks
	policy     *agent.Policy         // iptables and ipsets
	overlay    *overlay.Overlay      // VXLAN and IP-in-IP devices and routes
}

// dataplane builds the dataplane actors on a's confwatch, route table and
// FelixConfiguration actor, which applies routeRefreshInterval to the
// endpoints. iptables missing is an error: without it no policy can be
// enforced, and running anyway would fail open.
func (b *builder) dataplane(ctx context.Context, a *actors) (*dataplane, error) {
	node, felixEnv := b.cfg.node.NodeName, b.cfg.kube.felix.Spec // felixEnv: FELIX_*, may be nil
	// While a migration has the datastore locked, Felix programs nothing;
	// so do the dataplane actors (BGP, like BIRD, carries on).
	dp := &dataplane{ready: agent.NewDatastoreReady(a.confwatch, b.log)}
	dp.endpoints = agent.NewEndpoints(node, a.confwatch, a.routes, agent.ProcSysctl, agent.RouteRefreshInterval(felixEnv), b.log)
	dp.endpoints.Gate = dp.ready
	dp.endpoints.Env = felixEnv
	a.felixConfig.AddRouteRefresher(dp.endpoints)
	// The dataplane owns the routes to workload interfaces: other
	// software's routes there go, as with Felix (removeExternalRoutes).
	a.felixConfig.AddExternalRouteRemover(a.routes)
	blocks := func(ctx context.Context) <-chan ipam.BlockSnapshot {
		return ipam.WatchBlocks(ctx, a.watchKV, b.log)
	}
	dp.blackholes = agent.NewBlackholes(node, blocks, a.routes, b.log)
	dp.blackholes.Gate = dp.ready

	// The host's iptables flavour, not the image's default: in the
	// calico-node container `iptables` is the image's (xtables.DetectMode).
	runner := xtables.ExecRunner{}
	mode, err := iptablesMode(ctx, runner, felixEnv)
	if err != nil {
		return nil, fmt.Errorf("dataplane: %w", err)
	}
	have := func(be xtables.Backend) error {
		_, err := runner.Run(ctx, be.Save, []string{"--version"}, "")
		return err
	}
	b4, b6 := xtables.BackendFor(mode, 4), xtables.BackendFor(mode, 6)
	if err := have(b4); err != nil {
		return nil, fmt.Errorf("dataplane: %w (is the iptables package installed?)", err)
	}
	metrics := xtables.NewMetrics(b.reg)
	var v6 agent.Applier
	if err := have(b6); err == nil {
		v6 = xtablesApplier{xtables.New(b6, runner, metrics, b.log)}
	} else {
		b.log.Warn("no ip6tables: IPv6 policy is not programmed", "err", err)
	}
	b.log.Info("iptables backend", "mode", b4.Mode)
	// iptablesRefreshInterval (how soon a rule deleted by hand is
	// restored) is read by the actor from the merged configuration: the
	// default applies when neither FELIX_* nor the datastore sets it.
	// Felix adds --random-fully to natOutgoing's rules where iptables and
	// the kernel support it.
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	dp.policy = agent.NewPolicy(agent.PolicyConfig{
		Node: node, Resync: agent.DefaultRefreshInterval, HostInterfaces: agent.NetlinkHostInterfaces,
		Registerer: b.reg, Logger: b.log,
		NATRandomFully: xtables.RandomFully(ctx, runner, b4, string(release)),
	}, a.confwatch, xtablesApplier{xtables.New(b4, runner, metrics, b.log)}, v6)
	dp.policy.Overrides = felixEnv // FELIX_* env beats the datastore, as in felix
	dp.policy.Gate = dp.ready
	// What policy and routes have programmed, for CNI ADD to wait on.
	dp.policy.Programmed = a.epstatus.PolicyApplied
	a.routes.OnApplied(a.epstatus.RoutesApplied)

	dp.overlay = overlay.New(overlay.Config{NodeName: node, Resync: dataplaneResync, Logger: b.log, FelixEnv: felixEnv}, overlay.Deps{
		Updates: a.confwatch.Subscribe(overlay.Kinds()...),
		Blocks:  blocks,
		Store:   a.store, IPAM: ipam.New(a.store.ipam(), a.store, b.log),
		Kernel: a.nl, Routes: a.routes,
		Health: b.agg.Register("overlay", true, true, 0),
		Gate:   dp.ready,
	})
	return dp, nil
}

// iptablesMode is the iptables flavour the agent programs:
// FELIX_IPTABLESBACKEND's, else the one the host's other users program.
func iptablesMode(ctx context.Context, runner xtables.Runner, felixEnv *api.FelixConfigurationSpec) (string, error) {
	want := ""
	if felixEnv != nil && felixEnv.IptablesBackend != nil {
		switch *felixEnv.IptablesBackend {
		case api.IptablesBackendLegacy:
			want = "legacy"
		case api.IptablesBackendNFTables:
			want = "nft"
		}
	}
	return xtables.DetectMode(ctx, runner, want)
}

// xtablesApplier is the iptables-restore programmer as the policy actor
// uses it: what one Apply changed is for the programmer's own tests.
type xtablesApplier struct{ *xtables.Programmer }

func (x xtablesApplier) Apply(ctx context.Context, f *policy.Family) error {
	_, err := x.Programmer.Apply(ctx, f)
	return err
}
