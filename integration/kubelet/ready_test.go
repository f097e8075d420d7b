package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/agent/epstatus"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
)

const (
	// probePods run in waves of probeWave at a time: each wave is one
	// kubectl apply, so that the pods contend for the agent as pods
	// scheduled together do.
	probePods = 100
	probeWave = 10
)

// probeCommand is the probe pods' only instruction: connect to the peer,
// fetch its page, exit 0 when it came. nc gives up after 1 s, before
// TCP's first SYN retransmission: a dropped first packet fails the pod.
func probeCommand(peerIP string) []string {
	return []string{"sh", "-c", `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 1 ` + peerIP + " " + kubetest.ServerPort + " | grep -q " + kubetest.ServerPage}
}

// peerPolicy admits only pods labelled app=probe to the peer, so that a
// probe's first connection succeeds only once its address is in the
// peer's policy, and its own chains (without which felix's dispatch
// drops a cali interface's packets as "Unknown interface") exist.
const peerPolicy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: peer-from-probes, namespace: default}
spec:
  podSelector: {matchLabels: {app: peer}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: probe}}}]
    ports: [{port: 8080, protocol: TCP}]
`

// probeManifest is a wave of probe pods (restartPolicy Never: the pod
// ends Succeeded or Failed with its one try).
func probeManifest(names []string, wave, peerIP string) string {
	var b strings.Builder
	cmd, _ := json.Marshal(probeCommand(peerIP)) // JSON is YAML
	for _, n := range names {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default, labels: {app: probe, wave: %q}}
spec:
  nodeName: %s
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: %s, imagePullPolicy: Never, command: %s}
`, n, wave, kubetest.NodeName, kubetest.TestImage, string(cmd))
	}
	return b.String()
}

// runProbes starts the probe pods names at once and waits for each to
// end; it returns the phase of each and how long each took from the
// apply to its end being seen. The pods are deleted (without waiting).
func runProbes(t *testing.T, kube *kubetest.Cluster, names []string, wave, peerIP string) (map[string]corev1.PodPhase, map[string]time.Duration) {
	t.Helper()
	start := time.Now()
	if out, err := kube.RunKubectl(strings.NewReader(probeManifest(names, wave, peerIP)), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply probe pods: %v\n%s", err, out)
	}
	phases, took := map[string]corev1.PodPhase{}, map[string]time.Duration{}
	deadline := start.Add(2 * podWait)
	for len(phases) < len(names) {
		pods, err := kube.Client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "wave=" + wave})
		if err == nil {
			for _, p := range pods.Items {
				if _, done := phases[p.Name]; done {
					continue
				}
				if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
					phases[p.Name], took[p.Name] = p.Status.Phase, time.Since(start)
				}
			}
		}
		if time.Now().After(deadline) {
			out, _ := kube.RunKubectl(nil, "get", "pods", "-l", "wave="+wave, "-o", "wide")
			t.Fatalf("probe pods of wave %s not done after %v:\n%s", wave, 2*podWait, out)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if out, err := kube.RunKubectl(nil, "delete", "pods", "-l", "wave="+wave, "--wait=false"); err != nil {
		t.Errorf("delete probe pods: %v\n%s", err, out)
	}
	return phases, took
}

// percentile is the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))].Round(100 * time.Microsecond)
}

// probeBaseline runs one wave of probe pods against a peer on the
// reference ptp plugin (the node's current CNI config), for the figures
// of docs/benchmarks.md: the same burst as the calico waves, without
// Calico. It waits until they are gone, so that ptp tears them down.
func probeBaseline(t *testing.T, kube *kubetest.Cluster) {
	t.Helper()
	kube.RunPod(t, "ptp-peer", "app: ptp-peer", kubetest.ServerCommand(), podWait)
	var names []string
	for i := range probeWave {
		names = append(names, fmt.Sprintf("ptp-probe-%d", i))
	}
	phases, times := runProbes(t, kube, names, "ptp", kube.PodIP(t, "ptp-peer"))
	var took []time.Duration
	for _, n := range names {
		if phases[n] != corev1.PodSucceeded {
			t.Errorf("ptp probe pod %s: %s", n, phases[n])
		}
		took = append(took, times[n])
	}
	t.Logf("%d probe pods at once on ptp: create->Succeeded p50 %v p99 %v", probeWave, percentile(took, 50), percentile(took, 99))
	if out, err := kube.RunKubectl(nil, "delete", "pods", "-l", "wave=ptp", "--wait=true", "--timeout=60s"); err != nil {
		t.Fatalf("delete ptp probe pods: %v\n%s", err, out)
	}
	kube.DeletePods(t, "ptp-peer")
}

