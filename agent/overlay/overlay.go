package overlay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/projectcalico/calico-node/agent/felixenv"
	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Kinds are the resource kinds the actor needs from confwatch.
func Kinds() []string { return []string{"Node", "IPPool", "FelixConfiguration"} }

// Updates is a confwatch subscription to Kinds(); *confwatch.Subscription
// implements it. The channel closes when ctx ends.
type Updates interface {
	Updates(ctx context.Context) <-chan []confwatch.Update
}

// RouteSink takes the complete set of routes a source wants in the kernel;
// *routetable.Table implements it.
type RouteSink interface {
	Set(source string, rs []routes.Route)
}

// Reporter receives health reports; *health.Reporter implements it.
type Reporter interface {
	Report(live, ready bool, detail string)
}

// BlockWatch streams block affinities; StoreBlocks makes one.
type BlockWatch func(ctx context.Context) <-chan ipam.BlockSnapshot

// StoreBlocks is the BlockWatch of ipam.WatchBlocks on kv.
func StoreBlocks(kv datastore.KV, logger *slog.Logger) BlockWatch {
	return func(ctx context.Context) <-chan ipam.BlockSnapshot { return ipam.WatchBlocks(ctx, kv, logger) }
}

// DefaultResync is how often the kernel state is re-asserted (and the
// tunnel addresses re-checked) with no change seen.
const DefaultResync = 90 * time.Second

// Config configures the actor.
type Config struct {
	NodeName string
	// Resync is the periodic full reconcile; 0 means DefaultResync.
	Resync time.Duration
	Logger *slog.Logger
	// FelixEnv is the FELIX_* environment's FelixConfiguration (nil for
	// none); it outranks the datastore's, as in every other actor.
	FelixEnv *api.FelixConfigurationSpec
}

// Deps are the actor's collaborators.
type Deps struct {
	// Updates is a confwatch subscription to Kinds().
	Updates Updates
	// Blocks streams the IPAM block affinities.
	Blocks BlockWatch
	// Store and IPAM allocate this node's tunnel addresses; both nil
	// leaves the addresses to someone else (the actor then only follows
	// the Node).
	Store Store
	IPAM  IPAM
	// Kernel is a netlink handle in the node's network namespace.
	Kernel Netlink
	// Routes receives the overlay routes under routes.SourceTunnels.
	Routes RouteSink
	// Health, if set, gets the actor's readiness.
	Health Reporter
	// Gate, if set, pauses the actor while it is closed (the datastore is
	// locked for a migration): no tunnel address is allocated and the
	// kernel keeps what was programmed; reopening reconciles in full.
	Gate Gate
}

// Gate says whether the actor may work; changed is closed at the next
// change. *agent.DatastoreReady implements it.
type Gate interface {
	State() (open bool, changed <-chan struct{})
}

// Overlay is the VXLAN / IP-in-IP actor.
type Overlay struct {
	cfg    Config
	deps   Deps
	log    *slog.Logger
	kernel *kernel

	// State below is owned by Run.
	nodes  map[string]*api.Node
	pools  map[string]api.Pool // parsed; a pool that does not parse is absent
	felix  map[string]*api.FelixConfiguration
	blocks ipam.BlockSnapshot
	// last is the state last applied (for the health summary); lastIPIP
	// is set while IP-in-IP is wanted on a kernel without it.
	last     Desired
	lastIPIP *IPIPUnsupportedError
}

// New builds the actor.
func New(cfg Config, deps Deps) *Overlay {
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "overlay")
	return &Overlay{
		cfg: cfg, deps: deps, log: logger,
		kernel: &kernel{nl: deps.Kernel, log: logger},
		nodes:  map[string]*api.Node{},
		pools:  map[string]api.Pool{},
		felix:  map[string]*api.FelixConfiguration{},
	}
}

