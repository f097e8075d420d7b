package install

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/ociimage"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

const (
	// podCIDR is the cluster's pod CIDR, set as CALICO_IPV4POOL_CIDR.
	podCIDR = "10.244.0.0/16"
	podWait = 60 * time.Second
	dsWait  = 3 * time.Minute
)

// flavour is one datastore's files, in the order docs/kubernetes.md
// applies them.
type flavour struct {
	name     string
	crds     string // "" on etcd
	rbac     string
	manifest string
}

var flavours = []flavour{
	{name: "etcd", rbac: "rbac-etcd.yaml", manifest: "calico-node.yaml"},
	{name: "kdd", crds: "crds.yaml", rbac: "rbac-kdd.yaml", manifest: "calico-node-kdd.yaml"},
}

// TestInstall installs calico-node on a real kubelet node from the image
// and the manifests, as docs/kubernetes.md tells a user, per datastore,
// and runs pods on it.
func TestInstall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: runs kubelet, containerd and the calico-node pod in namespaces of their own")
	}
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) { install(t, fl) })
	}
}

func install(t *testing.T, fl flavour) {
	deploy := filepath.Join(testbin.RepoRoot(), "deploy")
	manifest, err := os.ReadFile(filepath.Join(deploy, fl.manifest))
	if err != nil {
		t.Fatal(err)
	}
	ds := daemonSet(t, manifest)
	image := ds.Spec.Template.Spec.Containers[0].Image

	// The machine's own host paths must come out as they went in; the
	// node gets its own (registered first: checked last).
	paths := hostPaths(ds)
	machineBefore := machinePaths(t, paths)
	t.Cleanup(func() {
		if after := machinePaths(t, paths); after != machineBefore {
			t.Errorf("the machine's host paths changed:\nbefore:\n%s\nafter:\n%s", machineBefore, after)
		}
	})
	kubetest.CheckHostRestored(t)
	t.Cleanup(kubetest.TakeAgentState().RemoveSince)
	kubetest.PrivateHostPaths(t, paths...)

	kube := kubetest.Start(t, kubetest.WithAPIServerArgs(kubetest.NodeAPIServerArgs()...),
		kubetest.WithControllers("daemonset-controller"), kubetest.WithScheduler())
	var etcd *etcdtest.Server
	if fl.name == "etcd" {
		etcd = etcdtest.Start(t)
	}
	// The standard CNI directories: the ones the DaemonSet's install-cni
	// writes to through its hostPath volumes.
	node := kubetest.StartNode(t, kube, kubetest.WithCNIDirs("/opt/cni/bin", "/etc/cni/net.d"))

	// The image, as `make image` builds it, under the name the manifest
	// gives (imagePullPolicy IfNotPresent: no registry is asked).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	archive := filepath.Join(t.TempDir(), "calico-node-image.tar")
	if _, err := ociimage.Build(ctx, ociimage.Options{Binary: testbin.Static(t), Name: image, Out: archive}); err != nil {
		t.Fatal(err)
	}
	node.ImportImage(t, archive)

	// What docs/kubernetes.md has a user set, and nothing else.
	edited := string(manifest)
	edited = edit(t, edited, `name: CALICO_IPV4POOL_CIDR
              value: "192.168.0.0/16"`, `name: CALICO_IPV4POOL_CIDR
              value: "`+podCIDR+`"`)
	if etcd != nil {
		edited = edit(t, edited, `etcd_endpoints: "http://127.0.0.1:2379"`, `etcd_endpoints: "`+strings.Join(etcd.Endpoints, ",")+`"`)
	}
	manifestFile := filepath.Join(t.TempDir(), fl.manifest)
	if err := os.WriteFile(manifestFile, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	// No kube-proxy on this node: the "kubernetes" Service's address
	// leads nowhere, so the API server's own, as docs/kubernetes.md says.
	kubectl(t, kube, nil, "-n", "kube-system", "create", "configmap", "kubernetes-services-endpoint",
		"--from-literal=KUBERNETES_SERVICE_HOST="+kube.Host, "--from-literal=KUBERNETES_SERVICE_PORT="+kube.Port)
	if fl.crds != "" {
		kubectl(t, kube, nil, "apply", "-f", filepath.Join(deploy, fl.crds))
		kubectl(t, kube, nil, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
	}
	start := time.Now()
	kubectl(t, kube, nil, "apply", "-f", filepath.Join(deploy, fl.rbac), "-f", manifestFile)
	// Runs before the node's teardown: a DaemonSet would put back the pod
	// the teardown deletes. No garbage collector runs here to delete the
	// pod with it (nor to orphan it: "orphan" waits for one); the
	// teardown deletes it.
	t.Cleanup(func() {
		if out, err := kube.RunKubectl(nil, "-n", "kube-system", "delete", "daemonset", "calico-node", "--cascade=background", "--timeout=30s"); err != nil {
			t.Errorf("delete the DaemonSet: %v\n%s", err, out)
		}
	})

	// Not "kubectl rollout status": it reports a DaemonSet rolled out when
	// the controller's first status has none desired, which it can write
	// before it has seen the node.
	if err := waitCalicoReady(kube, dsWait); err != nil {
		t.Fatalf("calico-node DaemonSet not ready: %v\n%s", err, diagnose(kube, node))
	}
	t.Logf("kubectl apply to calico-node Ready: %v", time.Since(start).Round(time.Millisecond))
	pod := calicoPod(t, kube)
	if st := pod.Status.ContainerStatuses[0]; !pod.Spec.HostNetwork || st.Image != image || !st.Ready || st.RestartCount != 0 {
		t.Errorf("calico-node pod: hostNetwork %v, image %q, ready %v, %d restarts; want host network, %s, ready, none\n%s",
			pod.Spec.HostNetwork, st.Image, st.Ready, st.RestartCount, image, diagnose(kube, node))
	}
	// Whatever fails from here on, the agent's side of it.
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(diagnose(kube, node))
		}
	})

	// install-cni, through the pod's hostPath volumes, into the node's
	// CNI directories.
	list, err := libcni.ConfListFromFile("/etc/cni/net.d/10-calico.conflist")
	if err != nil {
		t.Fatalf("conflist: %v", err)
	}
	// calico, then portmap (hostPort) and bandwidth, as Calico's manifests chain them.
	if len(list.Plugins) != 3 || list.Plugins[0].Network.Type != "calico" || list.Plugins[0].Network.IPAM.Type != "calico-ipam" ||
		list.Plugins[1].Network.Type != "portmap" || list.Plugins[2].Network.Type != "bandwidth" {
		t.Errorf("conflist plugins: %s", list.Bytes)
	}
	if kc, err := os.ReadFile("/etc/cni/net.d/calico-kubeconfig"); err != nil || !strings.Contains(string(kc), "server: https://"+kube.Host+":"+kube.Port) {
		t.Errorf("calico-kubeconfig: %v\n%s", err, kc)
	}
	for _, p := range []string{"calico", "calico-ipam", "portmap", "bandwidth"} {
		if st, err := os.Stat(filepath.Join("/opt/cni/bin", p)); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("CNI plugin %s: %v", p, err)
		}
	}
	node.WaitReady(t, 60*time.Second)
	// The controllers run in the pod, under their Lease.
	polltest.Until(t, 30*time.Second, "the calico-node pod holds the controllers' Lease", func() bool {
		out, _ := kube.RunKubectl(nil, "-n", "kube-system", "get", "lease", "calico-kube-controllers", "-o", "jsonpath={.spec.holderIdentity}")
		return out == kubetest.NodeName
	})

	calicoctl := func(args ...string) string {
		t.Helper()
		out, err := kube.RunKubectl(nil, append([]string{"-n", "kube-system", "exec", "daemonset/calico-node", "--", "calicoctl"}, args...)...)
		if err != nil {
			t.Fatalf("calicoctl in the calico-node pod: %v", err)
		}
		return out
	}

	kube.RunPod(t, "client", "app: client", []string{"sleep", "3600"}, podWait)
	kube.RunPod(t, "server", "app: server", kubetest.ServerCommand(), podWait)

	// Addresses from the pool the DaemonSet's CALICO_IPV4POOL_CIDR made.
	ips := kube.CalicoPodIPs(t, netip.MustParsePrefix(podCIDR), calicoctl, "client", "server")
	polltest.Until(t, 30*time.Second, "client reaches server over HTTP", func() bool {
		return strings.Contains(kube.Fetch("client", ips["server"]), kubetest.ServerPage)
	})

	// A Kubernetes NetworkPolicy, enforced by the pod's dataplane on real
	// packets.
	kube.CheckIngressPolicy(t, ips["client"], ips["server"])

	// Deleting the pods gives every address back.
	kube.DeletePods(t, "client", "server")
	for name, ip := range ips {
		polltest.Until(t, 30*time.Second, "address of "+name+" released", func() bool {
			return strings.Contains(calicoctl("ipam", "show", "--ip="+ip), "is not assigned")
		})
	}
	if out := calicoctl("ipam", "check"); !strings.Contains(out, "found 0 problems") {
		t.Errorf("ipam check after delete:\n%s", out)
	}
}

