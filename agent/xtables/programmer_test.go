package xtables

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// nsRunner runs every command inside one network namespace, the way the
// agent runs inside the node's namespace, and counts iptables-restores.
// The programmer may run ipset restore beside iptables-restore: the
// counts are guarded.
type nsRunner struct {
	ns       string
	mu       sync.Mutex
	restores int
	runs     int // every command
	log      []string
}

func (r *nsRunner) Run(ctx context.Context, name string, args []string, stdin string) (string, error) {
	r.mu.Lock()
	r.runs++
	if strings.Contains(name, "restore") && name != "ipset" {
		r.restores++
		r.log = append(r.log, stdin)
	}
	r.mu.Unlock()
	return ExecRunner{}.Run(ctx, "ip", append([]string{"netns", "exec", r.ns, name}, args...), stdin)
}

func (r *nsRunner) sh(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", r.ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

func newNS(t testing.TB) *nsRunner {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	name := fmt.Sprintf("xt-test-%d-%d", os.Getpid(), time.Now().UnixNano()%1000000)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return &nsRunner{ns: name}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func ord(f float64) *float64 { return &f }

// snapshot: two local workloads, one policy letting frontends reach web on
// TCP 80, optionally a second policy.
func snapshot(withDB bool) *policy.Snapshot {
	wep := func(pod, iface, ip string, labels map[string]string) api.WorkloadEndpoint {
		w := api.WorkloadEndpoint{}
		w.Kind, w.APIVersion, w.Namespace = "WorkloadEndpoint", api.GroupVersion, "default"
		w.Labels = labels
		w.Spec = api.WorkloadEndpointSpec{Orchestrator: "k8s", Node: "n1", Pod: pod, Endpoint: "eth0",
			InterfaceName: iface, IPNetworks: []string{ip}, Profiles: []string{"kns.default"}}
		w.Default()
		return w
	}
	tcp := api.ProtocolFromString("TCP")
	np := func(name, sel, src string, port uint16) api.NetworkPolicy {
		p := api.NetworkPolicy{}
		p.Kind, p.APIVersion, p.Name, p.Namespace = "NetworkPolicy", api.GroupVersion, name, "default"
		p.Spec = api.NetworkPolicySpec{Order: ord(100), Selector: sel, Ingress: []api.Rule{{
			Action: "Allow", Protocol: &tcp,
			Source:      api.EntityRule{Selector: src},
			Destination: api.EntityRule{Ports: []api.Port{api.SinglePort(port)}},
		}}}
		p.Default()
		return p
	}
	s := &policy.Snapshot{
		Node: "n1",
		WorkloadEndpoints: []api.WorkloadEndpoint{
			wep("web", "cali1111111111a", "10.65.0.2/32", map[string]string{"app": "web"}),
			wep("front", "cali2222222222b", "10.65.0.3/32", map[string]string{"app": "front"}),
			wep("db", "cali3333333333c", "10.65.0.4/32", map[string]string{"app": "db"}),
		},
		NetworkPolicies: []api.NetworkPolicy{np("web", `app == "web"`, `app == "front"`, 80)},
	}
	if withDB {
		s.NetworkPolicies = append(s.NetworkPolicies, np("db", `app == "db"`, `app == "web"`, 5432))
	}
	pool := api.IPPool{}
	pool.Name = "p"
	pool.Spec.CIDR = "10.65.0.0/16"
	pool.Spec.NATOutgoing = true
	pool.Default()
	s.IPPools = []api.IPPool{pool}
	return s
}

func TestApplyInNamespace(t *testing.T) {
	for _, mode := range []string{"nft", "legacy"} {
		t.Run(mode, func(t *testing.T) {
			r := newNS(t)
			b := Backend{Mode: mode, Save: "iptables-" + mode + "-save", Restore: "iptables-" + mode + "-restore", Family: 4}
			ipt := "iptables-" + mode
			p := New(b, r, nil, quiet())
			ctx := context.Background()

			// Another program's chain and rules, present before we start.
			r.sh(t, ipt, "-N", "OTHER-CHAIN")
			r.sh(t, ipt, "-A", "OTHER-CHAIN", "-s", "192.0.2.1", "-j", "ACCEPT")
			r.sh(t, ipt, "-A", "INPUT", "-j", "OTHER-CHAIN")
			r.sh(t, "ipset", "create", "other-set", "hash:ip")

			res := policy.Compile(snapshot(true))
			st, err := p.Apply(ctx, res.V4)
			if err != nil {
				t.Fatal(err)
			}
			if st.Restores != 1 || st.ChainsWritten == 0 || st.SetsWritten == 0 {
				t.Fatalf("first apply: %+v", st)
			}
			save := r.sh(t, b.Save)
			for _, want := range []string{":cali-FORWARD", ":cali-INPUT", "-A FORWARD -m comment --comment \"cali:", "-A OTHER-CHAIN -s 192.0.2.1/32 -j ACCEPT", "cali40s:"} {
				if !strings.Contains(save, want) {
					t.Errorf("after apply, iptables-save lacks %q", want)
				}
			}
			// The INPUT hook goes in front of the other program's rule.
			if in := inputRules(save); len(in) < 2 || !strings.Contains(in[0], "cali-INPUT") || !strings.Contains(in[len(in)-1], "OTHER-CHAIN") {
				t.Errorf("INPUT rules: %q", in)
			}
			sets := r.sh(t, "ipset", "list", "-n")
			if !strings.Contains(sets, "other-set") || !strings.Contains(sets, "cali40s:") {
				t.Errorf("ip sets: %s", sets)
			}

			// Same state again (an agent restart): nothing is written.
			r.restores = 0
			p2 := New(b, r, nil, quiet())
			st, err = p2.Apply(ctx, res.V4)
			if err != nil {
				t.Fatal(err)
			}
			if st.Changed() || r.restores != 0 {
				t.Errorf("unchanged state rewrote the kernel: %+v, %d restores\n%s", st, r.restores, strings.Join(r.log, "\n"))
			}

			// The programmer trusts what it last wrote: an unchanged
			// state costs no command at all, not even a read-back...
			r.runs = 0
			if st, err := p2.Apply(ctx, res.V4); err != nil || st.Changed() || r.runs != 0 {
				t.Errorf("second apply of unchanged state: %+v %v, %d commands run", st, err, r.runs)
			}

			// A rule deleted by hand: exactly that chain is rewritten.
			var victim string
			for _, c := range res.V4.Filter.Chains {
				if strings.HasPrefix(c.Name, "cali-pi-") {
					victim = c.Name
				}
			}
			if victim == "" {
				t.Fatalf("no policy chain compiled: %v", chainNames(res.V4.Filter))
			}
			r.sh(t, ipt, "-D", victim, "1")
			// ...so drift is found on the resync, which invalidates.
			if st, _ := p2.Apply(ctx, res.V4); st.Changed() {
				t.Errorf("apply without resync re-read the kernel: %+v", st)
			}
			p2.Invalidate()
			st, err = p2.Apply(ctx, res.V4)
			if err != nil {
				t.Fatal(err)
			}
			if st.ChainsWritten != 1 {
				t.Errorf("after deleting a rule by hand: %+v", st)
			}
			if st, _ := p2.Apply(ctx, res.V4); st.Changed() {
				t.Errorf("not converged: %+v", st)
			}

			// Another program inserts a rule in front of our hook: the hook
			// moves back to the top, their rule stays.
			r.sh(t, ipt, "-I", "INPUT", "1", "-s", "192.0.2.9", "-j", "DROP")
			p2.Invalidate()
			st, err = p2.Apply(ctx, res.V4)
			if err != nil || st.HooksFixed != 1 {
				t.Errorf("hook repair: %+v %v", st, err)
			}
			in := inputRules(r.sh(t, b.Save))
			if len(in) != 3 || !strings.Contains(in[0], "cali-INPUT") || !strings.Contains(in[1], "192.0.2.9") {
				t.Errorf("INPUT after hook repair: %q", in)
			}

			// A policy removed: its chains and sets go, the others stay.
			before := r.sh(t, "ipset", "list", "-n")
			res2 := policy.Compile(snapshot(false))
			st, err = p2.Apply(ctx, res2.V4)
			if err != nil {
				t.Fatal(err)
			}
			if st.ChainsDeleted == 0 || st.SetsDeleted == 0 {
				t.Errorf("removing a policy: %+v", st)
			}
			save = r.sh(t, b.Save)
			for _, c := range res.V4.Filter.Chains {
				if res2.V4.Filter.Chain(c.Name) == nil && strings.Contains(save, ":"+c.Name+" ") {
					t.Errorf("stale chain %s left behind", c.Name)
				}
			}
			after := r.sh(t, "ipset", "list", "-n")
			if len(after) >= len(before) || !strings.Contains(after, "other-set") {
				t.Errorf("ip sets before %q after %q", before, after)
			}
			if !strings.Contains(save, "-A OTHER-CHAIN -s 192.0.2.1/32 -j ACCEPT") {
				t.Error("another program's rule was removed")
			}
			if st, _ := p2.Apply(ctx, res2.V4); st.Changed() {
				t.Errorf("not converged after removal: %+v", st)
			}
			// What the programmer believes it wrote is what the kernel has.
			p2.Invalidate()
			if st, _ := p2.Apply(ctx, res2.V4); st.Changed() {
				t.Errorf("the programmer's view after removal differed from the kernel: %+v", st)
			}
			// And back: the policy's chains and sets return, from the view.
			if st, err := p2.Apply(ctx, res.V4); err != nil || st.ChainsWritten == 0 || st.SetsWritten == 0 {
				t.Errorf("policy restored: %+v %v", st, err)
			}
			p2.Invalidate()
			if st, _ := p2.Apply(ctx, res.V4); st.Changed() {
				t.Errorf("the programmer's view after re-adding differed from the kernel: %+v", st)
			}
		})
	}
}

func inputRules(save string) []string {
	var out []string
	inFilter := false
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, "*") {
			inFilter = l == "*filter"
		}
		if inFilter && strings.HasPrefix(l, "-A INPUT ") {
			out = append(out, l)
		}
	}
	return out
}