// Run follows the datastore until ctx is done. Datastore and kernel
// failures are logged, reported through Health and retried with backoff;
// Run returns only when ctx ends.
func (o *Overlay) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates := o.deps.Updates.Updates(ctx)
	blocks := o.deps.Blocks(ctx)
	o.report(false, "waiting for datastore sync")

	tick := time.NewTicker(o.cfg.Resync)
	defer tick.Stop()
	var (
		haveConf, haveBlocks bool
		allocDirty           = true
		kernelDirty          = true
		backoff              time.Duration
		retry                <-chan time.Time
		open                 = true
		gateC                <-chan struct{}
	)
	if o.deps.Gate != nil {
		open, gateC = o.deps.Gate.State()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ups, ok := <-updates:
			if !ok {
				return nil
			}
			alloc, kern := o.apply(ups)
			allocDirty = allocDirty || alloc
			kernelDirty = kernelDirty || kern
			haveConf = true
		case s, ok := <-blocks:
			if !ok {
				return nil
			}
			o.blocks = s
			kernelDirty, haveBlocks = true, true
		case <-tick.C:
			allocDirty, kernelDirty = true, true
		case <-retry:
			retry = nil
		case <-gateC:
			open, gateC = o.deps.Gate.State()
			allocDirty, kernelDirty = true, true
		}
		if !open {
			// Ready, as Felix reports itself while it waits for the
			// datastore: a paused node is not a failed one, and a
			// rollout during a migration must be able to proceed.
			o.report(true, "paused: the datastore is locked (ClusterInformation datastoreReady false)")
			continue
		}
		if !haveConf || !haveBlocks || retry != nil || (!allocDirty && !kernelDirty) {
			continue
		}
		// problems are retried; a kernel without IP-in-IP (o.lastIPIP)
		// cannot be fixed by retrying and only shows in the health report
		// until the configuration no longer asks for IP-in-IP.
		var problems []error
		if allocDirty {
			if err := o.allocate(ctx); err != nil {
				problems = append(problems, err)
			} else {
				allocDirty = false
			}
		}
		if kernelDirty {
			if err := o.reconcile(); err != nil {
				problems = append(problems, err)
			} else {
				kernelDirty = false
			}
		}
		var permanent error
		if o.lastIPIP != nil {
			permanent = o.lastIPIP
		}
		if len(problems) > 0 {
			err := errors.Join(append(problems, permanent)...)
			backoff = min(max(2*backoff, 200*time.Millisecond), 30*time.Second)
			o.log.Warn("overlay reconcile failed; will retry", "err", err, "backoff", backoff)
			o.report(false, err.Error())
			retry = time.After(backoff)
			continue
		}
		backoff = 0
		if permanent != nil {
			o.report(false, permanent.Error())
			continue
		}
		o.report(true, o.summary())
	}
}

// apply folds confwatch updates into the state and says what they
// affect: this node's tunnel addresses (its own Node, pools) and/or the
// kernel state (anything that changes the computation).
func (o *Overlay) apply(ups []confwatch.Update) (alloc, kern bool) {
	for _, u := range ups {
		switch obj := u.Object.(type) {
		case *api.Node:
			old := o.nodes[u.Key.Name]
			if u.Type == confwatch.Delete {
				delete(o.nodes, u.Key.Name)
			} else {
				o.nodes[u.Key.Name] = obj
			}
			if u.Key.Name == o.cfg.NodeName && !sameNodeForAllocation(old, o.nodes[u.Key.Name]) {
				alloc = true
			}
			kern = true
		case *api.IPPool:
			delete(o.pools, u.Key.Name)
			if u.Type != confwatch.Delete {
				if p, err := api.ParsePool(obj); err != nil {
					o.log.Warn("ignoring unusable IP pool", "err", err)
				} else {
					o.pools[u.Key.Name] = p
				}
			}
			alloc, kern = true, true
		case *api.FelixConfiguration:
			if u.Type == confwatch.Delete {
				delete(o.felix, u.Key.Name)
			} else {
				o.felix[u.Key.Name] = obj
			}
			kern = true
		}
	}
	return alloc, kern
}

// sameNodeForAllocation: only labels (pool selection) and the tunnel
// fields matter to allocation, so the actor's own Node writes and
// unrelated edits do not trigger a round of datastore reads.
func sameNodeForAllocation(a, b *api.Node) bool {
	if a == nil || b == nil {
		return a == b
	}
	return maps.Equal(a.Labels, b.Labels) && nodeTunnelState(a) == nodeTunnelState(b)
}

