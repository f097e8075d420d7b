package cni

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/connect"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/ipam"
)

// Server runs the CNI commands that plugin processes on this node forward
// to the agent (see package cnientry for the protocol and why). The
// commands run the same code as in a plugin process, with the request's
// environment and stdin; what differs is that the etcd connection is the
// server's, opened once per distinct etcd configuration and kept.
//
// The server declines, and the plugin then runs the command itself, what
// it cannot do exactly as the plugin process would: IPAM delegated to
// another plugin (host-local runs as a child of the plugin process, with
// its environment), files named by the config that the agent cannot read
// (a container's view of the host differs), a netns path that names
// another namespace in the agent's mount namespace than the descriptor the
// plugin sent (the agent could not check, as the plugin does, that the
// namespace is still the runtime's when ADD ends), unknown commands or
// protocol versions.
//
// Thread safety: one goroutine per connection; the store cache is
// guarded; commands on one node serialise on the IPAM lock file exactly
// as plugin processes do.
type Server struct {
	path  string
	log   *slog.Logger
	netns string // cnientry.NetNSID of the agent

	mu     sync.Mutex
	stores map[string]datastore.Store
	kubes  map[[sha256.Size]byte]*k8sAPI
	// ipamCaches: one per store, what its allocations start from (see
	// ipam.Cache).
	ipamCaches map[datastore.Store]*ipam.Cache

	// Dataplane, if set, is the agent's record of what its dataplane
	// has programmed: ADD reports its stages to it and returns only once
	// the endpoint is programmed (programmed.go). Set before Run.
	Dataplane Dataplane
	// View, if set, is what the agent watches on its Kubernetes
	// datastore: commands on that datastore read it instead of the API
	// server where they can (view.go). Set before Run.
	View *AgentView
	view *view

	// PolicySetupTimeout is how long ADD waits for Dataplane when the
	// network config does not say (0: defaultPolicySetupTimeout;
	// negative: do not wait). Set before Run.
	PolicySetupTimeout time.Duration

	// Served and Declined count requests (tests; metrics below).
	Served, Declined atomic.Int64
	metrics          *prometheus.CounterVec

	// declineLog rate-limits the info line per decline reason: a
	// misconfigured node declines every command.
	declineLog declineLog
}

// Why the agent declines a command: the reason label of
// calico_cni_server_requests_total (docs/metrics.md), a bounded set.
const (
	declineRequest   = "bad_request"       // unreadable request, or another protocol version
	declineHostNS    = "other_netns"       // the plugin runs in another network namespace than the agent
	declineCommand   = "command"           // a command the agent does not serve (GC, STATUS, ...)
	declineEnv       = "env"               // CNI_* variables missing: the plugin reports them as skel does
	declineConfig    = "config"            // undecodable config or unsupported cniVersion: the plugin reports it
	declineIPAM      = "ipam_delegated"    // IPAM by another plugin, which runs as the plugin's child
	declineFile      = "file_unreadable"   // a file the config names that the agent cannot read
	declineNetNSPath = "netns_not_visible" // CNI_NETNS names another namespace, or none, as the agent sees it
)

// decline is why the agent does not run a command: reason (a label
// value above) and the detail the log shows.
type decline struct{ reason, detail string }

// declineLogEvery is how often each decline reason is logged at info.
const declineLogEvery = time.Minute

// declineLog remembers when each reason was last logged and how many
// declines went unlogged since.
type declineLog struct {
	mu     sync.Mutex
	last   map[string]time.Time
	missed map[string]int
}

// note reports whether to log a decline for reason now, and how many
// were not logged before it.
func (l *declineLog) note(reason string, now time.Time) (log bool, missed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last, l.missed = map[string]time.Time{}, map[string]int{}
	}
	if t, ok := l.last[reason]; ok && now.Sub(t) < declineLogEvery {
		l.missed[reason]++
		return false, 0
	}
	missed = l.missed[reason]
	l.last[reason], l.missed[reason] = now, 0
	return true, missed
}

// NewServer serves on the unix socket at path (cnientry.DefaultSocket on
// a node); reg (may be nil) gets calico_cni_server_requests_total.
func NewServer(path string, reg prometheus.Registerer, logger *slog.Logger) *Server {
	m := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_cni_server_requests_total",
		Help: "CNI commands plugin processes handed to the agent: run here (served) or left to the plugin (declined, with the reason).",
	}, []string{"result", "reason"})
	if reg != nil {
		reg.MustRegister(m)
	}
	return &Server{path: path, log: logger.With("component", "cni-server"), metrics: m,
		stores: map[string]datastore.Store{}, kubes: map[[sha256.Size]byte]*k8sAPI{}, ipamCaches: map[datastore.Store]*ipam.Cache{}}
}

