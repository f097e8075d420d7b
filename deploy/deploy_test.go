package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/agent/felixenv"
	"github.com/projectcalico/calico-node/cniinstall"
	"github.com/projectcalico/calico-node/controllers"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/etcd"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/kube"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

const manifest = "calico-node.yaml"

// object is one document of the manifest.
type object struct {
	raw  []byte
	meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
}

// resource is how kubectl names the object in its output:
// "daemonset.apps/calico-node".
func (o object) resource() string {
	kind := strings.ToLower(o.meta.Kind)
	if group, _, ok := strings.Cut(o.meta.APIVersion, "/"); ok {
		kind += "." + group
	}
	return kind + "/" + o.meta.Metadata.Name
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

func objects(t *testing.T) []object {
	t.Helper()
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var out []object
	for _, doc := range docSeparator.Split(string(data), -1) {
		o := object{raw: []byte(doc)}
		if err := yaml.Unmarshal(o.raw, &o.meta); err != nil {
			t.Fatalf("parse %s: %v\n%s", manifest, err, doc)
		}
		if o.meta.Kind == "" {
			continue // comments only
		}
		out = append(out, o)
	}
	return out
}

func find(t *testing.T, objs []object, kind string, into any) {
	t.Helper()
	for _, o := range objs {
		if o.meta.Kind == kind {
			if err := yaml.UnmarshalStrict(o.raw, into); err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			return
		}
	}
	t.Fatalf("no %s in %s", kind, manifest)
}

// TestServerDryRun: the API server accepts every object of the manifest.
func TestServerDryRun(t *testing.T) {
	objs := objects(t)
	if len(objs) < 10 {
		t.Fatalf("only %d objects in %s", len(objs), manifest)
	}
	c := kubetest.Start(t)
	out, err := c.RunKubectl(nil, "apply", "--dry-run=server", "-f", manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		want := o.resource() + " created (server dry run)"
		if !strings.Contains(out, want) {
			t.Errorf("kubectl output lacks %q:\n%s", want, out)
		}
	}
}

// TestDaemonSetConfiguration: the settings the DaemonSet gives the agent
// are all accepted as the agent reads them.
func TestDaemonSetConfiguration(t *testing.T) {
	objs := objects(t)
	var cm corev1.ConfigMap
	var ds appsv1.DaemonSet
	find(t, objs, "ConfigMap", &cm)
	find(t, objs, "DaemonSet", &ds)
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || len(spec.Containers) != 1 {
		t.Fatalf("want one host-network container, got hostNetwork=%v, %d containers", spec.HostNetwork, len(spec.Containers))
	}
	ctr := spec.Containers[0]
	if ctr.SecurityContext == nil || ctr.SecurityContext.Privileged == nil || !*ctr.SecurityContext.Privileged {
		t.Error("container is not privileged")
	}
	for _, p := range []*corev1.Probe{ctr.LivenessProbe, ctr.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.IntValue() != 9099 {
			t.Errorf("probe %+v: want an HTTP probe on 9099", p)
		}
	}
	mounts := map[string]bool{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.MountPath] = true
	}
	for _, p := range []string{"/opt/cni/bin", "/etc/cni/net.d", "/lib/modules", "/var/run/calico", "/var/lib/calico"} {
		if !mounts[p] {
			t.Errorf("no mount at %s", p)
		}
	}

	// Resolve the environment as kubelet would (field refs: a node name).
	var environ []string
	env := map[string]string{}
	for _, e := range ctr.Env {
		v := e.Value
		if e.ValueFrom != nil {
			switch {
			case e.ValueFrom.ConfigMapKeyRef != nil:
				var ok bool
				if v, ok = cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]; !ok {
					t.Errorf("%s refers to missing ConfigMap key %s", e.Name, e.ValueFrom.ConfigMapKeyRef.Key)
				}
			case e.ValueFrom.FieldRef != nil:
				v = "node-1"
			}
		}
		env[e.Name] = v
		environ = append(environ, e.Name+"="+v)
	}

	ov, err := felixenv.Parse(environ)
	if err != nil {
		t.Errorf("FELIX_* settings: %v", err)
	}
	if len(ov.Unknown) > 0 {
		t.Errorf("unknown FELIX_* settings: %v", ov.Unknown)
	}
	if got, err := controllers.ParseEnabled(env["ENABLED_CONTROLLERS"]); err != nil || len(got) != len(controllers.All) {
		t.Errorf("ENABLED_CONTROLLERS = %v, %v; want all controllers", got, err)
	}
	switch env["CALICO_NETWORKING_BACKEND"] {
	case "bird", "vxlan", "none":
	default:
		t.Errorf("CALICO_NETWORKING_BACKEND = %q", env["CALICO_NETWORKING_BACKEND"])
	}
	if env["CALICO_K8S_NODE_REF"] != "node-1" || env["NODENAME"] != "node-1" {
		t.Error("node name and Kubernetes node reference must both come from spec.nodeName")
	}

	// install-cni with the ConfigMap's template writes a conflist the
	// runtime loads.
	dir := t.TempDir()
	in, err := cniinstall.New(cniinstall.Config{
		ConfDir: filepath.Join(dir, "net.d"), BinDir: filepath.Join(dir, "bin"),
		Template: env["CNI_NETWORK_CONFIG"], MTU: env["CNI_MTU"], NodeName: "node-1",
		EtcdEndpoints: env["ETCD_ENDPOINTS"], ServiceAccountDir: filepath.Join(dir, "no-sa"),
		Source: "/bin/true",
	})
	if err != nil {
		t.Fatalf("CNI template: %v", err)
	}
	if _, err := in.Sync(); err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromFile(filepath.Join(dir, "net.d", "10-calico.conflist"))
	if err != nil {
		t.Fatalf("installed conflist: %v", err)
	}
	if len(list.Plugins) != 1 || list.Plugins[0].Network.Type != "calico" || list.Plugins[0].Network.IPAM.Type != "calico-ipam" {
		t.Errorf("conflist plugins: %+v", list.Plugins)
	}
	if !bytes.Contains(list.Bytes, []byte(`"mtu": 1500`)) {
		t.Errorf("CNI_MTU not applied:\n%s", list.Bytes)
	}
}