func chainNames(t policy.Table) []string {
	var n []string
	for _, c := range t.Chains {
		n = append(n, c.Name)
	}
	return n
}

func TestDetect(t *testing.T) {
	b, err := Detect(context.Background(), ExecRunner{}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if (b.Mode != "nft" && b.Mode != "legacy") || !strings.HasSuffix(b.Save, "-save") {
		t.Errorf("backend %+v", b)
	}
	if _, err := exec.LookPath(b.Restore); err != nil {
		t.Errorf("detected restore command %s not on PATH: %v", b.Restore, err)
	}
}

// overlapRunner runs commands in a namespace (nsRunner) and sees whether
// an ipset restore overlapped an iptables-restore: the ipset restore
// waits up to wait for an iptables-restore to start.
type overlapRunner struct {
	ns   *nsRunner
	wait time.Duration

	mu         sync.Mutex
	started    chan struct{} // closed when an iptables-restore starts
	overlapped bool
}

func (r *overlapRunner) Run(ctx context.Context, name string, args []string, stdin string) (string, error) {
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	switch {
	case name == "ipset" && len(args) > 0 && args[0] == "restore":
		select {
		case <-started:
			r.mu.Lock()
			r.overlapped = true
			r.mu.Unlock()
		case <-time.After(r.wait):
		}
	case strings.HasSuffix(name, "-restore"):
		r.mu.Lock()
		select {
		case <-r.started:
		default:
			close(r.started)
		}
		r.mu.Unlock()
	}
	return r.ns.Run(ctx, name, args, stdin)
}

// TestApplySetsBesideRules: a change that only changes set members (a new
// pod's address) runs ipset restore beside iptables-restore, so that the
// pod's ADD waits for one process; a change that creates a set restores
// the sets first, as the new rules reference them.
func TestApplySetsBesideRules(t *testing.T) {
	ctx := context.Background()
	r := &overlapRunner{ns: newNS(t), wait: 300 * time.Millisecond, started: make(chan struct{})}
	p := New(BackendFor("nft", 4), r, nil, quiet())
	s := snapshot(false)
	if _, err := p.Apply(ctx, policy.Compile(s).V4); err != nil {
		t.Fatal(err)
	}
	if r.overlapped {
		t.Error("the first Apply, which creates the sets, ran iptables-restore before ipset restore had finished")
	}

	// A second frontend: its address joins the set of app == "front",
	// and its chains are new.
	front := s.WorkloadEndpoints[1]
	front.Name, front.Spec.Pod, front.Spec.InterfaceName, front.Spec.IPNetworks = "front2", "front2", "cali4444444444d", []string{"10.65.0.5/32"}
	s.WorkloadEndpoints = append(s.WorkloadEndpoints, front)
	r.mu.Lock()
	r.wait, r.started = 10*time.Second, make(chan struct{})
	r.mu.Unlock()
	st, err := p.Apply(ctx, policy.Compile(s).V4)
	if err != nil {
		t.Fatal(err)
	}
	if st.SetsWritten == 0 || st.ChainsWritten == 0 {
		t.Fatalf("the new endpoint changed no set or no chain: %+v", st)
	}
	if !r.overlapped {
		t.Error("a members-only change waited for ipset restore before running iptables-restore")
	}
}