// daemonSet is the manifest's DaemonSet.
func daemonSet(t *testing.T, manifest []byte) appsv1.DaemonSet {
	t.Helper()
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(manifest), -1) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind == "DaemonSet" {
			var ds appsv1.DaemonSet
			if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
				t.Fatal(err)
			}
			if len(ds.Spec.Template.Spec.Containers) != 1 {
				t.Fatalf("DaemonSet has %d containers, want 1", len(ds.Spec.Template.Spec.Containers))
			}
			return ds
		}
	}
	t.Fatal("no DaemonSet in the manifest")
	return appsv1.DaemonSet{}
}

// hostPaths are the DaemonSet's hostPath volumes: a file where the type
// says so, the machine's own where the container only reads it.
func hostPaths(ds appsv1.DaemonSet) []kubetest.HostPath {
	readOnly := map[string]bool{}
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		if ro, seen := readOnly[m.Name]; !seen || ro {
			readOnly[m.Name] = m.ReadOnly
		}
	}
	var out []kubetest.HostPath
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		file := v.HostPath.Type != nil && (*v.HostPath.Type == corev1.HostPathFileOrCreate || *v.HostPath.Type == corev1.HostPathFile)
		out = append(out, kubetest.HostPath{Path: v.HostPath.Path, File: file, Shared: readOnly[v.Name]})
	}
	return out
}

