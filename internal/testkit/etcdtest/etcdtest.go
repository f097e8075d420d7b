package etcdtest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/projectcalico/calico-node/internal/testkit/proctest"
)

const (
	// memberName is the etcd member name; any value works for one member.
	memberName = "etcdtest"
	// startAttempts bounds the retries after losing a port race.
	startAttempts = 5
	// readyTimeout is how long a server may take to become healthy. Debian's
	// etcd on a loaded 2-core CI machine takes well under a second; the margin
	// is for machines running many test binaries in parallel.
	readyTimeout = 30 * time.Second
	// stopGrace is how long etcd gets to exit after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
)

// errPortInUse marks a start failure that a retry with new ports can fix.
var errPortInUse = errors.New("port already in use")

// Option configures a Server.
type Option func(*options)

type options struct {
	tls  bool
	unix bool
}

// WithTLS makes the server serve clients over https with client certificate
// authentication. A throwaway CA, a server certificate for 127.0.0.1, ::1 and
// localhost, and a client certificate are generated into t.TempDir(); the
// Server's CACertFile, CertFile and KeyFile point at the client's files.
func WithTLS() Option {
	return func(o *options) { o.tls = true }
}

// WithUnixSocket makes the server also listen on a unix socket in its
// temporary directory, published as UnixEndpoint. A socket is a file, so
// processes in other network namespaces (test "nodes" run with `ip netns
// exec`) reach it, where the loopback port of the test's own namespace is
// out of their reach. Start only (not StartEmbedded).
func WithUnixSocket() Option {
	return func(o *options) { o.unix = true }
}

// Server is a running single-member etcd.
type Server struct {
	// Endpoints are the client URLs (http:// or, with WithTLS, https://).
	Endpoints []string
	// DataDir is etcd's data directory; it survives Stop and Restart.
	DataDir string
	// CACertFile is the CA that signed the server certificate; CertFile and
	// KeyFile are a client certificate the server accepts. Empty without
	// WithTLS.
	CACertFile, CertFile, KeyFile string
	// UnixEndpoint is the unix-socket client URL ("unix:///.../etcd.sock"),
	// set with WithUnixSocket.
	UnixEndpoint string

	embedded bool
	unixDir  string
	binary   string
	logPath  string
	pki      *pki

	mu         sync.Mutex
	clientPort int
	peerPort   int
	proc       *proctest.Proc
	etcd       *embed.Etcd
}

// Start runs Debian's etcd binary (/usr/bin/etcd, package etcd-server) as a
// child process and waits until it serves requests. The test fails at once
// when the binary is missing.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, err := findBinary()
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	s := newServer(t, false, opts)
	s.binary = bin
	s.startWithFreshPorts(t)
	return s
}

// StartEmbedded runs an etcd server inside the test process
// (go.etcd.io/etcd/server/v3/embed) and waits until it serves requests.
// WithTLS is honoured as for Start.
func StartEmbedded(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := newServer(t, true, opts)
	s.startWithFreshPorts(t)
	return s
}

func findBinary() (string, error) {
	const debianPath = "/usr/bin/etcd"
	if _, err := os.Stat(debianPath); err == nil {
		return debianPath, nil
	}
	return "", fmt.Errorf("etcd binary not found at %s: install Debian's etcd-server package (apt-get install etcd-server)", debianPath)
}

func newServer(t testing.TB, embedded bool, opts []Option) *Server {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	dir := t.TempDir()
	s := &Server{
		// etcd creates the data directory itself with the 0700 mode it insists
		// on, so it must not exist yet.
		DataDir:  filepath.Join(dir, "data"),
		embedded: embedded,
		logPath:  filepath.Join(dir, "etcd.log"),
	}
	if o.unix {
		if embedded {
			t.Fatalf("etcdtest: WithUnixSocket needs the etcd binary (Start)")
		}
		s.unixDir = dir
	}
	if o.tls {
		p, err := writePKI(dir)
		if err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
		s.pki = p
		s.CACertFile, s.CertFile, s.KeyFile = p.caFile, p.clientCertFile, p.clientKeyFile
	}
	// Registered before anything is started so that a half-started server
	// is stopped too; t.TempDir's own cleanup runs after this one.
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) startWithFreshPorts(t testing.TB) {
	t.Helper()
	var err error
	for range startAttempts {
		if err = s.pickPorts(); err != nil {
			break
		}
		if err = s.start(); !errors.Is(err, errPortInUse) {
			break
		}
	}
	if err != nil {
		t.Fatalf("etcdtest: start etcd: %v", err)
	}
}

