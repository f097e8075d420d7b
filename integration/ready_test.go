package integration

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/ipam"
)

// readyPolicy selects the test's pods and admits them from one another:
// every pod's IP is in the policy's IP set, and its chains jump to the
// policy's chain, once its policy is programmed.
const readyPolicy = `
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool}
spec: {cidr: 10.65.0.0/16, blockSize: 26}
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.ready}
spec: {ingress: [{action: Allow}], egress: [{action: Allow}]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: ready-peers}
spec:
  selector: app == 'ready'
  ingress:
  - action: Allow
    protocol: TCP
    source: {selector: app == 'ready'}
    destination: {ports: [8080]}
`

// readyADD is one pod's CNI ADD as a runtime makes it, and what the
// node's kernel held the moment it returned.
type readyADD struct {
	name, iface, ip string
	took            time.Duration
	err             error
	iptables        string // iptables-save
	ipsets          string // ipset list
	route           string // ip route show <ip>
}

// addReady runs CNI ADD of pod name in namespace "ready" with conf and
// reads iptables, ipsets and the pod's route as soon as it returns. DEL
// runs in cleanup.
func (n *node) addReady(t *testing.T, name string, conf *libcni.NetworkConfigList) readyADD {
	t.Helper()
	n.kube.addPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ready", Name: name, Labels: map[string]string{"app": "ready"}},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c"}}},
	})
	netNS, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create pod netns: %v", err)
	}
	id := "ctr-" + name
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: netNS.Path(), IfName: "eth0", Args: [][2]string{
		{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "ready"}, {"K8S_POD_NAME", name}, {"K8S_POD_INFRA_CONTAINER_ID", id}}}
	start := time.Now()
	r, err := n.cni.AddNetworkList(n.ctx, conf, rt)
	a := readyADD{name: name, took: time.Since(start), err: err}
	// The kernel as the runtime finds it when ADD returns.
	a.iptables = run(t, "iptables-save", "-t", "filter")
	a.ipsets = run(t, "ipset", "list")
	t.Cleanup(func() {
		if err := n.cni.DelNetworkList(context.Background(), conf, rt); err != nil {
			t.Errorf("CNI DEL %s: %v", name, err)
		}
		netNS.Close()
		testutils.UnmountNS(netNS)
	})
	if err != nil {
		return a
	}
	res, err := types100.NewResultFromResult(r)
	if err != nil || len(res.IPs) == 0 || len(res.Interfaces) == 0 {
		t.Fatalf("CNI ADD %s: result %v: %v", name, r, err)
	}
	a.iface, a.ip = res.Interfaces[0].Name, res.IPs[0].Address.IP.String()
	a.route = run(t, "ip", "route", "show", a.ip)
	return a
}

// programmed says what of the pod's dataplane the kernel lacked when its
// ADD returned ("" when nothing).
func (a readyADD) programmed() string {
	var missing []string
	for _, chain := range []string{"cali-tw-" + a.iface, "cali-fw-" + a.iface} {
		if !strings.Contains(a.iptables, ":"+chain+" ") {
			missing = append(missing, "chain "+chain)
		}
	}
	// The pod's chain applies the policy (a jump to its cali-pi- chain).
	if !regexp.MustCompile(`(?m)^-A cali-tw-` + regexp.QuoteMeta(a.iface) + ` .*-j cali-pi-`).MatchString(a.iptables) {
		missing = append(missing, "cali-tw-"+a.iface+"'s jump to the policy")
	}
	// Peers admit it: its address is in the policy's IP set.
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(a.ip) + `$`).MatchString(a.ipsets) {
		missing = append(missing, "its address in the IP set of app == 'ready'")
	}
	if !strings.Contains(a.route, "dev "+a.iface) || !strings.Contains(a.route, "proto 80") {
		missing = append(missing, "route "+a.ip+" dev "+a.iface+" proto 80 (have "+strings.TrimSpace(a.route)+")")
	}
	return strings.Join(missing, ", ")
}

