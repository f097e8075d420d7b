package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

// BenchmarkDataplaneThroughput is one-stream TCP throughput (iperf3)
// between two pods on one node through their host veths, with the 500
// policies of BenchmarkDataplane in force, as a ratio to the same path with
// no policy (Calico's dataplane for the same endpoints, profiles only:
// "ratio"), and to the path without a single iptables rule
// ("ratio-to-no-rules", which also prices conntrack and the workload
// anti-spoofing check every Calico node has). Runs rotate (none, no
// policy, policies, none, ...) so that machine noise hits every arm alike;
// medians are compared.
func BenchmarkDataplaneThroughput(b *testing.B) {
	if os.Getenv(nodeNetNSEnv) == "" {
		b.Skip("needs root: runs in private network namespaces")
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		b.Fatal("iperf3 not found: install Debian's iperf3 package (make deps)")
	}
	rounds := envInt("DATAPLANE_BENCH_IPERF_ROUNDS", 5)
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	node := newRecRunner(b)
	podA, podB := perfPod(b, node, "a", "10.111.0.1"), perfPod(b, node, "b", "10.111.0.2")
	objs := storetest.DataplaneCluster(b, nodeName, envInt("DATAPLANE_BENCH_EPS", 1000), envInt("DATAPLANE_BENCH_POLICIES", 500))
	extra := storetest.Objects(b, fmt.Sprintf(`
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: %[1]s-k8s-perfa-eth0, namespace: ns0, labels: {app: app0, tier: t0}}
spec: {orchestrator: k8s, node: %[1]s, pod: perfa, endpoint: eth0, interfaceName: %[2]s, ipNetworks: [10.111.0.1/32], profiles: [kns.ns0]}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: %[1]s-k8s-perfb-eth0, namespace: ns0, labels: {app: app0, tier: t0}}
spec: {orchestrator: k8s, node: %[1]s, pod: perfb, endpoint: eth0, interfaceName: %[3]s, ipNetworks: [10.111.0.2/32], profiles: [kns.ns0]}
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: iperf, namespace: ns0}
spec:
  order: 100000
  selector: app == 'app0'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [9050]}}]
  egress: [{action: Allow, protocol: TCP, destination: {ports: [9050]}}]
`, nodeName, podA.host, podB.host))
	snap := &policy.Snapshot{Node: nodeName, Config: policy.ConfigFromFelix(nil)}
	for _, o := range objs {
		snap.Add(o)
	}
	for _, o := range extra {
		snap.Add(o)
	}
	snap.Config.IPv6 = false
	res := policy.Compile(snap)
	// The same node with its endpoints and profiles but no policy: the
	// price of Calico's dataplane itself (conntrack, dispatch, endpoint
	// chains), apart from the price of the 500 policies.
	bare := *snap
	bare.NetworkPolicies, bare.GlobalNetworkPolicies = nil, nil
	resBare := policy.Compile(&bare)
	be, err := xtables.Detect(ctx, node, 4)
	if err != nil {
		b.Fatal(err)
	}
	prog := xtables.New(be, node, nil, logger)

	// Replacing a 31k-rule ruleset leaves the kernel work to do after
	// iptables-restore returns (freeing the old rules after an RCU grace
	// period); on two cores that would run during the next iperf3.
	settle := func() { time.Sleep(2 * time.Second) }
	for b.Loop() {
		var none, zero, pol []float64
		for range rounds {
			// No policy at all: not a single iptables rule.
			ipt := strings.TrimSuffix(be.Save, "-save")
			for _, table := range []string{"filter", "nat", "mangle", "raw"} {
				node.sh(b, ipt, "-t", table, "-F")
				node.sh(b, ipt, "-t", table, "-X")
			}
			if strings.Contains(node.sh(b, be.Save), "cali") {
				b.Fatal("cali rules left with no policy")
			}
			prog.Invalidate()
			settle()
			none = append(none, iperf(b, podA, podB))
			if _, err := prog.Apply(ctx, resBare.V4); err != nil {
				b.Fatal(err)
			}
			settle()
			zero = append(zero, iperf(b, podA, podB))
			if _, err := prog.Apply(ctx, res.V4); err != nil {
				b.Fatal(err)
			}
			settle()
			pol = append(pol, iperf(b, podA, podB))
		}
		med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
		mNone, mZero, mPol := med(none), med(zero), med(pol)
		b.ReportMetric(mNone/1e9, "none-Gbit/s")
		b.ReportMetric(mZero/1e9, "nopolicy-Gbit/s")
		b.ReportMetric(mPol/1e9, "policy-Gbit/s")
		b.ReportMetric(mPol/mZero, "ratio")
		b.ReportMetric(mPol/mNone, "ratio-to-no-rules")
		b.Logf("iperf3 one stream pod->pod, %d rounds, Gbit/s: no rules %v, Calico without policy %v, %d policies %v",
			rounds, gbits(none), gbits(zero), len(snap.NetworkPolicies)+len(snap.GlobalNetworkPolicies), gbits(pol))
		b.Logf("medians %.2f / %.2f / %.2f: %d policies vs no rules %.3f, vs Calico without policy %.3f",
			mNone/1e9, mZero/1e9, mPol/1e9, len(snap.NetworkPolicies)+len(snap.GlobalNetworkPolicies), mPol/mNone, mPol/mZero)
	}
}

