package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/buildinfo"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/connect"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/node/health"
)

// The fan-out, Calico's Typha in calico-node's terms: `calico-node fanout`
// watches the datastore once and serves confwatch's cache and the IPAM
// keys (confwatch.Server); `calico-node run` with CALICO_FANOUT_ADDR reads
// them from it (confwatch.Remote) instead of holding its own watches, so
// that the datastore — the Kubernetes API server above all — carries one
// set of watches however many nodes there are. Reads and writes (node
// registration, IPAM allocations, status) still go to the datastore.
//
// The protocol is calico-node's own, not Typha's: FELIX_TYPHA* variables
// stay ignored, so an agent never dials a real Typha it cannot read.

// DefaultFanoutPort is where `calico-node fanout` listens: Typha's port.
const DefaultFanoutPort = 5473

// fanoutClientConfig is how `calico-node run` reaches a fan-out.
type fanoutClientConfig struct {
	addr string // host:port; "" reads the datastore directly
	// caFile turns TLS on and verifies the server against it; certFile
	// and keyFile are this agent's client certificate, for a server that
	// requires one; serverName is the name the server's certificate must
	// carry (default: addr's host).
	caFile, certFile, keyFile, serverName string
}

func fanoutClientFlags() []cli.Flag {
	env := func(names ...string) []string { return names }
	return []cli.Flag{
		&cli.StringFlag{Name: "fanout-addr", EnvVars: env("CALICO_FANOUT_ADDR"), Usage: "host:port of a `calico-node fanout` to read Calico's resources and IPAM watches from instead of watching the datastore (empty: watch the datastore)"},
		&cli.StringFlag{Name: "fanout-ca-file", EnvVars: env("CALICO_FANOUT_CA_FILE"), Usage: "CA bundle that verifies the fan-out's certificate; turns TLS on"},
		&cli.StringFlag{Name: "fanout-cert-file", EnvVars: env("CALICO_FANOUT_CERT_FILE"), Usage: "client certificate for the fan-out (with --fanout-key-file)"},
		&cli.StringFlag{Name: "fanout-key-file", EnvVars: env("CALICO_FANOUT_KEY_FILE"), Usage: "client key for the fan-out"},
		&cli.StringFlag{Name: "fanout-server-name", EnvVars: env("CALICO_FANOUT_SERVER_NAME"), Usage: "name the fan-out's certificate must carry (default: the host of --fanout-addr)"},
	}
}

func fanoutClientConfigFrom(c *cli.Context) (fanoutClientConfig, error) {
	f := fanoutClientConfig{
		addr: c.String("fanout-addr"), caFile: c.String("fanout-ca-file"),
		certFile: c.String("fanout-cert-file"), keyFile: c.String("fanout-key-file"),
		serverName: c.String("fanout-server-name"),
	}
	if f.addr == "" {
		if f.caFile != "" || f.certFile != "" || f.keyFile != "" || f.serverName != "" {
			return f, errors.New("CALICO_FANOUT_CA_FILE, _CERT_FILE, _KEY_FILE and _SERVER_NAME need CALICO_FANOUT_ADDR")
		}
		return f, nil
	}
	if _, _, err := net.SplitHostPort(f.addr); err != nil {
		return f, fmt.Errorf("CALICO_FANOUT_ADDR=%q: want host:port: %w", f.addr, err)
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return f, errors.New("CALICO_FANOUT_CERT_FILE and CALICO_FANOUT_KEY_FILE go together")
	}
	if f.certFile != "" && f.caFile == "" {
		return f, errors.New("CALICO_FANOUT_CERT_FILE needs CALICO_FANOUT_CA_FILE: a client certificate is only sent over TLS")
	}
	return f, nil
}

