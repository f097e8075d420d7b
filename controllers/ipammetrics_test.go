package controllers

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

func ipPool(name, cidr string) *api.IPPool {
	return &api.IPPool{ObjectMeta: api.ObjectMeta{Name: name}, Spec: api.IPPoolSpec{CIDR: cidr}}
}

// parsedPools is what ipamGC.pools hands the metrics for pools.
func parsedPools(t *testing.T, pools ...*api.IPPool) []api.Pool {
	t.Helper()
	objs := make([]api.Object, len(pools))
	for i, p := range pools {
		objs[i] = p
	}
	out, errs := api.ParsePools(objs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return out
}

func alloc(ip, block, node, handle string) *ipam.Allocation {
	a := &ipam.Allocation{IP: ip, Block: netip.MustParsePrefix(block), Handle: handle, Attrs: map[string]string{}}
	if node != "" {
		a.Attrs[ipam.AttrNode] = node
	}
	return a
}

// TestCountIPAM: the gauges Calico's IPAM controller publishes, from one
// IPAM state: two pools, node a's block with its own pod, a pod of b
// borrowed from it, an allocation without a node, a block of no pool and
// a block affine to no node.
func TestCountIPAM(t *testing.T) {
	report := &ipam.CheckReport{Allocations: map[string][]*ipam.Allocation{}}
	report.Stats.BlockList = []ipam.BlockRef{
		{CIDR: "10.0.0.0/26", Node: "a"},
		{CIDR: "10.0.0.64/26", Node: ""},
		{CIDR: "172.16.0.0/26", Node: "b"},
	}
	for _, a := range []*ipam.Allocation{
		alloc("10.0.0.1", "10.0.0.0/26", "a", "h1"),
		alloc("10.0.0.2", "10.0.0.0/26", "b", "h2"),
		alloc("10.0.0.3", "10.0.0.0/26", "", "h3"),
		alloc("10.0.0.65", "10.0.0.64/26", "a", "h4"),
		alloc("172.16.0.1", "172.16.0.0/26", "b", "h5"),
	} {
		report.Allocations[a.IP] = append(report.Allocations[a.IP], a)
	}
	pools := parsedPools(t, ipPool("p1", "10.0.0.0/24"), ipPool("p2", "10.1.0.0/16"))
	candidate := func(a *ipam.Allocation) bool { return a.Handle == "h2" }
	got := countIPAM(report, pools, []string{"a", "b", "c"}, candidate)

	eq := func(what string, got, want map[poolNode]int) {
		t.Helper()
		if !maps.Equal(got, want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	zeros := func(extra map[poolNode]int) map[poolNode]int {
		out := map[poolNode]int{}
		for _, p := range []string{"p1", "p2"} {
			for _, n := range []string{"a", "b", "c"} {
				out[poolNode{p, n}] = 0
			}
		}
		maps.Copy(out, extra)
		return out
	}
	eq("in use", got.inUse, zeros(map[poolNode]int{
		{"p1", "a"}: 2, {"p1", "b"}: 1, {"p1", noNodeLabel}: 1, {noPoolLabel, "b"}: 1,
	}))
	eq("borrowed", got.borrowed, zeros(map[poolNode]int{
		{"p1", "b"}: 1, {"p1", "a"}: 1,
	}))
	eq("blocks", got.blocks, map[poolNode]int{{"p1", "a"}: 1, {"p1", noAffinityLabel}: 1, {noPoolLabel, "b"}: 1})
	eq("gc candidates", got.gcCandidates, zeros(map[poolNode]int{{"p1", "b"}: 1}))
	if want := map[string]float64{"p1": 256, "p2": 65536}; !maps.Equal(got.poolSize, want) {
		t.Errorf("pool sizes = %v, want %v", got.poolSize, want)
	}
	if want := map[string]int{"a": 2, "b": 2, noNodeLabel: 1}; !maps.Equal(got.allocs, want) {
		t.Errorf("allocations per node = %v, want %v", got.allocs, want)
	}
	if want := map[string]int{"a": 1, "b": 1}; !maps.Equal(got.borrowedByNode, want) {
		t.Errorf("borrowed per node = %v, want %v", got.borrowedByNode, want)
	}
	if want := map[string]int{"a": 1, noAffinityLabel: 1, "b": 1}; !maps.Equal(got.blocksByNode, want) {
		t.Errorf("blocks per node = %v, want %v", got.blocksByNode, want)
	}

	// Published, with Calico's names and labels; a second publication
	// replaces the first rather than adding to it.
	m := newIPAMMetrics()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.collectors()...)
	m.set(got)
	delete(report.Allocations, "10.0.0.1")
	m.set(countIPAM(report, pools, []string{"a", "b", "c"}, candidate))
	m.reclaimed(pools, alloc("10.0.0.1", "10.0.0.0/26", "a", "h1"))
	want := `
# HELP ipam_allocations_in_use IPs currently allocated in IPAM to a workload or tunnel endpoint.
# TYPE ipam_allocations_in_use gauge
ipam_allocations_in_use{ippool="no_ippool",node="b"} 1
ipam_allocations_in_use{ippool="p1",node="a"} 1
ipam_allocations_in_use{ippool="p1",node="b"} 1
ipam_allocations_in_use{ippool="p1",node="c"} 0
ipam_allocations_in_use{ippool="p1",node="unknown_node"} 1
ipam_allocations_in_use{ippool="p2",node="a"} 0
ipam_allocations_in_use{ippool="p2",node="b"} 0
ipam_allocations_in_use{ippool="p2",node="c"} 0
# HELP ipam_allocations_gc_reclamations The total allocations that have been reclaimed by the garbage collector over time. Under normal operation, this counter should increase, and increases of this counter should align to a return to zero for the candidate gauge.
# TYPE ipam_allocations_gc_reclamations counter
ipam_allocations_gc_reclamations{ippool="p1",node="a"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ipam_allocations_in_use", "ipam_allocations_gc_reclamations"); err != nil {
		t.Error(err)
	}

	// docs/metrics.md lists each.
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if !strings.Contains(string(doc), "`"+f.GetName()) {
			t.Errorf("docs/metrics.md does not list %s", f.GetName())
		}
	}
}

