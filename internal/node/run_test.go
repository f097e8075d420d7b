package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/etcd"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// nodeProc is one `calico-node run` process started by a test.
type nodeProc struct {
	*proctest.Proc
	health string
	logs   *proctest.Log
}

func startAgent(t *testing.T, args []string, env ...string) *nodeProc {
	t.Helper()
	health := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	cmd := exec.Command(testbin.Path(t), append([]string{"run", "--health-addr", health}, args...)...)
	// These agents share the test's own network namespace and addresses
	// that are not there: no BGP speaker (it would listen on the host's
	// port 179 and dial those addresses). BGP has its own tests in bgp/.
	// Control-plane tests in the host namespace: no BGP, no kernel changes.
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "CALICO_NETWORKING_BACKEND=none", "CALICO_DATAPLANE=none", "CALICO_CNI_SOCKET=none"}, env...)
	p := proctest.Start(t, "calico-node", cmd)
	return &nodeProc{Proc: p, health: health, logs: p.Log}
}

func (a *nodeProc) waitReady(t *testing.T) {
	t.Helper()
	a.WaitHTTP(t, 30*time.Second, "http://"+a.health+"/readiness")
}

// stop sends SIGTERM and returns the agent's exit; an agent still running
// 15s later is killed and reported.
func (a *nodeProc) stop(t *testing.T) error {
	t.Helper()
	return a.Stop(15 * time.Second)
}

func connectStore(t *testing.T, endpoints []string) datastore.Store {
	t.Helper()
	s, err := etcd.New(context.Background(), datastore.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A single node with nothing else installed: embedded etcd, node
// registration, default pool, readiness, clean SIGTERM, data kept.
func TestRunEmbedded(t *testing.T) {
	dataDir := t.TempDir()
	client := fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t))
	args := []string{"--data-dir", dataDir, "--embedded-etcd-client-url", client,
		"--embedded-etcd-peer-url", fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t))}
	a := startAgent(t, args, "NODENAME=solo", "IP=198.51.100.7/24")
	a.waitReady(t)

	store := connectStore(t, []string{client})
	ctx := context.Background()
	obj, err := store.Get(ctx, "Node", "", "solo")
	if err != nil {
		t.Fatalf("node not registered: %v", err)
	}
	if got := obj.(*api.Node).Spec.BGP.IPv4Address; got != "198.51.100.7/24" {
		t.Errorf("node address %q, want 198.51.100.7/24", got)
	}
	pool, err := store.Get(ctx, "IPPool", "", "default-ipv4-ippool")
	if err != nil {
		t.Fatalf("default pool: %v", err)
	}
	if p := pool.(*api.IPPool).Spec; p.CIDR != "192.168.0.0/16" || !p.NATOutgoing || p.IPIPMode != "Never" || p.BlockSize != 26 {
		t.Errorf("default pool spec %+v", p)
	}
	for _, tier := range []string{"default", "adminnetworkpolicy", "baselineadminnetworkpolicy"} {
		if _, err := store.Get(ctx, "Tier", "", tier); err != nil {
			t.Errorf("tier %s: %v", tier, err)
		}
	}
	ci, err := store.Get(ctx, "ClusterInformation", "", "default")
	if err != nil || ci.(*api.ClusterInformation).Spec.ClusterGUID == "" {
		t.Errorf("ClusterInformation: %v %+v", err, ci)
	}
	if b, err := os.ReadFile(filepath.Join(dataDir, "nodename")); err != nil || string(b) != "solo" {
		t.Errorf("nodename file: %q %v", b, err)
	}
	resp, err := http.Get("http://" + a.health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `calico_confwatch_resources{kind="Node"} 1`) {
		t.Errorf("metrics lack the confwatch gauge:\n%.2000s", body)
	}
	store.Close()

	if err := a.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, a.logs)
	}

	// The embedded etcd keeps its data: a restart finds the node and does
	// not create a second pool.
	b := startAgent(t, args, "NODENAME=solo")
	b.waitReady(t)
	store = connectStore(t, []string{client})
	pools, _, err := store.List(ctx, "IPPool", "")
	if err != nil || len(pools) != 1 {
		t.Errorf("after restart: %d pools, %v", len(pools), err)
	}
	obj, _ = store.Get(ctx, "Node", "", "solo")
	if got := obj.(*api.Node).Spec.BGP.IPv4Address; got != "198.51.100.7/24" {
		t.Errorf("IP unset on restart must keep the registered address, got %q", got)
	}
	if err := b.stop(t); err != nil {
		t.Fatalf("second exit: %v", err)
	}
}

