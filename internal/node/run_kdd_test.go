package node

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// startKDD is a kube-apiserver with Calico's CRDs installed.
func startKDD(t *testing.T) *kubetest.Cluster {
	t.Helper()
	c := kubetest.Start(t)
	c.InstallCalicoCRDs(t)
	return c
}

// TestRunKubernetesDatastore: with DATASTORE_TYPE=kubernetes and no etcd
// anywhere, the agent waits for kubelet's Node, then registers on it (the
// projectcalico.org annotations), creates the default pool, the tiers and
// ClusterInformation as custom resources, and turns ready.
func TestRunKubernetesDatastore(t *testing.T) {
	c := startKDD(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dataDir := t.TempDir()
	a := startAgent(t, []string{"--data-dir", dataDir, "--cni-socket", "none"},
		"DATASTORE_TYPE=kubernetes", "KUBECONFIG="+c.Kubeconfig, "NODENAME=kdd-node-1", "IP=198.51.100.9/24",
		"ENABLED_CONTROLLERS=policy,node")

	// Start-up waits: kubelet has not registered the node yet.
	a.WaitFor(t, 30*time.Second, "start-up waiting for the Kubernetes Node", func() bool {
		return strings.Contains(a.logs.String(), "waiting for the Kubernetes Node")
	})
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kdd-node-1",
		Labels: map[string]string{"kubernetes.io/hostname": "kdd-node-1"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.waitReady(t)
	// Of the controllers an etcd manifest may name, those with nothing to
	// do on KDD are left out with a warning; the node controller runs.
	texttest.Contains(t, "agent log", a.logs.String(), "controller does not apply to the Kubernetes datastore", "controller=policy")
	a.WaitFor(t, 30*time.Second, "the node controller standing for election alone", func() bool {
		return strings.Contains(a.logs.String(), `msg="kube-controllers standing for election" component=kube-controllers controllers=[node] `)
	})

	k8sNode, err := c.Client.CoreV1().Nodes().Get(ctx, "kdd-node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := k8sNode.Annotations["projectcalico.org/IPv4Address"]; got != "198.51.100.9/24" {
		t.Errorf("Node annotation projectcalico.org/IPv4Address = %q, want 198.51.100.9/24", got)
	}

	store := storetest.KDD(t, ctx, c)
	obj, err := store.Get(ctx, "Node", "", "kdd-node-1")
	if err != nil {
		t.Fatal(err)
	}
	if n := obj.(*api.Node); n.Spec.BGP == nil || n.Spec.BGP.IPv4Address != "198.51.100.9/24" || n.Labels["kubernetes.io/hostname"] != "kdd-node-1" {
		t.Errorf("Calico Node %+v", n)
	}
	pool, err := store.Get(ctx, "IPPool", "", "default-ipv4-ippool")
	if err != nil {
		t.Fatalf("default pool: %v", err)
	}
	if p := pool.(*api.IPPool).Spec; p.CIDR != "192.168.0.0/16" || p.BlockSize != 26 {
		t.Errorf("default pool spec %+v", p)
	}
	for _, tier := range []string{"default", "adminnetworkpolicy", "baselineadminnetworkpolicy"} {
		if _, err := store.Get(ctx, "Tier", "", tier); err != nil {
			t.Errorf("tier %s: %v", tier, err)
		}
	}
	ci, err := store.Get(ctx, "ClusterInformation", "", "default")
	if err != nil {
		t.Fatalf("ClusterInformation: %v", err)
	}
	if spec := ci.(*api.ClusterInformation).Spec; spec.ClusterGUID == "" || spec.ClusterType != "kdd" {
		t.Errorf("ClusterInformation spec %+v, want a GUID and clusterType kdd", spec)
	}
	if err := a.stop(t); err != nil {
		t.Errorf("agent exit: %v", err)
	}
}

// TestRunKubernetesDatastoreErrors: the datastore's configuration mistakes
// stop the agent with the reason.
func TestRunKubernetesDatastoreErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"unknown type", []string{"DATASTORE_TYPE=consul"}, `DATASTORE_TYPE="consul"`},
		{"etcd endpoints with kubernetes", []string{"DATASTORE_TYPE=kubernetes", "ETCD_ENDPOINTS=http://127.0.0.1:1"}, "does not use etcd"},
		{"missing kubeconfig", []string{"DATASTORE_TYPE=kubernetes", "KUBECONFIG=/nonexistent/kubeconfig"}, "/nonexistent/kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startAgent(t, []string{"--data-dir", t.TempDir(), "--cni-socket", "none"}, append(tc.env, "NODENAME=n")...)
			select {
			case <-a.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("agent still running")
			}
			if a.Err() == nil {
				t.Fatal("agent exited 0")
			}
			if !strings.Contains(a.logs.String(), tc.want) {
				t.Errorf("agent output lacks %q:\n%s", tc.want, a.logs.Tail(20))
			}
		})
	}
}
