package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// newKDDNode is the test node on the Kubernetes datastore: a real
// kube-apiserver (on this namespace's loopback) with Calico's CRDs and the
// Kubernetes Node the agent registers on, a store on it for the test's
// own writes, and the CNI plugin configured as calico-node-kdd.yaml does.
func newKDDNode(t *testing.T) *node {
	t.Helper()
	requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	n := &node{t: t, ctx: ctx, binDir: testbin.Dir(t), dataDir: t.TempDir()}
	n.kc = kubetest.Start(t)
	if out, err := n.kc.RunKubectl(nil, "apply", "-f", filepath.Join(testbin.RepoRoot(), "deploy", "crds.yaml")); err != nil {
		t.Fatalf("apply CRDs: %v\n%s", err, out)
	}
	if out, err := n.kc.RunKubectl(nil, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"); err != nil {
		t.Fatalf("wait for CRDs: %v\n%s", err, out)
	}
	// What kubelet registers; the agent waits for it.
	if _, err := n.kc.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName,
		Labels: map[string]string{"kubernetes.io/hostname": nodeName, "kubernetes.io/os": "linux"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Kubernetes Node: %v", err)
	}
	store, err := kdd.New(ctx, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{Kubeconfig: n.kc.Kubeconfig}})
	if err != nil {
		t.Fatalf("open datastore: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	n.store = store
	n.setupUplink()

	cacheDir := filepath.Join(t.TempDir(), "cni-cache")
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{n.binDir}, cacheDir, nil)
	conf, _ := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": "k8s-pod-network",
		"plugins": []any{map[string]any{
			"type":           "calico",
			"datastore_type": "kubernetes",
			"nodename":       nodeName,
			"mtu":            1500,
			"ipam_lock_file": filepath.Join(t.TempDir(), "ipam.lock"),
			"ipam":           map[string]any{"type": "calico-ipam"},
			"policy":         map[string]any{"type": "k8s"},
			"kubernetes":     map[string]any{"kubeconfig": n.kc.Kubeconfig},
		}},
	})
	if n.conf, err = libcni.ConfListFromBytes(conf); err != nil {
		t.Fatalf("libcni rejects the config: %v", err)
	}
	return n
}

