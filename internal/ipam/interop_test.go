package ipam_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/ipam"
)

// loadReference writes the raw keys real Calico v3.31 wrote (a pool, a
// node, a workload endpoint and its IPAM allocation) into the datastore:
// the IPAM keys through its KV, the resources as they are.
func loadReference(t *testing.T, f *fixture) map[string]string {
	t.Helper()
	file, err := os.Open("testdata/calico-3.31-etcd.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	kvs := map[string]string{}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var key string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#") || line == "":
		case key == "":
			key = line
		default:
			kvs[key] = line
			if strings.HasPrefix(key, ipam.Prefix) {
				f.put(t, key, line)
			} else {
				f.putResource(t, key, line)
			}
			key = ""
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return kvs
}

// jsonKeys lists the top-level keys of a JSON object in order.
func jsonKeys(t *testing.T, data string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", data)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// A datastore real Calico wrote works with this package, and what this
// package writes has Calico's shape: allocate from Calico's block, release
// Calico's handle, and compare the stored JSON byte for byte.
func TestCalicoDatastoreInterop(t *testing.T) {
	forEachBackend(t, allBackends, func(t *testing.T, f *fixture) {
		ref := loadReference(t, f)
		const (
			blockKey  = "/calico/ipam/v2/assignment/ipv4/block/10.244.166.128-26"
			affKey    = "/calico/ipam/v2/host/node1/ipv4/block/10.244.166.128-26"
			refHandle = "k8s-pod-network.probecontainer000"
			seq       = uint64(1795299572018225391)
		)
		blk := netip.MustParsePrefix("10.244.166.128/26")

		// node1 has a confirmed affinity to Calico's block: the next
		// address is the block's next one.
		attrs := map[string]string{"node": "node1", "namespace": "default", "pod": "web-0", "timestamp": "2026-11-22 10:00:00 +0000 UTC"}
		v4, _, err := f.c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "k8s-pod-network.ours", Node: "node1", Attrs: attrs})
		if err != nil {
			t.Fatal(err)
		}
		if len(v4) != 1 || v4[0] != netip.MustParsePrefix("10.244.166.129/32") {
			t.Fatalf("got %v, want 10.244.166.129/32 from Calico's block", v4)
		}
		if aff, _ := f.c.AffineBlocks(f.ctx, "node1"); !slices.Equal(aff, []netip.Prefix{blk}) {
			t.Errorf("AffineBlocks = %v: no new block should be claimed", aff)
		}
		if got := f.raw(t, affKey); got != ref[affKey] {
			t.Errorf("affinity rewritten: %s", got)
		}

		// Usage and check see Calico's allocation, held by its workload.
		u, err := f.c.Usage(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Pools) != 1 || u.Pools[0].Name != "pool1" || u.Pools[0].InUse != 2 || u.Pools[0].Size != 65536 {
			t.Errorf("usage pools = %+v", u.Pools)
		}
		rep, err := f.c.Check(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if a := rep.Allocations["10.244.166.128"]; len(a) != 1 || !a[0].InUse || a[0].Handle != refHandle ||
			!slices.Equal(a[0].Owners, []string{"Workload(default/node1-cni-probecontainer000-eth0)"}) {
			t.Errorf("Calico's allocation in the check report: %+v", a)
		}
		if leaked := rep.Leaked(); len(leaked) != 1 || leaked[0].IP != "10.244.166.129" {
			t.Errorf("leaked = %+v, want only ours (it has no workload endpoint)", leaked)
		}
		if rep.ClusterGUID != "39f8ab83d2004ab08350181a2e529524" {
			t.Errorf("cluster GUID %q", rep.ClusterGUID)
		}

		// Release Calico's handle: its address goes to the back of the
		// queue, its attribute goes (its sequence number stays), ours is
		// renumbered.
		if err := f.c.ReleaseByHandle(f.ctx, refHandle); err != nil {
			t.Fatal(err)
		}
		if got := f.raw(t, ipam.HandleKey(refHandle)); got != "" {
			t.Errorf("Calico's handle left: %s", got)
		}
		if got, want := f.raw(t, ipam.HandleKey("k8s-pod-network.ours")), `{"block":{"10.244.166.128/26":1},"deleted":false}`; got != want {
			t.Errorf("our handle = %s, want %s", got, want)
		}
		var want bytes.Buffer
		want.WriteString(`{"cidr":"10.244.166.128/26","affinity":"host:node1","allocations":[null,0`)
		want.WriteString(strings.Repeat(",null", 62))
		want.WriteString(`],"unallocated":[`)
		for i := 2; i < 64; i++ {
			fmt.Fprintf(&want, "%d,", i)
		}
		want.WriteString(`0],"attributes":[{"handle_id":"k8s-pod-network.ours","secondary":{"namespace":"default","node":"node1","pod":"web-0","timestamp":"2026-11-22 10:00:00 +0000 UTC"}}],`)
		// A release by handle leaves the ordinal's sequence number, as
		// Calico's does.
		fmt.Fprintf(&want, `"sequenceNumber":%d,"sequenceNumberForAllocation":{"0":%d,"1":%d},"deleted":false}`, seq+2, seq-1, seq)
		if got := f.raw(t, blockKey); got != want.String() {
			t.Errorf("block after allocate + release:\n got %s\nwant %s", got, want.String())
		}

		// A block we claim has exactly the fields, in the order, of the
		// one Calico wrote.
		a := f.assign4(t, "node2", "k8s-pod-network.n2")
		nb, _ := a.Prefix(26)
		if got, want := jsonKeys(t, f.raw(t, ipam.BlockKey(nb))), jsonKeys(t, ref[blockKey]); !slices.Equal(got, want) {
			t.Errorf("new block fields %v, Calico's %v", got, want)
		}
		if got := f.raw(t, ipam.AffinityKey("node2", nb)); got != ref[affKey] {
			t.Errorf("new affinity %s, Calico's %s", got, ref[affKey])
		}
		if got, want := jsonKeys(t, f.raw(t, ipam.HandleKey("k8s-pod-network.n2"))), jsonKeys(t, ref["/calico/ipam/v2/handle/"+refHandle]); !slices.Equal(got, want) {
			t.Errorf("handle fields %v, Calico's %v", got, want)
		}
		if got := f.raw(t, "/calico/ipam/v2/config"); got != ref["/calico/ipam/v2/config"] {
			t.Errorf("config rewritten: %s", got)
		}
	})
}
