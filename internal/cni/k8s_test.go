package cni_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/pkitest"
)

// fakeAPI serves the few Kubernetes reads the plugin makes: pods,
// namespaces and nodes, as kube-apiserver encodes them.
type fakeAPI struct {
	srv    *httptest.Server
	caFile string // the server's CA, PEM
	token  string // required bearer token, when set

	mu         sync.Mutex
	pods       map[string]*corev1.Pod // "ns/name"
	namespaces map[string]*corev1.Namespace
	nodes      map[string]*corev1.Node
	requests   []string
}

func newFakeAPI(t *testing.T, token string) *fakeAPI {
	f := &fakeAPI{token: token, pods: map[string]*corev1.Pod{}, namespaces: map[string]*corev1.Namespace{}, nodes: map[string]*corev1.Node{}}
	// TLS: client-go sends credentials only over TLS.
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	f.caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := pkitest.WriteCert(f.caFile, f.srv.Certificate().Raw); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		f.status(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var obj any
	switch {
	case len(parts) == 6 && parts[0] == "api" && parts[2] == "namespaces" && parts[4] == "pods":
		if p := f.pods[parts[3]+"/"+parts[5]]; p != nil {
			obj = p
		}
	case len(parts) == 4 && parts[0] == "api" && parts[2] == "namespaces":
		if n := f.namespaces[parts[3]]; n != nil {
			obj = n
		}
	case len(parts) == 4 && parts[0] == "api" && parts[2] == "nodes":
		if n := f.nodes[parts[3]]; n != nil {
			obj = n
		}
	}
	if obj == nil {
		f.status(w, http.StatusNotFound, "NotFound")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(obj)
}

func (f *fakeAPI) status(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   "Failure", Reason: metav1.StatusReason(reason), Code: int32(code), Message: reason,
	})
}

func (f *fakeAPI) addNamespace(name string, labels, annotations map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.namespaces[name] = &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
	}
}

func (f *fakeAPI) addPod(p *corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	f.pods[p.Namespace+"/"+p.Name] = p
}

