package ctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// ipamFixture sets up, through the CLI and the ipam package, a datastore
// with one address of each kind check reports on.
type ipamFixture struct {
	c                      *cli
	ctx                    context.Context
	ipam                   *ipam.Client
	used, leaked, goneAddr netip.Addr
	goneBlock              netip.Prefix
}

const ipamPool = `
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool1}
spec: {cidr: 10.60.0.0/24, blockSize: 26}
`

const ipamNode = `
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node1}
spec: {bgp: {ipv4Address: 127.0.0.1/8}}
`

func wepYAML(node, containerID, ip string) string {
	return fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: %[1]s-cni-%[2]s-eth0, namespace: default}
spec: {orchestrator: cni, node: %[1]s, containerID: %[2]s, endpoint: eth0, interfaceName: cali0123456789a, ipNetworks: [%[3]s/32]}
`, node, containerID, ip)
}

// newIPAMFixture fills the datastore e: node1 (on KDD the Kubernetes Node
// kubelet registers), a pool, and addresses: "used" by a workload on
// node1, "leaked" by none, "gonepod" by a workload of the missing node
// "gone" (on KDD Pods with the addresses Calico's CNI plugin writes on
// them, elsewhere WorkloadEndpoints), and a handle holding nothing.
func newIPAMFixture(t *testing.T, e *dsEnv) *ipamFixture {
	t.Helper()
	f := &ipamFixture{c: e.c, ctx: e.ctx, ipam: e.ipam}
	if r := f.c.run(ipamPool, "apply", "-f", "-"); r.err != nil {
		t.Fatalf("apply: %v %s", r.err, r.stderr)
	}
	if e.kube != nil {
		if _, err := e.kube.Client.CoreV1().Nodes().Create(e.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// No controller manager: the namespace's ServiceAccount is ours.
		if _, err := e.kube.Client.CoreV1().ServiceAccounts("default").Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	} else if r := f.c.run(ipamNode, "apply", "-f", "-"); r.err != nil {
		t.Fatalf("apply: %v %s", r.err, r.stderr)
	}
	assign := func(node, handle string) netip.Addr {
		v4, _, err := f.ipam.AutoAssign(e.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: handle, Node: node,
			Attrs: map[string]string{"namespace": "default", "pod": strings.TrimPrefix(handle, "k8s-pod-network.")}})
		if err != nil {
			t.Fatal(err)
		}
		return v4[0].Addr()
	}
	f.used = assign("node1", "k8s-pod-network.used")
	f.leaked = assign("node1", "k8s-pod-network.leaked")
	f.goneAddr = assign("gone", "k8s-pod-network.gonepod")
	f.goneBlock, _ = f.goneAddr.Prefix(26)
	for _, w := range []struct {
		node, pod string
		ip        netip.Addr
	}{{"node1", "used", f.used}, {"gone", "gonepod", f.goneAddr}} {
		if e.kube != nil {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: w.pod, Namespace: "default", Annotations: map[string]string{
					"cni.projectcalico.org/containerID": w.pod,
					"cni.projectcalico.org/podIP":       w.ip.String() + "/32",
					"cni.projectcalico.org/podIPs":      w.ip.String() + "/32",
				}},
				Spec: corev1.PodSpec{NodeName: w.node, Containers: []corev1.Container{{Name: "c", Image: "none"}}},
			}
			if _, err := e.kube.Client.CoreV1().Pods("default").Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if r := f.c.run(wepYAML(w.node, w.pod, w.ip.String()), "apply", "-f", "-"); r.err != nil {
			t.Fatalf("apply wep: %v %s", r.err, r.stderr)
		}
	}
	// A handle holding nothing.
	res, err := e.store.IPAM().Txn(e.ctx, datastore.Txn{Ops: []datastore.Op{{Type: datastore.OpPut, Key: ipam.HandleKey("k8s-pod-network.orphan"), Value: []byte(`{"block":{},"deleted":false}`)}}})
	if err != nil || !res.Succeeded {
		t.Fatalf("write the orphan handle: %v %v", res, err)
	}
	return f
}

func TestIPAMShow(t *testing.T) { onBothDatastores(t, testIPAMShow) }

func testIPAMShow(t *testing.T, e *dsEnv) {
	f := newIPAMFixture(t, e)
	c := f.c
	out := c.ok("ipam", "show")
	texttest.Contains(t, "ipam show", out,
		"+----------+--------------+-----------+------------+-----------+\n",
		"| GROUPING |     CIDR     | IPS TOTAL | IPS IN USE | IPS FREE  |\n",
		"| IP Pool  | 10.60.0.0/24 |       256 | 3 (1%)     | 253 (99%) |\n",
	)
	if strings.Contains(out, "Block") {
		t.Errorf("blocks shown without --show-blocks:\n%s", out)
	}
	out = c.ok("ipam", "show", "--show-blocks")
	nodeBlock, _ := f.used.Prefix(26)
	texttest.Contains(t, "ipam show --show-blocks", out,
		"| Block    | "+nodeBlock.String(), "host:node1",
		"| Block    | "+f.goneBlock.String(), "host:gone",
		"|        64 | 2 (3%)     | 62 (97%)  | host:node1 |", // node1's block: 2 of 64
		"AFFINITY",
	)
	// Flags in every position calicoctl users put them.
	positions := [][]string{
		{"ipam", "show", "--ip=" + f.used.String()},
		{"ipam", "show", "--ip", f.used.String()},
	}
	if !e.kdd {
		positions = append(positions, []string{"--etcd-endpoints", c.etcd.Endpoints[0], "ipam", "show", "--ip", f.used.String()})
	}
	for _, args := range positions {
		out = c.ok(args...)
		texttest.Contains(t, strings.Join(args, " "), out, "IP "+f.used.String()+" is in use", "Handle: k8s-pod-network.used", "  node: node1", "  pod: used")
	}
	if out := c.ok("ipam", "show", "--ip=10.60.0.250"); out != "10.60.0.250 is not assigned\n" {
		t.Errorf("free address: %q", out)
	}
	if stderr := c.fails("ipam", "show", "--ip=not-an-ip"); !strings.Contains(stderr, "invalid IP address") {
		t.Errorf("bad address: %s", stderr)
	}
	c.ok("ipam", "configure", "--strictaffinity=true")
	if out := c.ok("ipam", "show", "--show-configuration"); !strings.Contains(out, "| StrictAffinity     | true  |") {
		t.Errorf("configuration:\n%s", out)
	}
}

func TestIPAMCheckAndRelease(t *testing.T) { onBothDatastores(t, testIPAMCheckAndRelease) }

func testIPAMCheckAndRelease(t *testing.T, e *dsEnv) {
	f := newIPAMFixture(t, e)
	c := f.c
	report := filepath.Join(t.TempDir(), "report.json")
	out := c.ok("ipam", "check", "-o", report, "--show-problem-ips")
	texttest.Contains(t, "ipam check", out,
		"Found 2 IPAM blocks.",
		"IPAM blocks record 3 allocations.",
		"Found 2 workload IPs.",
		"  "+f.leaked.String()+" leaked; attrs Main:k8s-pod-network.leaked Extra:namespace=default,node=node1,pod=leaked,timestamp=",
		"Found 1 IPs that are allocated in IPAM but not actually in use.",
		"  k8s-pod-network.orphan doesn't have any active IPs.",
		"Found 1 handles with no matching IPs (and 3 handles with matches).",
		"  block "+f.goneBlock.String()+" is affine to missing node gone.",
		"Found 1 blocks affine to nodes that do not exist.",
		"Check complete; found 3 problems.",
	)
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Version     string `json:"version"`
		Allocations map[string][]struct {
			IP     string `json:"ip"`
			Handle string `json:"handle"`
			InUse  bool   `json:"inUse"`
		} `json:"allocations"`
		LeakedHandles []struct{ ID, Revision string } `json:"leakedHandles"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, data)
	}
	if rep.Version == "" || len(rep.Allocations) != 3 || rep.Allocations[f.leaked.String()][0].InUse ||
		!rep.Allocations[f.used.String()][0].InUse || len(rep.LeakedHandles) != 1 {
		t.Errorf("report: %+v", rep)
	}

	// Release from the report: exactly the leaked address and handle.
	out = c.ok("ipam", "release", "--from-report="+report)
	texttest.Contains(t, "release --from-report", out, "Released 1 IPs successfully", "Released 1 handles; 0 skipped; 0 errors.")
	if _, err := f.ipam.Lookup(f.ctx, f.leaked); err == nil {
		t.Errorf("%s still allocated", f.leaked)
	}
	for _, kept := range []netip.Addr{f.used, f.goneAddr} {
		if _, err := f.ipam.Lookup(f.ctx, kept); err != nil {
			t.Errorf("%s released: %v", kept, err)
		}
	}
	// The same report again: nothing is leaked any more.
	out = c.ok("ipam", "release", "--from-report", report)
	if !strings.Contains(out, "Released 0 IPs successfully") || !strings.Contains(out, "1 addresses marked as leaked in the report are no longer leaked") {
		t.Errorf("stale report:\n%s", out)
	}
	if out := c.ok("ipam", "check"); !strings.Contains(out, "Check complete; found 1 problems.") {
		t.Errorf("after release, only the missing node's block is left:\n%s", out)
	}

	// A report from another calicoctl version needs --force.
	var raw map[string]any
	json.Unmarshal(data, &raw)
	raw["version"] = "v3.31.0"
	other, _ := json.Marshal(raw)
	otherFile := filepath.Join(t.TempDir(), "calico-report.json")
	os.WriteFile(otherFile, other, 0o644)
	if stderr := c.fails("ipam", "release", "--from-report", otherFile); !strings.Contains(stderr, "different version") {
		t.Errorf("version mismatch: %s", stderr)
	}
	c.ok("ipam", "release", "--from-report", otherFile, "--force")

	// Release by address.
	if out := c.ok("ipam", "release", "--ip="+f.used.String()); out != "Successfully released IP address "+f.used.String()+"\n" {
		t.Errorf("release --ip: %q", out)
	}
	if stderr := c.fails("ipam", "release", "--ip", f.used.String()); !strings.Contains(stderr, "is not assigned") {
		t.Errorf("releasing a free address: %s", stderr)
	}
	if stderr := c.fails("ipam", "release"); !strings.Contains(stderr, "--ip") {
		t.Errorf("release without arguments: %s", stderr)
	}
}

// Calico's own IPAM data shows through `ipam show`.
func TestIPAMShowCalicoData(t *testing.T) {
	c := newCLI(t)
	kv := c.etcd.Client(t)
	data, err := os.ReadFile("testdata/reference/calico-3.31-etcd-layout.txt")
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "#") || line == "":
		case strings.HasPrefix(line, "/calico/"):
			key = line
		default:
			if _, err := kv.Put(context.Background(), key, line); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := c.ok("ipam", "show", "--ip=10.244.166.128")
	texttest.Contains(t, "ipam show", out, "IP 10.244.166.128 is in use", "Handle: k8s-pod-network.probecontainer000", "  timestamp: 2026-11-21 22:19:32.00917435 +0000 UTC")
	if out := c.ok("ipam", "show"); !strings.Contains(out, "| IP Pool  | 10.244.0.0/16 |     65536 | 1 (0%)     | 65535 (100%) |") {
		t.Errorf("ipam show:\n%s", out)
	}
	if out := c.ok("ipam", "check"); !strings.Contains(out, "Check complete; found 0 problems.") {
		t.Errorf("Calico's datastore is consistent:\n%s", out)
	}
}