// poolStore lists fixed IP pools; the only Store call ipamGC.pools makes.
type poolStore struct {
	Store
	pools []api.Object
}

func (s *poolStore) List(_ context.Context, kind, _ string) ([]api.Object, int64, error) {
	if kind != "IPPool" {
		return nil, 0, fmt.Errorf("unexpected List of %s", kind)
	}
	return s.pools, 1, nil
}

// TestIPAMMetricsBadPool: a pool written behind validation with a CIDR
// that does not parse is left out of the ippool label (its blocks count
// as no_ippool) and logged with its name, once while its error stays the
// same and again when it changes.
func TestIPAMMetricsBadPool(t *testing.T) {
	bad := ipPool("broken", "10.0.0.0/33")
	store := &poolStore{pools: []api.Object{ipPool("p1", "10.1.0.0/16"), bad}}
	var logs strings.Builder
	gc := &ipamGC{c: &Controllers{store: store}, log: slog.New(slog.NewTextHandler(&logs, nil))}
	warnings := func() int { return strings.Count(logs.String(), "IP pool left out of the IPAM metrics") }
	for range 2 {
		pools, err := gc.pools(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(pools) != 1 || pools[0].Name != "p1" {
			t.Fatalf("pools = %v, want p1 alone", pools)
		}
		if got := poolOf(pools, netip.MustParsePrefix("10.0.0.0/26")); got != noPoolLabel {
			t.Errorf("a block of the broken pool is in %q, want %q", got, noPoolLabel)
		}
	}
	if n := warnings(); n != 1 {
		t.Errorf("%d warnings after two listings, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "pool=broken") || !strings.Contains(logs.String(), "10.0.0.0/33") {
		t.Errorf("the warning does not name the pool and its cidr:\n%s", logs.String())
	}
	bad.Spec.CIDR = "not-a-cidr"
	if _, err := gc.pools(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := warnings(); n != 2 {
		t.Errorf("%d warnings after the error changed, want 2:\n%s", n, logs.String())
	}
	// An empty listing is still a listing: publish must not list again.
	store.pools = nil
	if pools, err := gc.pools(t.Context()); err != nil || pools == nil {
		t.Errorf("no pools = %v, %v; want an empty, non-nil list", pools, err)
	}
}
