package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// rcluster drives the demo's cluster from inside the test process: the
// same etcd, node namespaces, agents and CNI plugin as `calico-demo up`,
// with pods whose listeners are goroutines of the test (a socket keeps
// the namespace it was opened in), so that the test can hold a TCP
// connection open across an agent's death.
type rcluster struct {
	t   *testing.T
	c   *cluster
	cni map[int]*libcni.CNIConfig // by node

	mu sync.Mutex // guards c.st: pods are created concurrently
}

func newRCluster(t *testing.T) *rcluster {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end resilience")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	o := options{
		binDir:   testbin.Dir(t),
		stateDir: filepath.Join(t.TempDir(), "state"),
		prefix:   fmt.Sprintf("crs%d", os.Getpid()%100000),
		etcdPort: freePortPair(t),
	}
	c := &cluster{o: o, out: io.Discard}
	r := &rcluster{t: t, c: c, cni: map[int]*libcni.CNIConfig{}}
	t.Cleanup(func() {
		if t.Failed() {
			r.dumpLogs()
		}
		if err := down(o, io.Discard); err != nil {
			t.Errorf("remove the cluster: %v", err)
		}
	})
	if err := os.MkdirAll(filepath.Join(o.stateDir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	c.st = &state{path: statePath(o.stateDir)}
	if err := c.st.save(); err != nil {
		t.Fatal(err)
	}
	cniLog, err := os.OpenFile(filepath.Join(o.stateDir, "logs", "cni.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cniLog.Close() })
	for i := 1; i <= nodeCount; i++ {
		r.cni[i] = c.cniFor(i, filepath.Join(o.stateDir, "cni-cache"), cniLog)
	}

	for _, f := range []func() error{c.startEtcd, c.fabric, c.createPool, c.startAgents, r.waitMesh} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// dumpLogs shows the end of every log the cluster wrote.
func (r *rcluster) dumpLogs() { dumpLogs(r.t, r.c.o.stateDir) }

func (r *rcluster) waitMesh() error {
	ctx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
	defer cancel()
	return r.c.waitMesh(ctx, &results{Sessions: map[string][]string{}})
}

// ctl runs calicoctl against the cluster's etcd.
func (r *rcluster) ctl(stdin string, args ...string) (string, error) {
	cmd := exec.Command(r.c.calicoctl(), args...)
	cmd.Env = r.c.env()
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	b, err := cmd.CombinedOutput()
	if err != nil {
		return string(b), fmt.Errorf("calicoctl %s: %w: %s", strings.Join(args, " "), err, b)
	}
	return string(b), nil
}

// proc is the live record of a process the cluster started under name
// (an agent's node name, or "etcd"): after a restart, the newest one.
func (r *rcluster) proc(name string) (proc, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range slices.Backward(r.c.st.Procs) {
		if p.Name == name && p.alive() {
			return p, true
		}
	}
	return proc{}, false
}

// stop signals a recorded process and waits for it to be gone.
func (r *rcluster) stop(name string, sig syscall.Signal) {
	r.t.Helper()
	p, ok := r.proc(name)
	if !ok {
		r.t.Fatalf("%s is not running", name)
	}
	if err := syscall.Kill(p.PID, sig); err != nil {
		r.t.Fatalf("signal %s: %v", name, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for p.alive() {
		if time.Now().After(deadline) {
			r.t.Fatalf("%s (pid %d) still alive 15s after %v", name, p.PID, sig)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newPod(prefix, k8sNS string, node int) *pod {
	return &pod{prefix: prefix, k8sNS: k8sNS, node: node}
}

func (r *rcluster) runtimeConf(p *pod) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: p.netns(),
		NetNS:       p.nsPath(),
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", p.k8sNS},
			{"K8S_POD_NAME", fmt.Sprintf("pod-%d", p.node)},
			{"K8S_POD_INFRA_CONTAINER_ID", p.netns()},
		},
	}
}

// newNS creates p's namespace, recorded for down.
func (r *rcluster) newNS(p *pod) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c.newNS(p.netns())
}

// cniAdd runs CNI ADD for p from inside its node's namespace, as a
// runtime on that node would, and records its address.
func (r *rcluster) cniAdd(ctx context.Context, p *pod) error {
	list, err := r.c.cniList(p.node)
	if err != nil {
		return err
	}
	return ns.WithNetNSPath("/var/run/netns/"+r.c.nodeNS(p.node), func(ns.NetNS) error {
		out, err := r.cni[p.node].AddNetworkList(ctx, list, r.runtimeConf(p))
		if err != nil {
			return fmt.Errorf("CNI ADD %s: %w", p.netns(), err)
		}
		res, err := types100.NewResultFromResult(out)
		if err != nil {
			return fmt.Errorf("CNI ADD %s: %w", p.netns(), err)
		}
		if len(res.IPs) == 0 {
			return fmt.Errorf("CNI ADD %s: no address in the result", p.netns())
		}
		p.ip = res.IPs[0].Address.IP.String()
		return nil
	})
}

// cniDel runs CNI DEL for p and removes its namespace.
func (r *rcluster) cniDel(ctx context.Context, p *pod) error {
	list, err := r.c.cniList(p.node)
	if err != nil {
		return err
	}
	err = ns.WithNetNSPath("/var/run/netns/"+r.c.nodeNS(p.node), func(ns.NetNS) error {
		return r.cni[p.node].DelNetworkList(ctx, list, r.runtimeConf(p))
	})
	if err != nil {
		return fmt.Errorf("CNI DEL %s: %w", p.netns(), err)
	}
	if b, err := exec.Command("ip", "netns", "del", p.netns()).CombinedOutput(); err != nil {
		return fmt.Errorf("delete namespace %s: %v: %s", p.netns(), err, b)
	}
	return nil
}

// listen starts p's listener inside its namespace: it answers every
// connection with p's name and then echoes what it reads.
func (r *rcluster) listen(p *pod) {
	r.t.Helper()
	l, err := netnstest.ListenAt(p.nsPath(), "tcp", "0.0.0.0:"+strconv.Itoa(listenPort))
	if err != nil {
		r.t.Fatal(err)
	}
	netnstest.Serve(r.t, l, func(c net.Conn) {
		io.WriteString(c, p.name()+"\n")
		io.Copy(c, c)
	})
}

// basePods creates one pod per node, each in its own Kubernetes
// namespace r1..r3, with a listener.
func (r *rcluster) basePods() []*pod {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var pods []*pod
	for i := 1; i <= nodeCount; i++ {
		p := newPod(r.c.o.prefix, "r"+strconv.Itoa(i), i)
		if err := r.newNS(p); err != nil {
			r.t.Fatal(err)
		}
		if err := r.cniAdd(ctx, p); err != nil {
			r.t.Fatal(err)
		}
		r.listen(p)
		pods = append(pods, p)
	}
	return pods
}

// nodeCmd runs a command inside node i's namespace.
func (r *rcluster) nodeCmd(i int, args ...string) string {
	r.t.Helper()
	b, err := exec.Command("ip", append([]string{"netns", "exec", r.c.nodeNS(i)}, args...)...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("%s on %s: %v: %s", strings.Join(args, " "), nodeName(i), err, b)
	}
	return string(b)
}

// bgpRoutes are node i's routes of protocol 80 through a gateway: the
// other nodes' blocks learned over BGP.
func (r *rcluster) bgpRoutes(i int) []string {
	var out []string
	for _, l := range strings.Split(r.nodeCmd(i, "ip", "-4", "route", "show", "proto", "80"), "\n") {
		if strings.Contains(l, " via ") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	slices.Sort(out)
	return out
}

// caliRules is what node i's iptables-save shows of Calico's chains.
func (r *rcluster) caliRules(i int) []string {
	var out []string
	for _, l := range strings.Split(r.nodeCmd(i, "iptables-save"), "\n") {
		if strings.Contains(l, "cali") {
			out = append(out, l)
		}
	}
	return out
}

// assertMatrix waits for reachability between pods to become allowed(from, to).
func assertMatrix(t *testing.T, pods []*pod, allowed func(from, to *pod) bool, what string) {
	t.Helper()
	want := expected(pods, allowed)
	got := awaitMatrix(context.Background(), pods, want, 30*time.Second)
	for i := range pods {
		for j := range pods {
			if got[i][j] != want[i][j] {
				t.Errorf("%s: %s -> %s connected=%v, want %v", what, pods[i].name(), pods[j].name(), got[i][j], want[i][j])
			}
		}
	}
}

func allowAll(from, to *pod) bool { return true }

// conn is a connection held open from one pod to another's listener.
type conn struct {
	c  net.Conn
	rd *bufio.Reader
}

func dialFrom(from, to *pod) (*conn, error) {
	var c net.Conn
	err := ns.WithNetNSPath(from.nsPath(), func(ns.NetNS) error {
		var err error
		c, err = net.DialTimeout("tcp", net.JoinHostPort(to.ip, strconv.Itoa(listenPort)), 2*time.Second)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("connect %s -> %s: %w", from.name(), to.name(), err)
	}
	cn := &conn{c: c, rd: bufio.NewReader(c)}
	if line, err := cn.line(); err != nil || line != to.name() {
		c.Close()
		return nil, fmt.Errorf("greeting of %s: %q, %v", to.name(), line, err)
	}
	return cn, nil
}

func (c *conn) line() (string, error) {
	c.c.SetDeadline(time.Now().Add(5 * time.Second))
	l, err := c.rd.ReadString('\n')
	return strings.TrimSpace(l), err
}

// echo sends msg and waits for the listener to send it back: TCP
// retransmits, so a short outage only delays the answer.
func (c *conn) echo(msg string) error {
	c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.c, msg+"\n"); err != nil {
		return fmt.Errorf("send %q: %w", msg, err)
	}
	got, err := c.line()
	if err != nil || got != msg {
		return fmt.Errorf("echo of %q: %q, %v", msg, got, err)
	}
	return nil
}

// TestResilience runs one three-node cluster through an agent's SIGKILL,
// an etcd restart, pod churn and a node's removal, in that order (each
// step leaves the cluster whole for the next, the last takes a node away).
func TestResilience(t *testing.T) {
	r := newRCluster(t)
	pods := r.basePods()
	assertMatrix(t, pods, allowAll, "after start")
	if t.Failed() {
		t.FailNow()
	}

	t.Run("agent SIGKILL and restart", func(t *testing.T) { testAgentKill(t, r, pods) })
	t.Run("etcd restart", func(t *testing.T) { testEtcdRestart(t, r, pods) })
	t.Run("pod churn", func(t *testing.T) { testChurn(t, r, pods) })
	t.Run("node removal", func(t *testing.T) { testNodeRemoval(t, r, pods) })
}

// testAgentKill: node-2's agent dies without a word and comes back; the
// pods never notice.
func testAgentKill(t *testing.T, r *rcluster, pods []*pod) {
	const victim = 2
	c, err := dialFrom(pods[0], pods[victim-1])
	if err != nil {
		t.Fatal(err)
	}
	defer c.c.Close()
	if err := c.echo("before"); err != nil {
		t.Fatal(err)
	}
	routes := map[int][]string{}
	for i := 1; i <= nodeCount; i++ {
		routes[i] = r.bgpRoutes(i)
		if len(routes[i]) == 0 {
			t.Fatalf("%s has no BGP routes before the kill", nodeName(i))
		}
	}
	rules := r.caliRules(victim)
	if !slices.ContainsFunc(rules, func(l string) bool { return strings.HasPrefix(l, ":cali-tw-") }) {
		t.Fatalf("%s has no per-endpoint chain to compare:\n%s", nodeName(victim), strings.Join(rules, "\n"))
	}

	r.stop(nodeName(victim), syscall.SIGKILL)
	// Long enough for the peers to see the session gone.
	time.Sleep(2 * time.Second)
	if err := c.echo("while dead"); err != nil {
		t.Errorf("connection %s -> %s while the agent is dead: %v", pods[0].name(), pods[victim-1].name(), err)
	}
	for i := 1; i <= nodeCount; i++ {
		if got := r.bgpRoutes(i); !slices.Equal(got, routes[i]) {
			t.Errorf("%s routes while %s's agent is dead:\n%s\nwant (graceful restart)\n%s", nodeName(i), nodeName(victim), strings.Join(got, "\n"), strings.Join(routes[i], "\n"))
		}
	}

	if err := r.c.startAgent(victim); err != nil {
		t.Fatal(err)
	}
	if err := r.waitMesh(); err != nil {
		t.Fatal(err)
	}
	// The restarted agent resyncs its dataplane; give it the time to
	// write, should it (wrongly) change anything.
	time.Sleep(3 * time.Second)
	if err := c.echo("after restart"); err != nil {
		t.Errorf("connection %s -> %s after the restart: %v", pods[0].name(), pods[victim-1].name(), err)
	}
	for i := 1; i <= nodeCount; i++ {
		if got := r.bgpRoutes(i); !slices.Equal(got, routes[i]) {
			t.Errorf("%s routes after the restart:\n%s\nwant\n%s", nodeName(i), strings.Join(got, "\n"), strings.Join(routes[i], "\n"))
		}
	}
	if got := r.caliRules(victim); !slices.Equal(got, rules) {
		t.Errorf("%s iptables cali rules changed across the restart:\n%s\nwant\n%s", nodeName(victim), strings.Join(got, "\n"), strings.Join(rules, "\n"))
	}
	assertMatrix(t, pods, allowAll, "after the agent restart")
}

// r3OnlyPolicy lets the pods of r1..r3 accept TCP only from r3: it has
// a rule on every node.
const r3OnlyPolicy = `apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: from-r3-only
spec:
  selector: projectcalico.org/namespace in {'r1', 'r2', 'r3'}
  types: [Ingress]
  ingress:
  - action: Allow
    protocol: TCP
    source:
      selector: projectcalico.org/namespace == 'r3'
`

// testEtcdRestart: etcd goes away for a few seconds and comes back on
// the same addresses with its data; the agents carry on.
func testEtcdRestart(t *testing.T, r *rcluster, pods []*pod) {
	weps, err := r.ctl("", "get", "workloadendpoints", "-A", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	r.stop("etcd", syscall.SIGTERM)
	// A unix listener's file normally goes with it; a stale one would
	// keep the new etcd from listening.
	os.Remove(strings.TrimPrefix(r.c.etcdUnix(), "unix://"))
	time.Sleep(3 * time.Second)
	if err := r.c.startEtcd(); err != nil {
		t.Fatal(err)
	}
	assertMatrix(t, pods, allowAll, "after the etcd restart")
	if got, err := r.ctl("", "get", "workloadendpoints", "-A", "-o", "name"); err != nil || got != weps {
		t.Errorf("workload endpoints after the etcd restart: %v\n%s\nwant\n%s", err, got, weps)
	}

	if _, err := r.ctl(r3OnlyPolicy, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	fromR3 := func(from, to *pod) bool { return from.k8sNS == "r3" }
	assertMatrix(t, pods, fromR3, "policy applied after the etcd restart")
	if _, err := r.ctl("", "delete", "globalnetworkpolicy", "from-r3-only"); err != nil {
		t.Fatal(err)
	}
	assertMatrix(t, pods, allowAll, "policy deleted")
}

// testChurn creates and deletes 200 pods in bursts of 20 across the
// nodes and checks nothing of them is left anywhere.
func testChurn(t *testing.T, r *rcluster, pods []*pod) {
	const total, burst = 200, 20
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	var all, prev []*pod

	// each runs f on every pod of b at once.
	each := func(b []*pod, f func(context.Context, *pod) error) error {
		errs := make([]error, len(b))
		var wg sync.WaitGroup
		for k, p := range b {
			wg.Go(func() { errs[k] = f(ctx, p) })
		}
		wg.Wait()
		return errorsJoin(errs)
	}
	for n := 0; n < total; n += burst {
		var b []*pod
		for k := n; k < n+burst; k++ {
			p := newPod(r.c.o.prefix, "c"+strconv.Itoa(k), k%nodeCount+1)
			if err := r.newNS(p); err != nil {
				t.Fatal(err)
			}
			b = append(b, p)
		}
		if err := each(b, r.cniAdd); err != nil {
			t.Fatal(err)
		}
		// Live pods never share an address.
		seen := map[string]string{}
		for _, p := range append(slices.Clone(prev), b...) {
			if o, dup := seen[p.ip]; dup {
				t.Errorf("%s and %s both have %s", o, p.netns(), p.ip)
			}
			seen[p.ip] = p.netns()
		}
		// The previous burst goes while this one lives: adds and deletes
		// interleave in IPAM.
		if err := each(prev, r.cniDel); err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
		prev = b
	}
	if err := each(prev, r.cniDel); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d pods added and deleted in %s", total, time.Since(start).Round(100*time.Millisecond))

	base := map[string]bool{}
	for _, p := range pods {
		base[p.ip] = true
	}
	gone := map[string]bool{}
	for _, p := range all {
		if !base[p.ip] {
			gone[p.ip] = true
		}
	}

	// IPAM: only the base pods hold addresses, and the check is clean.
	report := filepath.Join(t.TempDir(), "check.json")
	if out, err := r.ctl("", "ipam", "check", "-o", report); err != nil {
		t.Errorf("ipam check: %v\n%s", err, out)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep ipam.CheckReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("ipam check report: %v", err)
	}
	var held []string
	for _, as := range rep.Allocations {
		for _, a := range as {
			held = append(held, a.IP)
		}
	}
	slices.Sort(held)
	var wantHeld []string
	for ip := range base {
		wantHeld = append(wantHeld, ip)
	}
	slices.Sort(wantHeld)
	if !slices.Equal(held, wantHeld) {
		t.Errorf("allocated addresses after the churn %v, want only the base pods' %v", held, wantHeld)
	}
	if len(rep.LeakedHandles)+len(rep.MissingHandles)+len(rep.InUseNotAllocated)+len(rep.InUseNotInPool) > 0 {
		t.Errorf("ipam check problems: leaked handles %v, missing handles %v, in use not allocated %v, not in pool %v",
			rep.LeakedHandles, rep.MissingHandles, rep.InUseNotAllocated, rep.InUseNotInPool)
	}

	// Datastore: only the base pods' endpoints.
	out, err := r.ctl("", "get", "workloadendpoints", "-A", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []struct {
			Spec struct {
				Node          string   `json:"node"`
				InterfaceName string   `json:"interfaceName"`
				IPNetworks    []string `json:"ipNetworks"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("workload endpoints: %v\n%s", err, out)
	}
	ifaces := map[string]map[string]bool{} // node -> interfaces of live endpoints
	for _, w := range list.Items {
		for _, n := range w.Spec.IPNetworks {
			if ip, _, _ := strings.Cut(n, "/"); !base[ip] {
				t.Errorf("workload endpoint on %s for %s left", w.Spec.Node, n)
			}
		}
		if ifaces[w.Spec.Node] == nil {
			ifaces[w.Spec.Node] = map[string]bool{}
		}
		ifaces[w.Spec.Node][w.Spec.InterfaceName] = true
	}
	if len(list.Items) != len(pods) {
		t.Errorf("%d workload endpoints after the churn, want %d", len(list.Items), len(pods))
	}

	// Every node's kernel: no route to a deleted pod, no cali veth and
	// no per-endpoint chain but the live endpoints' (which must be there:
	// the parsing below sees what it looks for).
	for i := 1; i <= nodeCount; i++ {
		live := ifaces[nodeName(i)]
		routed, links, chains := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, l := range strings.Split(r.nodeCmd(i, "ip", "-4", "route", "show"), "\n") {
			f := strings.Fields(l)
			if len(f) < 3 {
				continue
			}
			if gone[strings.TrimSuffix(f[0], "/32")] {
				t.Errorf("%s: route to a deleted pod: %s", nodeName(i), l)
			}
			if f[1] == "dev" {
				routed[f[2]] = true
			}
		}
		for _, l := range strings.Split(r.nodeCmd(i, "ip", "-o", "link", "show"), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			links[name] = true
			if strings.HasPrefix(name, "cali") && !live[name] {
				t.Errorf("%s: veth %s left", nodeName(i), name)
			}
		}
		for _, l := range r.caliRules(i) {
			chain, ok := strings.CutPrefix(l, ":")
			if !ok {
				continue
			}
			chain, _, _ = strings.Cut(chain, " ")
			chains[chain] = true
			for _, pfx := range []string{"cali-tw-", "cali-fw-"} {
				if iface, ok := strings.CutPrefix(chain, pfx); ok && !live[iface] {
					t.Errorf("%s: chain %s of a deleted endpoint left", nodeName(i), chain)
				}
			}
		}
		for iface := range live {
			if !routed[iface] || !links[iface] || !chains["cali-tw-"+iface] || !chains["cali-fw-"+iface] {
				t.Errorf("%s: live endpoint %s: route %v, link %v, chains %v/%v", nodeName(i), iface,
					routed[iface], links[iface], chains["cali-tw-"+iface], chains["cali-fw-"+iface])
			}
		}
	}
	assertMatrix(t, pods, allowAll, "after the churn")
}

func errorsJoin(errs []error) error {
	var msgs []string
	for _, e := range errs {
		if e != nil {
			msgs = append(msgs, e.Error())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%d failures: %s", len(msgs), strings.Join(msgs, "; "))
}

// testNodeRemoval decommissions node-3 as the Calico docs say (pods
// gone, agent stopped, Node and block affinities deleted) and checks
// that its blocks' routes leave the other nodes.
func testNodeRemoval(t *testing.T, r *rcluster, pods []*pod) {
	const gone = 3
	via := " via " + nodeAddr(gone) + " "
	for i := 1; i < gone; i++ {
		if !slices.ContainsFunc(r.bgpRoutes(i), func(l string) bool { return strings.Contains(l, via) }) {
			t.Fatalf("%s has no route via %s before the removal", nodeName(i), nodeAddr(gone))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.cniDel(ctx, pods[gone-1]); err != nil {
		t.Fatal(err)
	}
	// SIGKILL: the peers keep its routes (graceful restart, see above),
	// so only the removal itself can take them away.
	r.stop(nodeName(gone), syscall.SIGKILL)
	time.Sleep(time.Second)
	for i := 1; i < gone; i++ {
		if !slices.ContainsFunc(r.bgpRoutes(i), func(l string) bool { return strings.Contains(l, via) }) {
			t.Fatalf("%s dropped the routes via %s when its agent died, before the removal", nodeName(i), nodeAddr(gone))
		}
	}
	if _, err := r.ctl("", "delete", "node", nodeName(gone)); err != nil {
		t.Fatal(err)
	}
	// calicoctl's node deletion takes the node's block affinities too.
	store := storetest.Etcd(t, ctx, []string{r.c.etcdURL()})
	if blocks, err := ipam.New(store.IPAM(), store, slog.New(slog.DiscardHandler)).AffineBlocks(ctx, nodeName(gone)); err != nil || len(blocks) != 0 {
		t.Fatalf("after calicoctl delete node: blocks still affine to %s: %v %v", nodeName(gone), blocks, err)
	}

	deadline := time.Now().Add(30 * time.Second)
	for i := 1; i < gone; i++ {
		for {
			left := slices.DeleteFunc(r.bgpRoutes(i), func(l string) bool { return !strings.Contains(l, via) })
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s still routes via the removed %s:\n%s", nodeName(i), nodeName(gone), strings.Join(left, "\n"))
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	assertMatrix(t, pods[:gone-1], allowAll, "the remaining pods")
}
