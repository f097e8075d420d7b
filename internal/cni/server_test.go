package cni_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/internal/cni"
	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
)

// startServer runs an agent's CNI server in this process (the test process
// plays the node, in the node's namespace) and points the plugins libcni
// runs at it.
func startServer(t testing.TB) *cni.Server {
	t.Helper()
	srv, sock := startServerAt(t)
	t.Setenv(cnientry.SocketEnv, sock)
	return srv
}

// startServerAt runs an agent's CNI server in this process and returns it
// and its socket, for plugins pointed at it one by one (one server per
// simulated node).
func startServerAt(t testing.TB) (*cni.Server, string) {
	t.Helper()
	return startServerWith(t, nil)
}

// startServerWith is startServerAt with the server's metrics in reg,
// and each of configure applied to it before it runs.
func startServerWith(t testing.TB, reg prometheus.Registerer, configure ...func(*cni.Server)) (*cni.Server, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cnisrv") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "cni.sock")
	srv := cni.NewServer(sock, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, c := range configure {
		c(srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("server did not listen")
		}
	}
	return srv, sock
}

// TestAgentServesForwardedCommands: with an agent listening, ADD, CHECK
// and DEL are run by the agent, and what the runtime and the pod see is
// what the plugin process itself would have produced.
func TestAgentServesForwardedCommands(t *testing.T) {
	e := newEnv(t)
	e.addPool("served", "10.93.0.0/24", 28)
	srv := startServer(t)
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			e := e.in(t)
			conf := e.conf(v, nil)
			p := newPod(t)
			served := srv.Served.Load()
			res := e.mustAdd(conf, p)
			if len(res.IPs) != 1 || !netip.MustParsePrefix("10.93.0.0/24").Contains(netip.MustParseAddr(res.IPs[0].Address.IP.String())) {
				t.Fatalf("ADD result IPs: %v", res.IPs)
			}
			// The runtime's name for the namespace, not the agent's
			// descriptor path.
			var sandbox string
			for _, intf := range res.Interfaces {
				if intf.Sandbox != "" {
					sandbox = intf.Sandbox
				}
			}
			if sandbox != p.ns.Path() {
				t.Errorf("result sandbox %q, want %q", sandbox, p.ns.Path())
			}
			addr := res.IPs[0].Address.IP.String()
			if out := ipOut(t, p, "addr", "show", "eth0"); !strings.Contains(out, addr+"/32") {
				t.Errorf("pod eth0 lacks %s:\n%s", addr, out)
			}
			if out := ipOut(t, p, "route"); !strings.Contains(out, "default via 169.254.1.1") {
				t.Errorf("pod routes:\n%s", out)
			}
			// The host end is in the node's namespace (this process's).
			eps := e.endpointsOf(p.rt.ContainerID)
			if len(eps) != 1 {
				t.Fatalf("endpoints of %s: %d", p.rt.ContainerID, len(eps))
			}
			hostVeth := eps[0].Spec.InterfaceName
			if _, err := netlink.LinkByName(hostVeth); err != nil {
				t.Errorf("host veth %s: %v", hostVeth, err)
			}
			want := int64(2)
			if v != "0.3.1" {
				if err := e.check(conf, p); err != nil {
					t.Errorf("CHECK: %v", err)
				}
				want++
			}
			e.mustDel(conf, p)
			e.assertNothingLeft("k8s-pod-network", p, hostVeth)
			if got := srv.Served.Load() - served; got != want {
				t.Errorf("agent served %d commands, want %d", got, want)
			}
		})
	}
	if n := srv.Declined.Load(); n != 0 {
		t.Errorf("agent declined %d commands", n)
	}
}

// TestAgentServesErrors: a command failing in the agent fails for the
// runtime with the plugin's own error code and message.
func TestAgentServesErrors(t *testing.T) {
	e := newEnv(t)
	e.addPool("errs", "10.94.0.0/24", 28)
	srv := startServer(t)
	p := newPod(t)
	conf := e.conf("1.0.0", map[string]any{"ipam": map[string]any{"type": "calico-ipam", "ipv4_pools": []string{"10.95.0.0/24"}}})
	_, err := e.add(conf, p)
	code, msg := cniCode(err)
	if code == 0 || !strings.Contains(msg, "10.95.0.0/24") {
		t.Errorf("ADD from a pool that does not exist: code %d %q", code, msg)
	}
	if srv.Served.Load() != 1 {
		t.Errorf("served %d, want the failing ADD", srv.Served.Load())
	}
	if links := kubetest.CaliLinks(t); len(links) != 0 {
		t.Errorf("failed ADD left %v", links)
	}
	e.mustDel(conf, p)
}

