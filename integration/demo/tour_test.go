package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/bgp"
)

// checkTour runs the README tour's commands against the running demo (on
// either datastore, all its policies applied) and checks their answers: `calico-node
// plan` on a node finds it in sync, `node routes` and `node bgp why` on
// node-1 show node-2's block learned and installed, and, undoing the
// policies one at a time as the tour does, `policy explain` gives each
// pair of pods the verdict the demo's matrix measured for that step,
// and `apply --dry-run` lists exactly the pairs a policy would change
// and writes nothing.
func checkTour(t *testing.T, d *demoRun, r *results) {
	c := &cluster{o: options{binDir: d.binDir, stateDir: d.stateDir, prefix: d.prefix, etcdPort: d.port, datastore: datastoreEtcd, kubeBinDir: d.kubeBinDir}}
	if d.apiPort != 0 {
		c.o.datastore = datastoreKube
	}
	ctl := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(d.binDir, "calicoctl"), args...)
		cmd.Env = d.ctlEnv()
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	mustCtl := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := ctl(args...)
		if err != nil {
			t.Fatalf("calicoctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	t.Run("calico-node plan on a node", func(t *testing.T) {
		argv := c.agentArgv(1, "plan")
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("calico-node plan: %v\n%s", err, out)
		}
		sections := 0
		for _, l := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(l, "== ") {
				continue
			}
			sections++
			if !strings.Contains(l, ": in sync") {
				t.Errorf("plan beside the running agent of node-1 is not in sync: %q", l)
			}
		}
		for _, want := range []string{"== iptables and ipsets, IPv4", "== routes (protocol 80): in sync",
			"== BGP advertisements (AS 64512, router ID 192.0.2.11): in sync with the running speaker (1)"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("plan lacks %q", want)
			}
		}
		if t.Failed() || sections < 3 {
			t.Errorf("calico-node plan (%d sections):\n%s", sections, out)
		}
	})

	// node-2's block, as node-1's speaker learned it.
	var block string
	t.Run("node routes and bgp why on node-1", func(t *testing.T) {
		var node2 netip.Addr
		for _, p := range r.Pods {
			if p.Node == "node-2" {
				node2 = netip.MustParseAddr(p.IP)
			}
		}
		sock := c.bgpSocket(1)
		var rep bgp.RoutesReport
		if err := json.Unmarshal([]byte(mustCtl(t, "node", "routes", "--bgp-status-socket", sock, "-o", "json")), &rep); err != nil {
			t.Fatal(err)
		}
		for _, e := range rep.Routes {
			if pfx, err := netip.ParsePrefix(e.Prefix); err == nil && pfx.Contains(node2) && e.From == nodeAddr(2) {
				block = e.Prefix
				if !e.Best || e.NextHop != nodeAddr(2) || e.Kernel != bgp.KernelYes {
					t.Errorf("node-2's block on node-1: %+v; want the best path, via %s, in the kernel", e, nodeAddr(2))
				}
			}
		}
		text := mustCtl(t, "node", "routes", "--bgp-status-socket", sock)
		if block == "" || !strings.Contains(text, block) {
			t.Fatalf("node-1's routes have no path from node-2 to its pod %s:\n%s", node2, text)
		}
		var why bgp.WhyReport
		if err := json.Unmarshal([]byte(mustCtl(t, "node", "bgp", "why", block, "--bgp-status-socket", sock, "-o", "json")), &why); err != nil {
			t.Fatal(err)
		}
		if !why.Kernel.Installed || !strings.Contains(why.Kernel.Reason, "best path from "+nodeAddr(2)) {
			t.Errorf("bgp why %s: kernel %+v; want installed, the best path from node-2", block, why.Kernel)
		}
		for _, p := range why.Peers {
			if p.Peer == nodeAddr(2) && !strings.Contains(p.Received, "best path") {
				t.Errorf("bgp why %s: node-2 sent %q; want its best path", block, p.Received)
			}
			if p.Peer == nodeAddr(3) && p.Sent == bgp.SentExported {
				// node-1 does not re-advertise one iBGP peer's route to another.
				t.Errorf("bgp why %s: node-1 exports node-2's block to node-3 (%s)", block, p.Detail)
			}
		}
		if len(why.Peers) != 2 {
			t.Errorf("bgp why %s: peers %+v; want node-2 and node-3", block, why.Peers)
		}
	})

	// explain gives every pair of pods the matrix's verdict of step; the
	// tour's own pair is asked as the README shows it.
	explainStep := func(t *testing.T, step int) {
		t.Helper()
		m := r.Steps[step].Want
		for i, from := range r.Pods {
			for j, to := range r.Pods {
				if i == j {
					continue
				}
				var ex struct {
					Verdict string `json:"verdict"`
				}
				out := mustCtl(t, "policy", "explain", "--from", from.Name, "--to", to.Name, "--port", fmt.Sprint(listenPort), "-o", "json")
				if err := json.Unmarshal([]byte(out), &ex); err != nil {
					t.Fatalf("explain %s -> %s: %v\n%s", from.Name, to.Name, err, out)
				}
				if want := map[bool]string{true: "Allow", false: "Deny"}[m[i][j]]; ex.Verdict != want {
					t.Errorf("%s: explain %s -> %s: %s; the matrix says %s", r.Steps[step].Step, from.Name, to.Name, ex.Verdict, want)
				}
			}
		}
		out := mustCtl(t, "policy", "explain", "--from", "backend/pod-1", "--to", "frontend/pod-2", "--port", fmt.Sprint(listenPort))
		want := map[bool]string{true: ": Allow\n", false: ": Deny\n"}[m[podIndex(t, r, "backend/pod-1")][podIndex(t, r, "frontend/pod-2")]]
		if first, _, _ := strings.Cut(out, "\n"); !strings.HasSuffix(first+"\n", want) {
			t.Errorf("explain --from backend/pod-1 --to frontend/pod-2: %q, want it to end in %q\n%s", first, want, out)
		}
	}
	// awaitConnect waits for the pods' real connection to be allowed or
	// not (the agents apply a deletion within moments).
	awaitConnect := func(t *testing.T, from, to string, want bool) {
		t.Helper()
		f, p := r.Pods[podIndex(t, r, from)], r.Pods[podIndex(t, r, to)]
		for deadline := time.Now().Add(15 * time.Second); ; {
			_, err := tcp(f.NetNS, p.IP)
			if (err == nil) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s -> %s connects: %v, want %v", from, to, err == nil, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	t.Run("policy explain after each step", func(t *testing.T) {
		explainStep(t, 2)
		mustCtl(t, "delete", "globalnetworkpolicy", "frontend-from-frontend-only")
		awaitConnect(t, "backend/pod-1", "frontend/pod-2", true)
		explainStep(t, 1)
		// On the Kubernetes datastore the NetworkPolicy is the
		// networking.k8s.io object: kubectl's, as a user deletes it.
		if knp := filepath.Join(d.stateDir, "policy", "backend-knp.yaml"); c.kdd() {
			if out, err := c.kubectl("", "delete", "-f", knp); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		} else {
			mustCtl(t, "delete", "-f", knp)
		}
		awaitConnect(t, "frontend/pod-1", "backend/pod-2", true)
		explainStep(t, 0)
	})

	t.Run("apply --dry-run", func(t *testing.T) {
		// No policy left: the GlobalNetworkPolicy would deny backend's
		// pods their TCP connections to frontend's, and change no other
		// TCP between pods (it allows frontend only TCP: its UDP goes).
		file := filepath.Join(d.stateDir, "policy", "frontend-gnp.yaml")
		out := mustCtl(t, "apply", "--dry-run", "-f", file)
		if !strings.HasPrefix(out, "Dry run: nothing was written.") {
			t.Errorf("apply --dry-run:\n%s", out)
		}
		changed := map[string]bool{}
		for _, l := range strings.Split(out, "\n") {
			from, rest, ok := strings.Cut(strings.TrimSpace(l), " -> ")
			if !ok {
				continue
			}
			to, _, _ := strings.Cut(rest, " ")
			from, _, _ = strings.Cut(from, " ")
			if strings.Contains(l, " TCP/") {
				changed[from+" "+to] = true
			}
			if !strings.Contains(l, ": Allow -> Deny (ingress of WorkloadEndpoint frontend/") {
				t.Errorf("apply --dry-run: %q; the policy only denies, into frontend", l)
			}
		}
		for _, from := range r.Pods {
			for _, to := range r.Pods {
				if from.Name == to.Name {
					continue
				}
				want := strings.HasPrefix(from.Name, "backend/") && strings.HasPrefix(to.Name, "frontend/")
				if changed[from.Name+" "+to.Name] != want {
					t.Errorf("apply --dry-run lists TCP %s -> %s: %v, want %v\n%s", from.Name, to.Name, !want, want, out)
				}
			}
		}
		if got, err := ctl("get", "globalnetworkpolicy", "frontend-from-frontend-only"); err == nil {
			t.Errorf("apply --dry-run wrote the policy:\n%s", got)
		}
		awaitConnect(t, "backend/pod-1", "frontend/pod-2", true)
	})
}

// podIndex is the index of the pod named name in r.Pods.
func podIndex(t *testing.T, r *results, name string) int {
	t.Helper()
	for i, p := range r.Pods {
		if p.Name == name {
			return i
		}
	}
	t.Fatalf("no pod %s", name)
	return -1
}
