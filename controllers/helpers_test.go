package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/kube"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// env is a Kubernetes control plane and a Calico datastore.
type env struct {
	ctx   context.Context
	kube  *kubetest.Cluster
	store datastore.Store
	kv    datastore.KV // IPAM's storage
	ipam  *ipam.Client
	logs  *proctest.Log
}

func newEnv(t *testing.T) *env {
	t.Helper()
	kube := kubetest.Start(t)
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return envOn(t, ctx, kube, storetest.Etcd(t, ctx, srv.Endpoints))
}

// newKDDEnv is an env whose Calico datastore is the Kubernetes API itself
// (Calico's CRDs installed), IPAM included, as DATASTORE_TYPE=kubernetes.
func newKDDEnv(t *testing.T) *env {
	t.Helper()
	kube := kubetest.Start(t)
	kube.InstallCalicoCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return envOn(t, ctx, kube, storetest.KDD(t, ctx, kube))
}

// envOn is the env of kube and store; the controllers' logs are shown
// when the test fails.
func envOn(t *testing.T, ctx context.Context, kube *kubetest.Cluster, store datastore.Store) *env {
	e := &env{ctx: ctx, kube: kube, store: store, kv: store.IPAM(), ipam: ipam.New(store.IPAM(), store, nil), logs: &proctest.Log{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller logs:\n%s", e.logs.String())
		}
	})
	return e
}

// logger logs to the env's buffer as instance.
func (e *env) logger(instance string) *slog.Logger {
	return slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("instance", instance)
}

// fastConfig is a Config with short leader-election timings.
func (e *env) fastConfig(identity string, enabled ...string) Config {
	return Config{
		Enabled:          enabled,
		LeaseName:        "calico-test",
		Identity:         identity,
		LeaseDuration:    2 * time.Second,
		RenewDeadline:    1500 * time.Millisecond,
		RetryPeriod:      200 * time.Millisecond,
		Resync:           time.Minute,
		GCInterval:       300 * time.Millisecond,
		NodeCleanupRetry: 500 * time.Millisecond,
		Logger:           e.logger(identity),
		Datastore:        e.store.Type(),
	}
}

// instance is one running Controllers.
type instance struct {
	c      *Controllers
	cancel context.CancelFunc
	done   chan error
}

// start runs Controllers with cfg, on a client of its own, until the
// test ends or stop is called.
func (e *env) start(t *testing.T, cfg Config) *instance {
	t.Helper()
	k, err := kube.New(e.kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg, k, e.store, e.ipam)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- c.Run(ctx) }()
	t.Cleanup(func() { in.stop(t) })
	return in
}

// stop ends Run and waits for it; idempotent.
func (in *instance) stop(t *testing.T) {
	t.Helper()
	if in.cancel == nil {
		return
	}
	in.cancel()
	in.cancel = nil
	select {
	case err := <-in.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("Run did not return within 30s of cancellation")
	}
}

// eventually retries check until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	polltest.Eventually(t, timeout, "the check to pass", check)
}

