package cni_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// newKDDEnv is an env on the Kubernetes datastore (DATASTORE_TYPE=
// kubernetes): a real kube-apiserver with Calico's CRDs holds everything,
// and the plugin reads each pod from it and writes its annotations, so
// pods must exist there first (addK8sPod). No controller manager runs:
// the "default" ServiceAccount of the "default" namespace, which pods
// need, is created here.
func newKDDEnv(t testing.TB) *env {
	t.Helper()
	requireNode(t)
	c := kubetest.Start(t, kubetest.WithoutControllerManager())
	c.InstallCalicoCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	if _, err := c.Client.CoreV1().ServiceAccounts("default").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the default ServiceAccount: %v", err)
	}
	store, err := kdd.New(ctx, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{Kubeconfig: c.Kubeconfig}})
	if err != nil {
		t.Fatalf("open datastore: %v", err)
	}
	e := newEnvOn(t, ctx, &conn{store: store, ipam: ipam.New(store.IPAM(), store, nil)})
	e.kube = c
	return e
}

// addNode registers a node as its datastore knows nodes: a Calico Node on
// etcd, the Kubernetes Node (kubelet's) on the Kubernetes datastore.
func (e *env) addNode(name string) {
	e.t.Helper()
	if e.kube != nil {
		if _, err := e.kube.Client.CoreV1().Nodes().Create(e.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name}}}, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("create Kubernetes Node %s: %v", name, err)
		}
		return
	}
	node := &api.Node{TypeMeta: api.TypeMeta{Kind: "Node", APIVersion: api.GroupVersion}, ObjectMeta: api.ObjectMeta{Name: name}}
	if _, err := e.store.Create(e.ctx, node); err != nil {
		e.t.Fatalf("create Node %s: %v", name, err)
	}
}

// addK8sPod creates the Pod the runtime is asked to network, scheduled to
// node (no kubelet runs: it stays Pending). Only the Kubernetes datastore
// needs it; on etcd it does nothing.
// Annotations, when given, are the pod's (at most one map).
func (e *env) addK8sPod(namespace, name, node string, annotations ...map[string]string) {
	e.t.Helper()
	if e.kube == nil {
		return
	}
	no := false
	var ann map[string]string
	if len(annotations) > 0 {
		ann = annotations[0]
	}
	if _, err := e.kube.Client.CoreV1().Pods(namespace).Create(e.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create pod %s/%s: %v", namespace, name, err)
	}
}
