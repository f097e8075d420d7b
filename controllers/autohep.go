package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/selector"
)

// Automatic host endpoints, as Calico v3.31's kube-controllers makes them
// (node/hostendpoints.go).
const (
	// AutoHEPCreatedByLabel marks the host endpoints the controllers own;
	// only those are ever updated or deleted.
	AutoHEPCreatedByLabel = "projectcalico.org/created-by"
	AutoHEPCreatedByValue = "calico-kube-controllers"
	autoHEPSuffix         = "auto-hep"
	// autoHEPResync is Calico's periodic full host endpoint sync.
	autoHEPResync = 5 * time.Minute
	// dns1123SubdomainMaxLength bounds a host endpoint's name.
	dns1123SubdomainMaxLength = 253
)

// IsAutoHostEndpoint reports a host endpoint the controllers created.
func IsAutoHostEndpoint(h *api.HostEndpoint) bool {
	return h.Labels[AutoHEPCreatedByLabel] == AutoHEPCreatedByValue
}

// autoHostEndpoints are the host endpoints cfg asks for, by name: for each
// node, with createDefaultHostEndpoint, "<node>-auto-hep" on every
// interface ("*") expecting all the node's addresses; and for each
// template whose nodeSelector matches the node's labels, either one
// "<node>-<generateName>-auto-hep" expecting the node's addresses inside
// interfaceCIDRs (none when no address is), or, with interfacePattern,
// one "<node>-<generateName>-<interface>-auto-hep" per matching interface
// of spec.interfaces, on that interface, expecting those addresses and the
// interface's own. Labels are the node's, the template's over them, and
// projectcalico.org/created-by; the profile is
// projectcalico-default-allow. Templates that do not parse are skipped,
// named in problems.
func autoHostEndpoints(nodes []*api.Node, cfg hepConfig) (out map[string]*api.HostEndpoint, problems []string) {
	out = map[string]*api.HostEndpoint{}
	if !cfg.autoCreate {
		return out, nil
	}
	type tmpl struct {
		api.Template
		sel     selector.Selector
		cidrs   []netip.Prefix
		pattern *regexp.Regexp
	}
	var templates []tmpl
	for _, t := range cfg.templates {
		tt := tmpl{Template: t}
		var err error
		if tt.sel, err = selector.Parse(t.NodeSelector); err != nil {
			problems = append(problems, fmt.Sprintf("template %s: nodeSelector: %v", t.GenerateName, err))
			continue
		}
		bad := false
		for _, c := range t.InterfaceCIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				// As Calico: a template with a CIDR that does not parse
				// matches no address.
				problems = append(problems, fmt.Sprintf("template %s: interfaceCIDRs: %v", t.GenerateName, err))
				bad = true
				break
			}
			tt.cidrs = append(tt.cidrs, p.Masked())
		}
		if bad {
			tt.cidrs = nil
		}
		if t.InterfacePattern != "" {
			if tt.pattern, err = regexp.Compile(t.InterfacePattern); err != nil {
				problems = append(problems, fmt.Sprintf("template %s: interfacePattern: %v", t.GenerateName, err))
				continue
			}
		}
		templates = append(templates, tt)
	}
	add := func(n *api.Node, name string, labels map[string]string, ips []string, iface string) {
		l := maps.Clone(n.Labels)
		if l == nil {
			l = map[string]string{}
		}
		maps.Copy(l, labels)
		l[AutoHEPCreatedByLabel] = AutoHEPCreatedByValue
		h := &api.HostEndpoint{}
		h.Kind, h.APIVersion = "HostEndpoint", api.GroupVersion
		h.Name, h.Labels = name, l
		h.Spec = api.HostEndpointSpec{Node: n.Name, InterfaceName: iface, ExpectedIPs: ips,
			Profiles: []string{datastore.DefaultAllowProfileName}}
		out[name] = h
	}
	for _, n := range nodes {
		ips := expectedIPs(n)
		if cfg.createDefault {
			add(n, autoHEPName(n.Name), nil, ips, "*")
		}
		for _, t := range templates {
			if !t.sel.Evaluate(n.Labels) {
				continue
			}
			var inCIDRs []string
			for _, ip := range ips {
				a, err := netip.ParseAddr(ip)
				if err != nil {
					continue
				}
				if slices.ContainsFunc(t.cidrs, func(p netip.Prefix) bool { return p.Contains(a) }) {
					inCIDRs = append(inCIDRs, a.String())
				}
			}
			if t.pattern == nil {
				// Without an interface name the endpoint needs an
				// expected address.
				if len(inCIDRs) > 0 {
					add(n, autoHEPName(n.Name, t.GenerateName), t.Labels, inCIDRs, "")
				}
				continue
			}
			for _, iface := range n.Spec.Interfaces {
				if !t.pattern.MatchString(iface.Name) {
					continue
				}
				all := slices.Clone(inCIDRs)
				for _, a := range iface.Addresses {
					if !slices.Contains(all, a) {
						all = append(all, a)
					}
				}
				add(n, autoHEPName(n.Name, t.GenerateName, iface.Name), t.Labels, all, iface.Name)
			}
		}
	}
	return out, problems
}

