package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/agent/felixenv"
	"github.com/projectcalico/calico-node/cniinstall"
	"github.com/projectcalico/calico-node/controllers"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/kube"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

// The files a user applies: per datastore, the RBAC (ServiceAccount and
// roles) and the manifest (ConfigMap, DaemonSet); KDD also needs the CRDs.
const (
	manifestEtcd = "calico-node.yaml"
	rbacEtcd     = "rbac-etcd.yaml"
	manifestKDD  = "calico-node-kdd.yaml"
	rbacKDD      = "rbac-kdd.yaml"
	crdsFile     = "crds.yaml"
)

// flavour is one datastore's pair of files.
type flavour struct {
	name, rbac, manifest string
}

var flavours = []flavour{
	{"etcd", rbacEtcd, manifestEtcd},
	{"kdd", rbacKDD, manifestKDD},
}

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

// objects reads the documents of files.
func objects(t *testing.T, files ...string) []object {
	t.Helper()
	var out []object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range docSeparator.Split(string(data), -1) {
			o := object{raw: []byte(doc)}
			if err := yaml.Unmarshal(o.raw, &o.meta); err != nil {
				t.Fatalf("parse %s: %v\n%s", f, err, doc)
			}
			if o.meta.Kind == "" {
				continue // comments only
			}
			out = append(out, o)
		}
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
	t.Fatalf("no %s", kind)
}

// rbacKinds are the kinds that belong in the RBAC files, not the
// manifests.
var rbacKinds = []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// TestServerDryRun: the API server accepts every object of each flavour's
// RBAC and manifest.
func TestServerDryRun(t *testing.T) {
	c := kubetest.Start(t, kubetest.WithoutControllerManager())
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			objs := objects(t, fl.rbac, fl.manifest)
			if len(objs) < 9 {
				t.Fatalf("only %d objects in %s and %s", len(objs), fl.rbac, fl.manifest)
			}
			out, err := c.RunKubectl(nil, "apply", "--dry-run=server", "-f", fl.rbac, "-f", fl.manifest)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				want := o.resource() + " created (server dry run)"
				if !strings.Contains(out, want) {
					t.Errorf("kubectl output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestFilesAreConsistent: RBAC lives in the RBAC files only, the
// DaemonSet runs as the ServiceAccount its RBAC file defines and binds,
// and no rule is broad: no wildcard, no secrets, no RBAC or impersonation
// verbs.
func TestFilesAreConsistent(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			for _, o := range objects(t, fl.manifest) {
				if slices.Contains(rbacKinds, o.meta.Kind) {
					t.Errorf("%s holds %s; RBAC belongs in %s", fl.manifest, o.resource(), fl.rbac)
				}
			}
			objs := objects(t, fl.rbac)
			var ds appsv1.DaemonSet
			find(t, objects(t, fl.manifest), "DaemonSet", &ds)
			var sa corev1.ServiceAccount
			find(t, objs, "ServiceAccount", &sa)
			if ds.Spec.Template.Spec.ServiceAccountName != sa.Name || ds.Namespace != sa.Namespace {
				t.Errorf("DaemonSet runs as %s/%s, RBAC file defines %s/%s", ds.Namespace, ds.Spec.Template.Spec.ServiceAccountName, sa.Namespace, sa.Name)
			}
			roles := map[string][]rbacv1.PolicyRule{}
			for _, o := range objs {
				if !slices.Contains(rbacKinds, o.meta.Kind) {
					t.Errorf("%s holds %s, which is not RBAC", fl.rbac, o.resource())
				}
				switch o.meta.Kind {
				case "ClusterRole", "Role":
					var r rbacv1.ClusterRole
					if err := yaml.UnmarshalStrict(o.raw, &r); err != nil {
						t.Fatal(err)
					}
					roles[o.meta.Kind+"/"+r.Name] = r.Rules
				}
			}
			for _, o := range objs {
				switch o.meta.Kind {
				case "ClusterRoleBinding", "RoleBinding":
					var b rbacv1.RoleBinding
					if err := yaml.UnmarshalStrict(o.raw, &b); err != nil {
						t.Fatal(err)
					}
					if _, ok := roles[b.RoleRef.Kind+"/"+b.RoleRef.Name]; !ok {
						t.Errorf("%s binds %s %s, not defined in %s", o.resource(), b.RoleRef.Kind, b.RoleRef.Name, fl.rbac)
					}
					for _, s := range b.Subjects {
						if s.Kind != "ServiceAccount" || s.Name != sa.Name || s.Namespace != sa.Namespace {
							t.Errorf("%s binds %+v, not the DaemonSet's ServiceAccount", o.resource(), s)
						}
					}
				}
			}
			for name, rules := range roles {
				for _, r := range rules {
					for _, v := range slices.Concat(r.APIGroups, r.Resources, r.Verbs) {
						if strings.Contains(v, "*") {
							t.Errorf("%s: wildcard %q in %+v", name, v, r)
						}
					}
					if slices.Contains(r.Resources, "secrets") {
						t.Errorf("%s grants secrets: %+v", name, r)
					}
					for _, v := range []string{"escalate", "bind", "impersonate"} {
						if slices.Contains(r.Verbs, v) {
							t.Errorf("%s grants %s: %+v", name, v, r)
						}
					}
				}
			}
		})
	}
}

