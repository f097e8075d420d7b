package guard_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/guard"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

// backends runs fn against a guarded store on each datastore: etcd, and
// the Kubernetes API with the project's CRDs (skipped with -short).
func backends(t *testing.T, fn func(t *testing.T, raw datastore.Store)) {
	t.Run("etcd", func(t *testing.T) {
		srv := etcdtest.Start(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		fn(t, storetest.Etcd(t, ctx, srv.Endpoints))
	})
	t.Run("kdd", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short: no kube-apiserver")
		}
		c := kubetest.Start(t, kubetest.WithoutControllerManager())
		c.InstallCalicoCRDs(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		fn(t, storetest.KDD(t, ctx, c))
	})
}

func newPool(name, cidr string, blockSize int) *api.IPPool {
	p := &api.IPPool{}
	p.Kind, p.APIVersion, p.Name = "IPPool", api.GroupVersion, name
	p.Spec.CIDR, p.Spec.BlockSize = cidr, blockSize
	return p
}

func poolNames(t *testing.T, s datastore.Store) []string {
	t.Helper()
	objs, _, err := s.List(context.Background(), "IPPool", "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.Meta().Name)
	}
	return names
}

// TestGuard covers every rule on both datastores; the subtests share one
// datastore each, so each uses its own CIDRs and names.
func TestGuard(t *testing.T) {
	backends(t, func(t *testing.T, raw datastore.Store) {
		g := guard.New(raw, nil, guard.WithSettle(0))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()

		t.Run("overlap", func(t *testing.T) {
			if _, err := g.Create(ctx, newPool("legacy", "192.168.0.0/16", 0)); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name, cidr string
				write      func(context.Context, api.Object) (api.Object, error)
				want       string // "" = accepted
			}{
				{"same-cidr", "192.168.0.0/16", g.Create, "IPPool(same-cidr) CIDR overlaps with IPPool(legacy) CIDR 192.168.0.0/16"},
				{"inside", "192.168.10.0/24", g.Create, "IPPool(inside) CIDR overlaps with IPPool(legacy)"},
				{"around", "192.0.0.0/8", g.Apply, "IPPool(around) CIDR overlaps with IPPool(legacy)"},
				{"beside", "192.169.0.0/16", g.Create, ""},
				{"v6", "fd00:10::/64", g.Apply, ""},
			} {
				_, err := tc.write(ctx, newPool(tc.name, tc.cidr, 0))
				switch {
				case tc.want == "" && err != nil:
					t.Errorf("%s %s: %v", tc.name, tc.cidr, err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("%s %s: err = %v, want it to say %q", tc.name, tc.cidr, err, tc.want)
				}
			}
			// A second create of an existing pool is "already exists", not an overlap with itself.
			if _, err := g.Create(ctx, newPool("legacy", "192.168.0.0/16", 0)); !errors.Is(err, datastore.ErrAlreadyExists) {
				t.Errorf("create of an existing pool: %v, want ErrAlreadyExists", err)
			}
			// Re-applying an existing pool unchanged is fine.
			if _, err := g.Apply(ctx, newPool("legacy", "192.168.0.0/16", 0)); err != nil {
				t.Errorf("re-apply: %v", err)
			}
		})

		t.Run("concurrent creates", func(t *testing.T) {
			const n = 6
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Every pool overlaps 10.99.0.0/16; none is equal to another.
					_, errs[i] = g.Create(ctx, newPool(fmt.Sprintf("race-%d", i), fmt.Sprintf("10.99.%d.0/%d", 0, 16+i), 0))
				}()
			}
			wg.Wait()
			ok := 0
			for i, err := range errs {
				switch {
				case err == nil:
					ok++
				case !strings.Contains(err.Error(), "CIDR overlaps with IPPool(race-"):
					t.Errorf("race-%d: %v", i, err)
				}
			}
			var left []string
			for _, name := range poolNames(t, g) {
				if strings.HasPrefix(name, "race-") {
					left = append(left, name)
				}
			}
			if ok != 1 || len(left) != 1 {
				t.Errorf("%d creates succeeded, pools left %v; want exactly one of each (errors: %v)", ok, left, errs)
			}
		})

		t.Run("immutable", func(t *testing.T) {
			if _, err := g.Create(ctx, newPool("fixed", "10.40.0.0/16", 26)); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				cidr      string
				blockSize int
				want      string
			}{
				{"10.41.0.0/16", 26, "spec.cidr: \"10.41.0.0/16\" cannot be changed (it is 10.40.0.0/16)"},
				{"10.40.0.0/16", 28, "spec.blockSize: 28 cannot be changed (it is 26)"},
				{"10.40.0.0/16", 0, ""}, // 0 is the default, 26: unchanged
			} {
				for _, write := range []func(context.Context, api.Object) (api.Object, error){g.Update, g.Apply} {
					p := newPool("fixed", tc.cidr, tc.blockSize)
					p.Spec.NATOutgoing = true
					_, err := write(ctx, p)
					if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
						t.Errorf("%s /%d: err = %v, want %q", tc.cidr, tc.blockSize, err, tc.want)
					}
				}
			}
			got, err := g.Get(ctx, "IPPool", "", "fixed")
			if err != nil || got.(*api.IPPool).Spec.CIDR != "10.40.0.0/16" || !got.(*api.IPPool).Spec.NATOutgoing {
				t.Errorf("after updates: %+v %v", got, err)
			}
		})

		t.Run("load balancer pool stays one", func(t *testing.T) {
			// A LoadBalancer pool's addresses are Services'; letting it
			// also hand out Workload or Tunnel addresses would give one
			// address two owners.
			lb := newPool("lb", "10.45.0.0/24", 0)
			lb.Spec.AllowedUses = []api.IPPoolAllowedUse{api.IPPoolAllowedUseLoadBalancer}
			if _, err := g.Create(ctx, lb); err != nil {
				t.Fatal(err)
			}
			for _, uses := range [][]api.IPPoolAllowedUse{
				{api.IPPoolAllowedUseWorkload},
				{api.IPPoolAllowedUseTunnel},
				{api.IPPoolAllowedUseWorkload, api.IPPoolAllowedUseTunnel},
			} {
				for _, write := range []func(context.Context, api.Object) (api.Object, error){g.Update, g.Apply} {
					p := newPool("lb", "10.45.0.0/24", 0)
					p.Spec.AllowedUses = uses
					_, err := write(ctx, p)
					if err == nil || !strings.Contains(err.Error(), "a LoadBalancer pool cannot become a Workload or Tunnel pool") {
						t.Errorf("allowedUses %v: err = %v, want the LoadBalancer refusal", uses, err)
					}
				}
			}
			// Other fields still change.
			p := newPool("lb", "10.45.0.0/24", 0)
			p.Spec.AllowedUses, p.Spec.Disabled = []api.IPPoolAllowedUse{api.IPPoolAllowedUseLoadBalancer}, true
			if _, err := g.Update(ctx, p); err != nil {
				t.Errorf("update of a LoadBalancer pool keeping its use: %v", err)
			}
			got, err := g.Get(ctx, "IPPool", "", "lb")
			if err != nil || !slices.Equal(got.(*api.IPPool).Spec.AllowedUses, []api.IPPoolAllowedUse{api.IPPoolAllowedUseLoadBalancer}) {
				t.Errorf("after updates: %+v %v", got, err)
			}
		})

		t.Run("delete releases blocks", func(t *testing.T) {
			c := ipam.New(g.IPAM(), g, nil)
			if _, err := g.Create(ctx, newPool("gone", "10.60.0.0/16", 26)); err != nil {
				t.Fatal(err)
			}
			kept, _, err := c.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h-kept", Node: "n1", IPv4Pools: []string{"gone"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h-freed", Node: "n2", IPv4Pools: []string{"gone"}}); err != nil {
				t.Fatal(err)
			}
			if err := c.ReleaseByHandle(ctx, "h-freed"); err != nil {
				t.Fatal(err)
			}
			out, rep, err := g.DeletePool(ctx, "gone", "")
			if err != nil {
				t.Fatal(err)
			}
			if !out.(*api.IPPool).Spec.Disabled {
				t.Errorf("the deleted pool was not disabled first: %+v", out)
			}
			if len(rep.Released) != 2 {
				t.Errorf("released %v, want both nodes' blocks", rep.Released)
			}
			keptBlock := netip.PrefixFrom(kept[0].Addr(), 26).Masked()
			if len(rep.InUse) != 1 || rep.InUse[0].CIDR != keptBlock || rep.InUse[0].InUse != 1 {
				t.Errorf("in use: %+v, want %s with 1 address", rep.InUse, keptBlock)
			}
			for _, node := range []string{"n1", "n2"} {
				if b, err := c.AffineBlocks(ctx, node); err != nil || len(b) != 0 {
					t.Errorf("%s still has blocks %v (%v)", node, b, err)
				}
			}
			if blocks, err := c.Blocks(ctx, 4); err != nil || len(blocks) != 1 || blocks[0] != keptBlock {
				t.Errorf("blocks left: %v %v, want only %s", blocks, err, keptBlock)
			}
			if h, err := c.Lookup(ctx, kept[0].Addr()); err != nil || h.Handle != "h-kept" {
				t.Errorf("the address in use: %+v %v", h, err)
			}
			if _, err := g.Get(ctx, "IPPool", "", "gone"); !errors.Is(err, datastore.ErrNotFound) {
				t.Errorf("pool still there: %v", err)
			}

			// The kept /26 block stops a pool with /28 blocks over it.
			_, err = g.Create(ctx, newPool("smaller-blocks", "10.60.0.0/16", 28))
			if err == nil || !strings.Contains(err.Error(), "block "+keptBlock.String()+" is /26") {
				t.Errorf("pool over a block of another size: %v", err)
			}
			if _, err := g.Create(ctx, newPool("same-blocks", "10.60.0.0/16", 26)); err != nil {
				t.Errorf("pool with the same block size: %v", err)
			}
			// Through Delete too, and a stale resourceVersion is a conflict.
			if _, err := g.Delete(ctx, "IPPool", "", "same-blocks", "1"); !errors.Is(err, datastore.ErrConflict) {
				t.Errorf("delete at a stale version: %v", err)
			}
			if _, err := g.Delete(ctx, "ippools", "", "same-blocks", ""); err != nil {
				t.Errorf("delete: %v", err)
			}
			if _, err := g.Delete(ctx, "IPPool", "", "same-blocks", ""); !errors.Is(err, datastore.ErrNotFound) {
				t.Errorf("second delete: %v", err)
			}
		})

		t.Run("tiers", func(t *testing.T) {
			gnp := &api.GlobalNetworkPolicy{}
			gnp.Kind, gnp.APIVersion, gnp.Name = "GlobalNetworkPolicy", api.GroupVersion, "security.block"
			gnp.Spec.Tier, gnp.Spec.Selector = "security", "all()"
			if _, err := g.Create(ctx, gnp); err == nil || !strings.Contains(err.Error(), `tier "security" does not exist`) {
				t.Errorf("policy in a missing tier: %v", err)
			}
			np := &api.NetworkPolicy{}
			np.Kind, np.APIVersion, np.Name, np.Namespace = "NetworkPolicy", api.GroupVersion, "security.ns", "default"
			np.Spec.Tier = "security"
			if _, err := g.Apply(ctx, np); err == nil || !strings.Contains(err.Error(), `tier "security" does not exist`) {
				t.Errorf("namespaced policy in a missing tier: %v", err)
			}
			// The default tier need not exist.
			plain := &api.GlobalNetworkPolicy{}
			plain.Kind, plain.APIVersion, plain.Name = "GlobalNetworkPolicy", api.GroupVersion, "plain"
			if _, err := g.Create(ctx, plain); err != nil {
				t.Errorf("default-tier policy: %v", err)
			}
			tier := &api.Tier{}
			tier.Kind, tier.APIVersion, tier.Name = "Tier", api.GroupVersion, "security"
			for _, o := range []api.Object{tier, gnp, np} {
				if _, err := g.Create(ctx, o); err != nil {
					t.Fatalf("create %s: %v", o.Meta().Name, err)
				}
			}
			if _, err := g.Delete(ctx, "Tier", "", "security", ""); err == nil || !strings.Contains(err.Error(), "non-empty tier") {
				t.Errorf("delete of a tier with policies: %v", err)
			}
			if _, err := g.Delete(ctx, "GlobalNetworkPolicy", "", "security.block", ""); err != nil {
				t.Fatal(err)
			}
			if _, err := g.Delete(ctx, "tier", "", "security", ""); err == nil || !strings.Contains(err.Error(), "NetworkPolicy(default/security.ns)") {
				t.Errorf("delete of a tier with a namespaced policy: %v", err)
			}
			if _, err := g.Delete(ctx, "NetworkPolicy", "default", "security.ns", ""); err != nil {
				t.Fatal(err)
			}
			if _, err := g.Delete(ctx, "Tier", "", "security", ""); err != nil {
				t.Errorf("delete of an empty tier: %v", err)
			}
			for _, name := range []string{"default", "adminnetworkpolicy"} {
				if _, err := g.Delete(ctx, "Tier", "", name, ""); !errors.Is(err, datastore.ErrNotSupported) {
					t.Errorf("delete tier %s: %v, want ErrNotSupported", name, err)
				}
			}
		})
	})
}