// autoHEPName is "<parts...>-auto-hep", or, beyond 253 characters, a hash
// of it, as Calico names them.
func autoHEPName(parts ...string) string {
	name := strings.Join(append(slices.Clone(parts), autoHEPSuffix), "-")
	if len(name) <= dns1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	h := strings.NewReplacer("-", "", "_", "", ".", "").Replace(base64.RawURLEncoding.EncodeToString(sum[:]))
	name = strings.ToLower(h + "-" + autoHEPSuffix)
	return name[:min(len(name), dns1123SubdomainMaxLength)]
}

// expectedIPs are the node's addresses in Calico's order: BGP IPv4 and
// IPv6 (without their prefix length), the IP-in-IP, VXLAN and WireGuard
// tunnel addresses, then the InternalIP addresses and the interfaces'
// addresses not already listed. Those that do not parse are left out.
func expectedIPs(n *api.Node) []string {
	var out []string
	seen := map[string]bool{}
	first := func(s string) {
		if s != "" {
			out = append(out, s)
			seen[s] = true
		}
	}
	if b := n.Spec.BGP; b != nil {
		for _, c := range []string{b.IPv4Address, b.IPv6Address} {
			if c == "" {
				continue
			}
			if p, err := netip.ParsePrefix(c); err == nil {
				first(p.Addr().String())
			} else {
				first(c)
			}
		}
		first(b.IPv4IPIPTunnelAddr)
	}
	first(n.Spec.IPv4VXLANTunnelAddr)
	first(n.Spec.IPv6VXLANTunnelAddr)
	if w := n.Spec.Wireguard; w != nil {
		first(w.InterfaceIPv4Address)
		first(w.InterfaceIPv6Address)
	}
	more := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, a := range n.Spec.Addresses {
		if a.Type == api.NodeAddressInternalIP {
			more(a.Address)
		}
	}
	for _, i := range n.Spec.Interfaces {
		for _, a := range i.Addresses {
			more(a)
		}
	}
	return slices.DeleteFunc(out, func(s string) bool {
		_, errIP := netip.ParseAddr(s)
		_, errNet := netip.ParsePrefix(s)
		return errIP != nil && errNet != nil
	})
}

// hepNeedsUpdate: what Calico compares (labels, expected IPs, interface).
func hepNeedsUpdate(cur, want *api.HostEndpoint) bool {
	return !maps.Equal(cur.Labels, want.Labels) || !slices.Equal(cur.Spec.ExpectedIPs, want.Spec.ExpectedIPs) ||
		cur.Spec.InterfaceName != want.Spec.InterfaceName
}

// autoHEPController keeps the automatic host endpoints in step with the
// Calico Nodes and KubeControllersConfiguration's node.hostEndpoint. It
// runs with the node controller, enabled or not, so that turning
// autoCreate off removes what it made, as Calico's does.
type autoHEPController struct {
	c    *Controllers
	src  *kccSource
	log  *slog.Logger
	kick kicker
}

