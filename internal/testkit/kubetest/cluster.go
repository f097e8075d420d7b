package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/projectcalico/calico-node/internal/atomicfile"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/pkitest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

const (
	// buildTimeout bounds a cold build inside a test process.
	buildTimeout = 25 * time.Minute
	// readyTimeout is how long the apiserver may take to answer /readyz;
	// about 4 s on an idle 2-core machine, much more when several test
	// binaries start control planes at once.
	readyTimeout = 2 * time.Minute
	// stopGrace is how long a component gets after SIGTERM.
	stopGrace = 10 * time.Second
	// startAttempts bounds retries after losing a port race.
	startAttempts = 4
	// kcmControllers are the controllers a test cluster needs: namespaces
	// really disappear, every namespace gets its "default" ServiceAccount,
	// and kube-root-ca.crt is published. Pod GC and node lifecycle stay off:
	// they would delete or evict pods bound to nodes without a kubelet.
	kcmControllers = "namespace-controller,serviceaccount-controller,root-ca-certificate-publisher-controller"
)

// Cluster is a running control plane.
type Cluster struct {
	// URL is the apiserver's base URL, https://127.0.0.1:<port>.
	URL string
	// Host and Port are URL's parts, as KUBERNETES_SERVICE_HOST and
	// KUBERNETES_SERVICE_PORT would give them to a pod.
	Host, Port string
	// Kubeconfig is an admin kubeconfig file (group system:masters).
	Kubeconfig string
	// CAFile is the CA certificate that signed the serving certificate.
	CAFile string
	// Config is the admin client configuration; Client a clientset on it.
	Config *rest.Config
	Client kubernetes.Interface
	// Kubectl is the path of the kubectl binary of the same version.
	Kubectl string
	// Dir holds certificates, kubeconfigs and the components' logs.
	Dir string
	// EtcdEndpoints are the API server's etcd (client URLs), for tests
	// that write behind its back as another API server of the cluster
	// would while this one is down.
	EtcdEndpoints []string
	// APIServerPID is the kube-apiserver's process ID (the restarted
	// one's after RestartAPIServer), for benchmarks that read its CPU time
	// and memory from /proc. Never signal it: Start's cleanup, and
	// StopAPIServer, stop the process.
	APIServerPID int

	// api is the running kube-apiserver and what restarts it.
	api *apiServer
}

// apiServer is kube-apiserver as StopAPIServer and RestartAPIServer see
// it: how it was started, and its current process.
type apiServer struct {
	bin, dir string
	pki      *PKI
	etcdURL  string
	port     int
	extra    []string

	mu   sync.Mutex
	proc *process // nil while stopped
}

// Option changes what Start runs.
type Option func(*options)

type options struct {
	noKCM        bool
	apiserverArg []string
	controllers  []string
	scheduler    bool
}

// WithControllers runs these kube-controller-manager controllers besides
// the default ones, e.g. "daemonset-controller" for a DaemonSet to get its
// pods.
func WithControllers(names ...string) Option {
	return func(o *options) { o.controllers = append(o.controllers, names...) }
}

// WithScheduler runs kube-scheduler, which binds pods created without a
// nodeName (a DaemonSet's, a Deployment's) to a node.
func WithScheduler() Option {
	return func(o *options) { o.scheduler = true }
}

// WithAPIServerArgs adds command-line flags to kube-apiserver, e.g. the
// --kubelet-preferred-address-types a node from StartNode needs.
func WithAPIServerArgs(args ...string) Option {
	return func(o *options) { o.apiserverArg = append(o.apiserverArg, args...) }
}

// WithoutControllerManager starts no kube-controller-manager. Namespaces
// then get no "default" ServiceAccount (Pods must name an existing one)
// and deleted namespaces stay Terminating.
func WithoutControllerManager() Option {
	return func(o *options) { o.noKCM = true }
}