// never checks that check keeps failing (returns non-nil) for d.
func never(t *testing.T, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if check() == nil {
			t.Fatalf("%s happened, want it not to", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) get(kind, namespace, name string) (api.Object, error) {
	return e.store.Get(e.ctx, kind, namespace, name)
}

func (e *env) gone(kind, namespace, name string) func() error {
	return func() error {
		_, err := e.get(kind, namespace, name)
		if errors.Is(err, datastore.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("%s %s still exists", kind, qualified(namespace, name))
	}
}

func (e *env) exists(kind, namespace, name string) func() error {
	return func() error {
		_, err := e.get(kind, namespace, name)
		return err
	}
}

func (e *env) create(t *testing.T, objs ...api.Object) {
	t.Helper()
	for _, o := range objs {
		if _, err := e.store.Create(e.ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", o.Type().Kind, o.Meta().Name, err)
		}
	}
}

// pod creates a Pending pod bound to node.
func (e *env) pod(t *testing.T, ns, name, node string, labels map[string]string) *corev1.Pod {
	t.Helper()
	p, err := e.kube.Client.CoreV1().Pods(ns).Create(e.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	return p
}

// endpoint is the WorkloadEndpoint the CNI plugin would write for a pod.
func endpoint(t *testing.T, ns, node, pod, containerID string, labels map[string]string, ips ...string) *api.WorkloadEndpoint {
	t.Helper()
	w := &api.WorkloadEndpoint{}
	w.Kind, w.APIVersion = "WorkloadEndpoint", api.GroupVersion
	w.Namespace, w.Labels = ns, labels
	w.Spec = api.WorkloadEndpointSpec{
		Orchestrator: api.OrchestratorKubernetes, Node: node, Pod: pod, Endpoint: "eth0",
		ContainerID: containerID, InterfaceName: "cali0123456789a", IPNetworks: ips,
		Profiles: []string{"kns." + ns, "ksa." + ns + ".default"}, ServiceAccountName: "default",
	}
	name, err := api.WorkloadEndpointName(&w.Spec)
	if err != nil {
		t.Fatal(err)
	}
	w.Name = name
	return w
}

// checkAll reports every check that fails, not only the first.
func checkAll(t *testing.T, checks ...func() error) {
	t.Helper()
	for _, check := range checks {
		if err := check(); err != nil {
			t.Error(err)
		}
	}
}

// leakGracePeriod is the KubeControllersConfiguration that sets the
// node controller's leak grace period.
func leakGracePeriod(d time.Duration) *api.KubeControllersConfiguration {
	kcc := &api.KubeControllersConfiguration{}
	kcc.Kind, kcc.APIVersion, kcc.Name = "KubeControllersConfiguration", api.GroupVersion, "default"
	kcc.Spec.Controllers.Node = &api.NodeControllerConfig{LeakGracePeriod: &api.Duration{Duration: d}}
	return kcc
}

// onlyLeakReleased checks the end of an IPAM GC test, once leaked (the
// address of pod gc/leaked) was released: its release was logged with
// the pod, and two more grace periods (of 2s) later none of kept has
// gone and no other leak was released.
func (e *env) onlyLeakReleased(t *testing.T, leaked netip.Addr, kept map[string]netip.Addr) {
	t.Helper()
	texttest.Contains(t, "logs", e.logs.String(), "released leaked IP address", "ip="+leaked.String(), "pod=gc/leaked")
	time.Sleep(4 * time.Second)
	for name, ip := range kept {
		if _, err := e.ipam.Lookup(e.ctx, ip); err != nil {
			t.Errorf("%s address %s released: %v", name, ip, err)
		}
	}
	if strings.Count(e.logs.String(), "released leaked IP address") != 1 {
		t.Errorf("more than one leaked address released:\n%s", e.logs.String())
	}
}

// allocate assigns one address on node for a pod (attrs as the CNI
// plugin writes them; pod "" for an allocation without pod attributes).
func (e *env) allocate(t *testing.T, node, handle, ns, pod string) netip.Addr {
	t.Helper()
	attrs := map[string]string{}
	if pod != "" {
		attrs["namespace"], attrs["pod"] = ns, pod
	}
	v4, _, err := e.ipam.AutoAssign(e.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: handle, Node: node, Attrs: attrs})
	if err != nil || len(v4) != 1 {
		t.Fatalf("allocate on %s: %v %v", node, v4, err)
	}
	return v4[0].Addr()
}

func (e *env) allocated(ip netip.Addr) func() error {
	return func() error {
		_, err := e.ipam.Lookup(e.ctx, ip)
		return err
	}
}

func (e *env) released(ip netip.Addr) func() error {
	return func() error {
		h, err := e.ipam.Lookup(e.ctx, ip)
		if errors.Is(err, ipam.ErrNotAllocated) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("%s still held by %s", ip, h.Handle)
	}
}

func calicoNode(name, k8sName string, labels map[string]string) *api.Node {
	n := &api.Node{}
	n.Kind, n.APIVersion, n.Name, n.Labels = "Node", api.GroupVersion, name, labels
	if k8sName != "" {
		n.Spec.OrchRefs = []api.OrchRef{{NodeName: k8sName, Orchestrator: api.OrchestratorKubernetes}}
	}
	return n
}

func ippool(cidr string) *api.IPPool {
	p := &api.IPPool{}
	p.Kind, p.APIVersion, p.Name = "IPPool", api.GroupVersion, "pool-"+strings.NewReplacer(".", "-", "/", "-").Replace(cidr)
	p.Spec.CIDR = cidr
	p.Spec.BlockSize = 28
	return p
}