// Several nodes on one external etcd: all register, one default pool, and
// a node claiming another's address is refused with a clear error.
func TestRunExternalEtcd(t *testing.T) {
	etcd := etcdtest.Start(t)
	eps := "ETCD_ENDPOINTS=" + strings.Join(etcd.Endpoints, ",")
	var agents []*nodeProc
	for i := 1; i <= 3; i++ {
		agents = append(agents, startAgent(t, []string{"--data-dir", t.TempDir()},
			eps, fmt.Sprintf("NODENAME=node%d", i), fmt.Sprintf("IP=198.51.100.%d", i),
			"CALICO_IPV4POOL_CIDR=10.244.0.0/16", "CALICO_IPV4POOL_VXLAN=Always"))
	}
	for _, a := range agents {
		a.waitReady(t)
	}
	store := connectStore(t, etcd.Endpoints)
	nodes, _, err := store.List(context.Background(), "Node", "")
	if err != nil || len(nodes) != 3 {
		t.Fatalf("%d nodes registered, %v", len(nodes), err)
	}
	pools, _, _ := store.List(context.Background(), "IPPool", "")
	if len(pools) != 1 || pools[0].(*api.IPPool).Spec.VXLANMode != "Always" || pools[0].(*api.IPPool).Spec.CIDR != "10.244.0.0/16" {
		t.Errorf("pools after concurrent start: %+v", pools)
	}

	dup := startAgent(t, []string{"--data-dir", t.TempDir()}, eps, "NODENAME=node4", "IP=198.51.100.2")
	select {
	case <-dup.Done():
		if err := dup.Err(); err == nil || !strings.Contains(dup.logs.String(), `already used by Calico node "node2"`) {
			t.Errorf("duplicate address: exit %v, logs:\n%s", err, dup.logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("agent with a duplicate address kept running\n%s", dup.logs)
	}
	bad := startAgent(t, []string{"--data-dir", t.TempDir()}, eps, "NODENAME=node5", "IP=198.51.100.5", "CALICO_IPV4POOL_NAT_OUTGOING=maybe")
	select {
	case <-bad.Done():
		if err := bad.Err(); err == nil || !strings.Contains(bad.logs.String(), `CALICO_IPV4POOL_NAT_OUTGOING="maybe"`) {
			t.Errorf("bad env: exit %v, logs:\n%s", err, bad.logs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent with a bad env var kept running")
	}
	for _, a := range agents {
		if err := a.stop(t); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
}

func TestDispatchVersion(t *testing.T) {
	dir := testbin.Dir(t)
	for _, args := range [][]string{{"calico-node", "version", "(revision "}, {"calicoctl", "version", "Client Version:"}} {
		out, err := exec.Command(filepath.Join(dir, args[0]), args[1]).CombinedOutput()
		if err != nil || !strings.Contains(string(out), args[2]) {
			t.Errorf("%v: %v %s", args, err, out)
		}
	}
	out, err := exec.Command(filepath.Join(dir, "calico-node"), "ctl", "get", "ippools", "-o", "name", "--etcd-endpoints", "http://127.0.0.1:1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "127.0.0.1:1") {
		t.Errorf("calico-node ctl against a dead endpoint: %v %s", err, out)
	}
}