// checkNetworkAtStart is the test of ADD waiting for the dataplane on a
// real kubelet node: probe pods whose container's first instruction
// connects to a peer the policy allows them to reach. With the wait on
// (the default), every one of probePods succeeds. With it off, the race
// between the container starting and the agent programming the pod's
// policy is real but rarely lost on an idle machine (programming takes
// tens of milliseconds, starting a container hundreds); to show it
// deterministically, the agent's programming is slowed with felix's
// debugSimulateDataplaneApplyDelay (4 s, longer than the probe's 1 s
// connect), and then at least one probe must fail. restart restarts the
// agent with more environment; it returns the new agent. calicoctl is the
// binary's path.
func checkNetworkAtStart(t *testing.T, kube *kubetest.Cluster, calicoctl string, restart func(env ...string) *agentProc) *agentProc {
	t.Helper()
	began := time.Now()
	kube.RunPod(t, "peer", "app: peer", kubetest.ServerCommand(), podWait)
	peerIP := kube.PodIP(t, "peer")
	if out, err := kube.RunKubectl(strings.NewReader(peerPolicy), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the peer's policy: %v\n%s", err, out)
	}
	// The policy is in force: a pod it does not admit fails the same
	// probe (which also shows the probe can fail).
	polltest.Until(t, 60*time.Second, "the peer's policy refuses a pod it does not admit", func() bool {
		m := strings.ReplaceAll(probeManifest([]string{"outsider"}, "outsider", peerIP), "app: probe", "app: outsider")
		if out, err := kube.RunKubectl(strings.NewReader(m), "apply", "-f", "-"); err != nil {
			t.Fatalf("apply outsider: %v\n%s", err, out)
		}
		var phase corev1.PodPhase
		polltest.Until(t, 2*podWait, "outsider done", func() bool {
			p, err := kube.Client.CoreV1().Pods("default").Get(context.Background(), "outsider", metav1.GetOptions{})
			if err == nil {
				phase = p.Status.Phase
			}
			return phase == corev1.PodSucceeded || phase == corev1.PodFailed
		})
		kube.DeletePods(t, "outsider")
		return phase == corev1.PodFailed
	})

	// The wait on, as installed: every probe's first connection works.
	var names []string
	var took []time.Duration
	failed := map[string]corev1.PodPhase{}
	for w := range probePods / probeWave {
		var wave []string
		for i := range probeWave {
			wave = append(wave, fmt.Sprintf("probe-%d", w*probeWave+i))
		}
		phases, times := runProbes(t, kube, wave, fmt.Sprint(w), peerIP)
		for _, n := range wave {
			names = append(names, n)
			took = append(took, times[n])
			if phases[n] != corev1.PodSucceeded {
				failed[n] = phases[n]
			}
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d probe pods could not reach their peer at their first instruction: %v", len(failed), probePods, failed)
	}
	t.Logf("%d probe pods (%d at a time), wait on: %d failed; create->Succeeded p50 %v p99 %v; first wave (no deletions beside it, as the ptp baseline) p50 %v p99 %v (took %v)",
		probePods, probeWave, len(failed), percentile(took, 50), percentile(took, 99),
		percentile(took[:probeWave], 50), percentile(took[:probeWave], 99), time.Since(began).Round(time.Second))
	stageFigures(t, names)
	if out, err := exec.Command(calicoctl, "node", "timeline", "default/probe-0", "--status-socket", os.Getenv("CALICO_STATUS_SOCKET")).CombinedOutput(); err != nil {
		t.Errorf("calicoctl node timeline: %v\n%s", err, out)
	} else {
		t.Logf("calicoctl node timeline default/probe-0:\n%s", out)
	}

	// The wait off, and a dataplane slower than the probe's patience.
	offStart := time.Now()
	agent := restart("CALICO_POLICY_SETUP_TIMEOUT=0", "FELIX_DEBUGSIMULATEDATAPLANEAPPLYDELAY=4s")
	agent.waitReady(t)
	var off []string
	for i := range 5 {
		off = append(off, fmt.Sprintf("unready-%d", i))
	}
	phases, _ := runProbes(t, kube, off, "off", peerIP)
	nfail := 0
	for _, n := range off {
		if phases[n] == corev1.PodFailed {
			nfail++
		}
	}
	if nfail == 0 {
		t.Errorf("with the wait off and the dataplane slowed, every probe pod still reached its peer: %v", phases)
	}
	t.Logf("wait off, dataplane slowed by 4 s: %d of %d probe pods failed their first connection (took %v)", nfail, len(off), time.Since(offStart).Round(time.Second))
	return agent
}

// stageFigures logs, over the probe pods, when each stage came after the
// ADD reached the agent (the agent's own records, on its status socket):
// the figures of docs/benchmarks.md.
func stageFigures(t *testing.T, names []string) {
	t.Helper()
	offsets := map[epstatus.Stage][]time.Duration{}
	var waits []time.Duration // ADD's wait for the dataplane
	for _, n := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		a, err := epstatus.Query(ctx, os.Getenv("CALICO_STATUS_SOCKET"), "default", n)
		cancel()
		if err != nil {
			t.Errorf("status socket: %v", err)
			return
		}
		for _, r := range a.Records {
			start, ok := r.At(epstatus.StageADDReceived)
			if !ok {
				continue
			}
			for _, s := range r.Stages {
				offsets[s.Stage] = append(offsets[s.Stage], s.At.Sub(start))
			}
			// The wait's own guarantee, pod by pod.
			ret, ok1 := r.At(epstatus.StageADDReturned)
			pol, ok2 := r.At(epstatus.StagePolicy)
			rt, ok3 := r.At(epstatus.StageRoutes)
			if !ok1 || !ok2 || !ok3 || ret.Before(pol) || ret.Before(rt) {
				t.Errorf("%s: ADD returned %v, policy %v, routes %v: not in order", n, ret, pol, rt)
			}
			if w, ok := r.At(epstatus.StageEndpointWritten); ok && ok1 {
				waits = append(waits, ret.Sub(w))
			}
		}
	}
	var b strings.Builder
	for _, s := range epstatus.Stages {
		if ds := offsets[s]; len(ds) > 0 {
			fmt.Fprintf(&b, "  %-18s n=%-3d p50 %-8v p99 %v\n", s, len(ds), percentile(ds, 50), percentile(ds, 99))
		}
	}
	fmt.Fprintf(&b, "  ADD's wait for the dataplane (endpoint written -> ADD returned) p50 %v p99 %v\n", percentile(waits, 50), percentile(waits, 99))
	t.Logf("stage times after ADD received:\n%s", b.String())
}