// Run listens until ctx ends, then waits for the commands in flight (each
// bounded by the plugin's own command timeout).
func (s *Server) Run(ctx context.Context) error {
	if s.netns = cnientry.NetNSID(); s.netns == "" {
		return errors.New("cni server: cannot identify this network namespace (/proc/thread-self/ns/net)")
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return fmt.Errorf("cni socket directory: %w", err)
	}
	// Another agent on this filesystem (several nodes simulated on one
	// host) serves here already: leave it be; plugins fall back to
	// running commands themselves when they reach the wrong agent.
	if c, err := net.DialTimeout("unix", s.path, time.Second); err == nil {
		c.Close()
		s.log.Warn("another process serves CNI commands on this socket; not serving", "socket", s.path)
		<-ctx.Done()
		return nil
	}
	// A socket left by a previous agent: nobody listens on it any more.
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale cni socket %s: %w", s.path, err)
	}
	// Only root may hand the agent commands (it runs them as root).
	old := syscall.Umask(0o077)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("listen on cni socket %s: %w", s.path, err)
	}
	l.SetUnlinkOnClose(true)
	s.log.Info("serving CNI commands", "socket", s.path)
	var viewDone chan struct{}
	if s.View != nil {
		s.view = newView(*s.View, s.log)
		viewDone = make(chan struct{})
		go func() {
			defer close(viewDone)
			s.view.run(ctx)
		}()
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		s.closeStores()
		if viewDone != nil {
			<-viewDone
		}
	}()
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept on cni socket: %w", err)
		}
		wg.Go(func() {
			defer conn.Close()
			s.serve(conn)
		})
	}
}

// serve answers one connection.
func (s *Server) serve(conn *net.UnixConn) {
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	req, nsFile, err := readRequest(conn)
	if nsFile != nil {
		defer nsFile.Close()
	}
	if errors.Is(err, io.EOF) {
		return // a connection test (another agent starting), not a plugin
	}
	// The request is ours now: a plugin that loses the connection after
	// this byte must not run the command again itself.
	_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, werr := conn.Write([]byte{cnientry.Taken}); werr != nil {
		s.log.Warn("acknowledge CNI request", "err", werr)
		return
	}
	var resp cnientry.Response
	var d *decline
	switch {
	case err != nil:
		d = &decline{declineRequest, err.Error()}
	default:
		resp, d = s.execute(req, nsFile)
	}
	if d != nil {
		resp = cnientry.Response{Declined: d.detail}
		s.Declined.Add(1)
		s.metrics.WithLabelValues("declined", d.reason).Inc()
		if log, missed := s.declineLog.note(d.reason, time.Now()); log {
			s.log.Info("declined a CNI command; the plugin runs it itself", "reason", d.reason, "detail", d.detail,
				"command", commandOf(req), "alsoDeclinedSinceLastLogged", missed)
		} else {
			s.log.Debug("declined a CNI command; the plugin runs it itself", "reason", d.reason, "detail", d.detail, "command", commandOf(req))
		}
	} else {
		s.Served.Add(1)
		s.metrics.WithLabelValues("served", "").Inc()
	}
	b, err := json.Marshal(resp)
	if err != nil {
		s.log.Error("encode CNI answer", "err", err)
		return
	}
	_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(b); err != nil {
		s.log.Warn("send CNI answer", "err", err)
	}
}

// readRequest reads the request to EOF and takes the netns descriptor
// that came with it.
func readRequest(conn *net.UnixConn) (*cnientry.Request, *os.File, error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, fmt.Errorf("read request: %w", err)
	}
	if n == 0 && oobn == 0 {
		return nil, nil, io.EOF
	}
	var nsFile *os.File
	if oobn > 0 {
		msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, fmt.Errorf("read request: %w", err)
		}
		for _, m := range msgs {
			fds, err := syscall.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				syscall.CloseOnExec(fd)
				if nsFile == nil {
					nsFile = os.NewFile(uintptr(fd), "netns")
				} else {
					syscall.Close(fd)
				}
			}
		}
	}
	rest, err := io.ReadAll(io.LimitReader(conn, 16<<20))
	if err != nil {
		return nil, nsFile, fmt.Errorf("read request: %w", err)
	}
	var req cnientry.Request
	if err := json.Unmarshal(append(buf[:n:n], rest...), &req); err != nil {
		return nil, nsFile, fmt.Errorf("decode request: %w", err)
	}
	return &req, nsFile, nil
}

// commandOf names the request's plugin and command for the log.
func commandOf(req *cnientry.Request) string {
	if req == nil {
		return ""
	}
	return req.Plugin + " " + envOf(req)["CNI_COMMAND"]
}

