package routetable

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/agent/routes"
)

// memKernel is a kernel in memory: routes by table and destination, and
// the links named in links (index = position + 1).
type memKernel struct {
	links  []string
	routes map[string]netlink.Route
}

func (k *memKernel) mkey(r *netlink.Route) string {
	fam := netlink.FAMILY_V4
	if r.Dst.IP.To4() == nil {
		fam = netlink.FAMILY_V6
	}
	p, _ := prefixOf(r.Dst, fam)
	return fmt.Sprintf("%d/%s", r.Table, p)
}

func (k *memKernel) RouteListFiltered(fam int, _ *netlink.Route, _ uint64) ([]netlink.Route, error) {
	var out []netlink.Route
	for _, r := range k.routes {
		if (r.Dst.IP.To4() != nil) == (fam == netlink.FAMILY_V4) {
			out = append(out, r)
		}
	}
	return out, nil
}

func (k *memKernel) RouteReplace(r *netlink.Route) error {
	if r.LinkIndex > len(k.links) {
		return unix.ENODEV
	}
	k.routes[k.mkey(r)] = *r
	return nil
}

func (k *memKernel) RouteDel(r *netlink.Route) error {
	if _, ok := k.routes[k.mkey(r)]; !ok {
		return unix.ESRCH
	}
	delete(k.routes, k.mkey(r))
	return nil
}

func (k *memKernel) LinkByName(name string) (netlink.Link, error) {
	for i, n := range k.links {
		if n == name {
			return &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: n, Index: i + 1}}, nil
		}
	}
	return nil, fmt.Errorf("no link %q", name)
}

func (k *memKernel) LinkByIndex(i int) (netlink.Link, error) {
	if i < 1 || i > len(k.links) {
		return nil, fmt.Errorf("no link %d", i)
	}
	return &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: k.links[i-1], Index: i}}, nil
}

// describe is the kernel's routes as text, for comparing.
func (k *memKernel) describe() map[string]string {
	out := map[string]string{}
	for key, r := range k.routes {
		out[key] = fmt.Sprintf("type %d dev %d via %s metric %d", r.Type, r.LinkIndex, r.Gw, r.Priority)
	}
	return out
}

// TestDeltaEqualsFullReconcile drives a table with random Sets and
// Updates from several sources, passing as Run does (deltas after
// Updates), and checks after every pass that the kernel holds exactly
// what a full Reconcile of the same wants, from the same kernel, leaves
// (a route whose new device is missing keeps its old version in both),
// and that Inspect tells the same story.
func TestDeltaEqualsFullReconcile(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			k := &memKernel{links: []string{"eth0", "tunl0"}, routes: map[string]netlink.Route{}}
			tbl := New(k, 0, quiet())
			reg := prometheus.NewRegistry()
			if err := tbl.RegisterMetrics(reg); err != nil {
				t.Fatal(err)
			}
			sources := []string{routes.SourceBGP, routes.SourceBlackhole, routes.SourceWorkloads}
			want := map[string]map[routeKey]routes.Route{}
			for _, s := range sources {
				want[s] = map[routeKey]routes.Route{}
			}
			for step := range 200 {
				s := sources[rng.IntN(len(sources))]
				if rng.IntN(10) == 0 {
					var rs []routes.Route
					want[s] = map[routeKey]routes.Route{}
					for range rng.IntN(30) {
						r := randRoute(rng)
						if !hasKey(want[s], key(r)) {
							want[s][key(r)] = r
						}
						rs = append(rs, r)
					}
					tbl.Set(s, rs)
				} else {
					var set, del []routes.Route
					for range rng.IntN(6) {
						r := randRoute(rng)
						if rng.IntN(3) == 0 {
							del = append(del, r)
							continue
						}
						set = append(set, r)
					}
					// Update deletes first, then sets.
					for _, r := range del {
						delete(want[s], key(r))
					}
					for _, r := range set {
						want[s][key(r)] = r
					}
					tbl.Update(s, set, del)
				}
				// The reference: a full reconcile from the same kernel.
				ref := &memKernel{links: k.links, routes: maps.Clone(k.routes)}
				if err := tbl.pass(step == 0 || rng.IntN(25) == 0); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}

				full := New(ref, 0, quiet())
				fullReg := prometheus.NewRegistry()
				if err := full.RegisterMetrics(fullReg); err != nil {
					t.Fatal(err)
				}
				for s, m := range want {
					var rs []routes.Route
					for _, r := range m {
						rs = append(rs, r)
					}
					full.Set(s, rs)
				}
				if err := full.Reconcile(); err != nil {
					t.Fatal(err)
				}
				if got, exp := fmt.Sprint(k.describe()), fmt.Sprint(ref.describe()); got != exp {
					t.Fatalf("step %d: kernel after deltas\n%s\nafter a full reconcile\n%s", step, got, exp)
				}
				if got, exp := gauges(t, reg), gauges(t, fullReg); got != exp {
					t.Fatalf("step %d: gauges after deltas\n%s\nafter a full reconcile\n%s", step, got, exp)
				}
				for i := range 24 {
					dst := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i * 4)}), 30)
					got, exp := tbl.Inspect(dst), full.Inspect(dst)
					got.Passes, exp.Passes = 0, 0
					// Two routes of one source to one destination (two
					// tables) come out in map order; compare as sets.
					applied := func(w *routes.Want) string {
						if w == nil {
							return "none"
						}
						return w.Source + " " + w.Text
					}
					if fmt.Sprint(applied(got.Applied), got.Problem, len(got.Wanted)) != fmt.Sprint(applied(exp.Applied), exp.Problem, len(exp.Wanted)) {
						t.Fatalf("step %d: Inspect(%s) after deltas %+v, after a full reconcile %+v", step, dst, got, exp)
					}
				}
			}
		})
	}
}

