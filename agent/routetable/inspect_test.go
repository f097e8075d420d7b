package routetable

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent/routes"
)

// TestInspect: the table's record of a destination, as `bgp why` shows
// it: every source wanting it in priority order, what the last pass
// wrote (the first source's route), and why a route could not be
// written (a missing device, the kernel's refusal).
func TestInspect(t *testing.T) {
	nl := testNS(t)
	tbl := New(nl, time.Hour, quiet())
	pfx := netip.MustParsePrefix
	if got := tbl.Inspect(pfx("10.244.0.5/32")); got.Passes != 0 || got.Applied != nil || len(got.Wanted) != 0 {
		t.Errorf("before any pass: %+v", got)
	}
	tbl.Set(routes.SourceWorkloads, []routes.Route{{Dst: pfx("10.244.0.5/32"), Dev: "dummy0"}})
	tbl.Set(routes.SourceBGP, []routes.Route{
		{Dst: pfx("10.244.0.5/32"), Via: netip.MustParseAddr("192.0.2.3")},
		{Dst: pfx("10.244.1.0/26"), Via: netip.MustParseAddr("192.0.2.2")},
		// Next hop outside every connected network: the kernel refuses.
		{Dst: pfx("10.244.2.0/26"), Via: netip.MustParseAddr("198.18.0.7")},
	})
	tbl.Set(routes.SourceTunnels, []routes.Route{{Dst: pfx("10.244.3.0/26"), Via: netip.MustParseAddr("10.244.3.1"), Dev: "tunl9", OnLink: true}})
	if err := tbl.Reconcile(); err == nil {
		t.Fatal("reconcile with an unreachable next hop succeeded")
	}

	got := tbl.Inspect(pfx("10.244.0.5/32"))
	if len(got.Wanted) != 2 || got.Wanted[0].Source != routes.SourceWorkloads || got.Wanted[1].Source != routes.SourceBGP {
		t.Errorf("wanted %+v; want the workload's, then BGP's", got.Wanted)
	}
	if got.Applied == nil || got.Applied.Source != routes.SourceWorkloads || got.Applied.Text != "10.244.0.5/32 dev dummy0" || got.Problem != "" {
		t.Errorf("applied %+v, problem %q; want the workload's route written", got.Applied, got.Problem)
	}
	if got.Passes != 1 {
		t.Errorf("passes %d, want 1", got.Passes)
	}
	if got := tbl.Inspect(pfx("10.244.1.0/26")); got.Applied == nil || got.Applied.Text != "10.244.1.0/26 via 192.0.2.2" {
		t.Errorf("BGP route: %+v", got)
	}
	if got := tbl.Inspect(pfx("10.244.2.0/26")); got.Applied != nil || !strings.Contains(got.Problem, "the kernel refused it: network is unreachable") {
		t.Errorf("unreachable next hop: applied %+v, problem %q", got.Applied, got.Problem)
	}
	if got := tbl.Inspect(pfx("10.244.3.0/26")); got.Applied != nil || !strings.Contains(got.Problem, "not written: link tunl9") {
		t.Errorf("missing device: applied %+v, problem %q", got.Applied, got.Problem)
	}
	if got := tbl.Inspect(pfx("10.244.9.0/26")); len(got.Wanted) != 0 || got.Applied != nil || got.Problem != "" {
		t.Errorf("a destination nobody wants: %+v", got)
	}
}