// allocate brings this node's tunnel addresses in line with the pools.
func (o *Overlay) allocate(ctx context.Context) error {
	if o.deps.Store == nil || o.deps.IPAM == nil {
		return nil
	}
	if _, ok := o.nodes[o.cfg.NodeName]; !ok {
		return nil // not registered (yet); its arrival triggers us
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := EnsureTunnelAddrs(actx, o.deps.Store, o.deps.IPAM, o.cfg.NodeName, o.log)
	if err != nil {
		return fmt.Errorf("tunnel addresses: %w", err)
	}
	// Use the stored Node at once rather than waiting for its watch
	// event, unless the cache already has a newer one.
	if cur := o.nodes[o.cfg.NodeName]; cur == nil || revision(cur) <= revision(n) {
		o.nodes[o.cfg.NodeName] = n
	}
	return nil
}

// revision is a resource's etcd mod revision.
func revision(o api.Object) int64 {
	r, _ := strconv.ParseInt(o.Meta().ResourceVersion, 10, 64)
	return r
}

// input is the snapshot Compute works on.
func (o *Overlay) input() (Input, error) {
	in := Input{
		NodeName: o.cfg.NodeName,
		Nodes:    o.nodes,
		Blocks:   o.blocks,
	}
	for _, name := range slices.Sorted(maps.Keys(o.pools)) {
		in.Pools = append(in.Pools, o.pools[name])
	}
	in.Settings = SettingsFor(felixenv.ForNode(o.cfg.NodeName,
		func(name string) *api.FelixConfiguration { return o.felix[name] }, o.cfg.FelixEnv))
	me := o.nodes[o.cfg.NodeName]
	for _, fam := range []int{4, 6} {
		ip, _, ok := NodeAddr(me, fam)
		if !ok {
			continue
		}
		l, err := o.kernel.interfaceWith(ip)
		if err != nil {
			return in, err
		}
		if l == nil {
			continue
		}
		if fam == 4 {
			in.ParentDev = l.Attrs().Name
		} else {
			in.ParentDevV6 = l.Attrs().Name
		}
	}
	return in, nil
}

// reconcile computes the desired state and applies it: devices,
// addresses, neighbour and FDB entries directly, routes through the route
// table. A kernel without IP-in-IP for a pool that wants it is not an
// error here (retrying cannot fix it; the rest is applied regardless): it
// is recorded in o.lastIPIP and logged once.
func (o *Overlay) reconcile() error {
	in, err := o.input()
	if err != nil {
		return err
	}
	d := Compute(in)
	var errs []error
	if err := o.kernel.syncVXLAN(VXLANDevice, d.VXLAN); err != nil {
		errs = append(errs, err)
	}
	if err := o.kernel.syncVXLAN(VXLANDeviceV6, d.VXLANV6); err != nil {
		errs = append(errs, err)
	}
	rs := d.Routes
	var unsupported *IPIPUnsupportedError
	switch err := o.kernel.syncIPIP(d.IPIP); {
	case errors.As(err, &unsupported):
		if o.lastIPIP == nil || !reflect.DeepEqual(o.lastIPIP.Pools, unsupported.Pools) {
			o.log.Error("cannot route IP-in-IP pools", "err", err)
		}
		o.lastIPIP = unsupported
	case err != nil:
		errs = append(errs, err)
	default:
		o.lastIPIP = nil
		rs = append(rs, d.IPIPRoutes...)
	}
	o.deps.Routes.Set(routes.SourceTunnels, rs)
	o.last = d
	return errors.Join(errs...)
}

// summary is the health detail of a node whose overlay is in place.
func (o *Overlay) summary() string {
	d := o.last
	var parts []string
	for _, s := range []*VXLANSpec{d.VXLAN, d.VXLANV6} {
		if s != nil {
			parts = append(parts, fmt.Sprintf("%s %s, %d peers", s.Name, s.Addr.Addr(), len(s.Peers)))
		}
	}
	if d.IPIP != nil {
		parts = append(parts, IPIPDevice+" up")
	}
	if len(parts) == 0 {
		return "no overlay on this node"
	}
	return fmt.Sprintf("%s; %d routes", strings.Join(parts, "; "), len(d.Routes)+len(d.IPIPRoutes))
}

func (o *Overlay) report(ready bool, detail string) {
	if o.deps.Health != nil {
		o.deps.Health.Report(true, ready, detail)
	}
}
