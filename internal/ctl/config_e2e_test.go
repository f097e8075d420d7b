package ctl_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/ctl"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// TestKubernetesConfigFile: calicoctl reaches the Kubernetes datastore
// from a calicoctl.cfg alone (no DATASTORE_TYPE, no KUBECONFIG), as a
// user configures it: named by --config or -c, or at the default
// /etc/calico/calicoctl.cfg (in a private mount namespace, so the
// machine's /etc is not touched), with a kubeconfig or with the API
// server's address, CA and a bearer token. A write through it lands as
// Calico's custom resource; a missing or wrong file is a clear error.
func TestKubernetesConfigFile(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no kube-apiserver")
	}
	k := kubetest.Start(t, kubetest.WithoutControllerManager())
	k.InstallCalicoCRDs(t)
	bin := filepath.Join(testbin.Dir(t), "calicoctl")
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kubeconfigCfg := write("kubeconfig.cfg", "apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nmetadata:\nspec:\n"+
		"  datastoreType: kubernetes\n  kubeconfig: "+k.Kubeconfig+"\n")
	tokenCfg := write("token.cfg", "apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nmetadata:\nspec:\n"+
		"  datastoreType: kubernetes\n  k8sAPIEndpoint: "+k.URL+"\n  k8sCAFile: "+k.CAFile+"\n  k8sAPIToken: "+adminToken(t, k)+"\n")
	// The default path, as the user's file would be there.
	etcLayer := filepath.Join(t.TempDir(), "etc")
	if err := os.MkdirAll(filepath.Join(etcLayer, "calico"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(kubeconfigCfg)
	if err := os.WriteFile(filepath.Join(etcLayer, "calico", filepath.Base(ctl.DefaultConfigFile)), data, 0o600); err != nil {
		t.Fatal(err)
	}

	// run is calicoctl with nothing in its environment that names a
	// datastore; viaDefault runs it where ctl.DefaultConfigFile is the
	// kubeconfig file (/etc overlaid, read-only, with etcLayer).
	run := func(stdin string, viaDefault bool, args ...string) (string, string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var cmd *exec.Cmd
		if viaDefault {
			script := `mount -t overlay overlay -o "lowerdir=$1:/etc" /etc && shift && exec "$@"`
			cmd = exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", etcLayer, bin}, args...)...)
		} else {
			cmd = exec.CommandContext(ctx, bin, args...)
		}
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}

	for i, tc := range []struct {
		name       string
		args       []string
		viaDefault bool
	}{
		{"--config kubeconfig", []string{"--config", kubeconfigCfg}, false},
		{"-c kubeconfig", []string{"-c", kubeconfigCfg}, false},
		{"--config endpoint and token", []string{"--config", tokenCfg}, false},
		{"default path", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, cidr := fmt.Sprintf("cfg-pool-%d", i), fmt.Sprintf("10.%d.0.0/16", 80+i)
			pool := "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: " + name + "}\nspec: {cidr: " + cidr + "}\n"
			if out, errOut, err := run(pool, tc.viaDefault, append([]string{"create", "-f", "-"}, tc.args...)...); err != nil {
				t.Fatalf("create: %v\n%s%s", err, out, errOut)
			}
			// Stored where Calico keeps it on this datastore.
			if out, err := k.RunKubectl(nil, "get", "ippools.crd.projectcalico.org", name, "-o", "jsonpath={.spec.cidr}"); err != nil || out != cidr {
				t.Errorf("custom resource ippools/%s: cidr %q, %v; want %s", name, out, err, cidr)
			}
			out, errOut, err := run("", tc.viaDefault, append([]string{"get", "ippools", "-o", "name"}, tc.args...)...)
			if err != nil || !strings.Contains(out, name) {
				t.Errorf("get ippools: %v, %q\n%s", err, out, errOut)
			}
		})
	}

	t.Run("bad files", func(t *testing.T) {
		for _, tc := range []struct {
			name, file, want string
		}{
			{"missing", filepath.Join(dir, "none.cfg"), "read client config " + filepath.Join(dir, "none.cfg")},
			{"wrong kind", write("kind.cfg", "apiVersion: projectcalico.org/v3\nkind: Config\nspec: {datastoreType: kubernetes}\n"), `unsupported apiVersion "projectcalico.org/v3" / kind "Config"`},
			{"unknown field", write("field.cfg", "apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nspec: {datastoreType: kubernetes, kubeconfigPath: /x}\n"), `unknown field "kubeconfigPath"`},
			{"unknown datastore", write("type.cfg", "apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nspec: {datastoreType: consul}\n"), `unknown datastoreType "consul"`},
		} {
			_, errOut, err := run("", false, "get", "ippools", "--config", tc.file)
			if err == nil || !strings.Contains(errOut, tc.want) {
				t.Errorf("%s: err %v, stderr %q; want %q", tc.name, err, errOut, tc.want)
			}
		}
	})
}

// adminToken is a bearer token of a ServiceAccount bound to cluster-admin:
// what a user's token-based calicoctl.cfg carries.
func adminToken(t *testing.T, k *kubetest.Cluster) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "calicoctl", Namespace: "default"}}
	if _, err := k.Client.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "calicoctl"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "calicoctl", Namespace: "default"}},
	}
	if _, err := k.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return k.Token(t, "default", "calicoctl", time.Hour)
}
