package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/testkit/polltest"
)

// The pods of the node tests are TestImage pods in namespace default on
// NodeName. A pod running ServerCommand serves ServerPage over HTTP.
const (
	ServerPort = "8080"
	ServerPage = "hello-calico"
)

// ServerCommand serves ServerPage on ServerPort (busybox httpd).
func ServerCommand() []string {
	return []string{"sh", "-c", "mkdir -p /www && echo " + ServerPage + " > /www/index.html && exec httpd -f -p " + ServerPort + " -h /www"}
}

// RunPod applies a pod named name running command, with labels (the
// entries of a YAML flow mapping: "app: web"), and waits up to wait for it
// to run. It returns how long that took from the apply.
func (c *Cluster) RunPod(t testing.TB, name, labels string, command []string, wait time.Duration) time.Duration {
	t.Helper()
	cmd, _ := json.Marshal(command)
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default, labels: {%s}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: %s, imagePullPolicy: Never, command: %s}
`, name, labels, NodeName, TestImage, cmd)
	start := time.Now()
	if out, err := c.RunKubectl(strings.NewReader(manifest), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply pod %s: %v\n%s", name, err, out)
	}
	deadline := start.Add(wait)
	for {
		p, err := c.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			out, _ := c.RunKubectl(nil, "describe", "pod", name)
			t.Fatalf("pod %s not Running after %s:\n%s", name, wait, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PodIP is the IP of the pod name.
func (c *Cluster) PodIP(t testing.TB, name string) string {
	t.Helper()
	p, err := c.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || p.Status.PodIP == "" {
		t.Fatalf("pod %s: no IP (%v)", name, err)
	}
	return p.Status.PodIP
}

// CalicoPodIPs returns the IP of each named pod, failing the test unless
// it is from pool and calicoctl ("ipam show --ip") reports it in use by
// that pod: the address came from Calico IPAM, not from another plugin.
// calicoctl runs calicoctl wherever the test has it and returns its
// output.
func (c *Cluster) CalicoPodIPs(t testing.TB, pool netip.Prefix, calicoctl func(args ...string) string, names ...string) map[string]string {
	t.Helper()
	ips := map[string]string{}
	for _, name := range names {
		ip := c.PodIP(t, name)
		ips[name] = ip
		if a, err := netip.ParseAddr(ip); err != nil || !pool.Contains(a) {
			t.Fatalf("pod %s has IP %q, not from the pool %s", name, ip, pool)
		}
		out := calicoctl("ipam", "show", "--ip="+ip)
		if !strings.Contains(out, "is in use") || !strings.Contains(out, "pod: "+name) {
			t.Errorf("calicoctl ipam show --ip=%s:\n%s", ip, out)
		}
	}
	return ips
}

// DeletePods deletes the pods and waits until they are gone.
func (c *Cluster) DeletePods(t testing.TB, names ...string) {
	t.Helper()
	if out, err := c.RunKubectl(nil, append([]string{"delete", "pod", "--wait=true", "--timeout=60s"}, names...)...); err != nil {
		t.Fatalf("delete pods %v: %v\n%s", names, err, out)
	}
}

// Fetch is what the pod from gets from the HTTP server at ip:ServerPort
// ("" when it gets nothing). nc, not wget: Debian's static busybox wget
// crashes in a root without glibc's NSS modules.
func (c *Cluster) Fetch(from, ip string) string {
	out, _ := c.RunKubectl(nil, "exec", from, "--", "sh", "-c",
		`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 `+ip+" "+ServerPort)
	return out
}

// Ping reports whether the pod from gets an answer to one ping of ip.
func (c *Cluster) Ping(from, ip string) error {
	out, err := c.RunKubectl(nil, "exec", from, "--", "ping", "-c", "1", "-W", "2", ip)
	if err != nil {
		return fmt.Errorf("ping %s from pod %s: %w\n%s", ip, from, err, out)
	}
	return nil
}

// CheckIngressPolicy checks, on real packets between the pods "client"
// and "server" (running ServerCommand, labelled app=server), that a
// Kubernetes NetworkPolicy admitting to the server only pods labelled
// app=trusted is enforced: the client no longer reaches the server, the
// server still reaches the client (no egress policy), and the client is
// admitted again once labelled app=trusted. It deletes the policy at the
// end; the client keeps its label.
func (c *Cluster) CheckIngressPolicy(t testing.TB, clientIP, serverIP string) {
	t.Helper()
	const policy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: server-ingress, namespace: default}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector: {matchLabels: {app: trusted}}
`
	kubectl := func(stdin string, args ...string) {
		t.Helper()
		if out, err := c.RunKubectl(strings.NewReader(stdin), args...); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	reaches := func() bool { return strings.Contains(c.Fetch("client", serverIP), ServerPage) }
	kubectl(policy, "apply", "-f", "-")
	polltest.Until(t, 30*time.Second, "NetworkPolicy blocks client -> server", func() bool { return !reaches() })
	if err := c.Ping("server", clientIP); err != nil {
		t.Errorf("egress from the server (no egress policy) blocked: %v", err)
	}
	kubectl("", "label", "pod", "client", "app=trusted", "--overwrite")
	polltest.Until(t, 30*time.Second, "relabelled client admitted", reaches)
	kubectl("", "delete", "networkpolicy", "server-ingress")
}
