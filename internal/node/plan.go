package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/vishvananda/netlink"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/overlay"
	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/agent/routetable"
	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/bgp"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/connect"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// planCommand is `calico-node plan`: what the agent would write to this
// node's kernel now, as a diff against what is there, changing nothing.
// It reads the same flags and environment as `run`, so that in the
// calico-node container it plans for the agent beside it.
func planCommand() *cli.Command {
	return &cli.Command{
		Name: "plan",
		Usage: "print what the agent would write now — iptables-restore and ipset input, routes, BGP advertisements — " +
			"as a diff against the kernel; changes nothing",
		Flags: runFlags(),
		Action: func(c *cli.Context) error {
			cfg, err := runConfigFrom(c, os.Getenv)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context, 2*time.Minute)
			defer cancel()
			logger := slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn}))
			return runPlan(ctx, cfg, c.App.Writer, logger)
		},
	}
}

// runPlan computes each dataplane part's desired state with the agent's
// own functions, reads the kernel and prints the difference.
func runPlan(ctx context.Context, cfg runConfig, w io.Writer, logger *slog.Logger) error {
	ds := cfg.datastore
	if ds.EffectiveType() == datastore.TypeEtcd && len(ds.Endpoints) == 0 {
		// `run` serves its embedded etcd there.
		ds.Endpoints = []string{cfg.embedClient}
	}
	store, err := connect.New(ctx, ds)
	if err != nil {
		return fmt.Errorf("connect to datastore: %w", err)
	}
	defer store.Close()
	var kinds []string
	for _, k := range api.Kinds() {
		kinds = append(kinds, k.Kind)
	}
	objs, err := confwatch.Load(ctx, store, kinds...)
	if err != nil {
		return err
	}
	node, felixEnv := cfg.node.NodeName, cfg.kube.felix.Spec
	p := &planner{w: w, log: logger, node: node}
	fmt.Fprintf(w, "calico-node plan for node %s: what the agent would write now (nothing is changed)\n", node)
	if _, ok := objs[confwatch.Key{Kind: "Node", Name: node}]; !ok {
		p.note("there is no Node %s in the datastore: `calico-node run` registers it first", node)
	}
	if cfg.dataplane {
		if err := p.iptables(ctx, objs, felixEnv); err != nil {
			return err
		}
	}
	var blocks ipam.BlockSnapshot
	if cfg.dataplane || cfg.bgp.enabled {
		if blocks, err = firstBlocks(ctx, store.IPAM(), logger); err != nil {
			return err
		}
	}
	var planned bgp.Planned
	if cfg.bgp.enabled {
		if planned, err = bgp.Plan(ctx, node, kindObjs(objs, bgp.Kinds()), store.IPAM(), bgp.SecretsDir(cfg.bgp.secretsDir), logger); err != nil {
			return err
		}
	}
	if cfg.dataplane || cfg.bgp.enabled {
		if err := p.routes(cfg, objs, blocks, felixEnv); err != nil {
			return err
		}
	}
	if cfg.bgp.enabled {
		p.adverts(ctx, planned, cfg.bgp.statusSocket)
	}
	for _, n := range p.notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

type planner struct {
	w     io.Writer
	log   *slog.Logger
	node  string
	notes []string
}

func (p *planner) note(format string, args ...any) {
	p.notes = append(p.notes, fmt.Sprintf(format, args...))
}

// iptables compiles the node's policy as the policy actor does and asks
// the iptables programmer what it would write.
func (p *planner) iptables(ctx context.Context, objs map[confwatch.Key]api.Object, felixEnv *api.FelixConfigurationSpec) error {
	runner := xtables.ExecRunner{}
	mode, err := iptablesMode(ctx, runner, felixEnv)
	if err != nil {
		return err
	}
	b6 := xtables.BackendFor(mode, 6)
	_, err = exec.LookPath(b6.Save)
	ipv6 := err == nil
	s := agent.PolicySnapshot(objs, p.node, felixEnv)
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	randomFully := xtables.RandomFully(ctx, runner, xtables.BackendFor(mode, 4), string(release))
	if err := agent.CompleteSnapshot(s, agent.NetlinkHostInterfaces, ipv6, randomFully); err != nil {
		return err
	}
	maxSize := agent.MaxIPSetSize(agent.FelixSpec(objs, p.node, felixEnv))
	res := policy.Compile(s)
	for _, pr := range res.Problems {
		p.note("policy: %s", pr)
	}
	for _, f := range []*policy.Family{res.V4, res.V6} {
		if f == nil {
			continue
		}
		b := xtables.BackendFor(mode, f.Version)
		prog := xtables.New(b, runner, nil, p.log)
		prog.SetMaxIPSetSize(maxSize)
		plan, err := prog.Plan(ctx, f)
		if err != nil {
			return err
		}
		st := plan.Stats
		fmt.Fprintf(p.w, "\n== iptables and ipsets, IPv%d (%s)", f.Version, mode)
		if plan.Empty() {
			fmt.Fprintf(p.w, ": in sync\n")
			continue
		}
		fmt.Fprintf(p.w, ": %d chains to write, %d to delete, %d hooks to fix; %d IP sets to write, %d to destroy\n",
			st.ChainsWritten, st.ChainsDeleted, st.HooksFixed, st.SetsWritten, st.SetsDeleted)
		if plan.IPSets != "" {
			fmt.Fprintf(p.w, "-- ipset restore (first)\n%s", plan.IPSets)
		}
		if plan.Restore != "" {
			fmt.Fprintf(p.w, "-- %s --noflush\n%s", b.Restore, plan.Restore)
		}
		if plan.DestroySets != "" {
			fmt.Fprintf(p.w, "-- ipset restore (last)\n%s", plan.DestroySets)
		}
	}
	return nil
}

// routes hands a route table the routes each producer would publish and
// asks it what a reconcile would change.
func (p *planner) routes(cfg runConfig, objs map[confwatch.Key]api.Object, blocks ipam.BlockSnapshot, felixEnv *api.FelixConfigurationSpec) error {
	nl, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("open netlink: %w", err)
	}
	defer nl.Close()
	k := readOnlyNetlink{nl}
	t := routetable.New(k, 0, p.log)
	if cfg.dataplane {
		var weps []*api.WorkloadEndpoint
		for _, o := range objs {
			if w, ok := o.(*api.WorkloadEndpoint); ok && w.Spec.Node == p.node {
				weps = append(weps, w)
			}
		}
		slices.SortFunc(weps, func(a, b *api.WorkloadEndpoint) int {
			return strings.Compare(a.Spec.InterfaceName, b.Spec.InterfaceName)
		})
		t.Set(routes.SourceWorkloads, agent.WorkloadRoutes(weps, agent.DeviceRouteSourceFor(agent.FelixSpec(objs, p.node, felixEnv)), p.log))
		t.Set(routes.SourceBlackhole, agent.BlackholeRoutes(p.node, blocks.Affinity))
		d, err := overlay.Plan(overlay.Config{NodeName: p.node, FelixEnv: felixEnv, Logger: p.log}, kindObjs(objs, overlay.Kinds()), blocks, k)
		if err != nil {
			return err
		}
		rs := d.Routes
		if d.IPIP != nil {
			if _, err := nl.LinkByName(overlay.IPIPDevice); err != nil {
				p.note("IP-in-IP routes assume %s can be set up (the agent leaves them out when the kernel has no ipip module)", overlay.IPIPDevice)
			}
			rs = append(rs, d.IPIPRoutes...)
		}
		t.Set(routes.SourceTunnels, rs)
	}
	plan, err := t.Plan()
	if err != nil {
		return err
	}
	// Routes learned over BGP are the speaker's to keep or withdraw:
	// they come from the peers, not from the datastore.
	var learned, del []routes.Route
	for _, r := range plan.Delete {
		if cfg.bgp.enabled && r.Via.IsValid() {
			learned = append(learned, r)
		} else {
			del = append(del, r)
		}
	}
	fmt.Fprintf(p.w, "\n== routes (protocol %d)", 80)
	if len(plan.Add)+len(plan.Replace)+len(del)+len(plan.Skipped) == 0 {
		fmt.Fprintf(p.w, ": in sync (%d)\n", plan.Unchanged)
	} else {
		fmt.Fprintf(p.w, ": %d to add, %d to replace, %d to delete, %d unchanged\n", len(plan.Add), len(plan.Replace), len(del), plan.Unchanged)
	}
	for _, r := range plan.Add {
		fmt.Fprintf(p.w, "+ %s\n", r)
	}
	for _, r := range plan.Replace {
		fmt.Fprintf(p.w, "~ %s\n", r)
	}
	for _, r := range del {
		fmt.Fprintf(p.w, "- %s\n", r)
	}
	for _, r := range plan.Skipped {
		fmt.Fprintf(p.w, "! %s (its device does not exist yet: added when it appears)\n", r)
	}
	for _, r := range learned {
		fmt.Fprintf(p.w, "  %s (learned over BGP: the speaker's, kept while its session lasts)\n", r)
	}
	return nil
}