// Start runs a control plane for the test and stops it in t.Cleanup. The
// binaries are built first if the cache lacks them.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	if os.Getenv("CALICO_KUBE_TESTS") == "skip" {
		t.Skip("CALICO_KUBE_TESTS=skip: not running kube-apiserver")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	bins, err := EnsureBinaries(ctx, os.Stderr)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}

	etcd := etcdtest.StartEmbedded(t)
	dir := t.TempDir()
	p, err := WritePKI(dir, "kubetest", 7*24*time.Hour)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	c := &Cluster{Dir: dir, CAFile: p.CACert, Kubectl: bins.Kubectl, Kubeconfig: filepath.Join(dir, "admin.kubeconfig"),
		EtcdEndpoints: etcd.Endpoints}

	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		c.api = &apiServer{bin: bins.APIServer, dir: dir, pki: p, etcdURL: etcd.Endpoints[0], port: port, extra: o.apiserverArg}
		t.Cleanup(c.api.stop)
		c.Host, c.Port = "127.0.0.1", strconv.Itoa(port)
		c.URL = "https://" + net.JoinHostPort(c.Host, c.Port)
		proc, err := c.api.start(c.URL)
		if err == nil {
			c.APIServerPID = proc.Cmd.Process.Pid
			break
		}
		if proc == nil {
			t.Fatalf("kubetest: %v", err)
		}
		if attempt+1 < startAttempts && strings.Contains(proc.logTail(), "address already in use") {
			continue
		}
		t.Fatalf("kubetest: %v; kube-apiserver log %s:\n%s", err, proc.logPath, proc.logTail())
	}

	if err := WriteKubeconfig(c.Kubeconfig, "kubetest", c.URL, p.CACert, p.AdminCert, p.AdminKey); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatalf("kubetest: load admin kubeconfig: %v", err)
	}
	// Tests create objects in bursts; client-go's default 5 QPS would
	// make them wait for the client, not the server.
	c.Config.QPS, c.Config.Burst = 200, 400
	c.Client, err = kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatalf("kubetest: admin clientset: %v", err)
	}

	if !o.noKCM {
		kcmConfig := filepath.Join(dir, "kcm.kubeconfig")
		if err := WriteKubeconfig(kcmConfig, "kubetest", c.URL, p.CACert, p.KCMCert, p.KCMKey); err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		kcm, err := startProcess(bins.ControllerManager, dir, "kube-controller-manager",
			"--kubeconfig="+kcmConfig,
			"--authentication-kubeconfig="+kcmConfig,
			"--authorization-kubeconfig="+kcmConfig,
			"--bind-address=127.0.0.1",
			"--secure-port=0",
			"--leader-elect=false",
			"--controllers="+strings.Join(append([]string{kcmControllers}, o.controllers...), ","),
			"--use-service-account-credentials=true",
			"--root-ca-file="+p.CACert,
			"--service-account-private-key-file="+p.SAKey,
			"--v=1",
		)
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		t.Cleanup(kcm.stop)
		if err := c.waitServiceAccount(context.Background(), "default", "default", readyTimeout, kcm); err != nil {
			t.Fatalf("kubetest: %v; kube-controller-manager log %s:\n%s", err, kcm.logPath, kcm.logTail())
		}
	}
	if o.scheduler {
		// As admin: the scheduler's own identity would need its own
		// certificate and nothing here tests its RBAC.
		sched, err := startProcess(bins.Scheduler, dir, "kube-scheduler",
			"--kubeconfig="+c.Kubeconfig,
			"--authentication-kubeconfig="+c.Kubeconfig,
			"--authorization-kubeconfig="+c.Kubeconfig,
			"--bind-address=127.0.0.1",
			"--secure-port=0",
			"--leader-elect=false",
			"--v=1",
		)
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		t.Cleanup(sched.stop)
	}
	return c
}

// StopAPIServer stops kube-apiserver (SIGTERM, SIGKILL after a grace
// period, by its PID) and returns once it has exited. Its etcd and every
// other component keep running, so the cluster's data survive: clients
// see connections refused until RestartAPIServer.
func (c *Cluster) StopAPIServer(t testing.TB) {
	t.Helper()
	c.api.stop()
}

