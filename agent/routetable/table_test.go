package routetable

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/agent/routeproto"
	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// testNS makes a throwaway network namespace with a dummy link "dummy0"
// (192.0.2.1/24, 2001:db8::1/64) and returns a netlink handle in it.
func testNS(t *testing.T) *netlink.Handle {
	t.Helper()
	return nodeNS(t, "routes-test").Netlink(t)
}

// nodeNS is testNS's namespace, its name starting with prefix.
func nodeNS(t *testing.T, prefix string) *netnstest.NS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ns := netnstest.New(t, prefix)
	for _, args := range [][]string{
		// No dummy driver on every kernel: a veth pair serves.
		{"link", "add", "dummy0", "type", "veth", "peer", "name", "dummy0p"},
		{"link", "set", "dummy0p", "up"},
		{"link", "set", "dummy0", "up"},
		{"addr", "add", "192.0.2.1/24", "dev", "dummy0"},
		{"-6", "addr", "add", "2001:db8::1/64", "dev", "dummy0", "nodad"},
		// Someone else's route: must survive every reconcile.
		{"route", "add", "198.51.100.0/24", "via", "192.0.2.254", "proto", "static"},
	} {
		ns.MustRun(t, "ip", args...)
	}
	return ns
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// ours lists our routes as "dst dev/type" strings.
func ours(t *testing.T, nl *netlink.Handle) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := nl.RouteListFiltered(fam, &netlink.Route{Protocol: routeproto.Calico, Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			desc := "unicast"
			if r.Type == unix.RTN_BLACKHOLE {
				desc = "blackhole"
			} else if r.LinkIndex > 0 {
				l, _ := nl.LinkByIndex(r.LinkIndex)
				desc = l.Attrs().Name
			}
			if r.Gw != nil {
				desc += " via " + r.Gw.String()
			}
			out[r.Dst.String()] = desc
		}
	}
	return out
}

func foreignRoutePresent(t *testing.T, nl *netlink.Handle) bool {
	_, dst, _ := net.ParseCIDR("198.51.100.0/24")
	rs, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
	return err == nil && len(rs) == 1
}

func TestReconcile(t *testing.T) {
	nl := testNS(t)
	tbl := New(nl, time.Hour, quiet())
	tbl.Set(routes.SourceWorkloads, []routes.Route{
		{Dst: netip.MustParsePrefix("10.244.0.5/32"), Dev: "dummy0"},
		{Dst: netip.MustParsePrefix("fd00::5/128"), Dev: "dummy0"},
	})
	tbl.Set(routes.SourceBlackhole, []routes.Route{{Dst: netip.MustParsePrefix("10.244.0.0/26"), Type: routes.Blackhole}})
	tbl.Set(routes.SourceBGP, []routes.Route{
		{Dst: netip.MustParsePrefix("10.244.1.0/26"), Via: netip.MustParseAddr("192.0.2.2")},
		// Conflicts with the workload route: the workload wins.
		{Dst: netip.MustParsePrefix("10.244.0.5/32"), Via: netip.MustParseAddr("192.0.2.3")},
	})
	if err := tbl.Reconcile(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"10.244.0.5/32": "dummy0",
		"fd00::5/128":   "dummy0",
		"10.244.0.0/26": "blackhole",
		"10.244.1.0/26": "dummy0 via 192.0.2.2",
	}
	if got := ours(t, nl); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("routes = %v\nwant %v", got, want)
	}
	if !foreignRoutePresent(t, nl) {
		t.Error("a route we do not own was removed")
	}

	// A route deleted by hand comes back; one changed by hand is fixed.
	nl.RouteDel(&netlink.Route{Dst: mustNet("10.244.0.0/26"), Type: unix.RTN_BLACKHOLE, Protocol: routeproto.Calico})
	if err := tbl.Reconcile(); err != nil {
		t.Fatal(err)
	}
	if got := ours(t, nl); got["10.244.0.0/26"] != "blackhole" {
		t.Errorf("hand-deleted route not restored: %v", got)
	}

	// A source that no longer wants a route takes it away; the kernel's
	// and the operator's routes stay.
	tbl.Set(routes.SourceBGP, nil)
	if err := tbl.Reconcile(); err != nil {
		t.Fatal(err)
	}
	got := ours(t, nl)
	if _, ok := got["10.244.1.0/26"]; ok || len(got) != 3 {
		t.Errorf("after withdrawing BGP routes: %v", got)
	}
	if !foreignRoutePresent(t, nl) {
		t.Error("a route we do not own was removed")
	}

	// A second table on the same kernel state (an agent restart) changes
	// nothing: no route is replaced.
	before := ours(t, nl)
	restarted := New(nl, time.Hour, quiet())
	restarted.Set(routes.SourceWorkloads, []routes.Route{
		{Dst: netip.MustParsePrefix("10.244.0.5/32"), Dev: "dummy0"},
		{Dst: netip.MustParsePrefix("fd00::5/128"), Dev: "dummy0"},
	})
	restarted.Set(routes.SourceBlackhole, []routes.Route{{Dst: netip.MustParsePrefix("10.244.0.0/26"), Type: routes.Blackhole}})
	counting := &countingKernel{Kernel: nl}
	restarted.k = counting
	if err := restarted.Reconcile(); err != nil {
		t.Fatal(err)
	}
	if counting.writes != 0 {
		t.Errorf("restart with unchanged state wrote %d routes", counting.writes)
	}
	if after := ours(t, nl); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("routes changed across restart: %v -> %v", before, after)
	}
}