// adverts prints what the BGP speaker would originate as a diff against
// what the running speaker originates now, asked over the agent's BGP
// status socket (the `calicoctl node routes` query). With no speaker to
// ask it says so and lists the planned routes.
func (p *planner) adverts(ctx context.Context, d bgp.Planned, sock string) {
	for _, pr := range d.Problems {
		p.note("bgp: %s", pr)
	}
	if !d.OK {
		fmt.Fprintf(p.w, "\n== BGP advertisements: none (node %s has no BGP address: no speaker runs)\n", p.node)
		return
	}
	fmt.Fprintf(p.w, "\n== BGP advertisements (AS %d, router ID %s)", d.Identity.AS, d.Identity.RouterID)
	live, err := liveAdverts(ctx, sock, p.node)
	if err != nil {
		why := err.Error()
		if errors.Is(err, bgp.ErrNotRunning) {
			why = "no agent answers at " + sock
		}
		fmt.Fprintf(p.w, ": %d; no BGP speaker is reachable (%s): the list is what a speaker would advertise, not a diff\n", len(d.Adverts), why)
		for _, a := range d.Adverts {
			fmt.Fprintf(p.w, "  %s\n", advertText(a))
		}
		return
	}
	diff := diffAdverts(d.Adverts, live)
	if len(diff.add)+len(diff.del) == 0 {
		fmt.Fprintf(p.w, ": in sync with the running speaker (%d)\n", len(diff.same))
	} else {
		fmt.Fprintf(p.w, ": against the running speaker, %d to advertise, %d to withdraw, %d unchanged\n", len(diff.add), len(diff.del), len(diff.same))
	}
	for _, a := range diff.add {
		fmt.Fprintf(p.w, "+ %s\n", advertText(a))
	}
	for _, r := range diff.del {
		fmt.Fprintf(p.w, "- %s next hop %s\n", r.Prefix, r.NextHop)
	}
	for _, a := range diff.same {
		fmt.Fprintf(p.w, "  %s\n", advertText(a))
	}
}