// RestartAPIServer starts kube-apiserver again, stopping it first if it
// runs, with the same flags, certificates, etcd and address (the
// kubeconfigs stay valid), and waits until /readyz answers.
func (c *Cluster) RestartAPIServer(t testing.TB) {
	t.Helper()
	c.api.stop()
	// The old process's listening socket is closed, but a port left in
	// TIME_WAIT by its connections can still make the bind fail for a
	// moment: retried.
	deadline := time.Now().Add(30 * time.Second)
	for {
		proc, err := c.api.start(c.URL)
		if err == nil {
			c.APIServerPID = proc.Cmd.Process.Pid
			return
		}
		if proc != nil && strings.Contains(proc.logTail(), "address already in use") && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if proc == nil {
			t.Fatalf("kubetest: restart kube-apiserver: %v", err)
		}
		t.Fatalf("kubetest: restart kube-apiserver: %v; log %s:\n%s", err, proc.logPath, proc.logTail())
	}
}

// start runs kube-apiserver and waits for /readyz at url. On failure the
// process (if one was started) is stopped and returned for its log.
func (a *apiServer) start(url string) (*process, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	proc, err := startAPIServer(a.bin, a.dir, a.pki, a.etcdURL, a.port, a.extra)
	if err != nil {
		return nil, err
	}
	err = WaitReady(url, a.pki, readyTimeout, func() error {
		select {
		case <-proc.Done():
			return errors.New("kube-apiserver exited before it was ready")
		default:
			return nil
		}
	})
	if err != nil {
		proc.stop()
		return proc, err
	}
	a.proc = proc
	return proc, nil
}

// stop ends the running kube-apiserver, if any. Idempotent.
func (a *apiServer) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc != nil {
		a.proc.stop()
		a.proc = nil
	}
}

func startAPIServer(bin, dir string, p *PKI, etcdURL string, port int, extra []string) (*process, error) {
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		// No kubelets and one apiserver: nothing to reconcile the
		// "kubernetes" service endpoints against.
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + dir,
		"--tls-cert-file=" + p.ServerCert,
		"--tls-private-key-file=" + p.ServerKey,
		"--client-ca-file=" + p.CACert,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.SAPub,
		"--service-account-signing-key-file=" + p.SAKey,
		"--service-cluster-ip-range=10.96.0.0/12",
		"--allow-privileged=true",
		"--profiling=false",
		"--v=1",
	}
	return startProcess(bin, dir, "kube-apiserver", append(args, extra...)...)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitReady polls the API server at url's /readyz with p's admin
// certificate until it answers 200, for up to timeout. exited, polled
// too, stops the wait with its error (the apiserver process is gone).
func WaitReady(url string, p *PKI, timeout time.Duration, exited func() error) error {
	tlsCfg, err := pkitest.ClientTLS(p.CACert, p.AdminCert, p.AdminKey)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if err := exited(); err != nil {
			return err
		}
		resp, err := client.Get(url + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, tail(body, 5))
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver at %s not ready after %s (last: %s)", url, timeout, last)
}

// WriteKubeconfig writes a kubeconfig for the API server at server, the
// certificates embedded; name names its cluster, user and context.
func WriteKubeconfig(path, name, server, caFile, certFile, keyFile string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("read %s: %w", caFile, err)
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("read %s: %w", certFile, err)
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("read %s: %w", keyFile, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encode kubeconfig %s: %w", path, err)
	}
	return atomicfile.WriteFile(path, data, 0o600)
}

// waitServiceAccount waits until namespace/name exists.
func (c *Cluster) waitServiceAccount(ctx context.Context, namespace, name string, timeout time.Duration, kcm *process) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := c.Client.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			return fmt.Errorf("service account %s/%s: %w", namespace, name, err)
		}
		if kcm != nil {
			select {
			case <-kcm.Done():
				return errors.New("kube-controller-manager exited")
			default:
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CreateNamespace creates a namespace with the given labels and, when the
// controller manager runs, waits for its "default" ServiceAccount, so Pods
// can be created in it at once.
func (c *Cluster) CreateNamespace(t testing.TB, name string, labels map[string]string) *corev1.Namespace {
	t.Helper()
	ctx := context.Background()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: create namespace %s: %v", name, err)
	}
	if err := c.waitServiceAccount(ctx, name, "default", 30*time.Second, nil); err != nil {
		t.Fatalf("kubetest: %v (is the controller manager running?)", err)
	}
	return ns
}

// InstallCalicoCRDs applies Calico's CRDs (deploy/crds.yaml) and waits
// until the API server serves them: the Kubernetes datastore's setup.
func (c *Cluster) InstallCalicoCRDs(t testing.TB) {
	t.Helper()
	if out, err := c.RunKubectl(nil, "apply", "-f", filepath.Join(testbin.RepoRoot(), "deploy", "crds.yaml")); err != nil {
		t.Fatalf("kubetest: apply CRDs: %v\n%s", err, out)
	}
	if out, err := c.RunKubectl(nil, "wait", "--for=condition=Established", "--timeout=90s", "crd", "--all"); err != nil {
		t.Fatalf("kubetest: wait for CRDs: %v\n%s", err, out)
	}
}

// Token returns a bound service-account token (the TokenRequest API, as
// kubelet obtains the projected token of a pod) valid for ttl.
func (c *Cluster) Token(t testing.TB, namespace, serviceAccount string, ttl time.Duration) string {
	t.Helper()
	secs := int64(ttl / time.Second)
	tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: token for %s/%s: %v", namespace, serviceAccount, err)
	}
	return tr.Status.Token
}

