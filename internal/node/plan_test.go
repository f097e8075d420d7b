package node

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// planCluster is one node, n1 (192.0.2.1 on its eth0), a pool, a
// namespace profile and a pod on n1 with an address from the pool.
const planCluster = `
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool}
spec: {cidr: 10.66.0.0/16, blockSize: 26}
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.shop}
spec:
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
  labelsToApply: {pcns.projectcalico.org/name: shop}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: n1-k8s-web-eth0, namespace: shop, labels: {app: web}}
spec: {orchestrator: k8s, node: n1, pod: web, endpoint: eth0, interfaceName: cali1a2b3c4d5e6, ipNetworks: [10.66.0.1/32], profiles: [kns.shop]}
`

// TestPlan runs the agent in a throwaway node namespace until it has
// programmed the node, stops it, and checks that `calico-node plan` then
// finds everything in sync; changes the datastore, and checks that plan
// shows exactly the new policy's chains, the new pod's route, and
// changes nothing in the kernel.
func TestPlan(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace for the node")
	}
	ctx := context.Background()
	etcd := etcdtest.Start(t)
	store := connectStore(t, etcd.Endpoints)
	apply(t, store, planCluster)
	node := &api.Node{}
	node.Name = "n1"
	node.Spec.BGP = &api.NodeBGPSpec{IPv4Address: "192.0.2.1/24"}
	if _, err := store.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	// A block affine to n1, as the pod's address would have made it.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, _, err := ipam.New(store.IPAM(), store, quiet).AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "web", Node: "n1"}); err != nil {
		t.Fatal(err)
	}

	ns := netnstest.New(t, "plan-node")
	ns.MustRun(t, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer")
	ns.MustRun(t, "ip", "addr", "add", "192.0.2.1/24", "dev", "eth0")
	ns.MustRun(t, "ip", "link", "set", "eth0", "up")
	ns.MustRun(t, "ip", "link", "set", "eth0-peer", "up")
	ns.MustRun(t, "ip", "route", "add", "default", "via", "192.0.2.254")
	ns.MustRun(t, "ip", "link", "add", "cali1a2b3c4d5e6", "type", "veth", "peer", "name", "web0")
	ns.MustRun(t, "ip", "link", "set", "cali1a2b3c4d5e6", "up")
	// etcd listens on the machine's loopback: relay it onto the node's.
	relay, err := ns.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	netnstest.Serve(t, relay, func(in net.Conn) {
		out, err := net.Dial("tcp", strings.TrimPrefix(etcd.Endpoints[0], "http://"))
		if err != nil {
			return
		}
		defer out.Close()
		go io.Copy(out, in)
		io.Copy(in, out)
	})
	dir := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "NODENAME=n1", "IP=192.0.2.1/24", "ETCD_ENDPOINTS=http://" + relay.Addr().String(),
		"CALICO_BGP_STATUS_SOCKET=" + filepath.Join(dir, "bgp.sock"), "CALICO_CNI_SOCKET=none", "CALICO_DATA_DIR=" + filepath.Join(dir, "data")}
	inNS := func(args ...string) *exec.Cmd {
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name, testbin.Path(t)}, args...)...)
		cmd.Env = env
		return cmd
	}
	kernel := func() string {
		return ns.MustRun(t, "iptables-save") + ns.MustRun(t, "ipset", "save") + ns.MustRun(t, "ip", "route", "show", "proto", "80")
	}

	agent := proctest.Start(t, "calico-node", inNS("run", "--health-addr", "127.0.0.1:9099"))
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(kernel(), "10.66.0.0/26") || !strings.Contains(kernel(), "10.66.0.1 dev cali1a2b3c4d5e6") ||
		!strings.Contains(kernel(), "-A cali-tw-cali1a2b3c4d5e6") {
		if time.Now().After(deadline) || !agent.Running() {
			t.Fatalf("the agent did not program the node:\n%s\n%s", kernel(), agent.Log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Programmed: stop it, so that the datastore changes below stay
	// unapplied (the kernel keeps what it wrote).
	if err := agent.Stop(15 * time.Second); err != nil {
		t.Fatalf("agent: %v", err)
	}

	plan := func() string {
		t.Helper()
		before := kernel()
		out, err := inNS("plan").CombinedOutput()
		if err != nil {
			t.Fatalf("calico-node plan: %v\n%s", err, out)
		}
		if after := kernel(); after != before {
			t.Errorf("plan changed the kernel:\nbefore\n%s\nafter\n%s", before, after)
		}
		return string(out)
	}
	out := plan()
	for _, want := range []string{
		"calico-node plan for node n1",
		"== iptables and ipsets, IPv4",
		"== routes (protocol 80): in sync (2)",
		"== BGP advertisements (AS 64512, router ID 192.0.2.1): 1\n10.66.0.0/26 next hop 192.0.2.1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan of the programmed node lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "IPv4 (") || !strings.Contains(strings.SplitN(out, "== iptables and ipsets, IPv4", 2)[1], ": in sync") {
		t.Errorf("iptables not in sync after the agent programmed it:\n%s", out)
	}

	// The datastore changes; the agent is not there to apply it.
	apply(t, store, `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: web-http}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [80]}}]
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: n1-k8s-db-eth0, namespace: shop, labels: {app: db}}
spec: {orchestrator: k8s, node: n1, pod: db, endpoint: eth0, interfaceName: cali2b3c4d5e6f7, ipNetworks: [10.66.0.2/32], profiles: [kns.shop]}
`)
	ns.MustRun(t, "ip", "link", "add", "cali2b3c4d5e6f7", "type", "veth", "peer", "name", "db0")
	out = plan()
	v4 := strings.SplitN(strings.SplitN(out, "== iptables and ipsets, IPv4", 2)[1], "\n== ", 2)[0]
	for _, want := range []string{
		"-A cali-pi-default/web-http -m comment --comment",
		":cali-tw-cali2b3c4d5e6f7 - [0:0]",
		"-A cali-to-wl-dispatch",
	} {
		if !strings.Contains(v4, want) {
			t.Errorf("IPv4 plan lacks %q:\n%s", want, v4)
		}
	}
	if strings.Contains(v4, ":cali-INPUT ") {
		t.Errorf("IPv4 plan rewrites a chain that did not change:\n%s", v4)
	}
	if !strings.Contains(out, "+ 10.66.0.2/32 dev cali2b3c4d5e6f7\n") || !strings.Contains(out, "== routes (protocol 80): 1 to add, 0 to replace, 0 to delete, 2 unchanged") {
		t.Errorf("routes: want the new pod's route added:\n%s", out)
	}
	t.Logf("calico-node plan:\n%s", out)
}

// apply creates or updates the documents' resources.
func apply(t *testing.T, store interface {
	Apply(context.Context, api.Object) (api.Object, error)
}, yaml string) {
	t.Helper()
	docs, err := api.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		if _, err := store.Apply(context.Background(), d.Object); err != nil {
			t.Fatalf("apply %s %s: %v", d.Kind, d.Name, err)
		}
	}
}
