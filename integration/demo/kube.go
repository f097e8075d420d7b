package main

// The demo on the Kubernetes datastore (--datastore=kubernetes): a real
// kube-apiserver with its own etcd, Calico's CRDs, and the Kubernetes
// objects kubelet and a user would create (Nodes, Namespaces, Pods,
// NetworkPolicy).

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/projectcalico/calico-node/internal/node/embedetcd"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// apiserverProc is kube-apiserver's name in the state record.
const apiserverProc = "kube-apiserver"

// apiserverReadyTimeout bounds kube-apiserver's start: a few seconds on
// an idle machine, much more on a busy one.
const apiserverReadyTimeout = 2 * time.Minute

func (c *cluster) apiserverURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.o.apiserverPort)
}
func (c *cluster) apiserverAddr() string { return "127.0.0.1:" + strconv.Itoa(c.o.apiserverPort) }
func (c *cluster) kubeconfig() string    { return filepath.Join(c.o.stateDir, "kubeconfig") }
func (c *cluster) pkiDir() string        { return filepath.Join(c.o.stateDir, "pki") }

// kubeBin is a Kubernetes program: from --kube-bin-dir, else PATH.
func (c *cluster) kubeBin(name string) string {
	if c.o.kubeBinDir != "" {
		return filepath.Join(c.o.kubeBinDir, name)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return name
}

func (c *cluster) kubectlPath() string { return c.kubeBin("kubectl") }

// kubectlArgs are kubectl's leading arguments: the demo's cluster, and a
// discovery cache of its own rather than the user's ~/.kube.
func (c *cluster) kubectlArgs() []string {
	return []string{"--kubeconfig=" + c.kubeconfig(), "--cache-dir=" + filepath.Join(c.o.stateDir, "kubectl-cache")}
}

// kubectl runs kubectl against the demo's API server with stdin.
func (c *cluster) kubectl(stdin string, args ...string) (string, error) {
	cmd := exec.Command(c.kubectlPath(), append(c.kubectlArgs(), args...)...)
	cmd.Env = c.env()
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	b, err := cmd.CombinedOutput()
	if err != nil {
		return string(b), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// kubePrerequisites lists what the Kubernetes datastore needs and lacks.
func (c *cluster) kubePrerequisites() []string {
	var missing []string
	for _, b := range []string{"kube-apiserver", "kubectl"} {
		p := c.kubeBin(b)
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, fmt.Sprintf("%s (make kube-bins builds it into ~/.cache/calico-node/kube-bin; pass its directory with --kube-bin-dir)", b))
		}
	}
	if _, err := os.Stat(c.o.crds); err != nil {
		missing = append(missing, fmt.Sprintf("Calico's CRDs %s (deploy/crds.yaml of the repository; --crds names it)", c.o.crds))
	}
	return missing
}

// startAPIServer starts the API server's etcd, makes the certificates,
// starts kube-apiserver and waits until it is ready, then writes the admin
// kubeconfig everything else uses.
func (c *cluster) startAPIServer(ctx context.Context) error {
	peer := "http://127.0.0.1:" + strconv.Itoa(c.o.etcdPort+1)
	if err := c.spawn("etcd", c.o.stateDir, c.self, "etcd",
		"--data-dir", filepath.Join(c.o.stateDir, "etcd"),
		"--client-url", c.etcdURL(),
		"--peer-url", peer,
	); err != nil {
		return err
	}
	if err := c.waitEtcd(); err != nil {
		return err
	}
	p, err := kubetest.WritePKI(c.pkiDir(), "calico-demo", 365*24*time.Hour)
	if err != nil {
		return err
	}
	if err := c.spawn(apiserverProc, c.o.stateDir, c.kubeBin("kube-apiserver"),
		"--etcd-servers="+c.etcdURL(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(c.o.apiserverPort),
		// One apiserver and no kubelets: nothing to reconcile the
		// "kubernetes" service's endpoints against.
		"--endpoint-reconciler-type=none",
		"--cert-dir="+c.pkiDir(),
		"--tls-cert-file="+p.ServerCert,
		"--tls-private-key-file="+p.ServerKey,
		"--client-ca-file="+p.CACert,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.SAPub,
		"--service-account-signing-key-file="+p.SAKey,
		"--service-cluster-ip-range=10.96.0.0/12",
		"--allow-privileged=true",
		"--profiling=false",
		"--v=1",
	); err != nil {
		return err
	}
	if err := c.waitAPIServer(ctx, p); err != nil {
		return err
	}
	return kubetest.WriteKubeconfig(c.kubeconfig(), "calico-demo", c.apiserverURL(), p.CACert, p.AdminCert, p.AdminKey)
}

// waitAPIServer polls /readyz as the admin until it answers 200.
func (c *cluster) waitAPIServer(ctx context.Context, p *kubetest.PKI) error {
	logPath := filepath.Join(c.o.stateDir, "logs", apiserverProc+".log")
	err := kubetest.WaitReady(c.apiserverURL(), p, apiserverReadyTimeout, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !c.running(apiserverProc) {
			return fmt.Errorf("kube-apiserver exited; see %s", logPath)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w; see %s", err, logPath)
	}
	return nil
}

// running reports whether the newest recorded process of that name runs.
func (c *cluster) running(name string) bool {
	for i := len(c.st.Procs) - 1; i >= 0; i-- {
		if c.st.Procs[i].Name == name {
			return c.st.Procs[i].alive()
		}
	}
	return false
}

// installCRDs applies Calico's CRDs and waits until the API server serves
// every one of them.
func (c *cluster) installCRDs() error {
	if _, err := c.kubectl("", "apply", "-f", c.o.crds); err != nil {
		return err
	}
	_, err := c.kubectl("", "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
	return err
}

// startForwarder relays the API server's port into every node namespace's
// loopback and waits until each node reaches it.
func (c *cluster) startForwarder() error {
	args := []string{c.self, "forward", c.apiserverAddr()}
	for i := 1; i <= nodeCount; i++ {
		args = append(args, "/var/run/netns/"+c.nodeNS(i))
	}
	if err := c.spawn("apiserver-forward", c.o.stateDir, args...); err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for i := 1; i <= nodeCount; i++ {
		for {
			err := ns.WithNetNSPath("/var/run/netns/"+c.nodeNS(i), func(ns.NetNS) error {
				conn, err := net.DialTimeout("tcp", c.apiserverAddr(), time.Second)
				if err == nil {
					conn.Close()
				}
				return err
			})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the API server is not reachable from %s: %w; see %s", nodeName(i), err, filepath.Join(c.o.stateDir, "logs", "apiserver-forward.log"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// kubeDir holds the manifests the demo applies.
func (c *cluster) kubeDir() (string, error) {
	dir := filepath.Join(c.o.stateDir, "kube")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	return dir, nil
}

// applyManifest writes doc to kube/<file> and applies it.
func (c *cluster) applyManifest(file, doc string) error {
	dir, err := c.kubeDir()
	if err != nil {
		return err
	}
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = c.kubectl("", "apply", "-f", path)
	return err
}

// registerNodes creates what kubelet registers (the Nodes) and what a
// user creates before pods (their namespaces, each with the "default"
// ServiceAccount kube-controller-manager would add).
func (c *cluster) registerNodes() error {
	var b strings.Builder
	for i := 1; i <= nodeCount; i++ {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Node
metadata:
  name: %[1]s
  labels:
    kubernetes.io/hostname: %[1]s
    kubernetes.io/os: linux
`, nodeName(i))
	}
	for _, k := range k8sNamespaces() {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: default
  namespace: %[1]s
`, k)
	}
	return c.applyManifest("nodes.yaml", b.String())
}

// createPodObjects creates every pod as the API server has it when a
// runtime is asked for its network: scheduled (spec.nodeName), Pending.
// The CNI plugin reads it (labels, service account, ports) and writes
// Calico's annotations on it.
func (c *cluster) createPodObjects() error {
	var b strings.Builder
	for i := 1; i <= nodeCount; i++ {
		for _, k := range k8sNamespaces() {
			fmt.Fprintf(&b, `---
apiVersion: v1
kind: Pod
metadata:
  name: pod-%[1]d
  namespace: %[2]s
  labels:
    app: %[2]s
spec:
  nodeName: %[3]s
  automountServiceAccountToken: false
  containers:
  - name: listener
    image: calico-demo/listener
    ports:
    - name: http
      containerPort: %[4]d
`, i, k, nodeName(i), listenPort)
		}
	}
	return c.applyManifest("pods.yaml", b.String())
}

// serveEtcd runs the API server's etcd until ctx is done (`calico-demo
// etcd`): the etcd calico-node embeds, current where Debian's is older
// than the versions Kubernetes supports.
func serveEtcd(ctx context.Context, dataDir, clientURL, peerURL string) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	return embedetcd.New(embedetcd.Config{
		DataDir: dataDir, ClientURL: clientURL, PeerURL: peerURL, Name: "calico-demo", Logger: logger,
	}).Run(ctx)
}

// forward relays TCP connections to addr on the loopback of every network
// namespace in nsPaths to addr in this process's own namespace
// (`calico-demo forward`). A listening socket stays in the namespace it
// was opened in, so one process serves every node.
func forward(ctx context.Context, addr string, nsPaths []string) error {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for _, p := range nsPaths {
		l, err := netnstest.ListenAt(p, "tcp", addr)
		if err != nil {
			return err
		}
		listeners = append(listeners, l)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(listeners))
	for _, l := range listeners {
		wg.Go(func() {
			for {
				in, err := l.Accept()
				if err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("accept on %s: %w", l.Addr(), err)
					}
					return
				}
				go relay(in, addr)
			}
		})
	}
	select {
	case <-ctx.Done():
	case err := <-errs:
		return err
	}
	for _, l := range listeners {
		l.Close()
	}
	wg.Wait()
	return nil
}

// relay copies between in and a new connection to addr until both sides
// are done.
func relay(in net.Conn, addr string) {
	defer in.Close()
	out, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "forward: connect %s: %v\n", addr, err)
		return
	}
	defer out.Close()
	kubetest.Splice(in, out)
}
