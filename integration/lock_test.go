package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/testutils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLockedDatastore: `calicoctl datastore migrate lock` on a running
// node, as the migration's first step. As under Felix, the dataplane
// stays as it is (a policy written meanwhile takes no effect, iptables is
// not touched, the pods keep their connectivity), the agent stays ready,
// and the CNI plugin refuses new pods; `unlock` programs what changed.
// On etcd (the source of a migration) and on the Kubernetes datastore
// (the target, locked until the import is done).
func TestLockedDatastore(t *testing.T) {
	t.Run("etcd", func(t *testing.T) { testLockedDatastore(t, newNode(t)) })
	t.Run("kdd", func(t *testing.T) { testLockedDatastore(t, newKDDNode(t)) })
}

func testLockedDatastore(t *testing.T, n *node) {
	n.apply(t, policyPool)
	if n.kc == nil {
		n.apply(t, namespaceProfiles) // on KDD computed from the Namespaces
	}
	n.addNamespace(t, "prod", map[string]string{"env": "prod"})
	n.addNamespace(t, "dev", map[string]string{"env": "dev"})
	if err := listenEcho(t, 8080, 22); err != nil {
		t.Fatal(err)
	}
	n.startAgent(t)
	c := &cluster{n: n}
	c.web = n.addPod(t, "prod", "web", "web", map[string]string{"app": "web"})
	c.client = n.addPod(t, "prod", "client", "client", map[string]string{"app": "client"})
	c.builder = n.addPod(t, "dev", "builder", "builder", map[string]string{"app": "client"})
	n.apply(t, "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {defaultEndpointToHostAction: Accept}\n")
	open := c.expect(false)
	c.waitMatrix(t, open)

	if out := n.calicoctl(t, "datastore", "migrate", "lock"); out != "Datastore locked.\n" {
		t.Fatalf("lock: %q", out)
	}
	time.Sleep(time.Second) // the agent sees the lock
	before := caliRules(t)
	n.apply(t, webPolicy("app == 'client'"))
	// Several of the agent's resyncs go by: nothing changes.
	time.Sleep(3 * resync)
	if got := c.probeAll(); !equalVerdicts(got, open) {
		t.Errorf("connectivity changed while locked: %v", got)
	}
	if after := caliRules(t); after != before {
		t.Errorf("iptables changed while locked:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if resp, err := http.Get("http://127.0.0.1:9099/readiness"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("agent not ready while locked: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// A new pod is refused, as Calico's plugin refuses it.
	n.registerPod(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "late"},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "none"}}}})
	lateNS, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	rt := &libcni.RuntimeConf{ContainerID: "ctr-late", NetNS: lateNS.Path(), IfName: "eth0", Args: [][2]string{
		{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "prod"}, {"K8S_POD_NAME", "late"}, {"K8S_POD_INFRA_CONTAINER_ID", "ctr-late"}}}
	t.Cleanup(func() {
		n.cni.DelNetworkList(context.Background(), n.conf, rt)
		lateNS.Close()
		testutils.UnmountNS(lateNS)
	})
	if _, err := n.cni.AddNetworkList(n.ctx, n.conf, rt); err == nil || !strings.Contains(err.Error(), "Calico is currently not ready to process requests") {
		t.Errorf("ADD while locked: %v", err)
	}

	if out := n.calicoctl(t, "datastore", "migrate", "unlock"); out != "Datastore unlocked.\n" {
		t.Fatalf("unlock: %q", out)
	}
	c.waitMatrix(t, c.expect(true, "client->web tcp/8080", "web->client", "client->node", "outside->node"))
	if _, err := n.cni.AddNetworkList(n.ctx, n.conf, rt); err != nil {
		t.Errorf("ADD after the unlock: %v", err)
	}
}

func equalVerdicts(a, b verdicts) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