// A route whose device does not exist yet is skipped, not fatal, and is
// programmed by the Run loop soon after the device appears, even with the
// periodic refresh disabled.
func TestRunRetriesMissingDevice(t *testing.T) {
	nl := testNS(t)
	tbl := New(nl, 0, quiet())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tbl.Run(ctx) }()
	tbl.Set(routes.SourceWorkloads, []routes.Route{{Dst: netip.MustParsePrefix("10.244.0.9/32"), Dev: "later0"}})
	time.Sleep(200 * time.Millisecond)
	if got := ours(t, nl); len(got) != 0 {
		t.Fatalf("route to a missing device programmed: %v", got)
	}
	l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "later0"}, PeerName: "later0p"}
	if err := nl.LinkAdd(l); err != nil {
		t.Fatal(err)
	}
	nl.LinkSetUp(l)
	if p, err := nl.LinkByName("later0p"); err == nil {
		nl.LinkSetUp(p)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ours(t, nl)["10.244.0.9/32"] == "later0" {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("route never programmed after the device appeared: %v", ours(t, nl))
}

type countingKernel struct {
	Kernel
	writes int
}

func (c *countingKernel) RouteReplace(r *netlink.Route) error {
	c.writes++
	return c.Kernel.RouteReplace(r)
}
func (c *countingKernel) RouteDel(r *netlink.Route) error {
	c.writes++
	return c.Kernel.RouteDel(r)
}

func mustNet(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

type listCounting struct {
	Kernel
	lists, writes int
}

func (c *listCounting) RouteListFiltered(f int, r *netlink.Route, m uint64) ([]netlink.Route, error) {
	c.lists++
	return c.Kernel.RouteListFiltered(f, r, m)
}
func (c *listCounting) RouteReplace(r *netlink.Route) error {
	c.writes++
	return c.Kernel.RouteReplace(r)
}
func (c *listCounting) RouteDel(r *netlink.Route) error { c.writes++; return c.Kernel.RouteDel(r) }

// Run waits for every expected source before writing, then applies later
// changes as diffs without listing the kernel.
func TestRunExpectAndDiff(t *testing.T) {
	nl := testNS(t)
	// Routes a previous agent left behind, owned by both sources.
	pre := New(nl, time.Hour, quiet())
	pre.Set(routes.SourceWorkloads, []routes.Route{{Dst: netip.MustParsePrefix("10.244.0.5/32"), Dev: "dummy0"}})
	pre.Set(routes.SourceBGP, []routes.Route{{Dst: netip.MustParsePrefix("10.244.1.0/26"), Via: netip.MustParseAddr("192.0.2.2")}})
	if err := pre.Reconcile(); err != nil {
		t.Fatal(err)
	}

	k := &listCounting{Kernel: nl}
	tbl := New(k, time.Hour, quiet())
	tbl.Expect(routes.SourceWorkloads, routes.SourceBGP)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tbl.Run(ctx)
	tbl.Set(routes.SourceWorkloads, []routes.Route{{Dst: netip.MustParsePrefix("10.244.0.5/32"), Dev: "dummy0"}})
	time.Sleep(200 * time.Millisecond)
	if k.writes != 0 || len(ours(t, nl)) != 2 {
		t.Fatalf("wrote before the BGP source published: %d writes, routes %v", k.writes, ours(t, nl))
	}
	applied := tbl.Applied()
	tbl.Set(routes.SourceBGP, []routes.Route{{Dst: netip.MustParsePrefix("10.244.1.0/26"), Via: netip.MustParseAddr("192.0.2.2")}})
	select {
	case <-applied:
	case <-time.After(5 * time.Second):
		t.Fatal("never applied")
	}
	if k.writes != 0 {
		t.Errorf("restart with the same routes wrote %d times", k.writes)
	}
	lists := k.lists
	applied = tbl.Applied()
	tbl.Set(routes.SourceBGP, []routes.Route{
		{Dst: netip.MustParsePrefix("10.244.2.0/26"), Via: netip.MustParseAddr("192.0.2.3")},
	})
	select {
	case <-applied:
	case <-time.After(5 * time.Second):
		t.Fatal("change never applied")
	}
	if k.lists != lists {
		t.Errorf("a change listed the kernel's routes (%d lists)", k.lists-lists)
	}
	got := ours(t, nl)
	if _, ok := got["10.244.1.0/26"]; ok || got["10.244.2.0/26"] != "dummy0 via 192.0.2.3" {
		t.Errorf("after diff: %v", got)
	}
}

// runTable runs tbl until the test ends and waits for its first write of
// want.
func runTable(t *testing.T, tbl *Table, want []routes.Route) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	tbl.Set(routes.SourceWorkloads, want)
	applied := tbl.Applied()
	go func() { done <- tbl.Run(ctx) }()
	select {
	case <-applied:
	case <-time.After(5 * time.Second):
		t.Fatal("routes never applied")
	}
}

// deleteByHand removes our route to dst behind the table's back.
func deleteByHand(t *testing.T, nl *netlink.Handle, dst string) {
	t.Helper()
	rs, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: mustNet(dst), Protocol: routeproto.Calico},
		netlink.RT_FILTER_DST|netlink.RT_FILTER_PROTOCOL)
	if err != nil || len(rs) != 1 {
		t.Fatalf("find our route to %s: %v (%d found)", dst, err, len(rs))
	}
	if err := nl.RouteDel(&rs[0]); err != nil {
		t.Fatalf("delete %s by hand: %v", dst, err)
	}
	if _, ok := ours(t, nl)[dst]; ok {
		t.Fatalf("route to %s still there after deleting it", dst)
	}
}