// TestADDReturnsProgrammed: CNI ADD, served by the node's agent, returns
// only once the pod's policy (its chains, the policy's chain, its address
// in the peers' IP set) and its route are in the kernel, checked with
// iptables-save, ipset and ip route at the moment ADD returns;
// `calicoctl node timeline` prints the pod's stages in order. With the
// agent's programming slowed (felix's debugSimulateDataplaneApplyDelay)
// past the config's policy_setup_timeout_seconds, ADD fails with a clear
// error and leaves nothing behind; with a longer timeout the same ADD
// waits for the slow dataplane and succeeds.
func TestADDReturnsProgrammed(t *testing.T) {
	n := newNode(t)
	n.apply(t, readyPolicy)
	n.kube.addNamespace("ready", nil)
	n.startAgent(t)

	// Pods one after the other, taking turns with pods whose config
	// turns the wait off: what the wait costs (docs/benchmarks.md).
	noWait := n.confList(t, map[string]any{"policy_setup_timeout_seconds": 0})
	var with, without []time.Duration
	for i := range 10 {
		a := n.addReady(t, fmt.Sprintf("pod-%d", i), n.conf)
		if a.err != nil {
			t.Fatalf("CNI ADD %s: %v", a.name, a.err)
		}
		if missing := a.programmed(); missing != "" {
			t.Errorf("ADD of %s returned (after %v) before the dataplane had %s\n%s", a.name, a.took, missing, a.iptables)
		}
		with = append(with, a.took)
		b := n.addReady(t, fmt.Sprintf("nowait-%d", i), noWait)
		if b.err != nil {
			t.Fatalf("CNI ADD %s: %v", b.name, b.err)
		}
		without = append(without, b.took)
	}
	slices.Sort(with)
	slices.Sort(without)
	t.Logf("CNI ADD through libcni, one at a time, served by the agent: p50 %v with the wait for the dataplane, %v without (max %v / %v)",
		with[len(with)/2].Round(100*time.Microsecond), without[len(without)/2].Round(100*time.Microsecond),
		with[len(with)-1].Round(100*time.Microsecond), without[len(without)-1].Round(100*time.Microsecond))
	if got := n.metric(t, `calico_node_endpoint_stage_seconds_count{stage="policy_programmed"}`); got < 20 {
		t.Errorf("policy_programmed observations: %v, want 20", got)
	}

	// The timeline of the last pod, as an operator asks for it.
	out, err := exec.Command(filepath.Join(n.binDir, "calicoctl"), "node", "timeline", "ready/pod-9",
		"--status-socket", os.Getenv("CALICO_STATUS_SOCKET")).CombinedOutput()
	if err != nil {
		t.Fatalf("calicoctl node timeline: %v\n%s", err, out)
	}
	t.Logf("calicoctl node timeline ready/pod-9:\n%s", out)
	after := timelineOffsets(t, string(out))
	order := []string{"ADD received", "IPAM done", "veth up", "endpoint written", "policy programmed", "ADD returned"}
	for i := 1; i < len(order); i++ {
		if after[order[i]] < after[order[i-1]] {
			t.Errorf("%s (%v) before %s (%v)", order[i], after[order[i]], order[i-1], after[order[i-1]])
		}
	}
	if after["routes programmed"] > after["ADD returned"] {
		t.Errorf("routes programmed (%v) after ADD returned (%v)", after["routes programmed"], after["ADD returned"])
	}

	// A slow dataplane: every policy apply takes 1 s more. Changes that
	// arrive during an apply go into the next, so an ADD waits 1-3 s.
	n.apply(t, `
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {debugSimulateDataplaneApplyDelay: 1s}
`)
	short := n.confList(t, map[string]any{"policy_setup_timeout_seconds": 0.5})
	a := n.addReady(t, "too-slow", short)
	var cniErr *types.Error
	if !errors.As(a.err, &cniErr) || cniErr.Code != types.ErrTryAgainLater || !strings.Contains(cniErr.Msg, "policy and routes not programmed within 500ms") ||
		!strings.Contains(cniErr.Msg, "ready/") {
		t.Fatalf("ADD with a dataplane slower than policy_setup_timeout_seconds: %v, want code 11 naming the wait and the endpoint", a.err)
	}
	t.Logf("ADD failed as it should: %v", a.err)
	if a.took > 5*time.Second {
		t.Errorf("the failed ADD took %v with a 0.5 s timeout", a.took)
	}
	// Undone: no veth, no address, no endpoint.
	if _, err := netlink.LinkByName(hostVethName("ready", "too-slow")); err == nil {
		t.Error("the failed ADD left its host veth")
	}
	if ips, err := ipam.New(n.store.IPAM(), n.store, nil).IPsByHandle(n.ctx, "k8s-pod-network.ctr-too-slow"); err == nil && len(ips) > 0 {
		t.Errorf("the failed ADD left its addresses: %v", ips)
	}
	weps, _, err := n.store.List(n.ctx, "WorkloadEndpoint", "ready")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range weps {
		if strings.Contains(w.Meta().Name, "too--slow") {
			t.Errorf("the failed ADD left its workload endpoint %s", w.Meta().Name)
		}
	}

	// A timeout that outlasts the slow dataplane (its periodic resyncs
	// queue applies too): ADD waits, and succeeds.
	a = n.addReady(t, "slow", n.confList(t, map[string]any{"policy_setup_timeout_seconds": 10}))
	if a.err != nil {
		t.Fatalf("CNI ADD with a 10 s timeout on a slow dataplane: %v", a.err)
	}
	if missing := a.programmed(); missing != "" {
		t.Errorf("ADD on a slow dataplane returned (after %v) before it had %s", a.took, missing)
	}
	if a.took < 900*time.Millisecond {
		t.Errorf("ADD took %v on a dataplane that takes 1 s per apply: it did not wait", a.took)
	}

	// A plugin process that runs ADD itself (no agent answers on its
	// socket) waits for the agent's status file instead.
	inProcess := n.cni
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{n.binDir}, filepath.Join(t.TempDir(), "cni-cache"),
		&envExec{Exec: &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}}, env: []string{"CALICO_CNI_SOCKET=none"}})
	defer func() { n.cni = inProcess }()
	served := n.metric(t, `calico_cni_server_requests_total{reason="",result="served"}`)
	a = n.addReady(t, "plugin-slow", n.confList(t, map[string]any{"policy_setup_timeout_seconds": 10}))
	if a.err != nil {
		t.Fatalf("in-process CNI ADD with a 10 s timeout on a slow dataplane: %v", a.err)
	}
	if missing := a.programmed(); missing != "" || a.took < 900*time.Millisecond {
		t.Errorf("in-process ADD returned after %v; the dataplane lacked %q", a.took, missing)
	}
	a = n.addReady(t, "plugin-too-slow", short)
	if !errors.As(a.err, &cniErr) || cniErr.Code != types.ErrTryAgainLater || !strings.Contains(cniErr.Msg, "no status file") {
		t.Errorf("in-process ADD with a dataplane slower than its timeout: %v, want code 11 naming the status file", a.err)
	}
	if now := n.metric(t, `calico_cni_server_requests_total{reason="",result="served"}`); now != served {
		t.Errorf("the agent served %v of the in-process ADDs", now-served)
	}
}

// envExec runs plugins with more environment variables.
type envExec struct {
	invoke.Exec
	env []string
}

func (e *envExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	return e.Exec.ExecPlugin(ctx, pluginPath, stdinData, append(environ, e.env...))
}

// timelineOffsets reads the AFTER column of `calicoctl node timeline`.
func timelineOffsets(t *testing.T, out string) map[string]time.Duration {
	t.Helper()
	got := map[string]time.Duration{}
	for _, l := range strings.Split(out, "\n") {
		cols := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1)
		if len(cols) < 3 {
			continue
		}
		if d, err := time.ParseDuration(cols[1]); err == nil {
			got[cols[0]] = d
		}
	}
	for _, s := range []string{"ADD received", "IPAM done", "veth up", "endpoint written", "seen by the agent", "policy programmed", "routes programmed", "ADD returned"} {
		if _, ok := got[s]; !ok {
			t.Errorf("timeline has no time for %q:\n%s", s, out)
		}
	}
	return got
}

// hostVethName is Calico's host-side name of a Kubernetes pod's veth.
func hostVethName(namespace, pod string) string {
	sum := sha1.Sum([]byte(namespace + "." + pod))
	return "cali" + hex.EncodeToString(sum[:])[:11]
}