// dialer reads the TLS files (an unreadable one is a configuration error
// at start) and returns how the agent's Remote connects.
func (f fanoutClientConfig) dialer() (func(ctx context.Context) (net.Conn, error), error) {
	nd := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if f.caFile == "" {
		return func(ctx context.Context) (net.Conn, error) { return nd.DialContext(ctx, "tcp", f.addr) }, nil
	}
	pool, err := certPool(f.caFile)
	if err != nil {
		return nil, fmt.Errorf("CALICO_FANOUT_CA_FILE: %w", err)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: f.serverName, MinVersion: tls.VersionTLS12}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(f.addr)
	}
	if f.certFile != "" {
		cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		if err != nil {
			return nil, fmt.Errorf("fan-out client certificate %s: %w", f.certFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	td := &tls.Dialer{NetDialer: nd, Config: cfg}
	return func(ctx context.Context) (net.Conn, error) { return td.DialContext(ctx, "tcp", f.addr) }, nil
}

func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return pool, nil
}

// afterReady is a confwatch Source whose first List waits for ready: an
// agent reading a fan-out gets in sync only after it has registered its
// node, as one reading the datastore does (storeFuture), so that its
// snapshot already holds its own Node.
type afterReady struct {
	ready <-chan struct{}
	confwatch.Source
}

func (s afterReady) List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error) {
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	return s.Source.List(ctx, kind, namespace)
}

// fanoutConfig is everything `calico-node fanout` is told.
type fanoutConfig struct {
	datastore  datastore.Config
	listen     string
	healthAddr string
	logLevel   slog.Level
	// certFile and keyFile turn TLS on; clientCAFile then requires every
	// client to present a certificate it signed.
	certFile, keyFile, clientCAFile string
	maxQueue                        int
}

func fanoutCommand() *cli.Command {
	env := func(names ...string) []string { return names }
	// The datastore flags are run's own, so that the same ConfigMap and
	// environment configure both.
	var flags []cli.Flag
	for _, f := range runCommand().Flags {
		switch f.Names()[0] {
		case "datastore-type", "kubeconfig", "etcd-endpoints", "etcd-ca-cert-file", "etcd-cert-file",
			"etcd-key-file", "etcd-username", "etcd-password", "log-level":
			flags = append(flags, f)
		}
	}
	return &cli.Command{
		Name:  "fanout",
		Usage: "watch the datastore once and serve Calico's resources and IPAM keys to many agents (CALICO_FANOUT_ADDR), as Typha does",
		Flags: append(flags,
			&cli.StringFlag{Name: "listen", EnvVars: env("CALICO_FANOUT_LISTEN"), Value: fmt.Sprintf(":%d", DefaultFanoutPort), Usage: "address the agents connect to"},
			&cli.StringFlag{Name: "health-addr", EnvVars: env("CALICO_FANOUT_HEALTH_ADDR"), Value: ":9098", Usage: "/liveness, /readiness and /metrics"},
			&cli.StringFlag{Name: "server-cert-file", EnvVars: env("CALICO_FANOUT_SERVER_CERT_FILE"), Usage: "serve TLS with this certificate (with --server-key-file)"},
			&cli.StringFlag{Name: "server-key-file", EnvVars: env("CALICO_FANOUT_SERVER_KEY_FILE")},
			&cli.StringFlag{Name: "client-ca-file", EnvVars: env("CALICO_FANOUT_CLIENT_CA_FILE"), Usage: "require client certificates signed by this CA"},
			&cli.IntFlag{Name: "max-queue-bytes", EnvVars: env("CALICO_FANOUT_MAX_QUEUE_BYTES"), Value: 256 << 20, Usage: "bytes that may wait for one agent before it is disconnected (it reconnects with a new snapshot)"},
		),
		Action: func(c *cli.Context) error {
			cfg, err := fanoutConfigFrom(c, os.Getenv)
			if err != nil {
				return err
			}
			level := new(slog.LevelVar)
			level.Set(cfg.logLevel)
			logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			return runFanout(c.Context, cfg, logger)
		},
	}
}