// createKubePod creates the pod as the API server has it when kubelet
// asks for its network (bound to the node, Pending), with its namespace
// and service account when they are missing.
func (n *node) createKubePod(t testing.TB, p *corev1.Pod) {
	t.Helper()
	core := n.kc.Client.CoreV1()
	if _, err := core.Namespaces().Create(n.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", p.Namespace, err)
	}
	if sa := p.Spec.ServiceAccountName; sa != "" {
		if _, err := core.ServiceAccounts(p.Namespace).Create(n.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create service account %s/%s: %v", p.Namespace, sa, err)
		}
	}
	p.Spec.AutomountServiceAccountToken = ptr(false)
	if _, err := core.Pods(p.Namespace).Create(n.ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	t.Cleanup(func() {
		core.Pods(p.Namespace).Delete(context.Background(), p.Name, kubetest.ForceDelete())
	})
}

// addNamespace registers a Kubernetes namespace with the fake API or
// creates it in the real one.
func (n *node) addNamespace(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	if n.kc == nil {
		n.kube.addNamespace(name, labels)
		return
	}
	if _, err := n.kc.Client.CoreV1().Namespaces().Create(n.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// annotatePod sets a pod's annotation to the JSON of v (nil: removes it),
// as `kubectl annotate` does.
func (n *node) annotatePod(t testing.TB, namespace, name, key string, v []string) {
	t.Helper()
	pods := n.kc.Client.CoreV1().Pods(namespace)
	p, err := pods.Get(n.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	if v == nil {
		delete(p.Annotations, key)
	} else {
		data, _ := json.Marshal(v)
		p.Annotations[key] = string(data)
	}
	if _, err := pods.Update(n.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("annotate pod %s/%s: %v", namespace, name, err)
	}
}

// TestKDDPolicyOnRealPackets: every policy case on the Kubernetes
// datastore, where the profiles come from Namespaces and ServiceAccounts,
// the Kubernetes NetworkPolicy is Kubernetes' own object, tiers, policies,
// network sets, host endpoints and FelixConfigurations are custom
// resources, and an endpoint's allowed spoofed prefixes are its Pod's
// annotation.
func TestKDDPolicyOnRealPackets(t *testing.T) { testPolicyOnRealPackets(t, newKDDNode(t)) }

// kernelState is everything the agent programs in the node namespace:
// Calico's iptables rules (caliRules), its IP sets with their members,
// and every IPv4 route of every table.
func kernelState(t testing.TB) string {
	t.Helper()
	var sets []string
	for _, l := range strings.Split(run(t, "ipset", "save"), "\n") {
		if strings.Contains(l, " cali") {
			sets = append(sets, l)
		}
	}
	slices.Sort(sets)
	return "== iptables\n" + caliRules(t) +
		"\n== ipsets\n" + strings.Join(sets, "\n") +
		"\n== routes\n" + run(t, "ip", "-4", "route", "show", "table", "all")
}

// health reads one of the agent's health endpoints: status code, body.
func health(path string) (int, string) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://127.0.0.1:9099" + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// calicoctl runs the CLI against the node's datastore.
func (n *node) calicoctl(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(n.ctx, filepath.Join(n.binDir, "calicoctl"), args...)
	if n.kc != nil {
		cmd.Env = []string{"PATH=/usr/bin:/bin", "DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + n.kc.Kubeconfig}
	} else {
		cmd.Env = []string{"PATH=/usr/bin:/bin", "ETCD_ENDPOINTS=" + strings.Join(n.etcd.Endpoints, ",")}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("calicoctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// webPolicy lets only the pods source selects reach the web pod (TCP
// 8080); the outage test widens it from app=client to app=other once the
// API server is back.
func webPolicy(source string) string {
	return fmt.Sprintf(`
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec:
  selector: app == 'web'
  ingress:
  - action: Allow
    protocol: TCP
    source: {selector: "%s"}
    destination: {ports: [8080]}
`, source)
}

// TestKDDAPIServerOutage: the Kubernetes datastore goes away twice with
// policy and routes programmed. Throughout each outage the dataplane stays
// byte for byte as it is, across the agent's resyncs and, the second time,
// across a restart of the agent itself; the agent stays live and reports
// not ready and why; a CNI ADD is refused with "try again later" naming
// the API server and leaves nothing behind. When the API server is back
// the agent catches up by itself — the first time by resuming its
// watches, the second by its first list — and programs a policy change
// and new pods; IPAM has lost and leaked nothing.
func TestKDDAPIServerOutage(t *testing.T) {
	n := newKDDNode(t)
	n.apply(t, `
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool}
spec: {cidr: 10.65.0.0/16, blockSize: 26, ipipMode: Never, vxlanMode: Never}
`)
	n.startAgent(t)
	web := n.addPod(t, "prod", "web", "web", map[string]string{"app": "web"})
	client := n.addPod(t, "prod", "client", "client", map[string]string{"app": "client"})
	other := n.addPod(t, "prod", "other", "other", map[string]string{"app": "other"})
	pods := []*pod{web, client, other}
	n.apply(t, webPolicy("app in {'client'}"))

	type check struct {
		from  *pod
		allow bool
	}
	reach := func(t *testing.T, what string, want ...check) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var wrong []string
			for _, c := range want {
				if got := probe(c.from.ns, "tcp", web.ip, 8080); got != c.allow {
					wrong = append(wrong, fmt.Sprintf("%s->web tcp/8080 allowed=%v, want %v", c.from.name, got, c.allow))
				}
			}
			if len(wrong) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s", what, strings.Join(wrong, "; "))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	reach(t, "policy programmed", check{client, true}, check{other, false})

	var before string // the kernel state the outage must keep
	settle := func(t *testing.T) {
		t.Helper()
		// A resync has passed over the finished state.
		time.Sleep(resync + time.Second)
		before = kernelState(t)
		for _, p := range pods {
			if !strings.Contains(before, p.ip+" dev cali") {
				t.Fatalf("the kernel state lacks %s's route:\n%s", p.name, before)
			}
		}
		if !strings.Contains(before, "cali-pi-") || !strings.Contains(before, "blackhole 10.65.") {
			t.Fatalf("the kernel state lacks the policy or the block's blackhole:\n%s", before)
		}
	}
	unchanged := func(t *testing.T, what string) {
		t.Helper()
		if got := kernelState(t); got != before {
			t.Fatalf("%s: the kernel state changed:\n%s", what, lineDiff(before, got))
		}
	}
	hostVeth := regexp.MustCompile(`(?m)^\d+: cali[0-9a-f]{11}@`)
	// tryAgain runs CNI ADD for a pod while the API server is down.
	tryAgain := func(t *testing.T, name string) {
		t.Helper()
		start := time.Now()
		// Its DEL, as a runtime's cleanup of the failed sandbox, runs
		// at the end of the test, when the API server is back.
		_, err := n.cniAdd(n.t, "prod", name)
		var te *types.Error
		switch {
		case err == nil:
			t.Fatalf("CNI ADD of %s succeeded with the API server down", name)
		case !errors.As(err, &te):
			t.Fatalf("CNI ADD of %s: %v, want a CNI error", name, err)
		case te.Code != types.ErrTryAgainLater || !strings.Contains(te.Msg, "kubernetes API server "+n.kc.URL):
			t.Errorf("CNI ADD of %s: code %d %q, want %d (try again later) naming kubernetes API server %s", name, te.Code, te.Msg, types.ErrTryAgainLater, n.kc.URL)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("CNI ADD of %s took %s to fail", name, took)
		}
		// The failed ADD undid its veth.
		if out := run(t, "ip", "-o", "link", "show"); len(hostVeth.FindAllString(out, -1)) != len(pods) {
			t.Errorf("after the failed ADD the node has other than the %d pods' veths:\n%s", len(pods), out)
		}
		unchanged(t, "after a failed CNI ADD")
	}
	ready := func(t *testing.T) {
		t.Helper()
		n.agent.WaitFor(t, 90*time.Second, "readiness after the API server's return", func() bool {
			code, _ := health("/readiness")
			return code == http.StatusOK
		})
		// Nothing changed in the datastore: nothing changes in the
		// kernel, also after a resync.
		time.Sleep(resync + time.Second)
		unchanged(t, "agent ready again")
	}

	settle(t)
	n.kc.StopAPIServer(t)
	outageStart := time.Now()

	t.Run("dataplane kept while the API server is down", func(t *testing.T) {
		// 20s spans several of the agent's iptables resyncs (resync is
		// 2s) and its datastore watches' retries.
		notReady := false
		for time.Since(outageStart) < 20*time.Second {
			unchanged(t, fmt.Sprintf("%s into the outage", time.Since(outageStart).Round(time.Second)))
			if code, body := health("/liveness"); code != http.StatusOK {
				t.Fatalf("liveness during the outage: %d\n%s", code, body)
			}
			code, body := health("/readiness")
			if code == http.StatusServiceUnavailable && strings.Contains(body, "datastore unreachable") && strings.Contains(body, n.kc.URL) {
				notReady = true
			} else if notReady {
				t.Errorf("readiness turned %d during the outage:\n%s", code, body)
			}
			time.Sleep(time.Second)
		}
		if !notReady {
			code, body := health("/readiness")
			t.Errorf("readiness never said the datastore is unreachable; now %d:\n%s", code, body)
		}
		reach(t, "during the outage", check{client, true}, check{other, false})
		unchanged(t, "after the outage's probes")
	})
	t.Run("CNI ADD says try again later", func(t *testing.T) { tryAgain(t, "outage1") })

	n.kc.RestartAPIServer(t)
	t.Logf("first outage: %s", time.Since(outageStart).Round(time.Second))

	t.Run("watches resume when the API server is back", func(t *testing.T) {
		ready(t)
		n.apply(t, webPolicy("app in {'client', 'other'}"))
		reach(t, "policy changed after the outage", check{client, true}, check{other, true})
		// The pods live on after this subtest (n.t).
		late := n.addPod(n.t, "prod", "late", "client", map[string]string{"app": "client"})
		// The pod whose ADD failed, retried as kubelet does.
		retried := n.addPod(n.t, "prod", "outage1", "other", map[string]string{"app": "other"})
		pods = append(pods, late, retried)
		reach(t, "pods added after the outage", check{late, true}, check{retried, true})
	})
	if t.Failed() {
		t.FailNow()
	}

	settle(t)
	n.kc.StopAPIServer(t)
	outageStart = time.Now()

	t.Run("agent restarted during the outage", func(t *testing.T) {
		n.agent.WaitFor(t, 20*time.Second, "readiness 503 in the outage", func() bool {
			code, _ := health("/readiness")
			return code == http.StatusServiceUnavailable
		})
		n.agent.stop(t)
		unchanged(t, "agent stopped")
		n.launchAgent(t)
		// Start-up waits for the API server; nothing is written to the
		// kernel meanwhile, across several resync intervals.
		for i := range 8 {
			time.Sleep(time.Second)
			unchanged(t, fmt.Sprintf("%ds after the agent's restart", i+1))
			if code, body := health("/liveness"); code != http.StatusOK {
				t.Fatalf("liveness of the restarted agent during the outage: %d\n%s", code, body)
			}
			if code, body := health("/readiness"); code != http.StatusServiceUnavailable {
				t.Fatalf("readiness of the restarted agent during the outage: %d, want 503\n%s", code, body)
			}
		}
		tryAgain(t, "outage2")
		reach(t, "restarted agent during the outage", check{client, true}, check{other, true})
	})

	n.kc.RestartAPIServer(t)
	t.Logf("second outage: %s", time.Since(outageStart).Round(time.Second))

	t.Run("restarted agent catches up when the API server is back", func(t *testing.T) {
		ready(t)
		n.apply(t, webPolicy("app in {'other'}"))
		reach(t, "policy changed after the second outage", check{client, false}, check{other, true})
		last := n.addPod(n.t, "prod", "last", "other", map[string]string{"app": "other"})
		pods = append(pods, last)
		reach(t, "pod added after the second outage", check{last, true})
	})

	t.Run("nothing lost or leaked", func(t *testing.T) {
		// Each pod holds its one address; the failed ADDs hold none.
		ips := map[string]string{}
		for _, p := range pods {
			if prev, dup := ips[p.ip]; dup {
				t.Errorf("%s and %s have the same address %s", prev, p.name, p.ip)
			}
			ips[p.ip] = p.name
		}
		out := n.calicoctl(t, "ipam", "check")
		texttest.Contains(t, "calicoctl ipam check", out,
			fmt.Sprintf("IPAM blocks record %d allocations.", len(ips)),
			fmt.Sprintf("Found %d workload IPs.", len(ips)),
			"Check complete; found 0 problems.",
		)
		weps := n.calicoctl(t, "get", "workloadendpoints", "-A", "-o", "wide")
		for ip, name := range ips {
			if !regexp.MustCompile(`(?m)-k8s-` + name + `-eth0 .*` + regexp.QuoteMeta(ip) + `/32`).MatchString(weps) {
				t.Errorf("no workload endpoint of %s with %s:\n%s", name, ip, weps)
			}
		}
		if strings.Contains(weps, "outage2") {
			t.Errorf("the pod whose ADD failed has an endpoint:\n%s", weps)
		}
	})
}
