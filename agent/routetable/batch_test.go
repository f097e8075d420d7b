package routetable

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/agent/routeproto"
	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// batchNS is testNS's namespace with a batching Kernel in it.
func batchNS(t *testing.T) (*Netlink, *netlink.Handle) {
	t.Helper()
	ns := nodeNS(t, "routes-batch")
	h, err := netns.GetFromName(ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	k, err := NewNetlink(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k, ns.Netlink(t)
}

// TestWriteRoutesBatches writes more routes than one batch holds, some of
// which the kernel refuses (a missing device, an unreachable gateway, a
// delete of a route that is not there), also as the last message of a
// batch, and checks that exactly the good ones are in the kernel and
// that each refusal is reported against its own route.
func TestWriteRoutesBatches(t *testing.T) {
	k, nl := batchNS(t)
	dummy, err := nl.LinkByName("dummy0")
	if err != nil {
		t.Fatal(err)
	}
	n := 2*batchSize + 10
	var ops []Op
	bad := map[int]unix.Errno{}
	want := map[string]string{}
	for i := range n {
		dst := &net.IPNet{IP: net.IPv4(10, 1, byte(i>>8), byte(i)), Mask: net.CIDRMask(32, 32)}
		r := &netlink.Route{Dst: dst, Protocol: routeproto.Calico, Table: unix.RT_TABLE_MAIN}
		switch {
		case i == 7 || i == batchSize-1: // the last of the first batch
			r.LinkIndex = 9999
			bad[i] = unix.ENODEV
		case i == batchSize+3:
			r.Gw = net.ParseIP("203.0.113.1")
			bad[i] = unix.ENETUNREACH
		case i%3 == 0:
			r.LinkIndex, r.Scope = dummy.Attrs().Index, netlink.SCOPE_LINK
			want[dst.String()] = "dummy0"
		case i%3 == 1:
			r.Gw = net.ParseIP("192.0.2.254")
			want[dst.String()] = "dummy0 via 192.0.2.254"
		default:
			r.Type = unix.RTN_BLACKHOLE
			want[dst.String()] = "blackhole"
		}
		ops = append(ops, Op{Route: r})
	}
	v6 := &net.IPNet{IP: net.ParseIP("2001:db8:1::"), Mask: net.CIDRMask(64, 128)}
	ops = append(ops, Op{Route: &netlink.Route{Dst: v6, Protocol: routeproto.Calico, Gw: net.ParseIP("2001:db8::fe")}})
	want[v6.String()] = "dummy0 via 2001:db8::fe"
	// Deleting a route nobody wrote.
	ops = append(ops, Op{Del: true, Route: &netlink.Route{Dst: &net.IPNet{IP: net.IPv4(10, 9, 9, 9), Mask: net.CIDRMask(32, 32)}, Protocol: routeproto.Calico}})
	bad[len(ops)-1] = unix.ESRCH

	errs := k.WriteRoutes(ops)
	if len(errs) != len(ops) {
		t.Fatalf("%d answers for %d routes", len(errs), len(ops))
	}
	for i, err := range errs {
		if code, isBad := bad[i]; isBad {
			if !errors.Is(err, code) {
				t.Errorf("route %d (%s): error %v, want %v", i, ops[i].Route.Dst, err, code)
			}
		} else if err != nil {
			t.Errorf("route %d (%s): %v", i, ops[i].Route.Dst, err)
		}
	}
	if got := ours(t, nl); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("kernel has %d routes, want %d; differences: %s", len(got), len(want), mapDiff(got, want))
	}
	if !foreignRoutePresent(t, nl) {
		t.Error("someone else's route was removed")
	}

	// Deleting them all, in batches, leaves only someone else's route.
	var dels []Op
	for i, op := range ops {
		if _, isBad := bad[i]; !isBad && !op.Del {
			dels = append(dels, Op{Del: true, Route: op.Route})
		}
	}
	for i, err := range k.WriteRoutes(dels) {
		if err != nil {
			t.Errorf("delete %s: %v", dels[i].Route.Dst, err)
		}
	}
	if got := ours(t, nl); len(got) != 0 {
		t.Errorf("after deleting: %v", got)
	}
	if !foreignRoutePresent(t, nl) {
		t.Error("someone else's route was removed")
	}
}

func mapDiff(got, want map[string]string) string {
	var b strings.Builder
	for k, v := range want {
		if got[k] != v {
			fmt.Fprintf(&b, "%s: got %q want %q; ", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "%s: unwanted %q; ", k, v)
		}
	}
	return b.String()
}

// TestTableBatchedReportsRefusals reconciles through the batching Kernel:
// the routes the kernel takes are in place, and the one it refuses is
// reported by Inspect and by the error.
func TestTableBatchedReportsRefusals(t *testing.T) {
	k, nl := batchNS(t)
	tbl := New(k, 0, quiet())
	tbl.Set(routes.SourceBGP, []routes.Route{
		{Dst: netip.MustParsePrefix("10.2.0.0/26"), Via: netip.MustParseAddr("192.0.2.254")},
		{Dst: netip.MustParsePrefix("10.2.0.64/26"), Via: netip.MustParseAddr("203.0.113.1")},
		{Dst: netip.MustParsePrefix("10.2.0.128/26"), Type: routes.Blackhole},
	})
	err := tbl.Reconcile()
	if err == nil || !strings.Contains(err.Error(), "10.2.0.64/26") {
		t.Errorf("Reconcile: %v, want the refused route named", err)
	}
	want := map[string]string{"10.2.0.0/26": "dummy0 via 192.0.2.254", "10.2.0.128/26": "blackhole"}
	if got := ours(t, nl); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("kernel: %v, want %v", got, want)
	}
	if p := tbl.Inspect(netip.MustParsePrefix("10.2.0.64/26")).Problem; !strings.Contains(p, "refused") {
		t.Errorf("Inspect problem %q, want the kernel's refusal", p)
	}
}

// BenchmarkWrite10k installs and removes 10,000 blackhole /32s in a
// throwaway namespace, one RouteReplace per route (netlink.Handle) and
// in batches (Netlink.WriteRoutes).
func BenchmarkWrite10k(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for network namespaces")
	}
	ns := netnstest.New(b, "routes-bench")
	h, err := netns.GetFromName(ns.Name)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	k, err := NewNetlink(h)
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	var add, del []Op
	for i := range 10000 {
		r := &netlink.Route{Dst: &net.IPNet{IP: net.IPv4(10, 244, byte(i>>8), byte(i)), Mask: net.CIDRMask(32, 32)},
			Protocol: routeproto.Calico, Type: unix.RTN_BLACKHOLE}
		add, del = append(add, Op{Route: r}), append(del, Op{Del: true, Route: r})
	}
	check := func(errs []error) {
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("one-by-one", func(b *testing.B) {
		for b.Loop() {
			for _, op := range add {
				if err := k.Handle.RouteReplace(op.Route); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			check(k.WriteRoutes(del))
			b.StartTimer()
		}
	})
	b.Run("batched", func(b *testing.B) {
		for b.Loop() {
			check(k.WriteRoutes(add))
			b.StopTimer()
			check(k.WriteRoutes(del))
			b.StartTimer()
		}
	})
}