// kubeconfig writes a kubeconfig for the fake server.
func (f *fakeAPI) kubeconfig(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	data := `apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: ` + f.srv.URL + `
    certificate-authority: ` + f.caFile + `
users:
- name: cni
  user:
    token: ` + f.token + `
contexts:
- name: test
  context: {cluster: test, user: cni}
current-context: test
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestKubernetesPods(t *testing.T) {
	e := newEnv(t)
	e.addPool("default-pool", "10.244.0.0/16", 26)
	e.addPool("special", "10.250.0.0/24", 28)
	kube := newFakeAPI(t, "s3cret")
	kube.addNamespace("prod", map[string]string{"team": "a"}, nil)
	kube.addNamespace("pinned", nil, map[string]string{"cni.projectcalico.org/ipv4pools": `["special"]`})
	kube.addPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "prod", GenerateName: "web-", Labels: map[string]string{"app": "web", "tier": "front"}},
		Spec: corev1.PodSpec{ServiceAccountName: "websa", NodeName: "node1", Containers: []corev1.Container{{
			Name:  "c",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {ContainerPort: 53, HostPort: 5353, Protocol: corev1.ProtocolUDP}, {ContainerPort: 9}},
		}}},
	})
	kube.addPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "pinned"}})
	kube.addPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fixed", Namespace: "prod",
		Annotations: map[string]string{"cni.projectcalico.org/ipAddrs": `["10.250.0.77"]`}}})
	kube.addPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "spoofer", Namespace: "prod",
		Annotations: map[string]string{"cni.projectcalico.org/allowedSourcePrefixes": `["10.9.3.0/16", "192.0.2.7"]`}}})
	kube.addPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "badspoof", Namespace: "prod",
		Annotations: map[string]string{"cni.projectcalico.org/allowedSourcePrefixes": `["nope"]`}}})
	kubeconfig := kube.kubeconfig(t)

	withKubeconfig := e.conf("1.0.0", map[string]any{"kubernetes": map[string]any{"kubeconfig": kubeconfig}})
	t.Run("allowedSourcePrefixes annotation", func(t *testing.T) {
		e := e.in(t)
		p := newPod(t, "prod", "spoofer")
		e.mustAdd(withKubeconfig, p)
		ep := e.endpoints("prod")["node1-k8s-spoofer-eth0"]
		if ep == nil || !slices.Equal(ep.Spec.AllowSpoofedSourcePrefixes, []string{"10.9.0.0/16", "192.0.2.7/32"}) {
			t.Errorf("endpoint allowSpoofedSourcePrefixes: %+v", ep)
		}
		e.mustDel(withKubeconfig, p)
		bad := newPod(t, "prod", "badspoof")
		_, err := e.add(withKubeconfig, bad)
		if code, msg := cniCode(err); code != 7 || !strings.Contains(msg, "allowedSourcePrefixes") {
			t.Errorf("bad annotation: code %d %q, want 7 naming the annotation", code, msg)
		}
		e.assertNothingLeft("k8s-pod-network", bad, k8sVethName("prod", "badspoof"))
	})
	withAPIRoot := e.conf("0.3.1", map[string]any{"policy": map[string]any{"type": "k8s", "k8s_api_root": kube.srv.URL + "/api/v1/",
		"k8s_auth_token": "s3cret", "k8s_certificate_authority": kube.caFile}})

	t.Run("labels, service account, profiles, ports", func(t *testing.T) {
		e := e.in(t)
		for name, conf := range map[string][]byte{"kubeconfig": withKubeconfig, "policy api root": withAPIRoot} {
			t.Run(name, func(t *testing.T) {
				e := e.in(t)
				p := newPod(t, "prod", "web-0")
				res := e.mustAdd(conf, p)
				veth := k8sVethName("prod", "web-0")
				assertPodNetworking(t, p, veth, podAddrs(t, res), 1500)
				ep := e.endpoints("prod")["node1-k8s-web--0-eth0"]
				if ep == nil {
					t.Fatalf("no endpoint node1-k8s-web--0-eth0 in prod: %v", e.endpoints("prod"))
				}
				wantLabels := map[string]string{"app": "web", "tier": "front", api.LabelNamespace: "prod",
					api.LabelOrchestrator: "k8s", api.LabelServiceAccount: "websa"}
				if !mapsEqual(ep.Labels, wantLabels) {
					t.Errorf("labels %v, want %v", ep.Labels, wantLabels)
				}
				s := ep.Spec
				if s.Orchestrator != "k8s" || s.Pod != "web-0" || s.ContainerID != p.rt.ContainerID || s.ServiceAccountName != "websa" ||
					s.InterfaceName != veth || s.Endpoint != "eth0" || s.Node != "node1" {
					t.Errorf("endpoint spec %+v", s)
				}
				if !slices.Equal(s.Profiles, []string{"kns.prod", "ksa.prod.websa"}) {
					t.Errorf("profiles %v, want [kns.prod ksa.prod.websa]", s.Profiles)
				}
				if len(s.Ports) != 2 || s.Ports[0].Name != "http" || s.Ports[0].Port != 8080 || s.Ports[0].Protocol.String() != "TCP" ||
					s.Ports[1].HostPort != 5353 || s.Ports[1].Protocol.String() != "UDP" {
					t.Errorf("ports %+v: want the named port and the host port", s.Ports)
				}
				if ep.GenerateName != "web-" {
					t.Errorf("generateName %q", ep.GenerateName)
				}
				e.mustDel(conf, p)
				e.assertNothingLeft("k8s-pod-network", p, veth)
			})
		}
	})

	t.Run("namespace ipv4pools annotation", func(t *testing.T) {
		e := e.in(t)
		p := newPod(t, "pinned", "db")
		res := e.mustAdd(withKubeconfig, p)
		if a := podAddrs(t, res)[0]; !strings.HasPrefix(a.String(), "10.250.0.") {
			t.Errorf("address %s is not from the annotated pool 10.250.0.0/24", a)
		}
		e.mustDel(withKubeconfig, p)
	})

	t.Run("pod ipAddrs annotation", func(t *testing.T) {
		e := e.in(t)
		p := newPod(t, "prod", "fixed")
		res := e.mustAdd(withKubeconfig, p)
		if a := podAddrs(t, res)[0]; a.String() != "10.250.0.77/32" {
			t.Errorf("address %s, want the annotated 10.250.0.77", a)
		}
		if held := e.heldBy("k8s-pod-network." + p.rt.ContainerID); len(held) != 1 || held[0].String() != "10.250.0.77" {
			t.Errorf("handle holds %v", held)
		}
		// The pod's next sandbox gets the same address: the old sandbox's
		// allocation is freed for it, as in Calico.
		next := newPod(t, "prod", "fixed")
		res = e.mustAdd(withKubeconfig, next)
		if a := podAddrs(t, res)[0]; a.String() != "10.250.0.77/32" {
			t.Errorf("new sandbox got %s, want 10.250.0.77", a)
		}
		e.mustDel(withKubeconfig, p)
		e.mustDel(withKubeconfig, next)
		e.assertNothingLeft("k8s-pod-network", next, "")
	})

	// kubelet recreates the sandbox of a pod: new container ID, same pod,
	// so the same endpoint name and host veth name. The old sandbox's DEL
	// may come while its namespace is still there or after it is gone.
	for _, oldNetnsGone := range []bool{false, true} {
		t.Run(fmt.Sprintf("sandbox restart, old netns gone %v", oldNetnsGone), func(t *testing.T) {
			e := e.in(t)
			old := newPod(t, "prod", "web-0")
			oldAddr := podAddrs(t, e.mustAdd(withKubeconfig, old))[0]
			cur := newPod(t, "prod", "web-0")
			curAddr := podAddrs(t, e.mustAdd(withKubeconfig, cur))[0]
			ep := e.endpoints("prod")["node1-k8s-web--0-eth0"]
			if ep == nil || ep.Spec.ContainerID != cur.rt.ContainerID || !slices.Equal(ep.Spec.IPNetworks, []string{curAddr.String()}) {
				t.Fatalf("endpoint after the second ADD: %+v, want container %s with %s", ep, cur.rt.ContainerID, curAddr)
			}
			if oldNetnsGone {
				old.dropPath(t)
			}
			// The old sandbox's DEL frees its address but leaves the pod's
			// endpoint and interface (the same host veth name) alone.
			e.mustDel(withKubeconfig, old)
			if held := e.heldBy("k8s-pod-network." + old.rt.ContainerID); len(held) != 0 {
				t.Errorf("old sandbox still holds %v (had %s)", held, oldAddr)
			}
			if ep := e.endpoints("prod")["node1-k8s-web--0-eth0"]; ep == nil || ep.Spec.ContainerID != cur.rt.ContainerID {
				t.Errorf("old sandbox's DEL removed the live endpoint: %+v", ep)
			}
			assertPodNetworking(t, cur, k8sVethName("prod", "web-0"), []netip.Prefix{curAddr}, 1500)
			e.mustDel(withKubeconfig, cur)
			e.assertNothingLeft("k8s-pod-network", cur, k8sVethName("prod", "web-0"))
		})
	}

	t.Run("pod not found", func(t *testing.T) {
		e := e.in(t)
		p := newPod(t, "prod", "ghost")
		_, err := e.add(withKubeconfig, p)
		if code, msg := cniCode(err); code != types.ErrUnknownContainer || !strings.Contains(msg, "prod/ghost") {
			t.Errorf("ADD of a missing pod: %v, want code 3 naming prod/ghost", err)
		}
		e.assertNothingLeft("k8s-pod-network", p, k8sVethName("prod", "ghost"))
	})

	t.Run("wrong token", func(t *testing.T) {
		e := e.in(t)
		conf := e.conf("0.3.1", map[string]any{"policy": map[string]any{"type": "k8s", "k8s_api_root": kube.srv.URL,
			"k8s_auth_token": "wrong", "k8s_certificate_authority": kube.caFile}})
		p := newPod(t, "prod", "web-0")
		_, err := e.add(conf, p)
		if code, _ := cniCode(err); code != types.ErrInvalidNetworkConfig {
			t.Errorf("ADD with a refused token: %v, want code 7", err)
		}
		e.assertNothingLeft("k8s-pod-network", p, k8sVethName("prod", "web-0"))
	})

	t.Run("API server down", func(t *testing.T) {
		e := e.in(t)
		down := httptest.NewServer(http.NotFoundHandler())
		down.Close()
		conf := e.conf("1.0.0", map[string]any{"kubernetes": map[string]any{"k8s_api_root": down.URL}})
		p := newPod(t, "prod", "web-0")
		_, err := e.add(conf, p)
		if code, _ := cniCode(err); code != types.ErrTryAgainLater {
			t.Errorf("ADD with the API server down: %v, want code 11", err)
		}
		e.assertNothingLeft("k8s-pod-network", p, k8sVethName("prod", "web-0"))
	})

	t.Run("no Kubernetes API configured", func(t *testing.T) {
		e := e.in(t)
		// CNI_ARGS name a pod but the config has no way to read it: the
		// endpoint is a Kubernetes one, with the network's profile.
		conf := e.conf("1.0.0", nil)
		p := newPod(t, "prod", "web-0")
		e.mustAdd(conf, p)
		ep := e.endpoints("prod")["node1-k8s-web--0-eth0"]
		if ep == nil || !slices.Equal(ep.Spec.Profiles, []string{"k8s-pod-network"}) || ep.Labels[api.LabelOrchestrator] != "k8s" {
			t.Errorf("endpoint %+v", ep)
		}
		e.mustDel(conf, p)
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