// TestAgentDeclines: what the agent cannot run as the plugin process
// would, the plugin runs itself, and the runtime sees no difference; the
// agent's metric counts each decline under its reason.
func TestAgentDeclines(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	srv, sock := startServerWith(t, reg)
	t.Setenv(cnientry.SocketEnv, sock)
	p := newPod(t)
	conf := e.conf("1.0.0", map[string]any{"ipam": e.hostLocal("10.96.7.0/24")})
	res := e.mustAdd(conf, p)
	if len(res.IPs) != 1 {
		t.Fatalf("host-local ADD: %v", res.IPs)
	}
	e.mustDel(conf, p)
	if srv.Served.Load() != 0 || srv.Declined.Load() != 2 {
		t.Errorf("served %d declined %d, want 0 and 2 (host-local runs under the plugin)", srv.Served.Load(), srv.Declined.Load())
	}
	e.assertNothingLeft("k8s-pod-network", p, "")
	// A config naming a file the agent cannot read: whatever the plugin
	// makes of it, the agent left it both commands.
	p = newPod(t)
	conf = e.conf("1.0.0", map[string]any{"kubernetes": map[string]any{"kubeconfig": filepath.Join(t.TempDir(), "no-such-kubeconfig")}})
	e.add(conf, p)
	e.del(conf, p)
	want := map[string]float64{
		`calico_cni_server_requests_total{reason="ipam_delegated",result="declined"}`:  2,
		`calico_cni_server_requests_total{reason="file_unreadable",result="declined"}`: 2,
	}
	if got := counters(t, reg, "calico_cni_server_requests_total"); !maps.Equal(got, want) {
		t.Errorf("metric samples %v, want %v", got, want)
	}
}

// counters are the samples of the counter vector name in reg, as the
// exposition format writes them.
func counters(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out[name+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestAgentServesDELWithNetNSGone: a DEL after the runtime removed the
// pod's namespace (as kubelet's pod deletion does) is served by the agent
// and deletes everything: the addresses, the endpoint and the host veth,
// which the namespace still held open by someone keeps alive.
func TestAgentServesDELWithNetNSGone(t *testing.T) {
	e := newEnv(t)
	e.addPool("gone", "10.93.128.0/24", 28)
	reg := prometheus.NewRegistry()
	srv, sock := startServerWith(t, reg)
	t.Setenv(cnientry.SocketEnv, sock)
	conf := e.conf("1.0.0", nil)
	p, veth := e.addThenDropNetNS(conf)
	e.mustDel(conf, p)
	e.assertNothingLeft("k8s-pod-network", p, veth)
	if srv.Served.Load() != 2 || srv.Declined.Load() != 0 {
		t.Errorf("served %d declined %d, want the ADD and the DEL served", srv.Served.Load(), srv.Declined.Load())
	}
	want := map[string]float64{`calico_cni_server_requests_total{reason="",result="served"}`: 2}
	if got := counters(t, reg, "calico_cni_server_requests_total"); !maps.Equal(got, want) {
		t.Errorf("metric samples %v, want %v", got, want)
	}
}

// TestPluginWithoutAgent: a socket nobody listens on (an agent that died)
// and a missing socket leave the plugin to run the command itself.
func TestPluginWithoutAgent(t *testing.T) {
	e := newEnv(t)
	e.addPool("noagent", "10.97.0.0/24", 28)
	dir, err := os.MkdirTemp("", "cnisrv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // the file stays, nobody listens
	for _, sock := range []string{stale, filepath.Join(dir, "missing.sock"), "none"} {
		t.Run(filepath.Base(sock), func(t *testing.T) {
			t.Setenv(cnientry.SocketEnv, sock)
			e := e.in(t)
			p := newPod(t)
			conf := e.conf("1.0.0", nil)
			if res := e.mustAdd(conf, p); len(res.IPs) != 1 {
				t.Fatalf("ADD: %v", res.IPs)
			}
			e.mustDel(conf, p)
			e.assertNothingLeft("k8s-pod-network", p, "")
		})
	}
}

// TestAgentLostMidCommand: an agent that vanishes before it has taken the
// request (stopping with it still queued) leaves the plugin to run the
// command itself; one that vanishes after taking it may have done part of
// an ADD, so the runtime is told to try again (code 11) rather than the
// plugin doing it a second time. DEL, idempotent, is then done by the
// plugin itself.
func TestAgentLostMidCommand(t *testing.T) {
	e := newEnv(t)
	e.addPool("lost", "10.98.9.0/24", 28)
	for _, tc := range []struct {
		name  string
		taken bool
	}{{"before taking the request", false}, {"after taking the request", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.in(t)
			dir, err := os.MkdirTemp("", "cnisrv")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			sock := filepath.Join(dir, "cni.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			netnstest.Serve(t, l, func(c net.Conn) {
				io.Copy(io.Discard, c) // the whole request, then hang up
				if tc.taken {
					c.Write([]byte{cnientry.Taken})
				}
			})
			t.Setenv(cnientry.SocketEnv, sock)
			p := newPod(t)
			conf := e.conf("1.0.0", nil)
			res, err := e.add(conf, p)
			if tc.taken {
				code, msg := cniCode(err)
				if code != types.ErrTryAgainLater || !strings.Contains(msg, "agent") {
					t.Errorf("ADD with the agent lost: code %d %q, want 11 naming the agent", code, msg)
				}
			} else if err != nil || len(res.IPs) != 1 {
				t.Errorf("ADD with the agent gone before taking it: %v %v, want the plugin to do it", res, err)
			}
			e.mustDel(conf, p)
			e.assertNothingLeft("k8s-pod-network", p, "")
		})
	}
}

// TestServerBadSocket: a socket path the agent cannot listen on is an
// error naming the path (the agent stops with it, as for any bad flag),
// and nothing is left behind.
func TestServerBadSocket(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("x", 120), "cni.sock") // over the 108-byte limit
	err := cni.NewServer(long, nil, slog.New(slog.NewTextHandler(io.Discard, nil))).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), long) {
		t.Fatalf("Run on %s: %v, want an error naming the socket", long, err)
	}
	if _, err := os.Stat(long); err == nil {
		t.Errorf("%s was created", long)
	}
}