// randRoute is a random route among few destinations (so that sources
// and changes collide), of every kind the table writes: blackhole, to a
// device, to a device that does not exist, via a gateway, with a metric,
// in another table.
func randRoute(rng *rand.Rand) routes.Route {
	r := routes.Route{Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(24) * 4)}), 30)}
	if rng.IntN(4) == 0 {
		r.Dst = netip.MustParsePrefix(fmt.Sprintf("fd00::%x/128", rng.IntN(8)))
	}
	switch rng.IntN(5) {
	case 0:
		r.Type = routes.Blackhole
	case 1:
		r.Dev = "eth0"
	case 2:
		r.Dev = "missing0" // never written, retried
	case 3:
		r.Via = netip.MustParseAddr("192.0.2.1")
		r.Dev, r.OnLink = "tunl0", true
		if r.Dst.Addr().Is6() {
			r.Via = netip.MustParseAddr("fd00::ffff")
		}
	default:
		r.Dev, r.Metric = "eth0", 1+rng.IntN(3)
	}
	if rng.IntN(6) == 0 {
		r.Table = 100
	}
	return r
}

// gauges is the route count gauges of reg as text.
func gauges(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		if mf.GetType() != dto.MetricType_GAUGE {
			continue
		}
		for _, m := range mf.GetMetric() {
			lines = append(lines, fmt.Sprintf("%s%v %v", mf.GetName(), m.GetLabel(), m.GetGauge().GetValue()))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// flakyKernel refuses a route now and then, failing the pass.
type flakyKernel struct {
	*memKernel
	rng *rand.Rand
}

func (k *flakyKernel) RouteReplace(r *netlink.Route) error {
	if k.rng.IntN(40) == 0 {
		return unix.EINVAL
	}
	return k.memKernel.RouteReplace(r)
}

// TestOnAppliedAddsUpToInstalled drives a table with random Sets and
// Updates, full and delta passes as Run makes them, refused routes that
// fail a pass and a missing device that appears: after every pass the
// changes OnApplied reported, applied in turn, are what the table has
// installed, and a failed pass reports nothing.
func TestOnAppliedAddsUpToInstalled(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 2))
			k := &flakyKernel{&memKernel{links: []string{"eth0", "tunl0"}, routes: map[string]netlink.Route{}}, rng}
			tbl := New(k, 0, quiet())
			view := map[routeKey]routes.Route{} // what the reports add up to
			reported := false
			tbl.OnApplied(func(set, del []routes.Route) {
				reported = true
				seen := map[routeKey]bool{}
				for _, r := range del {
					if seen[key(r)] {
						t.Errorf("%s reported twice in one pass", key(r))
					}
					seen[key(r)] = true
					if _, ok := view[key(r)]; !ok {
						t.Errorf("%s removed, but was not installed", key(r))
					}
					delete(view, key(r))
				}
				for _, r := range set {
					if seen[key(r)] {
						t.Errorf("%s reported twice in one pass", key(r))
					}
					seen[key(r)] = true
					view[key(r)] = r
				}
			})
			sources := []string{routes.SourceBGP, routes.SourceBlackhole, routes.SourceWorkloads}
			for step := range 300 {
				s := sources[rng.IntN(len(sources))]
				switch {
				case step == 150:
					k.links = append(k.links, "missing0")
				case rng.IntN(10) == 0:
					var rs []routes.Route
					for range rng.IntN(30) {
						rs = append(rs, randRoute(rng))
					}
					tbl.Set(s, rs)
				default:
					var set, del []routes.Route
					for range rng.IntN(6) {
						if r := randRoute(rng); rng.IntN(3) == 0 {
							del = append(del, r)
						} else {
							set = append(set, r)
						}
					}
					tbl.Update(s, set, del)
				}
				reported = false
				err := tbl.passAndReport(step == 0 || rng.IntN(25) == 0)
				if err != nil {
					if reported {
						t.Fatalf("step %d: a failed pass (%v) reported changes", step, err)
					}
					continue
				}
				if !reported {
					t.Fatalf("step %d: a successful pass reported nothing", step)
				}
				if !maps.Equal(view, tbl.last) {
					t.Fatalf("step %d: reports add up to\n%v\nthe table has installed\n%v", step, view, tbl.last)
				}
			}
		})
	}
}
