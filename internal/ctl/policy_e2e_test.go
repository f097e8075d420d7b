package ctl_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/explain"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// shop is a small cluster: namespaces shop and dev, web and db pods on
// n1, a client pod on n2, and a policy that lets only web reach db.
var shop = storetest.NamespaceProfile("shop", nil) + storetest.NamespaceProfile("dev", nil) + `---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: n1}
spec: {bgp: {ipv4Address: 192.0.2.1/24}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: n2}
spec: {bgp: {ipv4Address: 192.0.2.2/24}}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: n1-k8s-web-eth0, namespace: shop, labels: {app: web}}
spec: {orchestrator: k8s, node: n1, pod: web, endpoint: eth0, interfaceName: cali1a2b3c4d5e6, ipNetworks: [10.80.0.5/32], profiles: [kns.shop]}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: n1-k8s-db-eth0, namespace: shop, labels: {app: db}}
spec: {orchestrator: k8s, node: n1, pod: db, endpoint: eth0, interfaceName: cali2b3c4d5e6f7, ipNetworks: [10.80.0.6/32], profiles: [kns.shop]}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: n2-k8s-client-eth0, namespace: dev, labels: {app: client}}
spec: {orchestrator: k8s, node: n2, pod: client, endpoint: eth0, interfaceName: cali3c4d5e6f7a8, ipNetworks: [10.80.1.7/32], profiles: [kns.dev]}
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: db, namespace: shop}
spec:
  selector: app == 'db'
  ingress:
  - action: Allow
    protocol: TCP
    source: {selector: app == 'web'}
    destination: {ports: [5432]}
`

func TestPolicyExplain(t *testing.T) {
	c := newCLI(t)
	if r := c.run(shop, "apply", "-f", "-"); r.err != nil {
		t.Fatalf("apply: %+v", r)
	}
	t.Run("text", func(t *testing.T) {
		out := c.ok("policy", "explain", "--from", "dev/client", "--to", "shop/db", "--port", "5432")
		texttest.Contains(t, "output", out,
			"TCP 10.80.1.7:40000 -> 10.80.0.6:5432: Deny",
			"node n2 (forward, in cali3c4d5e6f7a8, out eth0): Allow",
			"node n1 (forward, in eth0, out cali2b3c4d5e6f7): Deny in filter FORWARD",
			"NetworkPolicy shop/db",
			"no rule matched",
			"end of tier default: no policy allowed, denied or passed the packet: default action Deny",
			"= filter cali-tw-cali2b3c4d5e6f7 #",
		)
	})
	t.Run("yaml, and the same as the library says", func(t *testing.T) {
		out := c.ok("policy", "explain", "--from", "shop/web", "--to", "10.80.0.6", "--port", "5432", "-o", "yaml")
		var got explain.Explanation
		if err := yaml.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if got.Verdict != explain.Allow || got.To.Kind != explain.KindWorkload || got.To.Name != "shop/db" {
			t.Errorf("verdict %s to %s %s, want Allow to WorkloadEndpoint shop/db\n%s", got.Verdict, got.To.Kind, got.To.Name, out)
		}
		// The same explanation, computed here from the same datastore.
		store := storetest.Etcd(t, context.Background(), c.etcd.Endpoints)
		objs, err := confwatch.Load(context.Background(), store, agent.PolicyKinds()...)
		if err != nil {
			t.Fatal(err)
		}
		snaps := func(node string) (*policy.Snapshot, error) { return agent.PolicySnapshot(objs, node, nil), nil }
		any, _ := snaps("")
		from, _ := explain.Resolve(any, "shop/web")
		to, _ := explain.Resolve(any, "10.80.0.6")
		want, err := explain.Explain(explain.Request{From: from, To: to, Protocol: 6, DstPort: 5432}, snaps)
		if err != nil {
			t.Fatal(err)
		}
		wantYAML, _ := yaml.Marshal(want)
		if out != string(wantYAML) {
			t.Errorf("calicoctl says\n%s\nthe library says\n%s", out, wantYAML)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--from", "shop/nope", "--to", "shop/db"}, "no WorkloadEndpoint for pod nope in namespace shop"},
			{[]string{"--from", "192.0.2.77", "--to", "198.51.100.1"}, "neither end is on a node"},
			{[]string{"--from", "shop/web", "--to", "shop/db", "--protocol", "bogus"}, `protocol "bogus"`},
			{[]string{"--from", "shop/web", "--to", "shop/db", "-o", "xml"}, `--output "xml"`},
		} {
			if got := c.fails(append([]string{"policy", "explain"}, tc.args...)...); !strings.Contains(got, tc.want) {
				t.Errorf("%v: stderr %q, want %q", tc.args, got, tc.want)
			}
		}
		// Between two outside addresses, the node that routes them.
		if out := c.ok("policy", "explain", "--from", "192.0.2.77", "--to", "198.51.100.1", "--node", "n1"); !strings.Contains(out, ": Allow") {
			t.Errorf("routed through n1: %s", out)
		}
	})
}