// machinePaths lists the host paths as the machine sees them: in the
// mount namespace of the parent test process (TestMain).
func machinePaths(t *testing.T, paths []kubetest.HostPath) string {
	t.Helper()
	ns := fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid())
	self, _ := os.Readlink("/proc/self/ns/mnt")
	if parent, err := os.Readlink(ns); err != nil || parent == self {
		t.Fatalf("the parent process is not in another mount namespace (%s: %v): not re-executed by TestMain", ns, err)
	}
	var b strings.Builder
	for _, p := range paths {
		out, _ := exec.Command("nsenter", "--mount="+ns, "--", "ls", "-lA", "--time-style=full-iso", p.Path).CombinedOutput()
		fmt.Fprintf(&b, "%s:\n%s", p.Path, out)
	}
	return b.String()
}

// edit replaces old, which must occur exactly once, as a user editing the
// file would.
func edit(t *testing.T, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("manifest has %q %d times, want once", old, n)
	}
	return strings.Replace(s, old, new, 1)
}

func kubectl(t *testing.T, kube *kubetest.Cluster, stdin io.Reader, args ...string) string {
	t.Helper()
	out, err := kube.RunKubectl(stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// calicoPod is the DaemonSet's one pod.
func calicoPod(t *testing.T, kube *kubetest.Cluster) corev1.Pod {
	t.Helper()
	pods, err := kube.Client.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "k8s-app=calico-node"})
	if err != nil || len(pods.Items) != 1 || len(pods.Items[0].Status.ContainerStatuses) != 1 {
		t.Fatalf("calico-node pods: %v %+v", err, pods)
	}
	return pods.Items[0]
}

// waitCalicoReady waits until the node's one calico-node pod is Ready, as
// the DaemonSet's status and the pod's own both say.
func waitCalicoReady(kube *kubetest.Cluster, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := "no status yet"
	for {
		ds, err := kube.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "calico-node", metav1.GetOptions{})
		if err == nil {
			st := ds.Status
			last = fmt.Sprintf("desired %d, ready %d, available %d", st.DesiredNumberScheduled, st.NumberReady, st.NumberAvailable)
			if st.DesiredNumberScheduled == 1 && st.NumberReady == 1 && st.NumberAvailable == 1 {
				pods, err := kube.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=calico-node"})
				if err == nil && len(pods.Items) == 1 && len(pods.Items[0].Status.ContainerStatuses) == 1 && pods.Items[0].Status.ContainerStatuses[0].Ready {
					return nil
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %v: %s", timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// diagnose is what a user would look at when the DaemonSet does not come
// up: the pod, its log, kubelet's log.
func diagnose(kube *kubetest.Cluster, node *kubetest.Node) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"-n", "kube-system", "get", "daemonset,pods", "-o", "wide"},
		{"-n", "kube-system", "describe", "pods", "-l", "k8s-app=calico-node"},
		{"-n", "kube-system", "logs", "-l", "k8s-app=calico-node", "--tail=60"},
	} {
		out, err := kube.RunKubectl(nil, args...)
		fmt.Fprintf(&b, "$ kubectl %s (%v)\n%s\n", strings.Join(args, " "), err, out)
	}
	if data, err := os.ReadFile(node.KubeletLog); err == nil {
		lines := strings.Split(string(data), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "kubelet log:\n%s\n", strings.Join(lines, "\n"))
	}
	return b.String()
}