// restoredWithin polls for our route to dst until d has passed.
func restoredWithin(t *testing.T, nl *netlink.Handle, dst string, d time.Duration) bool {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, ok := ours(t, nl)[dst]; ok {
			return true
		}
	}
	return false
}

// The refresh interval (FelixConfiguration routeRefreshInterval) decides
// whether and how soon a route deleted by hand comes back: with nothing
// else changing, only the periodic full reconcile notices it.
func TestRefreshIntervalRepairsDrift(t *testing.T) {
	const dst = "10.244.0.7/32"
	tests := []struct {
		name     string
		interval time.Duration
		restored bool
	}{
		{"short interval restores", 100 * time.Millisecond, true},
		{"zero disables the refresh", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nl := testNS(t)
			tbl := New(nl, tc.interval, quiet())
			runTable(t, tbl, []routes.Route{{Dst: netip.MustParsePrefix(dst), Dev: "dummy0"}})
			deleteByHand(t, nl, dst)
			if got := restoredWithin(t, nl, dst, time.Second); got != tc.restored {
				t.Errorf("refresh %s: route restored within 1s = %v, want %v", tc.interval, got, tc.restored)
			}
		})
	}
}

// SetRefreshInterval takes effect on a running table: turning the refresh
// on repairs drift that was left alone while it was off, and turning it
// off again stops the repairs.
func TestSetRefreshIntervalAtRuntime(t *testing.T) {
	const dst = "10.244.0.8/32"
	nl := testNS(t)
	tbl := New(nl, 0, quiet())
	runTable(t, tbl, []routes.Route{{Dst: netip.MustParsePrefix(dst), Dev: "dummy0"}})

	deleteByHand(t, nl, dst)
	if restoredWithin(t, nl, dst, 500*time.Millisecond) {
		t.Fatal("route restored with the refresh disabled")
	}
	tbl.SetRefreshInterval(50 * time.Millisecond)
	if !restoredWithin(t, nl, dst, 2*time.Second) {
		t.Fatal("route not restored within 2s of setting a 50ms refresh")
	}

	tbl.SetRefreshInterval(0)
	time.Sleep(100 * time.Millisecond) // let Run take the change
	deleteByHand(t, nl, dst)
	if restoredWithin(t, nl, dst, 500*time.Millisecond) {
		t.Error("route restored after the refresh was disabled again")
	}
}

