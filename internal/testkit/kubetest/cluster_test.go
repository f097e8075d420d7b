package kubetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

func TestStagingReplace(t *testing.T) {
	gomod := "module k8s.io/kubernetes\n\ngo 1.25.0\n\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\tk8s.io/cri-client => ./staging/src/k8s.io/cri-client\n\tgithub.com/x/y => github.com/x/y v1.0.0\n)\n"
	var got []string
	for _, m := range stagingReplace.FindAllStringSubmatch(gomod, -1) {
		got = append(got, m[1])
	}
	if strings.Join(got, ",") != "k8s.io/api,k8s.io/cri-client" {
		t.Errorf("staging modules = %v, want [k8s.io/api k8s.io/cri-client]", got)
	}
	if m := goDirective.FindStringSubmatch(gomod); m == nil || m[1] != "1.25.0" {
		t.Errorf("go directive = %v, want 1.25.0", m)
	}
}

func TestMissing(t *testing.T) {
	dir := t.TempDir()
	if got := missing(dir); len(got) != len(binaryNames) {
		t.Fatalf("missing(empty) = %v, want all of %v", got, binaryNames)
	}
	for i, n := range binaryNames {
		if i == 2 {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Not executable: a half-written file is not a binary.
	if err := os.WriteFile(filepath.Join(dir, binaryNames[2]), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := missing(dir); len(got) != 1 || got[0] != binaryNames[2] {
		t.Fatalf("missing = %v, want [%s]", got, binaryNames[2])
	}
}

// TestCluster starts a control plane and checks what the other packages'
// tests rely on: admin access, kubectl, namespaces with a default
// ServiceAccount, Pending pods bound to nodes, tokens that RBAC applies to,
// and that nothing outlives the test.
func TestCluster(t *testing.T) {
	var pids []int
	t.Run("run", func(t *testing.T) {
		start := time.Now()
		c := Start(t)
		t.Logf("control plane ready in %s", time.Since(start).Round(time.Millisecond))
		ctx := context.Background()

		out, err := c.RunKubectl(nil, "version", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, `"gitVersion": "v`+Version+`"`) {
			t.Errorf("kubectl version does not report v%s for client and server:\n%s", Version, out)
		}

		c.CreateNamespace(t, "kubetest", map[string]string{"team": "a"})
		pod, err := c.Client.CoreV1().Pods("kubetest").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p1"},
			Spec: corev1.PodSpec{
				NodeName:   "node-a",
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod: %v", err)
		}
		if pod.Spec.ServiceAccountName != "default" {
			t.Errorf("pod service account = %q, want default (ServiceAccount admission)", pod.Spec.ServiceAccountName)
		}
		if pod.Status.Phase != corev1.PodPending {
			t.Errorf("pod phase = %q, want Pending", pod.Status.Phase)
		}

		// A service-account token authenticates, and RBAC applies to it.
		tok := c.Token(t, "kubetest", "default", time.Hour)
		sa, err := kubernetes.NewForConfig(c.ConfigForToken(tok))
		if err != nil {
			t.Fatal(err)
		}
		_, err = sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("list nodes as kubetest:default: err = %v, want Forbidden", err)
		}

		// The namespace controller runs: a deleted namespace goes away
		// (once its pods are gone: without a kubelet only a forced
		// deletion removes a pod bound to a node).
		if err := c.Client.CoreV1().Pods("kubetest").Delete(ctx, "p1", ForceDelete()); err != nil {
			t.Fatal(err)
		}
		if err := c.Client.CoreV1().Namespaces().Delete(ctx, "kubetest", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, err := c.Client.CoreV1().Namespaces().Get(ctx, "kubetest", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("namespace kubetest still there after 60s (err %v)", err)
			}
			time.Sleep(200 * time.Millisecond)
		}

		// The API server stops and comes back on the same address with
		// the same data (its etcd runs on); the restarted process is
		// the one cleanup stops.
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survivor", Namespace: "default"}, Data: map[string]string{"k": "v"}}
		if _, err := c.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		firstPID := pidOf(t, c.Dir, "kube-apiserver")
		c.StopAPIServer(t)
		if err := syscall.Kill(firstPID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("kube-apiserver pid %d still exists after StopAPIServer (kill -0: %v)", firstPID, err)
		}
		if _, err := c.Client.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("get while stopped: err = %v, want connection refused", err)
		}
		c.RestartAPIServer(t)
		got, err := c.Client.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{})
		if err != nil || got.Data["k"] != "v" {
			t.Errorf("config map after the restart: %v, %v", got, err)
		}
		if out, err := c.RunKubectl(nil, "get", "configmap", "survivor", "-o", "name"); err != nil || strings.TrimSpace(out) != "configmap/survivor" {
			t.Errorf("kubectl with the same kubeconfig after the restart: %q, %v", out, err)
		}

		// Relayed into another network namespace, at its own address.
		if os.Geteuid() == 0 {
			netNS := netnstest.New(t, "kubetest")
			c.RelayInto(t, "/var/run/netns/"+netNS.Name)
			out := netNS.MustRun(t, c.Kubectl, "--kubeconfig="+c.Kubeconfig, "--cache-dir="+t.TempDir(), "get", "configmap", "survivor", "-o", "name")
			if strings.TrimSpace(out) != "configmap/survivor" {
				t.Errorf("kubectl in another namespace through the relay: %q", out)
			}
		}

		for _, name := range []string{"kube-apiserver", "kube-controller-manager"} {
			pids = append(pids, pidOf(t, c.Dir, name))
		}
		if pids[0] == firstPID {
			t.Errorf("kube-apiserver pid %d unchanged by the restart", firstPID)
		}
	})
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists after the test's cleanup (kill -0: %v)", pid, err)
		}
	}
}

// pidOf finds a component's PID through /proc by its command line.
func pidOf(t *testing.T, dir, name string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) == name && strings.Contains(string(cmdline), dir) {
			return pid
		}
	}
	t.Fatalf("no %s process for %s", name, dir)
	return 0
}