func newAutoHEPController(c *Controllers, src *kccSource, log *slog.Logger) *autoHEPController {
	return &autoHEPController{c: c, src: src, log: log, kick: newKicker()}
}

// run syncs at start, on every Node or HostEndpoint change, on every
// configuration change and every 5 minutes, until ctx ends. A failed sync
// is retried with backoff.
func (h *autoHEPController) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	h.kick.pokeOnEvents(ctx, &wg, h.c.store, "Node", "HostEndpoint")
	var retry time.Duration
	for {
		_, changed := h.src.current()
		if err := h.sync(ctx); err != nil && ctx.Err() == nil {
			retry = min(max(2*retry, 500*time.Millisecond), 30*time.Second)
			h.c.metrics.syncFailures.WithLabelValues("hostendpoint").Inc()
			h.log.Warn("host endpoint sync failed, will retry", "err", err, "in", retry)
		} else {
			retry = 0
		}
		var again <-chan time.Time
		if retry > 0 {
			again = time.After(retry)
		}
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
		case <-changed:
		case <-again:
		case <-time.After(autoHEPResync):
		}
	}
}

// sync creates, updates and deletes host endpoints until the automatic
// ones are those the configuration asks for. Host endpoints without the
// created-by label are never touched.
func (h *autoHEPController) sync(ctx context.Context) error {
	cfg, _ := h.src.current()
	nodeObjs, _, err := h.c.store.List(ctx, "Node", "")
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	hepObjs, _, err := h.c.store.List(ctx, "HostEndpoint", "")
	if err != nil {
		return fmt.Errorf("list host endpoints: %w", err)
	}
	nodes := make([]*api.Node, 0, len(nodeObjs))
	for _, o := range nodeObjs {
		if n, ok := o.(*api.Node); ok {
			nodes = append(nodes, n)
		}
	}
	want, problems := autoHostEndpoints(nodes, cfg.hep)
	for _, p := range problems {
		h.log.Error("host endpoint template skipped", "problem", p)
	}
	existing := map[string]*api.HostEndpoint{}
	for _, o := range hepObjs {
		if he, ok := o.(*api.HostEndpoint); ok {
			existing[he.Name] = he
		}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(existing)) {
		cur := existing[name]
		if !IsAutoHostEndpoint(cur) {
			continue
		}
		w, ok := want[name]
		switch {
		case !ok:
			if _, err := h.c.store.Delete(ctx, "HostEndpoint", "", name, cur.ResourceVersion); err != nil && !errors.Is(err, datastore.ErrNotFound) {
				errs = append(errs, fmt.Errorf("delete host endpoint %s: %w", name, err))
				continue
			}
			h.log.Info("deleted automatic host endpoint", "name", name, "node", cur.Spec.Node)
		case hepNeedsUpdate(cur, w):
			w.ResourceVersion, w.UID, w.CreationTimestamp = cur.ResourceVersion, cur.UID, cur.CreationTimestamp
			if _, err := h.c.store.Update(ctx, w); err != nil {
				errs = append(errs, fmt.Errorf("update host endpoint %s: %w", name, err))
				continue
			}
			h.log.Info("updated automatic host endpoint", "name", name, "node", w.Spec.Node, "expectedIPs", w.Spec.ExpectedIPs)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if cur, ok := existing[name]; ok {
			if !IsAutoHostEndpoint(cur) {
				// As Calico, whose create fails: someone else's.
				h.log.Warn("a host endpoint not created by the controllers has the automatic one's name; leaving it", "name", name)
			}
			continue
		}
		w := want[name]
		if _, err := h.c.store.Create(ctx, w); err != nil {
			errs = append(errs, fmt.Errorf("create host endpoint %s: %w", name, err))
			continue
		}
		h.log.Info("created automatic host endpoint", "name", name, "node", w.Spec.Node, "interface", w.Spec.InterfaceName, "expectedIPs", w.Spec.ExpectedIPs)
	}
	return errors.Join(errs...)
}