// TestApplyDryRun: --dry-run lists the packets whose verdict the file
// would change, computed by compiling both states, and writes nothing.
func TestApplyDryRun(t *testing.T) {
	c := newCLI(t)
	if r := c.run(shop, "apply", "-f", "-"); r.err != nil {
		t.Fatalf("apply: %+v", r)
	}
	const isolateWeb = `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: web-from-shop-only}
spec:
  selector: app == 'web'
  ingress:
  - action: Allow
    source: {namespaceSelector: projectcalico.org/name == 'shop'}
`
	r := c.run(isolateWeb, "apply", "--dry-run", "-f", "-")
	if r.err != nil {
		t.Fatalf("apply --dry-run: %+v", r)
	}
	out := r.stdout
	t.Logf("apply --dry-run:\n%s", out)
	texttest.Contains(t, "output", out,
		"Dry run: nothing was written.",
		"dev/client (10.80.1.7) -> shop/web (10.80.0.5) TCP/5432: Allow -> Deny (ingress of WorkloadEndpoint shop/n1-k8s-web-eth0)",
		"203.0.113.254 -> shop/web (10.80.0.5) UDP/",
		// Another node's host is not in namespace shop either.
		"n2 (192.0.2.2) -> shop/web (10.80.0.5) TCP/80: Allow -> Deny",
	)
	for _, line := range strings.Split(out, "\n") {
		// Only web's ingress changes, and web to db stays as it was.
		if strings.HasPrefix(line, "  ") && !strings.Contains(line, "-> shop/web") {
			t.Errorf("unexpected change: %s", line)
		}
		if strings.Contains(line, "shop/db (10.80.0.6) -> shop/web") {
			t.Errorf("shop's own pods keep their access: %s", line)
		}
	}
	if r := c.run("", "get", "globalnetworkpolicy", "web-from-shop-only"); r.err == nil {
		t.Errorf("--dry-run wrote the policy: %s", r.stdout)
	}
	// An invalid document is refused as apply refuses it.
	if got := c.fails("apply", "--dry-run", "-f", writeTemp(t, "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: bad}\nspec: {selector: \"app ==\"}\n")); !strings.Contains(got, "nothing was written") {
		t.Errorf("invalid document: %s", got)
	}
}

// TestPolicyExplainLive programs node n1's policy into a throwaway
// namespace with the agent's programmer, runs calicoctl policy explain
// --live in it, and checks that every rule it cites is in that kernel,
// with its counters.
func TestPolicyExplainLive(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace")
	}
	c := newCLI(t)
	if r := c.run(shop, "apply", "-f", "-"); r.err != nil {
		t.Fatalf("apply: %+v", r)
	}
	store := storetest.Etcd(t, context.Background(), c.etcd.Endpoints)
	objs, err := confwatch.Load(context.Background(), store, agent.PolicyKinds()...)
	if err != nil {
		t.Fatal(err)
	}
	s := agent.PolicySnapshot(objs, "n1", nil)
	s.Config.IPv6 = false
	ns := netnstest.New(t, "ctl-live")
	ctx := context.Background()
	b, err := xtables.Detect(ctx, xtables.ExecRunner{}, 4)
	if err != nil {
		t.Skip(err)
	}
	prog := xtables.New(b, nsRunner{ns.Name}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := prog.Apply(ctx, policy.Compile(s).V4); err != nil {
		t.Fatal(err)
	}
	// etcd listens on the machine's loopback: relay it onto the
	// namespace's, as a node reaches its datastore.
	relay, err := ns.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	netnstest.Serve(t, relay, func(in net.Conn) {
		out, err := net.Dial("tcp", strings.TrimPrefix(c.etcd.Endpoints[0], "http://"))
		if err != nil {
			return
		}
		defer out.Close()
		go io.Copy(out, in)
		io.Copy(in, out)
	})
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "ETCD_ENDPOINTS=http://" + relay.Addr().String(), "NODENAME=n1"}
	cmd := exec.Command("ip", "netns", "exec", ns.Name, c.bin, "policy", "explain", "--from", "shop/web", "--to", "shop/db",
		"--port", "5432", "--live", "-o", "yaml")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("explain --live: %v\n%s", err, out)
	}
	var got struct {
		explain.Explanation
		Notes []string `json:"notes"`
	}
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Notes) > 0 {
		t.Errorf("notes %q: every cited rule should be in the kernel", got.Notes)
	}
	rules := got.Rules()
	if len(rules) == 0 {
		t.Fatalf("no rules cited\n%s", out)
	}
	for _, r := range rules {
		if r.Packets == nil {
			t.Errorf("%s has no counters", r.Ref())
		}
	}
	// Drift: a rule the kernel lacks is named.
	if out, err := exec.Command("ip", "netns", "exec", ns.Name, "iptables", "-F", "cali-pi-default/shop/db").CombinedOutput(); err != nil {
		t.Fatalf("flush: %v %s", err, out)
	}
	cmd = exec.Command(cmd.Path, cmd.Args[1:]...)
	cmd.Env = env
	out, _ = cmd.CombinedOutput()
	got.Notes = nil
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Notes) != 1 || !strings.Contains(got.Notes[0], "filter cali-pi-default/shop/db #1") || !strings.Contains(got.Notes[0], "is not in this host's kernel") {
		t.Errorf("notes %q: want the flushed policy chain's rule named", got.Notes)
	}
}

// nsRunner runs the programmer's commands in a namespace.
type nsRunner struct{ ns string }

func (r nsRunner) Run(ctx context.Context, name string, args []string, stdin string) (string, error) {
	return xtables.ExecRunner{}.Run(ctx, "ip", append([]string{"netns", "exec", r.ns, name}, args...), stdin)
}