// envOf is the request's environment as a map.
func envOf(req *cnientry.Request) map[string]string {
	env := map[string]string{}
	for _, kv := range req.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// execute runs the request's command, or says why it declines it.
func (s *Server) execute(req *cnientry.Request, nsFile *os.File) (resp cnientry.Response, _ *decline) {
	if req.Version != cnientry.ProtocolVersion {
		return resp, &decline{declineRequest, fmt.Sprintf("protocol version %d, the agent speaks %d", req.Version, cnientry.ProtocolVersion)}
	}
	if req.HostNetNS != s.netns {
		// The host end of the veth goes into the caller's namespace.
		return resp, &decline{declineHostNS, "the plugin runs in another network namespace than the agent"}
	}
	env := envOf(req)
	var fn func(*invocation, context.Context) error
	command := env["CNI_COMMAND"]
	switch req.Plugin + " " + command {
	case NetworkPlugin + " ADD":
		fn = (*invocation).add
	case NetworkPlugin + " DEL":
		fn = (*invocation).del
	case NetworkPlugin + " CHECK":
		fn = (*invocation).check
	case IPAMPlugin + " ADD":
		fn = (*invocation).ipamAdd
	case IPAMPlugin + " DEL":
		fn = (*invocation).ipamDel
	case IPAMPlugin + " CHECK":
		fn = (*invocation).ipamCheck
	default:
		return resp, &decline{declineCommand, fmt.Sprintf("%s %s is not served", req.Plugin, command)}
	}
	if d := s.unservable(req, env, nsFile != nil); d != nil {
		return resp, d
	}
	if nsFile != nil && env["CNI_NETNS"] != "" && command != "DEL" && !sameNamespace(nsFile, env["CNI_NETNS"]) {
		// The plugin checks at the end of ADD (and CHECK reports) that
		// the runtime's path names the namespace it worked in. An agent
		// in another mount namespace (a DaemonSet whose /var/run/netns
		// lacks HostToContainer propagation) sees a stale or empty file
		// there and cannot do the same. DEL needs no path: it works on
		// the namespace the descriptor holds, as the plugin would.
		return resp, &decline{declineNetNSPath, fmt.Sprintf("netns %s is another namespace, or none, as the agent sees it (the agent runs in another mount namespace than the runtime)", env["CNI_NETNS"])}
	}
	args := &skel.CmdArgs{
		ContainerID: env["CNI_CONTAINERID"],
		IfName:      env["CNI_IFNAME"],
		Args:        env["CNI_ARGS"],
		Path:        env["CNI_PATH"],
		StdinData:   req.Stdin,
	}
	if nsFile != nil {
		// The descriptor names the namespace; its path in this process
		// is the descriptor's.
		args.Netns = fmt.Sprintf("/proc/self/fd/%d", nsFile.Fd())
	}
	var stdout, stderr bytes.Buffer
	h := &host{
		env:       func(k string) string { return env[k] },
		stdout:    &stdout,
		logTo:     &stderr,
		stores:    s.store,
		kube:      s.kubeClient,
		ipamCache: s.ipamCache,

		dataplane:     s.Dataplane,
		policyTimeout: s.PolicySetupTimeout,
	}
	if nsFile != nil {
		h.netnsName = env["CNI_NETNS"]
	}
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("CNI command panicked", "plugin", req.Plugin, "command", command, "panic", p)
			stdout.Reset()
			resp = cnientry.Response{ExitCode: 1, Stdout: errorJSON(types.NewError(types.ErrInternal, fmt.Sprintf("calico-node agent: %s %s failed: %v", req.Plugin, command, p), "")), Stderr: stderr.Bytes()}
		}
	}()
	err := run(h, req.Plugin, command, args, fn)
	if isStalePod(err) {
		// Undone; once more, reading the pod (view.go).
		stdout.Reset()
		h.noPodView = true
		err = run(h, req.Plugin, command, args, fn)
	}
	if err != nil {
		stdout.Reset()
		return cnientry.Response{ExitCode: 1, Stdout: errorJSON(err), Stderr: stderr.Bytes()}, nil
	}
	return cnientry.Response{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, nil
}