// ForceDelete are the options of a deletion that takes effect at once.
// Without a kubelet nobody confirms a graceful deletion of a Pod bound to
// a node, so tests delete Pods (and namespaces holding them) with it.
func ForceDelete() metav1.DeleteOptions {
	zero := int64(0)
	return metav1.DeleteOptions{GracePeriodSeconds: &zero}
}

// ConfigForToken is a client configuration that authenticates with a
// bearer token instead of the admin certificate.
func (c *Cluster) ConfigForToken(token string) *rest.Config {
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.CAFile},
		QPS:             200,
		Burst:           400,
	}
}

// RunKubectl runs kubectl against the cluster as admin with stdin as its
// standard input and returns its combined output. Its discovery cache is
// the cluster's, not ~/.kube/cache.
func (c *Cluster) RunKubectl(stdin io.Reader, args ...string) (string, error) {
	cmd := exec.Command(c.Kubectl, append([]string{"--kubeconfig=" + c.Kubeconfig, "--cache-dir=" + filepath.Join(c.Dir, "kubectl-cache")}, args...)...)
	cmd.Stdin = stdin
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// process is one running control-plane component, its output in logPath.
type process struct {
	*proctest.Proc
	logPath string
}

// startProcess runs bin with args, its output going to <dir>/<name>.log,
// without the test's variables that would point it somewhere else.
func startProcess(bin, dir, name string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	cmd := exec.Command(bin, args...)
	cmd.Env = proctest.EnvWithout("KUBECONFIG=", "ETCD_")
	p, err := proctest.LaunchLogged(name, cmd, logPath)
	if err != nil {
		return nil, err
	}
	return &process{Proc: p, logPath: logPath}, nil
}

// stop ends the process by its PID: SIGTERM, SIGKILL after stopGrace.
// Idempotent.
func (p *process) stop() { p.Stop(stopGrace) }

// logTail is the end of the component's log, for failure messages.
func (p *process) logTail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return tail(data, 25)
}

// RelayInto makes the API server reachable at its own address (c.URL,
// on 127.0.0.1) from inside the network namespace nsPath (a file such as
// /var/run/netns/<name>): a listener on that namespace's loopback relays
// every connection to the API server in the caller's namespace, so that
// an agent running there (`ip netns exec`) uses c.Kubeconfig unchanged.
// The namespace's loopback must be up. The relay ends in t.Cleanup; it
// keeps relaying across RestartAPIServer.
func (c *Cluster) RelayInto(t testing.TB, nsPath string) {
	t.Helper()
	addr := net.JoinHostPort(c.Host, c.Port)
	l, err := netnstest.ListenAt(nsPath, "tcp", addr)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, cn := range conns {
			cn.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				in.Close() // the API server is down: refused, as it would be
				continue
			}
			mu.Lock()
			conns = append(conns, in, out) // closed at cleanup if still open
			mu.Unlock()
			wg.Go(func() {
				Splice(in, out)
				in.Close()
				out.Close()
			})
		}
	})
}

// Splice copies between two TCP connections both ways until both
// directions end, closing each side's writing half once its reader has
// read EOF, so that each end sees the other's EOF as it would directly.
func Splice(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		io.Copy(b, a)
		b.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(a, b)
	a.(*net.TCPConn).CloseWrite()
	<-done
}