func fanoutConfigFrom(c *cli.Context, getenv func(string) string) (fanoutConfig, error) {
	cfg := fanoutConfig{
		listen: c.String("listen"), healthAddr: c.String("health-addr"),
		certFile: c.String("server-cert-file"), keyFile: c.String("server-key-file"),
		clientCAFile: c.String("client-ca-file"), maxQueue: c.Int("max-queue-bytes"),
	}
	var err error
	if cfg.datastore, err = datastoreConfigFrom(c, getenv); err != nil {
		return cfg, err
	}
	if cfg.datastore.EffectiveType() == datastore.TypeEtcd && len(cfg.datastore.Endpoints) == 0 {
		return cfg, errors.New("calico-node fanout reads a shared datastore: set ETCD_ENDPOINTS or DATASTORE_TYPE=kubernetes")
	}
	if cfg.logLevel, err = agent.ParseLogLevel(c.String("log-level")); err != nil {
		return cfg, err
	}
	if (cfg.certFile == "") != (cfg.keyFile == "") {
		return cfg, errors.New("CALICO_FANOUT_SERVER_CERT_FILE and CALICO_FANOUT_SERVER_KEY_FILE go together")
	}
	if cfg.clientCAFile != "" && cfg.certFile == "" {
		return cfg, errors.New("CALICO_FANOUT_CLIENT_CA_FILE needs TLS: set CALICO_FANOUT_SERVER_CERT_FILE and _KEY_FILE")
	}
	if cfg.maxQueue < 1<<20 {
		return cfg, fmt.Errorf("CALICO_FANOUT_MAX_QUEUE_BYTES=%d: want at least 1 MiB", cfg.maxQueue)
	}
	return cfg, nil
}

// listener listens on cfg.listen, with TLS when configured. Read at start:
// a bad file or a port in use stops the process before anything runs.
func (cfg fanoutConfig) listener() (net.Listener, error) {
	var tcfg *tls.Config
	if cfg.certFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.certFile, cfg.keyFile)
		if err != nil {
			return nil, fmt.Errorf("fan-out server certificate %s: %w", cfg.certFile, err)
		}
		tcfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if cfg.clientCAFile != "" {
			pool, err := certPool(cfg.clientCAFile)
			if err != nil {
				return nil, fmt.Errorf("CALICO_FANOUT_CLIENT_CA_FILE: %w", err)
			}
			tcfg.ClientCAs, tcfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
	}
	l, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return nil, fmt.Errorf("fan-out: %w", err)
	}
	if tcfg != nil {
		l = tls.NewListener(l, tcfg)
	}
	return l, nil
}

// runFanout is `calico-node fanout`: one group of the signal handler, the
// health server, the datastore connection, confwatch and the server.
func runFanout(ctx context.Context, cfg fanoutConfig, logger *slog.Logger) error {
	logger.Info("starting fan-out", "version", buildinfo.String(), "listen", cfg.listen, "datastore", cfg.datastore.EffectiveType())
	if err := connect.Check(cfg.datastore); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	agg := health.NewAggregator()
	l, err := cfg.listener()
	if err != nil {
		return err
	}
	defer l.Close()
	store := newStoreFuture()
	w := confwatch.New(store, logger, reg)
	srv := confwatch.NewServer(w, l, confwatch.ServerConfig{
		KV: store.ipam(), KVPrefix: ipam.Prefix, MaxQueue: cfg.maxQueue, Logger: logger, Registerer: reg,
	})
	connRep := agg.Register("datastore", true, true, 0)
	connRep.Report(true, false, "connecting")
	syncRep := agg.Register("confwatch", true, true, 0)
	syncRep.Report(true, false, "waiting for datastore")

	g := newGroup(ctx, logger)
	// Signal handler: SIGINT/SIGTERM stop the group.
	g.add("signal handler", waitForSignal(logger))
	// /liveness, /readiness (in sync) and /metrics.
	g.add("health server", health.NewServer(cfg.healthAddr, agg, reg, logger).Run)
	// The datastore connection, held until the group stops.
	g.add("datastore", func(ctx context.Context) error {
		s, err := connectRetrying(ctx, cfg.datastore, logger)
		if err != nil {
			return err
		}
		defer s.Close()
		connRep.Report(true, true, "connected")
		store.resolve(s)
		<-ctx.Done()
		return nil
	})
	// confwatch: the one set of watches every agent shares.
	g.add("confwatch", func(ctx context.Context) error {
		go func() {
			select {
			case <-w.Synced():
				syncRep.Report(true, true, "in sync")
			case <-ctx.Done():
			}
		}()
		return w.Run(ctx)
	})
	// The server: agents get their snapshot once confwatch is in sync.
	g.add("fan-out server", srv.Run)
	return g.run()
}
