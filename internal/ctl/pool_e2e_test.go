package ctl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

const poolA = `apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-a}
spec: {cidr: 10.70.0.0/16, blockSize: 26}
`

// TestPoolSafety: what can cost addresses is refused with Calico's reasons,
// and deleting a pool releases its blocks and says what is still in use.
func TestPoolSafety(t *testing.T) {
	onBothDatastores(t, func(t *testing.T, e *dsEnv) {
		c := e.c
		if r := c.run(poolA, "create", "-f", "-"); r.err != nil {
			t.Fatalf("create: %+v", r)
		}

		// Overlaps, by create and by apply, name the other pool.
		for _, verb := range []string{"create", "apply"} {
			other := strings.NewReplacer("pool-a", "pool-b", "10.70.0.0/16", "10.70.128.0/17").Replace(poolA)
			r := c.run(other, verb, "-f", "-")
			if want := "IPPool(pool-b) CIDR overlaps with IPPool(pool-a) CIDR 10.70.0.0/16"; r.err == nil || !strings.Contains(r.stderr, want) {
				t.Errorf("%s of an overlapping pool: %+v, want %q", verb, r, want)
			}
		}

		// CIDR and block size cannot change, by replace, apply or patch.
		moved := strings.Replace(poolA, "10.70.0.0/16", "10.71.0.0/16", 1)
		for _, verb := range []string{"replace", "apply"} {
			if r := c.run(moved, verb, "-f", "-"); r.err == nil || !strings.Contains(r.stderr, `spec.cidr: "10.71.0.0/16" cannot be changed (it is 10.70.0.0/16)`) {
				t.Errorf("%s with another CIDR: %+v", verb, r)
			}
		}
		if stderr := c.fails("patch", "ippool", "pool-a", "-p", `{"spec":{"blockSize":28}}`); !strings.Contains(stderr, "spec.blockSize: 28 cannot be changed (it is 26)") {
			t.Errorf("patch of blockSize: %s", stderr)
		}
		c.ok("patch", "ippool", "pool-a", "-p", `{"spec":{"natOutgoing":true}}`)

		// Delete: one node's block still holds an address, another's is empty.
		used, _, err := e.ipam.AutoAssign(e.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h-used", Node: "n1"})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.ipam.AutoAssign(e.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h-gone", Node: "n2"}); err != nil {
			t.Fatal(err)
		}
		if err := e.ipam.ReleaseByHandle(e.ctx, "h-gone"); err != nil {
			t.Fatal(err)
		}
		r := c.run("", "delete", "ippool", "pool-a")
		if r.err != nil || !strings.Contains(r.stdout, "Successfully deleted 1 'IPPool' resource(s)") {
			t.Fatalf("delete: %+v", r)
		}
		usedBlock, _ := used[0].Addr().Prefix(26)
		texttest.Contains(t, "delete stderr", r.stderr, "IPPool(pool-a) is deleted but 1 address(es) from it are still in use", usedBlock.String()+" (1)")
		for _, node := range []string{"n1", "n2"} {
			if b, err := e.ipam.AffineBlocks(e.ctx, node); err != nil || len(b) != 0 {
				t.Errorf("%s still has blocks %v (%v)", node, b, err)
			}
		}
		if blocks, err := e.ipam.Blocks(e.ctx, 4); err != nil || len(blocks) != 1 || blocks[0] != usedBlock {
			t.Errorf("blocks after delete: %v %v, want only %s", blocks, err, usedBlock)
		}
		if _, err := e.store.Get(e.ctx, "IPPool", "", "pool-a"); !errors.Is(err, datastore.ErrNotFound) {
			t.Errorf("pool-a: %v", err)
		}

		// The block left behind stops a pool over it with other block sizes.
		small := strings.Replace(poolA, "blockSize: 26", "blockSize: 28", 1)
		if r := c.run(small, "create", "-f", "-"); r.err == nil || !strings.Contains(r.stderr, "block "+usedBlock.String()+" is /26") {
			t.Errorf("pool over a /26 block with /28 blocks: %+v", r)
		}
		c.ok("create", "-f", writeTemp(t, poolA))
		p := decodeOne(t, c.ok("get", "ippool", "pool-a", "-o", "yaml")).(*api.IPPool)
		if p.Spec.Disabled {
			t.Errorf("recreated pool is disabled")
		}
	})
}