// pickPorts chooses two free loopback ports. They are free when chosen, not
// necessarily when etcd binds them: start reports errPortInUse then.
func (s *Server) pickPorts() error {
	ports := make([]int, 2)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("pick free port: %w", err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	s.mu.Lock()
	s.clientPort, s.peerPort = ports[0], ports[1]
	scheme := "http"
	if s.pki != nil {
		scheme = "https"
	}
	s.Endpoints = []string{fmt.Sprintf("%s://127.0.0.1:%d", scheme, s.clientPort)}
	if s.unixDir != "" {
		// etcd names a unix listener "host:port" relative to its working
		// directory (the test directory); clients take an absolute path.
		s.UnixEndpoint = "unix://" + filepath.Join(s.unixDir, s.unixName())
	}
	s.mu.Unlock()
	return nil
}

func (s *Server) clientURL() string { return s.Endpoints[0] }

func (s *Server) unixName() string { return "localhost:" + strconv.Itoa(s.clientPort) }

func (s *Server) peerURL() string { return "http://127.0.0.1:" + strconv.Itoa(s.peerPort) }

// start starts etcd on the current ports and waits until it is healthy.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.embedded {
		return s.startEmbedded()
	}
	return s.startProcess()
}

// Stop stops the server. The data directory is kept for Restart. Stop is
// idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.Stop(stopGrace)
		s.proc = nil
	}
	if s.etcd != nil {
		s.etcd.Close()
		s.etcd = nil
	}
}

// Restart stops the server if it runs and starts it again on the same ports
// and data directory.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	// The port may still be held briefly by the old process's sockets on
	// some kernels; a few retries on the same port cover that.
	var err error
	for range startAttempts {
		if err = s.start(); !errors.Is(err, errPortInUse) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("etcdtest: restart etcd: %v", err)
	}
}

// Compact compacts the key-value history up to rev, so that watches and
// reads at older revisions fail with "required revision has been compacted".
func (s *Server) Compact(t testing.TB, rev int64) {
	t.Helper()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("etcdtest: compact to revision %d: %v", rev, err)
	}
}

// Client returns a raw etcd client for the server, closed in t.Cleanup.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := s.newClient()
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TLSConfig returns the client TLS configuration (CA and client
// certificate), or nil without WithTLS.
func (s *Server) TLSConfig() (*tls.Config, error) {
	if s.pki == nil {
		return nil, nil
	}
	info := transport.TLSInfo{
		CertFile:      s.CertFile,
		KeyFile:       s.KeyFile,
		TrustedCAFile: s.CACertFile,
	}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load client TLS files: %w", err)
	}
	return cfg, nil
}

func (s *Server) newClient() (*clientv3.Client, error) {
	tlsCfg, err := s.TLSConfig()
	if err != nil {
		return nil, err
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   append([]string(nil), s.Endpoints...),
		DialTimeout: 5 * time.Second,
		TLS:         tlsCfg,
		// The client logs every retry at warn level; tests see errors
		// through return values instead.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("create etcd client for %v: %w", s.Endpoints, err)
	}
	return c, nil
}

// waitReady waits until a linearizable read succeeds, i.e. the member has
// elected itself leader and serves clients. exited, when it fires, aborts
// the wait: the process died.
func (s *Server) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.clientPort))
	// Wait for the listener first: a gRPC connection that fails early backs
	// off for a second or more before it tries again.
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case <-exited:
			return errors.New("etcd exited before listening")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd not listening on %s after %s", addr, readyTimeout)
		}
	}
	c, err := s.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	return waitRead(c, s.clientURL(), exited, deadline)
}

// waitRead polls a linearizable read through c (of the member at url)
// until it succeeds, the member exits or deadline passes.
func waitRead(c *clientv3.Client, url string, exited <-chan struct{}, deadline time.Time) error {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Get(ctx, "etcdtest-health")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("etcd exited before becoming healthy")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd at %s not healthy after %s: %w", url, readyTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logTail returns the last lines of the server log for failure messages.
func (s *Server) logTail() string { return fileTail(s.logPath) }

// fileTail is the last 20 lines of the log at path.
func fileTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