// TestRBACIsEnough runs the kube-controllers and the CNI plugin's reads
// with only the ServiceAccount and RBAC of the manifest: they work, and
// the ServiceAccount can do nothing else that matters.
func TestRBACIsEnough(t *testing.T) {
	objs := objects(t)
	c := kubetest.Start(t)
	var rbac bytes.Buffer
	for _, o := range objs {
		switch o.meta.Kind {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			rbac.WriteString("---\n")
			rbac.Write(o.raw)
		}
	}
	if _, err := c.RunKubectl(&rbac, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	token := c.Token(t, "kube-system", "calico-node", time.Hour)
	sa, err := kubernetes.NewForConfig(c.ConfigForToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The CNI plugin's reads.
	c.CreateNamespace(t, "apps", map[string]string{"team": "a"})
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods("apps").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for what, call := range map[string]func() error{
		"get pod":       func() error { _, err := sa.CoreV1().Pods("apps").Get(ctx, "web", metav1.GetOptions{}); return err },
		"get namespace": func() error { _, err := sa.CoreV1().Namespaces().Get(ctx, "apps", metav1.GetOptions{}); return err },
		"get node":      func() error { _, err := sa.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{}); return err },
	} {
		if err := call(); err != nil {
			t.Errorf("%s as calico-node: %v", what, err)
		}
	}
	// Least privilege: no secrets, no writes to Kubernetes objects.
	for what, call := range map[string]func() error{
		"list secrets": func() error { _, err := sa.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); return err },
		"delete pod":   func() error { return sa.CoreV1().Pods("apps").Delete(ctx, "web", metav1.DeleteOptions{}) },
		"update node": func() error {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			_, err = sa.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		},
		"other lease": func() error {
			_, err := sa.CoordinationV1().Leases("kube-system").Get(ctx, "kube-scheduler", metav1.GetOptions{})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s as calico-node: err = %v, want Forbidden", what, err)
		}
	}

	// The controllers, with the manifest's lease and nothing but its RBAC.
	srv := etcdtest.Start(t)
	store, err := etcd.New(ctx, datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	saKube, err := kube.New(c.ConfigForToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := controllers.New(controllers.Config{
		Enabled: controllers.All, Identity: "node-1",
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
	}, saKube, store, ipam.New(store.IPAM(), store, nil))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("controllers: %v", err)
		}
	}()
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-all", Namespace: "apps"}}
	if _, err := c.Client.NetworkingV1().NetworkPolicies("apps").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ kind, ns, name string }{
		{"Profile", "", "kns.apps"},
		{"Profile", "", "ksa.apps.default"},
		{"NetworkPolicy", "apps", "knp.default.deny-all"},
	} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := store.Get(ctx, want.kind, want.ns, want.name)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %s not created by controllers running as calico-node: %v", want.kind, want.name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	lease, err := c.Client.CoordinationV1().Leases("kube-system").Get(ctx, controllers.DefaultLeaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "node-1" {
		t.Errorf("lease %s = %v, %v; want held by node-1", controllers.DefaultLeaseName, fmt.Sprint(lease), err)
	}
}