// advertText is one advertisement as plan prints it.
func advertText(a bgp.Advert) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s next hop %s", a.Prefix, a.NextHop)
	for _, c := range a.Communities {
		fmt.Fprintf(&b, " community %d:%d", c>>16, c&0xffff)
	}
	for _, c := range a.Large {
		fmt.Fprintf(&b, " large-community %d:%d:%d", c[0], c[1], c[2])
	}
	return b.String()
}

// liveAdverts are the routes the speaker behind sock originates now:
// the paths of its global RIB that no peer sent.
func liveAdverts(ctx context.Context, sock, node string) ([]bgp.RouteEntry, error) {
	if sock == "" || sock == "none" {
		return nil, errors.New("the BGP status socket is off")
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rep, err := bgp.QueryRoutes(qctx, sock)
	if err != nil {
		return nil, err
	}
	if rep.Node != node {
		return nil, fmt.Errorf("the speaker at %s is node %s's", sock, rep.Node)
	}
	var out []bgp.RouteEntry
	for _, r := range rep.Routes {
		if r.From == "" && !r.Filtered {
			out = append(out, r)
		}
	}
	return out, nil
}

// advertDiff is the planned advertisements against the live ones.
type advertDiff struct {
	add, same []bgp.Advert
	del       []bgp.RouteEntry
}

// diffAdverts compares by prefix and next hop: the routes report the
// speaker answers does not carry communities, so a change of communities
// alone is not shown (docs/decisions.md).
func diffAdverts(planned []bgp.Advert, live []bgp.RouteEntry) advertDiff {
	key := func(prefix, nextHop string) string { return prefix + " " + nextHop }
	have := map[string]bool{}
	for _, r := range live {
		have[key(r.Prefix, r.NextHop)] = true
	}
	var d advertDiff
	want := map[string]bool{}
	for _, a := range planned {
		k := key(a.Prefix.String(), a.NextHop.String())
		want[k] = true
		if have[k] {
			d.same = append(d.same, a)
		} else {
			d.add = append(d.add, a)
		}
	}
	for _, r := range live {
		if k := key(r.Prefix, r.NextHop); !want[k] {
			want[k] = true // listed once, however many local paths
			d.del = append(d.del, r)
		}
	}
	return d
}

// kindObjs are the objects of kinds.
func kindObjs(objs map[confwatch.Key]api.Object, kinds []string) []api.Object {
	var out []api.Object
	for k, o := range objs {
		if slices.Contains(kinds, k.Kind) {
			out = append(out, o)
		}
	}
	return out
}

// firstBlocks is the block affinities as the blackhole and overlay
// actors first see them.
func firstBlocks(ctx context.Context, kv datastore.KV, logger *slog.Logger) (ipam.BlockSnapshot, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	select {
	case s, ok := <-ipam.WatchBlocks(wctx, kv, logger):
		if !ok {
			return ipam.BlockSnapshot{}, ctx.Err()
		}
		return s, nil
	case <-ctx.Done():
		return ipam.BlockSnapshot{}, fmt.Errorf("read IPAM blocks: %w", ctx.Err())
	}
}

// errReadOnly is what readOnlyNetlink answers every write with.
var errReadOnly = errors.New("calico-node plan changes nothing")

// readOnlyNetlink passes reads to the handle and refuses every write, so
// that plan cannot change the kernel even by mistake.
type readOnlyNetlink struct{ *netlink.Handle }

func (readOnlyNetlink) RouteReplace(*netlink.Route) error                        { return errReadOnly }
func (readOnlyNetlink) RouteDel(*netlink.Route) error                            { return errReadOnly }
func (readOnlyNetlink) LinkAdd(netlink.Link) error                               { return errReadOnly }
func (readOnlyNetlink) LinkDel(netlink.Link) error                               { return errReadOnly }
func (readOnlyNetlink) LinkSetUp(netlink.Link) error                             { return errReadOnly }
func (readOnlyNetlink) LinkSetMTU(netlink.Link, int) error                       { return errReadOnly }
func (readOnlyNetlink) LinkSetHardwareAddr(netlink.Link, net.HardwareAddr) error { return errReadOnly }
func (readOnlyNetlink) AddrAdd(netlink.Link, *netlink.Addr) error                { return errReadOnly }
func (readOnlyNetlink) AddrDel(netlink.Link, *netlink.Addr) error                { return errReadOnly }
func (readOnlyNetlink) NeighSet(*netlink.Neigh) error                            { return errReadOnly }
func (readOnlyNetlink) NeighDel(*netlink.Neigh) error                            { return errReadOnly }
