package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/controllers"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// TestKDDOutsideAPod follows docs/kubernetes.md's "Outside a pod" (README
// names the same steps) on the Kubernetes datastore, as a user running
// calico-node from a systemd unit would: the CRDs and rbac-kdd.yaml
// applied with kubectl, a token minted for the calico-node ServiceAccount
// with `kubectl create token` (TokenRequest) and the cluster CA copied
// into a service-account directory, a kubeconfig made with `kubectl
// config` from them, KUBERNETES_SERVICE_HOST/PORT, and the DaemonSet's
// environment from calico-node-kdd.yaml with nodename_file added to its
// CNI template (the agent's data directory is not /var/lib/calico). No
// admin credentials reach calico-node or the plugin: with only that RBAC
// the agent registers on the Node, its controllers take their Lease, and
// CNI ADD, served by the agent and run by the plugin itself through the
// calico-kubeconfig install-cni wrote, gives pods addresses and writes
// their annotations.
func TestKDDOutsideAPod(t *testing.T) {
	requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := kubetest.Start(t, kubetest.WithoutControllerManager())
	deploy := filepath.Join(testbin.RepoRoot(), "deploy")

	// 1. The CRDs and the identity: the RBAC file alone.
	for _, args := range [][]string{
		{"apply", "-f", filepath.Join(deploy, "crds.yaml")},
		{"wait", "--for=condition=Established", "--timeout=90s", "crd", "--all"},
		{"apply", "-f", filepath.Join(deploy, "rbac-kdd.yaml")},
	} {
		if out, err := c.RunKubectl(nil, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	// What kubelet registers; the agent waits for it.
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName,
		Labels: map[string]string{"kubernetes.io/hostname": nodeName, "kubernetes.io/os": "linux"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// 2. The ServiceAccount's credentials, laid out as in a pod.
	root := t.TempDir()
	saDir := filepath.Join(root, "serviceaccount")
	if err := os.MkdirAll(saDir, 0o755); err != nil {
		t.Fatal(err)
	}
	token, err := c.RunKubectl(nil, "-n", "kube-system", "create", "token", "calico-node", "--duration=8760h")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(saDir, "token"), strings.TrimSpace(token))
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(saDir, "ca.crt"), string(ca))

	// 3. A kubeconfig with that token, made as the doc says.
	kubeconfig := filepath.Join(root, "kubeconfig")
	for _, args := range [][]string{
		{"set-cluster", "k8s", "--server=" + c.URL, "--certificate-authority=" + filepath.Join(saDir, "ca.crt"), "--embed-certs"},
		{"set-credentials", "calico-node", "--token=" + strings.TrimSpace(token)},
		{"set-context", "default", "--cluster=k8s", "--user=calico-node"},
		{"use-context", "default"},
	} {
		if out, err := exec.Command(c.Kubectl, append([]string{"config", "--kubeconfig=" + kubeconfig}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl config %v: %v\n%s", args, err, out)
		}
	}

	// 4. The DaemonSet's environment, from the manifest a user applies.
	env := daemonSetEnv(t, filepath.Join(deploy, "calico-node-kdd.yaml"), nodeName)
	dataDir, confDir, binDir := filepath.Join(root, "lib-calico"), filepath.Join(root, "net.d"), filepath.Join(root, "cni-bin")
	// The template is JSON but for its __CNI_MTU__ number, filled in here
	// with the DaemonSet's CNI_MTU as install-cni would.
	var tmpl map[string]any
	if err := json.Unmarshal([]byte(strings.ReplaceAll(env["CNI_NETWORK_CONFIG"], "__CNI_MTU__", env["CNI_MTU"])), &tmpl); err != nil {
		t.Fatalf("CNI_NETWORK_CONFIG of the manifest: %v", err)
	}
	calicoPlugin := tmpl["plugins"].([]any)[0].(map[string]any)
	calicoPlugin["nodename_file"] = filepath.Join(dataDir, "nodename") // the doc's step for another --data-dir
	// Not a user's step: the plugins' node-wide lock in the test's
	// directory rather than the machine's /var/run/calico.
	calicoPlugin["ipam_lock_file"] = filepath.Join(root, "ipam.lock")
	tmplJSON, _ := json.Marshal(tmpl)
	env["CNI_NETWORK_CONFIG"] = string(tmplJSON)

	n := &node{t: t, ctx: ctx, kc: c}
	n.setupUplink() // the node's NIC: IP=autodetect finds it
	argv := []string{"run", "--data-dir=" + dataDir, "--health-addr=127.0.0.1:9099"}
	cmd := exec.Command(testbin.Path(t), argv...)
	cmd.Env = append(os.Environ(), "ETCD_ENDPOINTS=",
		"KUBECONFIG="+kubeconfig,
		"KUBERNETES_SERVICE_HOST="+c.Host, "KUBERNETES_SERVICE_PORT="+c.Port,
		"CALICO_SERVICE_ACCOUNT_DIR="+saDir,
		"CALICO_CNI_CONF_DIR="+confDir, "CALICO_CNI_BIN_DIR="+binDir,
		// No BGP peers and no packets here: the control plane is the
		// point, and the shared node namespace's iptables stay as they are.
		"CALICO_NETWORKING_BACKEND=none", "CALICO_DATAPLANE=none")
	for k, v := range env {
		if k != "CALICO_NETWORKING_BACKEND" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	agent := proc{proctest.Start(t, "calico-node", cmd)}
	agent.WaitHTTP(t, 60*time.Second, "http://127.0.0.1:9099/readiness")

	// The agent registered on the Node with its own identity.
	k8sNode, err := c.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := k8sNode.Annotations["projectcalico.org/IPv4Address"]; got != nodeIP+"/24" {
		t.Errorf("Node annotation projectcalico.org/IPv4Address = %q, want %s/24 (autodetected)", got, nodeIP)
	}
	agent.WaitFor(t, 30*time.Second, "the controllers holding their Lease", func() bool {
		l, err := c.Client.CoordinationV1().Leases(controllers.DefaultLeaseNamespace).Get(ctx, controllers.DefaultLeaseName, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == nodeName
	})
	// install-cni's kubeconfig for the plugin: the API server's address
	// and the minted token.
	kc, err := os.ReadFile(filepath.Join(confDir, "calico-kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kc), c.URL) || !strings.Contains(string(kc), strings.TrimSpace(token)) {
		t.Errorf("calico-kubeconfig lacks %s or the token:\n%s", c.URL, kc)
	}
	// kubelet's view: the conflist install-cni wrote, the plugins it
	// installed.
	if n.conf, err = libcni.ConfListFromFile(filepath.Join(confDir, "10-calico.conflist")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		env  []string // the plugin's
	}{
		{"served by the agent", nil},
		{"run by the plugin", []string{"CALICO_CNI_SOCKET=none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := "web-" + strings.ReplaceAll(tc.name, " ", "-")
			n.createKubePod(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: pod},
				Spec: corev1.PodSpec{NodeName: nodeName, ServiceAccountName: "default", Containers: []corev1.Container{{Name: "c", Image: "none"}}}})
			n.cni = libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(),
				&envExec{Exec: &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}}, env: tc.env})
			served := n.metric(t, `calico_cni_server_requests_total{reason="",result="served"}`)
			added, err := n.cniAdd(t, "default", pod)
			if err != nil {
				t.Fatalf("CNI ADD with calico-node's RBAC: %v\nagent:\n%s", err, agent.Log.Tail(30))
			}
			ip, id := added.ip+"/32", "ctr-"+pod // cniAdd's container ID
			p, err := c.Client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range map[string]string{
				"cni.projectcalico.org/podIP":       ip,
				"cni.projectcalico.org/podIPs":      ip,
				"cni.projectcalico.org/containerID": id,
			} {
				if got := p.Annotations[k]; got != want {
					t.Errorf("pod annotation %s = %q, want %q", k, got, want)
				}
			}
			wantServed := served
			if tc.env == nil {
				wantServed++
			}
			if now := n.metric(t, `calico_cni_server_requests_total{reason="",result="served"}`); now != wantServed {
				t.Errorf("the agent served %v ADDs, want %v", now-served, wantServed-served)
			}
		})
	}
	if strings.Contains(strings.ToLower(agent.Log.String()), "forbidden") {
		t.Errorf("the agent was refused something its RBAC should allow:\n%s", agent.Log.Tail(40))
	}
}

// daemonSetEnv is the calico-node container's environment in manifest,
// as kubelet would resolve it on node: values, the ConfigMap's keys and
// spec.nodeName.
func daemonSetEnv(t *testing.T, manifest, node string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	var ds appsv1.DaemonSet
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s: %v", manifest, err)
		}
		switch meta.Kind {
		case "ConfigMap":
			err = yaml.Unmarshal([]byte(doc), &cm)
		case "DaemonSet":
			err = yaml.Unmarshal([]byte(doc), &ds)
		}
		if err != nil {
			t.Fatalf("%s: %v", manifest, err)
		}
	}
	out := map[string]string{}
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil && e.ValueFrom.ConfigMapKeyRef.Name == cm.Name:
			out[e.Name] = cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			out[e.Name] = node
		default:
			t.Fatalf("%s: env %s: a source this test does not resolve", manifest, e.Name)
		}
	}
	if out["DATASTORE_TYPE"] != "kubernetes" || out["CNI_NETWORK_CONFIG"] == "" {
		t.Fatalf("%s: DaemonSet environment %v lacks the KDD datastore or the CNI template", manifest, out)
	}
	return out
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