// TestDaemonSetConfiguration: the settings each flavour's DaemonSet gives
// the agent are all accepted as the agent reads them, and install-cni
// writes from its template a conflist the runtime loads, for the right
// datastore.
func TestDaemonSetConfiguration(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) { checkDaemonSet(t, fl) })
	}
}

func checkDaemonSet(t *testing.T, fl flavour) {
	objs := objects(t, fl.manifest)
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
	switch env["CALICO_NETWORKING_BACKEND"] {
	case "bird", "vxlan", "none":
	default:
		t.Errorf("CALICO_NETWORKING_BACKEND = %q", env["CALICO_NETWORKING_BACKEND"])
	}
	if env["NODENAME"] != "node-1" {
		t.Error("the node name must come from spec.nodeName")
	}
	controllersWanted := controllers.All
	switch fl.name {
	case "etcd":
		if env["CALICO_K8S_NODE_REF"] != "node-1" {
			t.Error("the Kubernetes node reference must come from spec.nodeName")
		}
		if env["ETCD_ENDPOINTS"] == "" {
			t.Error("no ETCD_ENDPOINTS")
		}
	case "kdd":
		if env["DATASTORE_TYPE"] != datastore.TypeKubernetes {
			t.Errorf("DATASTORE_TYPE = %q, want %q", env["DATASTORE_TYPE"], datastore.TypeKubernetes)
		}
		// Nothing of etcd: no endpoints, no TLS files, no Secret.
		for name := range env {
			if strings.HasPrefix(name, "ETCD_") {
				t.Errorf("%s set on the Kubernetes datastore", name)
			}
		}
		for _, v := range spec.Volumes {
			if v.Secret != nil {
				t.Errorf("volume %s mounts Secret %s", v.Name, v.Secret.SecretName)
			}
		}
		for k := range cm.Data {
			if strings.HasPrefix(k, "etcd") {
				t.Errorf("ConfigMap key %s on the Kubernetes datastore", k)
			}
		}
		// Calico on KDD runs only the node-lifecycle controllers and
		// LoadBalancer IPAM.
		controllersWanted = []string{"node", "ipamgc", "loadbalancer"}
	}
	if got, err := controllers.ParseEnabled(env["ENABLED_CONTROLLERS"]); err != nil || !slices.Equal(got, controllersWanted) {
		t.Errorf("ENABLED_CONTROLLERS = %v, %v; want %v", got, err, controllersWanted)
	}

	// install-cni with the ConfigMap's template writes a conflist the
	// runtime loads.
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins") // portmap and bandwidth, as the image has them beside calico-node
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range cniinstall.ChainedPlugins {
		if err := os.WriteFile(filepath.Join(plugins, p), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	in, err := cniinstall.New(cniinstall.Config{
		ConfDir: filepath.Join(dir, "net.d"), BinDir: filepath.Join(dir, "bin"),
		Template: env["CNI_NETWORK_CONFIG"], MTU: env["CNI_MTU"], NodeName: env["KUBERNETES_NODE_NAME"],
		EtcdEndpoints: env["ETCD_ENDPOINTS"], ServiceAccountDir: filepath.Join(dir, "no-sa"),
		Getenv: func(k string) string { return env[k] },
		Source: "/bin/true", PluginDir: plugins,
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
	// calico, then portmap and bandwidth as Calico's manifests chain them.
	if len(list.Plugins) != 3 || list.Plugins[0].Network.Type != "calico" || list.Plugins[0].Network.IPAM.Type != "calico-ipam" ||
		list.Plugins[1].Network.Type != "portmap" || list.Plugins[2].Network.Type != "bandwidth" {
		t.Fatalf("conflist plugins: %+v", list.Plugins)
	}
	var portmap struct {
		SNAT *bool `json:"snat"`
	}
	if json.Unmarshal(list.Plugins[1].Bytes, &portmap) != nil || portmap.SNAT == nil || !*portmap.SNAT ||
		list.Plugins[1].Network.Capabilities["portMappings"] != true ||
		list.Plugins[2].Network.Capabilities["bandwidth"] != true {
		t.Errorf("portmap/bandwidth configuration: %s", list.Bytes)
	}
	if !bytes.Contains(list.Bytes, []byte(`"mtu": 1500`)) {
		t.Errorf("CNI_MTU not applied:\n%s", list.Bytes)
	}
	var plugin struct {
		DatastoreType string `json:"datastore_type"`
		EtcdEndpoints string `json:"etcd_endpoints"`
		Nodename      string `json:"nodename"`
		Kubernetes    struct {
			Kubeconfig string `json:"kubeconfig"`
		} `json:"kubernetes"`
	}
	if err := json.Unmarshal(list.Plugins[0].Bytes, &plugin); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "net.d", "calico-kubeconfig"); plugin.Kubernetes.Kubeconfig != want {
		t.Errorf("plugin kubeconfig = %q, want %q", plugin.Kubernetes.Kubeconfig, want)
	}
	switch fl.name {
	case "etcd":
		if plugin.EtcdEndpoints != env["ETCD_ENDPOINTS"] {
			t.Errorf("plugin etcd_endpoints = %q, want %q", plugin.EtcdEndpoints, env["ETCD_ENDPOINTS"])
		}
	case "kdd":
		if plugin.DatastoreType != datastore.TypeKubernetes || plugin.EtcdEndpoints != "" || plugin.Nodename != "node-1" {
			t.Errorf("plugin config: %+v; want datastore_type kubernetes, no etcd, nodename node-1:\n%s", plugin, list.Plugins[0].Bytes)
		}
	}
}

// TestRBACIsEnough runs the kube-controllers and the CNI plugin's reads
// with only the ServiceAccount and RBAC of rbac-etcd.yaml: they work, and
// the ServiceAccount can do nothing else that matters.
func TestRBACIsEnough(t *testing.T) {
	objs := objects(t, rbacEtcd)
	c := kubetest.Start(t)
	if len(objs) < 7 {
		t.Fatalf("only %d objects in %s", len(objs), rbacEtcd)
	}
	if _, err := c.RunKubectl(nil, "apply", "-f", rbacEtcd); err != nil {
		t.Fatal(err)
	}
	token := c.Token(t, "kube-system", "calico-node", time.Hour)
	sa, err := kubernetes.NewForConfig(c.ConfigForToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The CNI plugin's and BGP's reads.
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
		// BGP's per-service advertisement.
		"list services": func() error { _, err := sa.CoreV1().Services("").List(ctx, metav1.ListOptions{}); return err },
		"list endpointslices": func() error {
			_, err := sa.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
			return err
		},
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
	store := storetest.Etcd(t, ctx, srv.Endpoints)
	runControllers(t, ctx, c, token, controllers.Config{Enabled: controllers.All}, store, ipam.New(store.IPAM(), store, nil))
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

// TestKDD installs the Kubernetes-datastore flavour as docs/kubernetes.md
// says (crds.yaml, wait until established, rbac-kdd.yaml and
// calico-node-kdd.yaml) on a real API server, then checks with the
// ServiceAccount's own token that it may do everything calico-node does on
// KDD and nothing else.
func TestKDD(t *testing.T) {
	c := kubetest.Start(t, kubetest.WithoutControllerManager())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := c.RunKubectl(nil, "apply", "-f", crdsFile); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := c.RunKubectl(nil, "wait", "--for=condition=Established", "--timeout=90s", "crd", "--all"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := c.RunKubectl(nil, "apply", "-f", rbacKDD, "-f", manifestKDD)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objects(t, rbacKDD, manifestKDD) {
		if !strings.Contains(out, o.resource()+" created") {
			t.Errorf("kubectl output lacks %s created:\n%s", o.resource(), out)
		}
		if _, err := c.RunKubectl(nil, "get", "-n", o.meta.Metadata.Namespace, o.resource()); err != nil {
			t.Errorf("after apply: %v", err)
		}
	}

	token := c.Token(t, "kube-system", "calico-node", time.Hour)
	sa, err := kubernetes.NewForConfig(c.ConfigForToken(token))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("grants are exactly what calico-node uses", func(t *testing.T) {
		need := kddAccess()
		for _, a := range need {
			if !allowed(ctx, t, sa, a) {
				t.Errorf("calico-node may not %s", a)
			}
		}
		// Everything the ServiceAccount may do is in the list: nothing
		// broad, nothing unused. The review of kube-system shows the
		// cluster roles' rules and the Lease role's.
		for _, ns := range []string{"kube-system"} {
			rr, err := sa.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
				Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rr.Status.ResourceRules {
				for _, g := range r.APIGroups {
					if g == "authorization.k8s.io" || g == "authentication.k8s.io" {
						continue // every authenticated user may ask who it is and what it may do
					}
					for _, res := range r.Resources {
						for _, v := range r.Verbs {
							got := access{verb: v, group: g, resource: res, namespace: ns}
							if len(r.ResourceNames) > 0 {
								got.name = strings.Join(r.ResourceNames, ",")
							}
							if !got.in(need) {
								t.Errorf("calico-node may %s, which calico-node does not do", got)
							}
						}
					}
				}
			}
		}
		for _, a := range []access{
			{verb: "list", resource: "secrets", namespace: "kube-system"},
			{verb: "get", resource: "configmaps", namespace: "kube-system"},
			{verb: "delete", resource: "pods", namespace: "default"},
			{verb: "update", resource: "pods", namespace: "default"},
			{verb: "update", resource: "nodes"},
			{verb: "patch", resource: "nodes"},
			{verb: "delete", resource: "nodes"},
			{verb: "create", resource: "serviceaccounts/token", namespace: "kube-system"},
			{verb: "create", group: "crd.projectcalico.org", resource: "globalnetworkpolicies"},
			{verb: "update", group: "crd.projectcalico.org", resource: "felixconfigurations"},
			{verb: "delete", group: "crd.projectcalico.org", resource: "ippools"},
			{verb: "create", group: "apiextensions.k8s.io", resource: "customresourcedefinitions"},
			{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system", name: "kube-scheduler"},
		} {
			if allowed(ctx, t, sa, a) {
				t.Errorf("calico-node may %s", a)
			}
		}
	})

	t.Run("the writes calico-node makes work", func(t *testing.T) {
		// The Store starts: the API answers and every CRD is installed.
		s, err := kdd.New(ctx, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{
			APIEndpoint: c.URL, CAFile: c.CAFile, Token: token,
		}})
		if err != nil {
			t.Fatalf("KDD store as calico-node: %v", err)
		}
		s.Close()

		// Calico's node annotations go through nodes/status, and land on
		// the Node.
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		patch := []byte(`{"metadata":{"annotations":{"projectcalico.org/IPv4Address":"10.0.0.1/24"}}}`)
		if _, err := sa.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Errorf("patch node status: %v", err)
		}
		if n, err := c.Client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{}); err != nil || n.Annotations["projectcalico.org/IPv4Address"] != "10.0.0.1/24" {
			t.Errorf("node annotations after the status patch: %v, %v", n.Annotations, err)
		}

		// The CNI plugin's pod annotations, the same way.
		if _, err := c.Client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		patch = []byte(`{"metadata":{"annotations":{"cni.projectcalico.org/podIP":"10.244.0.5/32"}}}`)
		if _, err := sa.CoreV1().Pods("default").Patch(ctx, "web", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Errorf("patch pod status: %v", err)
		}
		if p, err := c.Client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{}); err != nil || p.Annotations["cni.projectcalico.org/podIP"] != "10.244.0.5/32" {
			t.Errorf("pod annotations after the status patch: %v, %v", p.Annotations, err)
		}

		// IPAM's whole life cycle, and what start-up creates.
		dyn, err := dynamic.NewForConfig(c.ConfigForToken(token))
		if err != nil {
			t.Fatal(err)
		}
		crd := func(plural string) dynamic.ResourceInterface {
			return dyn.Resource(k8sschema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: plural})
		}
		handle := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMHandle",
			"metadata": map[string]any{"name": "k8s-pod-network.abc"},
			"spec":     map[string]any{"handleID": "k8s-pod-network.abc", "block": map[string]any{"10.244.0.0/26": int64(1)}},
		}}
		created, err := crd("ipamhandles").Create(ctx, handle, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create IPAMHandle: %v", err)
		}
		if _, err := crd("ipamhandles").Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Errorf("update IPAMHandle: %v", err)
		}
		if err := crd("ipamhandles").Delete(ctx, "k8s-pod-network.abc", metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete IPAMHandle: %v", err)
		}
		for _, o := range []*unstructured.Unstructured{
			{Object: map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "ClusterInformation",
				"metadata": map[string]any{"name": "default"}, "spec": map[string]any{"clusterType": "k8s,bgp,kdd", "datastoreReady": true}}},
			{Object: map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "Tier",
				"metadata": map[string]any{"name": "default"}, "spec": map[string]any{"order": 1e6, "defaultAction": "Deny"}}},
			{Object: map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
				"metadata": map[string]any{"name": "default-ipv4-ippool"}, "spec": map[string]any{"cidr": "10.244.0.0/16"}}},
		} {
			plural := strings.ToLower(o.GetKind()) + "s"
			if _, err := crd(plural).Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Errorf("create %s: %v", o.GetKind(), err)
			}
		}
	})

	t.Run("the controllers clean up a deleted node", func(t *testing.T) {
		// The operator's configuration for node-2, written as admin; the
		// address and block the CNI plugin takes on it, as calico-node.
		admin := storetest.KDD(t, ctx, c)
		store, err := kdd.New(ctx, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{
			APIEndpoint: c.URL, CAFile: c.CAFile, Token: token,
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() }) // after the controllers stop
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pool := &api.IPPool{}
		pool.Kind, pool.APIVersion, pool.Name = "IPPool", api.GroupVersion, "controllers-test"
		pool.Spec.CIDR = "10.245.0.0/16"
		peer := &api.BGPPeer{}
		peer.Kind, peer.APIVersion, peer.Name = "BGPPeer", api.GroupVersion, "tor-node-2"
		peer.Spec.Node, peer.Spec.PeerIP, peer.Spec.ASNumber = "node-2", "192.0.2.1", api.ASNumber(64512)
		fc := &api.FelixConfiguration{}
		fc.Kind, fc.APIVersion, fc.Name = "FelixConfiguration", api.GroupVersion, "node.node-2"
		for _, o := range []api.Object{pool, peer, fc} {
			if _, err := admin.Create(ctx, o); err != nil {
				t.Fatalf("create %s: %v", o.Meta().Name, err)
			}
		}
		ipamc := ipam.New(store.IPAM(), store, nil)
		v4, _, err := ipamc.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "k8s-pod-network.gone", Node: "node-2",
			IPv4Pools: []string{"controllers-test"}, Attrs: map[string]string{"namespace": "default", "pod": "gone"}})
		if err != nil || len(v4) != 1 {
			t.Fatalf("allocate as calico-node: %v %v", v4, err)
		}

		// The manifest's controllers, with nothing but the RBAC.
		runControllers(t, ctx, c, token, controllers.Config{
			Enabled: []string{controllers.Node, controllers.IPAMGC, controllers.LoadBalancer}, Datastore: datastore.TypeKubernetes,
		}, store, ipamc)

		if err := c.Client.CoreV1().Nodes().Delete(ctx, "node-2", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			var left []string
			for _, o := range []api.Object{peer, fc} {
				if _, err := admin.Get(ctx, o.Type().Kind, "", o.Meta().Name); !errors.Is(err, datastore.ErrNotFound) {
					left = append(left, fmt.Sprintf("%s %s: %v", o.Type().Kind, o.Meta().Name, err))
				}
			}
			if _, err := ipamc.Lookup(ctx, v4[0].Addr()); !errors.Is(err, ipam.ErrNotAllocated) {
				left = append(left, fmt.Sprintf("address %s: %v", v4[0].Addr(), err))
			}
			if blocks, err := ipamc.AffineBlocks(ctx, "node-2"); err != nil || len(blocks) > 0 {
				left = append(left, fmt.Sprintf("blocks of node-2: %v %v", blocks, err))
			}
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not cleaned up by controllers running as calico-node:\n%s", strings.Join(left, "\n"))
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// crdGroup is the API group of Calico's custom resources.
var crdGroup, _, _ = strings.Cut(kdd.CRDGroupVersion, "/")

// access is one request: verb on group/resource[/subresource], in a
// namespace ("" = cluster-wide or all), on one object (name).
type access struct {
	verb, group, resource, namespace, name string
}

func (a access) String() string {
	r := a.resource
	if a.group != "" {
		r += "." + a.group
	}
	if a.name != "" {
		r += "/" + a.name
	}
	if a.namespace != "" {
		r += " in " + a.namespace
	}
	return a.verb + " " + r
}

// in reports whether a is in list; a rule without a namespace (a cluster
// role) covers every namespace.
func (a access) in(list []access) bool {
	return slices.ContainsFunc(list, func(b access) bool {
		return a.verb == b.verb && a.group == b.group && a.resource == b.resource &&
			a.name == b.name && (b.namespace == "" || a.namespace == b.namespace)
	})
}

// kddAccess is every request calico-node makes on the Kubernetes datastore:
//   - every Calico kind the agent's confwatch lists and watches (all of
//     api.Kinds()) through the CRD it is stored in, or the Kubernetes
//     objects it is computed from (Node: nodes; WorkloadEndpoint: pods;
//     Profile: namespaces and serviceaccounts; NetworkPolicy also
//     networking.k8s.io networkpolicies), with get for single reads (the
//     CNI plugin's pod, namespace and node);
//   - Calico's annotations on Nodes (agent) and Pods (CNI plugin), patched
//     through the status subresource;
//   - IPAM on its four CRDs (CNI plugin, agent tunnel addresses, IPAM GC);
//   - start-up's ClusterInformation, tiers and default pools;
//   - the node controller's removal of a deleted node's BGPPeers,
//     HostEndpoints and node.<name> configurations, and its automatic
//     host endpoints;
//   - the LoadBalancer controller's Service status;
//   - the controllers' Lease.
func kddAccess() []access {
	var out []access
	read := func(group string, resources ...string) {
		for _, r := range resources {
			for _, v := range []string{"get", "list", "watch"} {
				out = append(out, access{verb: v, group: group, resource: r})
			}
		}
	}
	for _, k := range api.Kinds() {
		switch k.Kind {
		case "Node":
			read("", "nodes")
		case "WorkloadEndpoint":
			read("", "pods")
		case "Profile":
			read("", "namespaces", "serviceaccounts")
		case "NetworkPolicy":
			read("networking.k8s.io", "networkpolicies")
			read(crdGroup, k.Plural)
		default:
			read(crdGroup, k.Plural)
		}
	}
	ipam := []string{"ipamblocks", "blockaffinities", "ipamhandles", "ipamconfigs"}
	read(crdGroup, ipam...)
	for _, r := range ipam {
		for _, v := range []string{"create", "update", "delete"} {
			out = append(out, access{verb: v, group: crdGroup, resource: r})
		}
	}
	for _, r := range []string{"clusterinformations", "tiers", "ippools"} {
		out = append(out, access{verb: "create", group: crdGroup, resource: r})
	}
	for _, r := range []string{"bgppeers", "hostendpoints", "felixconfigurations", "bgpconfigurations"} {
		out = append(out, access{verb: "delete", group: crdGroup, resource: r})
	}
	for _, v := range []string{"create", "update"} { // automatic host endpoints
		out = append(out, access{verb: v, group: crdGroup, resource: "hostendpoints"})
	}
	for _, v := range []string{"list", "watch"} { // BGP's per-service advertisement
		out = append(out, access{verb: v, resource: "services"}, access{verb: v, group: "discovery.k8s.io", resource: "endpointslices"})
	}
	out = append(out,
		access{verb: "patch", resource: "nodes/status"},
		access{verb: "patch", resource: "pods/status"},
		access{verb: "update", resource: "services/status"}, // the LoadBalancer controller's addresses
		access{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: controllers.DefaultLeaseNamespace},
		access{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: controllers.DefaultLeaseNamespace, name: controllers.DefaultLeaseName},
		access{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: controllers.DefaultLeaseNamespace, name: controllers.DefaultLeaseName},
	)
	return out
}

// allowed asks the API server whether the client's user may do a.
func allowed(ctx context.Context, t *testing.T, cs kubernetes.Interface, a access) bool {
	t.Helper()
	resource, sub, _ := strings.Cut(a.resource, "/")
	r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: resource, Subresource: sub, Namespace: a.namespace, Name: a.name,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("access review %s: %v", a, err)
	}
	return r.Status.Allowed
}

// runControllers runs the controllers as the manifest's service account
// (token), as node-1 with a short lease, until the test ends.
func runControllers(t *testing.T, ctx context.Context, c *kubetest.Cluster, token string, cfg controllers.Config, store datastore.Store, ipamc controllers.IPAM) {
	t.Helper()
	saKube, err := kube.New(c.ConfigForToken(token))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Identity = "node-1"
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 2*time.Second, 1500*time.Millisecond, 200*time.Millisecond
	ctrl, err := controllers.New(cfg, saKube, store, ipamc)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("controllers: %v", err)
		}
	})
}
