package cni_test

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/cni"
	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/kube"
)

// TestAgentViewKDD: an ADD the agent serves on its own Kubernetes
// datastore reads the pod, its namespace, ClusterInformation, the pools,
// the reservations and the Node from the agent's watches, not from the
// API server (counted by the API server's apiserver_request_total),
// where an agent without them reads each; a pod whose IPAM annotations
// changed after the watch's copy gets what the pod asks for now; a pod
// the watch does not hold is read.
func TestAgentViewKDD(t *testing.T) {
	e := newKDDEnv(t)
	e.addNode(e.node)
	e.addNode("node2") // the agent without the watches: blocks and IPAM cache of its own
	e.addPool("pool-a", "10.71.0.0/24", 28)
	e.addPool("pool-b", "10.72.0.0/24", 28)
	conf := e.conf("1.0.0", map[string]any{"log_level": "error", "endpoint_status_dir": t.TempDir()})
	plainConf := e.conf("1.0.0", map[string]any{"log_level": "error", "endpoint_status_dir": t.TempDir(), "nodename": "node2"})

	// The agent's watches, as `calico-node run` builds them on KDD.
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	w := confwatch.New(e.store, slog.New(slog.DiscardHandler), nil)
	wg.Go(func() { w.Run(ctx) })
	rc, err := kdd.RESTConfig(datastore.KubeConfig{Kubeconfig: e.kube.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kube.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	nodePods := kube.NewNodePods(kc, e.node)
	wg.Go(func() { nodePods.Run(ctx) })
	server, err := kdd.ServerURL(datastore.KubeConfig{Kubeconfig: e.kube.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	<-w.Synced()
	pods := &heldPods{PodSource: nodePods, held: map[string]*corev1.Pod{}, hidden: map[string]bool{}}
	viewed := startViewServer(t, &cni.AgentView{Server: server, Node: e.node, Resources: w.Subscribe(cni.ViewKinds...), Pods: pods})
	plain := startViewServer(t, nil)

	// A pod bound to node, in the watch at its current version when it
	// is the agent's.
	addPodOn := func(node, name string, labels, anns map[string]string) *pod {
		t.Helper()
		no := false
		created, err := e.kube.Client.CoreV1().Pods("default").Create(e.ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels, Annotations: anns},
			Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: &no,
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node == e.node {
			waitWatched(t, nodePods, created)
		}
		p := newPod(t, "default", name)
		p.rt.Args = append(p.rt.Args, [2]string{"K8S_POD_UID", string(created.UID)})
		return p
	}
	addPod := func(name string, labels, anns map[string]string) *pod { return addPodOn(e.node, name, labels, anns) }
	// add runs ADD through the server at sock and returns the pod's
	// address and the API server's requests it took, by verb and
	// resource ("GET pods").
	add := func(sock string, p *pod) (netip.Addr, map[string]float64) {
		t.Helper()
		os.Setenv(cnientry.SocketEnv, sock)
		defer os.Setenv(cnientry.SocketEnv, "none")
		c := conf
		if sock == plain {
			c = plainConf
		}
		before := apiRequests(t, e)
		res := e.mustAdd(c, p)
		after := apiRequests(t, e)
		for k, v := range before {
			after[k] -= v
		}
		if len(res.IPs) != 1 {
			t.Fatalf("ADD result %v, want one address", res.IPs)
		}
		a, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
		return a.Unmap(), after
	}
	// Both servers' IPAM caches and the view warm (the node's block
	// claimed), as on a node that has run pods.
	add(viewed, addPod("warm-viewed", nil, nil))
	add(plain, addPodOn("node2", "warm-plain", nil, nil))
	t.Setenv(cnientry.SocketEnv, "none")

	reads := []string{"GET pods", "GET namespaces", "GET clusterinformations", "LIST ippools", "LIST ipreservations", "GET nodes"}
	t.Run("from the watch", func(t *testing.T) {
		_, ref := add(plain, addPodOn("node2", "ref", nil, nil))
		_, got := add(viewed, addPod("web", map[string]string{"app": "web"}, nil))
		for _, r := range reads {
			if got[r] != 0 {
				t.Errorf("agent with its watches: %v %s requests, want none (without them: %v)", got[r], r, ref[r])
			}
		}
		if total(got) >= total(ref) {
			t.Errorf("agent with its watches made %v API requests, without them %v: want fewer (%v; %v)", total(got), total(ref), got, ref)
		}
		if ref["GET pods"] == 0 || ref["GET namespaces"] == 0 {
			t.Errorf("agent without its watches: %v, want the pod and namespace read", ref)
		}
		ep := e.endpoints("default")[e.node+"-k8s-web-eth0"]
		if ep == nil || ep.Labels["app"] != "web" || len(ep.Spec.IPNetworks) != 1 {
			t.Errorf("endpoint %+v, want label app=web and an address", ep)
		}
	})

	t.Run("changed after the watch's copy", func(t *testing.T) {
		p := addPod("moved", map[string]string{"v": "1"},
			map[string]string{"cni.projectcalico.org/ipv4pools": `["pool-a"]`})
		// The watch keeps the old copy: the change reaches it only
		// after the ADD began, as when a watch lags.
		old, _ := nodePods.Pod("default", "moved")
		pods.hold(old)
		changed := old.DeepCopy()
		changed.Labels["v"] = "2"
		changed.Annotations["cni.projectcalico.org/ipv4pools"] = `["pool-b"]`
		changed.Annotations["cni.projectcalico.org/allowedSourcePrefixes"] = `["192.0.2.0/24"]`
		if _, err := e.kube.Client.CoreV1().Pods("default").Update(e.ctx, changed, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		addr, got := add(viewed, p)
		if !netip.MustParsePrefix("10.72.0.0/24").Contains(addr) {
			t.Errorf("address %s, want one of pool-b (the annotation as the pod has it now)", addr)
		}
		if got["GET pods"] == 0 {
			t.Errorf("requests %v: want the pod read once the watch did not confirm it", got)
		}
		ep := e.endpoints("default")[e.node+"-k8s-moved-eth0"]
		if ep == nil || ep.Labels["v"] != "2" || strings.Join(ep.Spec.AllowSpoofedSourcePrefixes, ",") != "192.0.2.0/24" ||
			strings.Join(ep.Spec.IPNetworks, ",") != addr.String()+"/32" {
			t.Errorf("endpoint %+v, want label v=2, allowed source 192.0.2.0/24 and address %s", ep, addr)
		}
		if held := e.heldBy("k8s-pod-network." + p.rt.ContainerID); len(held) != 1 || held[0] != addr {
			t.Errorf("the pod's handle holds %v, want only %s (the first attempt's address released)", held, addr)
		}
	})

	t.Run("not in the watch", func(t *testing.T) {
		p := addPod("unseen", map[string]string{"app": "unseen"},
			map[string]string{"cni.projectcalico.org/ipv4pools": `["pool-b"]`})
		pods.hide("default", "unseen")
		addr, got := add(viewed, p)
		if got["GET pods"] == 0 || got["GET namespaces"] == 0 {
			t.Errorf("requests %v: want the pod and its namespace read", got)
		}
		if !netip.MustParsePrefix("10.72.0.0/24").Contains(addr) {
			t.Errorf("address %s, want one of pool-b", addr)
		}
		if ep := e.endpoints("default")[e.node+"-k8s-unseen-eth0"]; ep == nil || ep.Labels["app"] != "unseen" {
			t.Errorf("endpoint %+v, want label app=unseen", ep)
		}
	})
}

// startViewServer runs an agent's CNI server in this process with view
// (nil: none) and returns its socket.
func startViewServer(t *testing.T, view *cni.AgentView) string {
	t.Helper()
	_, sock := startServerWith(t, nil, func(s *cni.Server) { s.View = view })
	return sock
}

// heldPods is the agent's pod watch with some pods held at an old copy
// and some hidden, as a watch that lags has them.
type heldPods struct {
	cni.PodSource
	mu     sync.Mutex
	held   map[string]*corev1.Pod
	hidden map[string]bool
}

func (h *heldPods) hold(p *corev1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[p.Namespace+"/"+p.Name] = p.DeepCopy()
}

func (h *heldPods) hide(namespace, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hidden[namespace+"/"+name] = true
}

func (h *heldPods) Pod(namespace, name string) (*corev1.Pod, bool) {
	h.mu.Lock()
	held, hidden := h.held[namespace+"/"+name], h.hidden[namespace+"/"+name]
	h.mu.Unlock()
	switch {
	case hidden:
		return nil, false
	case held != nil:
		return held, true
	}
	return h.PodSource.Pod(namespace, name)
}

// waitWatched waits until the watch holds pod at its resourceVersion.
func waitWatched(t *testing.T, w cni.PodSource, pod *corev1.Pod) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if got, ok := w.Pod(pod.Namespace, pod.Name); ok && got.ResourceVersion == pod.ResourceVersion {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s not in the watch at resourceVersion %s", pod.Namespace, pod.Name, pod.ResourceVersion)
		}
	}
}

// apiRequests is the API server's count of requests so far, by verb and
// resource ("GET pods"; subresources apart: "PATCH pods/status").
func apiRequests(t *testing.T, e *env) map[string]float64 {
	t.Helper()
	raw, err := e.kube.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(e.ctx)
	if err != nil {
		t.Fatalf("API server metrics: %v", err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(line[:i], "apiserver_request_total{"), "}"), ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				labels[k] = strings.Trim(val, `"`)
			}
		}
		key := labels["verb"] + " " + labels["resource"]
		if labels["subresource"] != "" {
			key += "/" + labels["subresource"]
		}
		out[key] += v
	}
	return out
}

// total is the number of requests in m, watches (long-running) aside.
func total(m map[string]float64) float64 {
	n := 0.0
	for k, v := range m {
		if !strings.HasPrefix(k, "WATCH ") {
			n += v
		}
	}
	return n
}