// unservable says why the agent cannot run the command exactly as the
// plugin process would, or nil.
func (s *Server) unservable(req *cnientry.Request, env map[string]string, haveNS bool) *decline {
	for _, k := range []string{"CNI_CONTAINERID", "CNI_PATH"} {
		if env[k] == "" {
			return &decline{declineEnv, k + " is not set"} // the plugin reports it as skel does
		}
	}
	if env["CNI_COMMAND"] != "DEL" && (env["CNI_IFNAME"] == "" || !haveNS) {
		return &decline{declineEnv, "CNI_IFNAME or CNI_NETNS missing"}
	}
	conf, err := parseConf(req.Stdin)
	if err != nil {
		return &decline{declineConfig, "config: " + err.Error()} // the plugin reports it
	}
	if !slices.Contains(SupportedVersions.SupportedVersions(), conf.CNIVersion) && conf.CNIVersion != "" {
		return &decline{declineConfig, "cniVersion " + conf.CNIVersion}
	}
	if req.Plugin == NetworkPlugin && conf.IPAMConf.Type != IPAMPlugin {
		return &decline{declineIPAM, "IPAM is delegated to " + conf.IPAMConf.Type}
	}
	for _, f := range []string{conf.Kubernetes.Kubeconfig, conf.EtcdCACertFile, conf.EtcdCertFile, conf.EtcdKeyFile,
		env["ETCD_CA_CERT_FILE"], env["ETCD_CERT_FILE"], env["ETCD_KEY_FILE"],
		conf.Policy.K8sCertificateAuthority, conf.Policy.K8sClientCertificate, conf.Policy.K8sClientKey} {
		if f == "" {
			continue
		}
		if fh, err := os.Open(f); err != nil {
			return &decline{declineFile, "the agent cannot read " + f}
		} else {
			fh.Close()
		}
	}
	return nil
}

// sameNamespace reports whether path, as this process sees it, names the
// namespace f holds.
func sameNamespace(f *os.File, path string) bool {
	var held, named syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &held); err != nil {
		return false
	}
	if err := syscall.Stat(path, &named); err != nil {
		return false
	}
	return held.Dev == named.Dev && held.Ino == named.Ino
}

// store returns the shared store for cfg, connecting on first use.
func (s *Server) store(ctx context.Context, cfg datastore.Config) (datastore.Store, error) {
	// Everything that says which datastore and how to reach it: two
	// networks on different Kubernetes API servers get different stores.
	key := fmt.Sprintf("%#v", []any{cfg.EffectiveType(), cfg.Endpoints, cfg.CACertFile, cfg.CertFile, cfg.KeyFile, cfg.Kube})
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.stores[key]; st != nil {
		return st, nil
	}
	// The store outlives the invocation that opened it: it logs to the
	// agent, not to that invocation's stderr.
	cfg.Logger = s.log
	st, err := connect.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if k, ok := backend(st).(*kdd.Store); ok && s.view != nil && k.Server() == s.view.Server {
		// The agent's own datastore: read what it watches.
		st = viewStore{Store: st, kdd: k, v: s.view}
	}
	s.stores[key] = st
	return st, nil
}

// backend is the Store under st's wrappers (guard's).
func backend(st datastore.Store) datastore.Store {
	for {
		u, ok := st.(interface{ Unwrap() datastore.Store })
		if !ok {
			return st
		}
		st = u.Unwrap()
	}
}

// kubeClient returns the shared API client for the config's Kubernetes
// settings and the kubeconfig file's current content (install-cni
// rewrites the file when the token rotates: a new client then), keeping
// its connections to the API server warm.
func (s *Server) kubeClient(c *netConf) (*k8sAPI, error) {
	h := sha256.New()
	if c.Kubernetes.Kubeconfig != "" {
		data, err := os.ReadFile(c.Kubernetes.Kubeconfig)
		if err != nil {
			return nil, configError("kubernetes.kubeconfig", "%v", err)
		}
		h.Write(data)
	}
	settings, _ := json.Marshal([]any{c.Kubernetes, c.Policy})
	h.Write(settings)
	var key [sha256.Size]byte
	h.Sum(key[:0])
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.kubes[key]; k != nil {
		return k, nil
	}
	k, err := newK8sClient(c)
	if err != nil {
		return nil, err
	}
	if len(s.kubes) >= 16 { // rotated tokens: drop the old clients
		clear(s.kubes)
	}
	s.kubes[key] = k
	return k, nil
}

// ipamCache returns the IPAM cache of a store s.store handed out.
func (s *Server) ipamCache(st datastore.Store) *ipam.Cache {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.ipamCaches[st]
	if c == nil {
		c = ipam.NewCache()
		s.ipamCaches[st] = c
	}
	return c
}

func (s *Server) closeStores() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, st := range s.stores {
		st.Close()
		delete(s.stores, k)
		delete(s.ipamCaches, st)
	}
}

// errorJSON is err as the CNI error JSON a plugin prints.
func errorJSON(err error) []byte {
	var e *types.Error
	if !errors.As(err, &e) {
		e = types.NewError(types.ErrInternal, err.Error(), "")
	}
	// As (*types.Error).Print writes it.
	b, merr := json.MarshalIndent(e, "", "    ")
	if merr != nil {
		return []byte(fmt.Sprintf(`{"code":%d,"msg":%q}`, types.ErrInternal, err.Error()))
	}
	return b
}
