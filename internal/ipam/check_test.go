package ipam_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

func TestCheckAndReleaseLeaked(t *testing.T) {
	forEachBackend(t, []backend{etcdBinary, kubeAPI}, testCheckAndReleaseLeaked)
}

func testCheckAndReleaseLeaked(t *testing.T, f *fixture) {
	f.create(t, ippool("pool1", "10.40.0.0/24", 26), node("node1", nil),
		&api.ClusterInformation{TypeMeta: api.TypeMeta{Kind: "ClusterInformation", APIVersion: api.GroupVersion},
			ObjectMeta: api.ObjectMeta{Name: "default"}, Spec: api.ClusterInformationSpec{ClusterGUID: "guid-1"}})

	used := f.assign4(t, "node1", "k8s-pod-network.used")
	f.create(t, wep("default", "node1", "used", used.String()+"/32"))
	tunnel := f.assign4(t, "node1", "vxlan-tunnel-addr-node1")
	n1 := node("node1", nil)
	n1.Spec.IPv4VXLANTunnelAddr = tunnel.String()
	f.update(t, n1)
	leak1 := f.assign4(t, "node1", "k8s-pod-network.leak1")
	leak2 := f.assign4(t, "node1", "k8s-pod-network.leak2")
	// An allocation whose handle was lost.
	ghost := f.assign4(t, "node1", "k8s-pod-network.ghost")
	f.del(t, ipam.HandleKey("k8s-pod-network.ghost"))
	// A handle with no addresses.
	f.put(t, ipam.HandleKey("k8s-pod-network.orphan"), `{"block":{"10.40.0.0/26":1},"deleted":false}`)
	// A block of a node that is gone; its one address is used by a workload.
	gone := f.assign4(t, "gone", "k8s-pod-network.gone")
	goneBlock, _ := gone.Prefix(26)
	f.create(t, wep("default", "gone", "x", gone.String()+"/32"))
	// Workload addresses IPAM never handed out.
	f.create(t, wep("default", "node1", "stray", "10.40.0.250/32"),
		wep("other", "node1", "hostlocal", "192.168.5.5/32"))

	rep, err := f.c.Check(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var leaked []string
	for _, a := range rep.Leaked() {
		leaked = append(leaked, a.IP)
	}
	wantLeaked := []string{leak1.String(), leak2.String(), ghost.String()}
	slices.Sort(wantLeaked)
	slices.Sort(leaked)
	if !slices.Equal(leaked, wantLeaked) {
		t.Errorf("leaked = %v, want %v", leaked, wantLeaked)
	}
	if a := rep.Allocations[tunnel.String()]; len(a) != 1 || !a[0].InUse || a[0].Owners[0] != "Node(node1)" {
		t.Errorf("tunnel address: %+v", a)
	}
	if len(rep.LeakedHandles) != 1 || rep.LeakedHandles[0].ID != "k8s-pod-network.orphan" || rep.LeakedHandles[0].Revision == "" {
		t.Errorf("leaked handles = %+v", rep.LeakedHandles)
	}
	if !slices.Equal(rep.MissingHandles, []string{"k8s-pod-network.ghost"}) {
		t.Errorf("missing handles = %v", rep.MissingHandles)
	}
	if len(rep.BlocksOfMissingNodes) != 1 || rep.BlocksOfMissingNodes[0] != (ipam.BlockRef{CIDR: goneBlock.String(), Node: "gone"}) {
		t.Errorf("blocks of missing nodes = %+v", rep.BlocksOfMissingNodes)
	}
	if len(rep.InUseNotAllocated) != 1 || rep.InUseNotAllocated[0].IP != "10.40.0.250" ||
		len(rep.InUseNotInPool) != 1 || rep.InUseNotInPool[0].IP != "192.168.5.5" {
		t.Errorf("in use, not allocated: %+v; not in pool: %+v", rep.InUseNotAllocated, rep.InUseNotInPool)
	}
	if got := rep.Problems(); got != 8 {
		t.Errorf("problems = %d, want 8", got)
	}
	if rep.ClusterGUID != "guid-1" || rep.ClusterInfoRevision == "" {
		t.Errorf("cluster info: %q %q", rep.ClusterGUID, rep.ClusterInfoRevision)
	}
	// With the caller's node list, "gone" is alive.
	if rep2, err := f.c.Check(f.ctx, "node1", "gone"); err != nil || len(rep2.BlocksOfMissingNodes) != 0 {
		t.Errorf("Check with live nodes: %+v %v", rep2.BlocksOfMissingNodes, err)
	}

	// The report goes through its JSON form, as with `ipam check -o`.
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	texttest.Contains(t, "report JSON", string(data),
		`"allocations":`, `"leakedHandles":[{"ID":"k8s-pod-network.orphan","UID":null,"Revision":`, `"clusterGUID":"guid-1"`, `"inUse":false`)
	var loaded ipam.CheckReport
	if err := json.Unmarshal(data, &loaded); err != nil {
		t.Fatal(err)
	}

	// Between the report and the release: leak2 is released and handed to
	// someone else, the ghost address gets its workload.
	if _, err := f.c.ReleaseIPs(f.ctx, leak2); err != nil {
		t.Fatal(err)
	}
	if err := f.c.AssignIP(f.ctx, ipam.AssignIPArgs{IP: leak2, HandleID: "k8s-pod-network.new", Node: "node1"}); err != nil {
		t.Fatal(err)
	}
	f.create(t, wep("default", "node1", "ghost", ghost.String()))

	wrong := loaded
	wrong.ClusterGUID = "guid-2"
	if _, err := f.c.ReleaseLeaked(f.ctx, &wrong); !errors.Is(err, ipam.ErrWrongCluster) {
		t.Errorf("report of another cluster: %v", err)
	}

	res, err := f.c.ReleaseLeaked(f.ctx, &loaded)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Released, []netip.Addr{leak1}) {
		t.Errorf("released %v, want only %s", res.Released, leak1)
	}
	wantSkipped := []netip.Addr{leak2, ghost}
	slices.SortFunc(wantSkipped, netip.Addr.Compare)
	if !slices.Equal(res.Skipped, wantSkipped) {
		t.Errorf("skipped %v, want %v", res.Skipped, wantSkipped)
	}
	if !slices.Equal(res.HandlesDeleted, []string{"k8s-pod-network.orphan"}) {
		t.Errorf("handles deleted %v", res.HandlesDeleted)
	}
	if _, err := f.c.Lookup(f.ctx, leak1); !errors.Is(err, ipam.ErrNotAllocated) {
		t.Errorf("%s still allocated: %v", leak1, err)
	}
	for _, kept := range []struct {
		ip     netip.Addr
		handle string
	}{{leak2, "k8s-pod-network.new"}, {ghost, "k8s-pod-network.ghost"}, {used, "k8s-pod-network.used"}, {tunnel, "vxlan-tunnel-addr-node1"}} {
		if h, err := f.c.Lookup(f.ctx, kept.ip); err != nil || h.Handle != kept.handle {
			t.Errorf("%s: holder %q, %v; want %s kept", kept.ip, h.Handle, err, kept.handle)
		}
	}
	if f.raw(t, ipam.HandleKey("k8s-pod-network.orphan")) != "" || f.raw(t, ipam.HandleKey("k8s-pod-network.leak1")) != "" {
		t.Error("orphan or released handle left behind")
	}
}