// agentSocketEnv makes the test binary an agent serving CNI commands on
// the socket it names, in a mount namespace of its own (runMountNSAgent).
const agentSocketEnv = "CALICO_CNI_TEST_AGENT_SOCKET"

// runMountNSAgent is the child startMountNSAgent starts: already in a new
// mount namespace (CLONE_NEWNS), it makes every mount private, as a
// DaemonSet's /var/run/netns without HostToContainer propagation is, so
// that namespaces the runtime mounts from now on are not seen here; then
// it serves until SIGTERM, logging every decision at debug level.
func runMountNSAgent(sock string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return cni.NewServer(sock, nil, log).Run(ctx)
}

// startMountNSAgent runs an agent in its own mount namespace (in this
// node's network namespace) and points the plugins at it.
func startMountNSAgent(t *testing.T) *proctest.Proc {
	t.Helper()
	dir, err := os.MkdirTemp("", "cnisrv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "cni.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), agentSocketEnv+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	agent := proctest.Start(t, "agent", cmd)
	agent.WaitFor(t, 10*time.Second, "the agent's CNI socket", func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	t.Setenv(cnientry.SocketEnv, sock)
	return agent
}

// TestAgentInAnotherMountNamespace: an agent that does not see the
// runtime's netns mounts (they were made after it started, and its
// mounts do not propagate) cannot check at the end of ADD that the
// namespace is still the runtime's, so it declines and the plugin does
// the work: every ADD succeeds, where it failed with "netns ...
// disappeared during ADD". A namespace mounted before the agent started
// is the same in both views, and the agent serves it.
func TestAgentInAnotherMountNamespace(t *testing.T) {
	e := newEnv(t)
	e.addPool("mountns", "10.93.64.0/24", 28)
	seen := newPod(t) // mounted before the agent starts: the agent sees it
	agent := startMountNSAgent(t)
	unseen := newPod(t)
	conf := e.conf("1.0.0", nil)
	for _, p := range []*pod{seen, unseen} {
		res, err := e.add(conf, p)
		if err != nil {
			t.Fatalf("ADD %s: %v", p.name, err)
		}
		if len(res.IPs) != 1 {
			t.Fatalf("ADD %s: IPs %v", p.name, res.IPs)
		}
		addr := res.IPs[0].Address.IP.String()
		if out := ipOut(t, p, "addr", "show", "eth0"); !strings.Contains(out, addr+"/32") {
			t.Errorf("pod %s eth0 lacks %s:\n%s", p.name, addr, out)
		}
	}
	log := agent.Log.String()
	if n := strings.Count(log, "declined a CNI command"); n != 1 || !strings.Contains(log, unseen.ns.Path()) {
		t.Errorf("agent declined %d commands, want only the ADD of %s:\n%s", n, unseen.ns.Path(), log)
	}
	// DEL works on the descriptor: the agent serves it whatever it sees
	// at the path.
	for _, p := range []*pod{seen, unseen} {
		e.mustDel(conf, p)
		e.assertNothingLeft("k8s-pod-network", p, "")
	}
	if n := strings.Count(agent.Log.String(), "declined a CNI command"); n != 1 {
		t.Errorf("agent declined %d commands, want only the ADD of %s:\n%s", n, unseen.ns.Path(), agent.Log.String())
	}
}