// OnApplied reports what each pass changed in what the table has
// installed: a route whose device is missing is not in it until the
// device appears, and a withdrawn route is reported removed.
func TestOnApplied(t *testing.T) {
	nl := testNS(t)
	tbl := New(nl, 0, quiet())
	type report struct{ set, del []routes.Route }
	reports := make(chan report, 100)
	tbl.OnApplied(func(set, del []routes.Route) { reports <- report{set, del} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tbl.Run(ctx) }()
	defer func() { cancel(); <-done }()
	want := routes.Route{Dst: netip.MustParsePrefix("10.244.0.9/32"), Dev: "later1"}
	hole := routes.Route{Dst: netip.MustParsePrefix("10.244.1.0/26"), Type: routes.Blackhole}
	tbl.Set(routes.SourceWorkloads, []routes.Route{want, hole})
	select {
	case r := <-reports:
		if !slices.Equal(r.set, []routes.Route{hole}) || len(r.del) != 0 {
			t.Fatalf("first report = %+v, want the blackhole set only (the device is missing)", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no report")
	}
	l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "later1"}, PeerName: "later1p"}
	if err := nl.LinkAdd(l); err != nil {
		t.Fatal(err)
	}
	nl.LinkSetUp(l)
	next := func(what string, ok func(report) bool) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case r := <-reports:
				if ok(r) {
					return
				}
				if len(r.set)+len(r.del) > 0 {
					t.Fatalf("report %+v before %s", r, what)
				}
			case <-deadline:
				t.Fatalf("never reported: %s", what)
			}
		}
	}
	next("the route installed", func(r report) bool {
		if !slices.Equal(r.set, []routes.Route{want}) || len(r.del) != 0 {
			return false
		}
		if ours(t, nl)["10.244.0.9/32"] != "later1" {
			t.Fatalf("reported before the kernel had it: %v", ours(t, nl))
		}
		return true
	})
	tbl.Update(routes.SourceWorkloads, nil, []routes.Route{hole})
	next("the blackhole removed", func(r report) bool {
		return len(r.set) == 0 && slices.Equal(r.del, []routes.Route{hole})
	})
}

