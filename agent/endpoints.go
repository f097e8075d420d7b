package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/projectcalico/calico-node/agent/refresh"
	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// RouteSink receives a producer's complete set of wanted routes.
type RouteSink interface {
	Set(source string, rs []routes.Route)
}

// Subscriber is the part of confwatch the actors use.
type Subscriber interface {
	Subscribe(kinds ...string) *confwatch.Subscription
}

// Endpoints owns the per-workload kernel state on this node: the host
// route to each local WorkloadEndpoint and its host veth's sysctls.
type Endpoints struct {
	// Gate, if set, holds the routes and sysctls as they are while it is
	// closed (the datastore is locked). Set before Run.
	Gate Gate
	// Env is the FELIX_* layer of the configuration (nil: none), for
	// deviceRouteSourceAddress(IPv6). Set before Run.
	Env *api.FelixConfigurationSpec

	node    string
	watch   Subscriber
	sink    RouteSink
	sysctl  SysctlWriter
	log     *slog.Logger
	weps    map[confwatch.Key]*api.WorkloadEndpoint // owned by Run
	felix   map[confwatch.Key]api.Object            // FelixConfigurations, owned by Run
	applied map[string]bool                         // interfaces whose sysctls are set
	refresh *refresh.Ticker                         // periodic re-assertion; 0: none
}

// SysctlWriter writes one sysctl, e.g. ("net/ipv4/conf/cali1/proxy_arp", "1").
type SysctlWriter func(path, value string) error

// ProcSysctl writes under /proc/sys of the calling process's network
// namespace.
func ProcSysctl(path, value string) error {
	return os.WriteFile(filepath.Join("/proc/sys", path), []byte(value), 0o644)
}

// NewEndpoints builds the actor for node. period is how often the host
// veth sysctls are re-asserted and the routes re-published
// (routeRefreshInterval); 0 or less: never.
func NewEndpoints(node string, watch Subscriber, sink RouteSink, sysctl SysctlWriter, period time.Duration, logger *slog.Logger) *Endpoints {
	return &Endpoints{
		node: node, watch: watch, sink: sink, sysctl: sysctl, refresh: refresh.NewTicker(period),
		log:     logger.With("component", "endpoints"),
		weps:    map[confwatch.Key]*api.WorkloadEndpoint{},
		felix:   map[confwatch.Key]api.Object{},
		applied: map[string]bool{},
	}
}

// SetRefreshInterval changes the refresh period at runtime (0 or less:
// none). Safe from any goroutine.
func (e *Endpoints) SetRefreshInterval(d time.Duration) { e.refresh.Set(d) }

// Run follows the WorkloadEndpoints until ctx is done. A host veth that
// does not exist yet when its endpoint arrives is retried with backoff,
// independent of the refresh (which may be off).
func (e *Endpoints) Run(ctx context.Context) error {
	sub := e.watch.Subscribe("WorkloadEndpoint", "FelixConfiguration")
	updates := sub.Updates(ctx)
	tickC := e.refresh.Start()
	defer e.refresh.Stop()
	synced := false
	open, gateC := gateState(e.Gate)
	missingBackoff := time.Duration(0)
	for {
		var missing <-chan time.Time
		if missingBackoff > 0 {
			missing = time.After(missingBackoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case ups, ok := <-updates:
			if !ok {
				return nil
			}
			e.apply(ups)
			synced = true
		case <-e.refresh.Changed():
			tickC = e.refresh.Start()
			continue
		case <-tickC:
			// Re-assert every interface's sysctls: a hand edit does not
			// stick, and a recreated veth gets its settings back.
			clear(e.applied)
		case <-missing:
		case <-gateC:
			open, gateC = gateState(e.Gate)
			clear(e.applied) // reopened: assert everything again
		}
		if !synced || !open {
			continue
		}
		src := DeviceRouteSourceFor(FelixSpec(e.felix, e.node, e.Env))
		e.sink.Set(routes.SourceWorkloads, WorkloadRoutes(e.local(), src, e.log))
		if e.applySysctls() {
			missingBackoff = min(max(2*missingBackoff, 200*time.Millisecond), 10*time.Second)
		} else {
			missingBackoff = 0
		}
	}
}

func (e *Endpoints) apply(ups []confwatch.Update) {
	for _, u := range ups {
		if u.Key.Kind == "FelixConfiguration" {
			if u.Type == confwatch.Delete {
				delete(e.felix, u.Key)
			} else {
				e.felix[u.Key] = u.Object
			}
			continue
		}
		w, ok := u.Object.(*api.WorkloadEndpoint)
		if !ok {
			continue
		}
		if u.Type == confwatch.Delete || w.Spec.Node != e.node {
			if old, had := e.weps[u.Key]; had {
				delete(e.applied, old.Spec.InterfaceName)
			}
			delete(e.weps, u.Key)
			continue
		}
		e.weps[u.Key] = w
	}
}

func (e *Endpoints) local() []*api.WorkloadEndpoint {
	out := make([]*api.WorkloadEndpoint, 0, len(e.weps))
	for _, w := range e.weps {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.InterfaceName < out[j].Spec.InterfaceName })
	return out
}

