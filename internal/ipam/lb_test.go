package ipam_test

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// testLoadBalancer: LoadBalancer addresses come from the pools that allow
// the use, in blocks of the virtual host "load-balancer", with Calico's
// keys and affinity; a node named "load-balancer" keeps its own blocks.
func testLoadBalancer(t *testing.T, f *fixture) {
	lbOnly := func(s *api.IPPoolSpec) { s.AllowedUses = []api.IPPoolAllowedUse{api.IPPoolAllowedUseLoadBalancer} }
	manual := func(s *api.IPPoolSpec) {
		m := api.AssignmentModeManual
		s.AssignmentMode = &m
	}
	f.create(t, ippool("pods", "10.1.0.0/24", 26), ippool("lb", "10.9.0.0/24", 26, lbOnly),
		ippool("lb-manual", "10.8.0.0/24", 26, lbOnly, manual))
	lb := func(args ipam.AutoAssignArgs) netip.Addr {
		t.Helper()
		args.Use, args.Num4 = api.IPPoolAllowedUseLoadBalancer, 1
		v4, _, err := f.c.AutoAssign(f.ctx, args)
		if err != nil || len(v4) != 1 {
			t.Fatalf("AutoAssign(%+v) = %v, %v", args, v4, err)
		}
		return v4[0].Addr()
	}
	a := lb(ipam.AutoAssignArgs{HandleID: "lb-abc", Attrs: map[string]string{"service": "web", "namespace": "default"}})
	blk, _ := a.Prefix(26)
	if !mustPrefix("10.9.0.0/24").Contains(a) || a != blk.Addr() {
		t.Fatalf("LoadBalancer address %s: want one from the automatic LoadBalancer pool 10.9.0.0/24", a)
	}
	if got, want := f.raw(t, "/calico/ipam/v2/virtual/load-balancer/ipv4/block/"+strings.Replace(blk.String(), "/", "-", 1)), `{"state":"confirmed","deleted":false}`; got != want {
		t.Errorf("virtual affinity = %q, want %s", got, want)
	}
	if got := f.raw(t, ipam.AffinityKey("load-balancer", blk)); got != "" {
		t.Errorf("the node load-balancer got the LoadBalancer block: %s", got)
	}
	b := f.block(t, blk)
	if b.Affinity == nil || *b.Affinity != "virtual:load-balancer" {
		t.Errorf("block affinity %v, want virtual:load-balancer", b.Affinity)
	}
	if at := b.Attributes[0].Secondary; at["node"] != "" || at["service"] != "web" || at["timestamp"] == "" {
		t.Errorf("attributes %v: want the caller's, a timestamp and no node", at)
	}
	// A Manual pool only when named.
	if m := lb(ipam.AutoAssignArgs{HandleID: "lb-def", IPv4Pools: []string{"lb-manual"}}); !mustPrefix("10.8.0.0/24").Contains(m) {
		t.Errorf("address %s from the named manual pool: want 10.8.0.0/24", m)
	}
	// The real node of that name allocates from its own blocks of the
	// workload pool.
	p := f.assign4(t, "load-balancer", "k8s-pod-network.c0")
	if !mustPrefix("10.1.0.0/24").Contains(p) {
		t.Errorf("pod address %s of node load-balancer: want the workload pool", p)
	}
	// A workload pool is not for LoadBalancer addresses, by name or by
	// address.
	if _, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "lb-x", Use: api.IPPoolAllowedUseLoadBalancer, IPv4Pools: []string{"pods"}}); !errors.Is(err, ipam.ErrNoPools) {
		t.Errorf("LoadBalancer address from the workload pool: err %v, want ErrNoPools", err)
	}
	err := f.c.AssignIP(f.ctx, ipam.AssignIPArgs{IP: netip.MustParseAddr("10.1.0.200"), HandleID: "lb-x", Use: api.IPPoolAllowedUseLoadBalancer})
	if !errors.Is(err, ipam.ErrNotInPool) {
		t.Errorf("AssignIP of a workload pool's address for a LoadBalancer: err %v, want ErrNotInPool", err)
	}
	// A requested address goes to the virtual host's block too.
	req := netip.MustParseAddr("10.9.0.77")
	if err := f.c.AssignIP(f.ctx, ipam.AssignIPArgs{IP: req, HandleID: "lb-ghi", Use: api.IPPoolAllowedUseLoadBalancer}); err != nil {
		t.Fatalf("AssignIP %s: %v", req, err)
	}
	if b := f.block(t, mustPrefix("10.9.0.64/26")); b.Affinity == nil || *b.Affinity != "virtual:load-balancer" {
		t.Errorf("requested address's block affinity %v, want virtual:load-balancer", b.Affinity)
	}
	if err := f.c.AssignIP(f.ctx, ipam.AssignIPArgs{IP: req, HandleID: "lb-x", Node: "node1", Use: api.IPPoolAllowedUseLoadBalancer}); err == nil {
		t.Error("a LoadBalancer address for a node: want an error")
	}
	// The check does not take the virtual host for a missing node.
	r, err := f.c.Check(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.BlocksOfMissingNodes) != 1 || r.BlocksOfMissingNodes[0].Node != "load-balancer" || r.BlocksOfMissingNodes[0].CIDR != netip.PrefixFrom(p, 26).Masked().String() {
		t.Errorf("blocks of missing nodes %+v: want only the real node load-balancer's (it has no Node here)", r.BlocksOfMissingNodes)
	}
	// The Service's address is in use by it (calicoctl counts Services'
	// addresses); those without service attributes are not.
	if al := r.Allocations[a.String()]; len(al) != 1 || !al[0].InUse || !slices.Equal(al[0].Owners, []string{"Service(default/web)"}) || al[0].Node != "" {
		t.Errorf("check: allocation of %s %+v: want in use by Service(default/web), no node", a, al)
	}
	if al := r.Allocations[req.String()]; len(al) != 1 || al[0].InUse {
		t.Errorf("check: %s without service attributes %+v: want leaked", req, al)
	}
	if r.Stats.LoadBalancerServices != 1 {
		t.Errorf("check: %d LoadBalancer services, want 1", r.Stats.LoadBalancerServices)
	}
	// Dual stack: one address of each family, both in the virtual host's
	// blocks.
	f.create(t, ippool("lb6", "fd00:50::/120", 124, lbOnly))
	v4, v6, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, Num6: 1, HandleID: "lb-dual", Use: api.IPPoolAllowedUseLoadBalancer})
	if err != nil || len(v4) != 1 || len(v6) != 1 {
		t.Fatalf("dual-stack LoadBalancer AutoAssign = %v %v, %v", v4, v6, err)
	}
	blk6 := netip.PrefixFrom(v6[0].Addr(), 124).Masked()
	if got := f.raw(t, "/calico/ipam/v2/virtual/load-balancer/ipv6/block/"+strings.Replace(blk6.String(), "/", "-", 1)); got == "" {
		t.Errorf("no virtual affinity for the IPv6 LoadBalancer block %s", blk6)
	}
	if b := f.block(t, blk6); b.Affinity == nil || *b.Affinity != "virtual:load-balancer" {
		t.Errorf("IPv6 block affinity %v, want virtual:load-balancer", b.Affinity)
	}
	// Released by handle; the block stays the virtual host's.
	if err := f.c.ReleaseByHandle(f.ctx, "lb-abc"); err != nil {
		t.Fatal(err)
	}
	if got := f.raw(t, ipam.HandleKey("lb-abc")); got != "" {
		t.Errorf("handle after release: %s", got)
	}
	if b := f.block(t, blk); b.Allocations[0] != nil {
		t.Errorf("address %s still allocated after release", a)
	}
}