// TestRemoveExternalRoutes: with removeExternalRoutes (Felix's default) a
// full reconcile also deletes routes of other protocols to workload
// interfaces that nobody wants, and replaces a wanted one with ours; the
// kernel's own routes there (IPv6 link-local), and other protocols'
// routes to other interfaces, stay. Turned off, only our protocol's
// routes go.
func TestRemoveExternalRoutes(t *testing.T) {
	n := nodeNS(t, "routes-external")
	nl := n.Netlink(t)
	ns := func(args ...string) {
		t.Helper()
		n.MustRun(t, "ip", args...)
	}
	ns("link", "add", "cali12345", "type", "veth", "peer", "name", "cali12345p")
	ns("link", "set", "cali12345", "up")
	ns("link", "set", "cali12345p", "up")
	external := func() {
		ns("route", "replace", "10.244.0.7/32", "dev", "cali12345", "proto", "static") // a pod that is gone
		ns("route", "replace", "10.244.0.8/32", "dev", "cali12345", "proto", "boot")   // a pod that is ours now
	}
	has := func(dst, proto string) bool {
		_, n, _ := net.ParseCIDR(dst)
		rs, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: n}, netlink.RT_FILTER_DST)
		if err != nil || len(rs) != 1 {
			return false
		}
		return proto == "" || fmt.Sprint(int(rs[0].Protocol)) == proto
	}
	tbl := New(nl, time.Hour, quiet())
	tbl.Set(routes.SourceWorkloads, []routes.Route{{Dst: netip.MustParsePrefix("10.244.0.8/32"), Dev: "cali12345"}})

	// Off: the static route stays; the wanted one becomes ours.
	external()
	if err := tbl.Reconcile(); err != nil {
		t.Fatal(err)
	}
	if !has("10.244.0.7/32", "") || !has("10.244.0.8/32", fmt.Sprint(routeproto.Calico)) {
		t.Errorf("without removeExternalRoutes: 10.244.0.7 kept %v, 10.244.0.8 ours %v", has("10.244.0.7/32", ""), has("10.244.0.8/32", fmt.Sprint(routeproto.Calico)))
	}

	tbl.SetRemoveExternalRoutes([]string{"cali"})
	external()
	if err := tbl.Reconcile(); err != nil {
		t.Fatal(err)
	}
	if has("10.244.0.7/32", "") {
		t.Error("an unwanted static route to a workload interface survived removeExternalRoutes")
	}
	if !has("10.244.0.8/32", fmt.Sprint(routeproto.Calico)) {
		t.Error("the wanted route to the workload is not ours")
	}
	if !foreignRoutePresent(t, nl) {
		t.Error("a static route to another interface was removed")
	}
	rs, err := nl.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	link, err := nl.LinkByName("cali12345")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rs, func(r netlink.Route) bool {
		return r.LinkIndex == link.Attrs().Index && r.Dst != nil && r.Dst.IP.IsLinkLocalUnicast()
	}) {
		t.Error("the kernel's IPv6 link-local route of the workload interface was removed")
	}
}

// TestRouteSource: a route's src (deviceRouteSourceAddress) is written,
// and taken away again by a full reconcile (an agent started after the
// field was unset).
func TestRouteSource(t *testing.T) {
	nl := testNS(t)
	src := func() string {
		_, n, _ := net.ParseCIDR("10.244.0.9/32")
		rs, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: n}, netlink.RT_FILTER_DST)
		if err != nil || len(rs) != 1 {
			t.Fatalf("route to 10.244.0.9: %v %v", rs, err)
		}
		return rs[0].Src.String()
	}
	for _, tc := range []struct {
		src  netip.Addr
		want string
	}{
		{netip.MustParseAddr("192.0.2.1"), "192.0.2.1"},
		{netip.Addr{}, "<nil>"},
	} {
		tbl := New(nl, time.Hour, quiet())
		tbl.Set(routes.SourceWorkloads, []routes.Route{{Dst: netip.MustParsePrefix("10.244.0.9/32"), Dev: "dummy0", Src: tc.src}})
		if err := tbl.Reconcile(); err != nil {
			t.Fatal(err)
		}
		if got := src(); got != tc.want {
			t.Errorf("src %v: the kernel's route has src %s, want %s", tc.src, got, tc.want)
		}
	}
}