// applySysctls sets the sysctls of the interfaces not done yet and reports
// whether any interface was missing.
func (e *Endpoints) applySysctls() (missing bool) {
	for _, w := range e.local() {
		iface := w.Spec.InterfaceName
		if iface == "" || e.applied[iface] {
			continue
		}
		if err := ApplyHostVethSysctls(e.sysctl, iface); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				missing = true // veth not there (yet): retried
				continue
			}
			e.log.Warn("host veth sysctls", "iface", iface, "err", err)
			continue
		}
		e.applied[iface] = true
	}
	return missing
}

// DeviceRouteSource is the source address Felix gives the routes to
// workloads of each family (deviceRouteSourceAddress,
// deviceRouteSourceAddressIPv6); invalid: none, the kernel picks.
type DeviceRouteSource struct{ V4, V6 netip.Addr }

// DeviceRouteSourceFor reads the two fields of spec. A value that is not
// an address of its family is left out (validation refuses it on write).
func DeviceRouteSourceFor(spec api.FelixConfigurationSpec) DeviceRouteSource {
	var d DeviceRouteSource
	if a, err := netip.ParseAddr(spec.DeviceRouteSourceAddress); err == nil && a.Is4() {
		d.V4 = a
	}
	if a, err := netip.ParseAddr(spec.DeviceRouteSourceAddressIPv6); err == nil && a.Is6() {
		d.V6 = a
	}
	return d
}

// WorkloadRoutes is the pure part: a /32 or /128 route per address of each
// local endpoint, via its host veth, with src's address of the family.
func WorkloadRoutes(weps []*api.WorkloadEndpoint, src DeviceRouteSource, log *slog.Logger) []routes.Route {
	var out []routes.Route
	for _, w := range weps {
		if w.Spec.InterfaceName == "" {
			continue
		}
		for _, n := range w.Spec.IPNetworks {
			p, err := netip.ParsePrefix(n)
			if err != nil {
				log.Warn("endpoint has a bad ipNetwork", "endpoint", w.Name, "value", n)
				continue
			}
			r := routes.Route{Dst: p.Masked(), Dev: w.Spec.InterfaceName, Src: src.V4}
			if p.Addr().Is6() {
				r.Src = src.V6
			}
			out = append(out, r)
		}
	}
	return out
}

// hostVethSysctls are the settings real Calico v3.31 leaves on a pod's host
// veth (shared/reference/calico-3.31-cni-netns.txt). The CNI plugin sets
// them at ADD; the agent re-asserts them so a hand edit does not stick.
var hostVethSysctls = []struct{ path, value string }{
	{"net/ipv4/conf/%s/proxy_arp", "1"},
	{"net/ipv4/conf/%s/forwarding", "1"},
	{"net/ipv4/conf/%s/rp_filter", "0"},
	{"net/ipv4/conf/%s/route_localnet", "1"},
	{"net/ipv4/conf/%s/accept_local", "0"},
	{"net/ipv4/neigh/%s/proxy_delay", "0"},
	{"net/ipv6/conf/%s/accept_ra", "0"},
}

// ApplyHostVethSysctls writes the host veth settings for iface.
func ApplyHostVethSysctls(w SysctlWriter, iface string) error {
	for _, s := range hostVethSysctls {
		if err := w(fmt.Sprintf(s.path, iface), s.value); err != nil {
			return fmt.Errorf("sysctl %s: %w", fmt.Sprintf(s.path, iface), err)
		}
	}
	return nil
}
