package cni_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// The plugin in Kubernetes mode against a real kube-apiserver: pods made
// with spec.nodeName (no kubelet) get their labels, service account,
// profiles and the namespace's pool annotation, read by the plugin itself.
func TestKubernetesModeRealAPIServer(t *testing.T) {
	if os.Getenv("CALICO_KUBE_TESTS") == "skip" {
		t.Skip("CALICO_KUBE_TESTS=skip")
	}
	e := newEnv(t)
	e.addPool("default-pool", "10.244.0.0/16", 26)
	e.addPool("special", "10.250.0.0/24", 28)
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c.CreateNamespace(t, "shop", map[string]string{"team": "a"})
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Annotations = map[string]string{"cni.projectcalico.org/ipv4pools": `["special"]`}
	if _, err := c.Client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "cart"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cart-1", Labels: map[string]string{"app": "cart"}},
		Spec: corev1.PodSpec{NodeName: "node1", ServiceAccountName: "cart",
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer c.Client.CoreV1().Pods("shop").Delete(context.Background(), "cart-1", kubetest.ForceDelete())

	conf := e.conf("1.0.0", map[string]any{"kubernetes": map[string]any{"kubeconfig": c.Kubeconfig}, "policy": map[string]any{"type": "k8s"}})
	p := newPod(t, "shop", "cart-1")
	res := e.mustAdd(conf, p)
	if a := podAddrs(t, res)[0]; !strings.HasPrefix(a.String(), "10.250.0.") {
		t.Errorf("address %s is not from the namespace's annotated pool", a)
	}
	ep := e.endpoints("shop")["node1-k8s-cart--1-eth0"]
	if ep == nil {
		t.Fatalf("no endpoint node1-k8s-cart--1-eth0: %v", e.endpoints("shop"))
	}
	want := map[string]string{"app": "cart", api.LabelNamespace: "shop", api.LabelOrchestrator: "k8s", api.LabelServiceAccount: "cart"}
	if !mapsEqual(ep.Labels, want) {
		t.Errorf("labels %v, want %v", ep.Labels, want)
	}
	if !slices.Equal(ep.Spec.Profiles, []string{"kns.shop", "ksa.shop.cart"}) || ep.Spec.ServiceAccountName != "cart" {
		t.Errorf("profiles %v sa %q", ep.Spec.Profiles, ep.Spec.ServiceAccountName)
	}
	if len(ep.Spec.Ports) != 1 || ep.Spec.Ports[0].Name != "http" || ep.Spec.Ports[0].Port != 8080 {
		t.Errorf("ports %+v", ep.Spec.Ports)
	}
	e.mustDel(conf, p)
	e.assertNothingLeft("k8s-pod-network", p, k8sVethName("shop", "cart-1"))

	// The same pod through the agent's CNI server, twice (its API server
	// client is kept between commands): the same endpoint results.
	srv := startServer(t)
	for range 2 {
		res := e.mustAdd(conf, p)
		if a := podAddrs(t, res)[0]; !strings.HasPrefix(a.String(), "10.250.0.") {
			t.Errorf("through the agent: address %s is not from the namespace's annotated pool", a)
		}
		ep := e.endpoints("shop")["node1-k8s-cart--1-eth0"]
		if ep == nil || !mapsEqual(ep.Labels, want) || !slices.Equal(ep.Spec.Profiles, []string{"kns.shop", "ksa.shop.cart"}) || len(ep.Spec.Ports) != 1 {
			t.Fatalf("through the agent: endpoint %+v", ep)
		}
		e.mustDel(conf, p)
		e.assertNothingLeft("k8s-pod-network", p, k8sVethName("shop", "cart-1"))
	}
	if srv.Served.Load() != 4 || srv.Declined.Load() != 0 {
		t.Errorf("agent served %d, declined %d; want 4 and 0", srv.Served.Load(), srv.Declined.Load())
	}
}