func gbits(v []float64) []string {
	var out []string
	for _, x := range v {
		out = append(out, fmt.Sprintf("%.2f", x/1e9))
	}
	return out
}

type perfPodNS struct {
	ns, host, ip string
}

// perfPod is a pod namespace wired to node's namespace as the CNI plugin
// wires it: a veth, the pod's /32, a link-local gateway answered by proxy
// ARP, a host route to the pod.
func perfPod(b *testing.B, node *recRunner, suffix, ip string) *perfPodNS {
	b.Helper()
	name := node.ns + "-" + suffix
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		b.Fatalf("ip netns add: %v: %s", err, out)
	}
	b.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	host := "caliperf0000" + suffix
	node.sh(b, "ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", name)
	node.sh(b, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf."+host+".proxy_arp=1")
	node.sh(b, "ip", "link", "set", host, "up")
	node.sh(b, "ip", "route", "add", ip+"/32", "dev", host)
	node.sh(b, "ip", "link", "set", "lo", "up")
	// The node needs an address of its own: the source of its ARP
	// requests to the pods (a loopback source is a martian to them).
	node.sh(b, "ip", "addr", "replace", "192.0.2.1/32", "dev", "lo")
	// proxy ARP answers only for addresses the node can route.
	node.sh(b, "ip", "route", "replace", "169.254.1.1/32", "dev", "lo")
	pod := func(args ...string) {
		if out, err := exec.Command("ip", append([]string{"netns", "exec", name}, args...)...).CombinedOutput(); err != nil {
			b.Fatalf("in %s: %v: %v: %s", name, args, err, out)
		}
	}
	pod("ip", "link", "set", "lo", "up")
	pod("ip", "addr", "add", ip+"/32", "dev", "eth0")
	pod("ip", "link", "set", "eth0", "up")
	pod("ip", "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
	pod("ip", "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
	return &perfPodNS{ns: name, host: host, ip: ip}
}

// sh runs a command in the runner's namespace.
func (r *recRunner) sh(b testing.TB, args ...string) string {
	b.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", r.ns}, args...)...).CombinedOutput()
	if err != nil {
		b.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

// The pods are app0/t0 in ns0: five policies select them; the first
// allows the server's port (9050, in its 9000:9100 range) on ingress, and
// egress passes all five before the "iperf" policy allows it.

// iperf runs one 3-second single-stream TCP test from a to b and returns
// the received bits per second.
func iperf(b *testing.B, from, to *perfPodNS) float64 {
	b.Helper()
	srv := exec.Command("ip", "netns", "exec", to.ns, "iperf3", "-s", "-1", "-p", "9050", "-B", to.ip)
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var r struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	var out []byte
	for range 20 { // until the server listens: -J reports errors in the JSON
		out, _ = exec.Command("ip", "netns", "exec", from.ns, "iperf3", "-c", to.ip, "-p", "9050", "-t", "3", "--connect-timeout", "2000", "-J").Output()
		r.Error = ""
		if err := json.Unmarshal(out, &r); err == nil && r.Error == "" && r.End.SumReceived.BitsPerSecond > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.End.SumReceived.BitsPerSecond == 0 {
		b.Fatalf("iperf3 %s -> %s failed:\n%s", from.ip, to.ip, out)
	}
	return r.End.SumReceived.BitsPerSecond
}
