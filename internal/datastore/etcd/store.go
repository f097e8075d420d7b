package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/projectcalico/calico-node/internal/model/api"
)

const (
	defaultDialTimeout    = 5 * time.Second
	defaultRequestTimeout = 10 * time.Second
)

// Store is a Calico v3 resource store on etcd. See the package doc.
type Store struct {
	client         *clientv3.Client
	endpoints      string // for error messages
	kinds          *registry
	requestTimeout time.Duration
	logger         *slog.Logger

	// Injected for tests; time.Now and uuid.NewString otherwise.
	now    func() time.Time
	newUID func() string

	// ctx is cancelled by Close and ends all watches.
	ctx    context.Context
	cancel context.CancelFunc
}

// New connects to etcd and checks that it answers within cfg.DialTimeout.
// Configuration mistakes are returned as *ConfigError; any other error means
// the cluster did not answer and a later attempt may succeed.
func New(ctx context.Context, cfg datastore.Config) (*Store, error) {
	return newStore(ctx, cfg, api.Kinds(), api.LookupKind)
}

// Check returns the *datastore.ConfigError New would return for cfg,
// without connecting: no endpoints, or TLS files that cannot be read or do
// not hold what they should.
func Check(cfg datastore.Config) error {
	_, err := checkedTLS(cfg)
	return err
}

// checkedTLS is the TLS configuration of cfg (nil: plain), or why cfg
// cannot be used, as a *datastore.ConfigError.
func checkedTLS(cfg datastore.Config) (*tls.Config, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, &datastore.ConfigError{Err: errors.New("connect to etcd: no endpoints configured")}
	}
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, &datastore.ConfigError{Err: fmt.Errorf("connect to etcd at %s: %w", strings.Join(cfg.Endpoints, ","), err)}
	}
	return tlsCfg, nil
}

func newStore(ctx context.Context, cfg datastore.Config, kinds []api.KindInfo, lookup func(string) (api.KindInfo, bool)) (*Store, error) {
	tlsCfg, err := checkedTLS(cfg)
	if err != nil {
		return nil, err
	}
	endpoints := strings.Join(cfg.Endpoints, ",")
	dialTimeout := cfg.DialTimeout
	if dialTimeout <= 0 {
		dialTimeout = defaultDialTimeout
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   append([]string(nil), cfg.Endpoints...),
		TLS:         tlsCfg,
		Username:    cfg.Username,
		Password:    cfg.Password,
		DialTimeout: dialTimeout,
		// The etcd client logs each retry; our callers get errors instead.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd at %s: %w", endpoints, err)
	}

	// The client connects lazily and then waits for a connection on every
	// call; one cheap linearizable read here makes an unreachable or
	// leaderless cluster an error now rather than a stall later.
	probeCtx, cancel := context.WithTimeout(ctx, dialTimeout)
	_, err = client.Get(probeCtx, Prefix, clientv3.WithCountOnly())
	cancel()
	if err != nil {
		client.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect to etcd at %s: %w", endpoints, ctx.Err())
		}
		if reason := diagnose(cfg.Endpoints, tlsCfg); reason != "" {
			return nil, fmt.Errorf("connect to etcd at %s: no endpoint answered within %s (%s): %w", endpoints, dialTimeout, reason, err)
		}
		return nil, fmt.Errorf("connect to etcd at %s: no endpoint answered within %s: %w", endpoints, dialTimeout, err)
	}

	requestTimeout := cfg.RequestTimeout
	if requestTimeout <= 0 {
		requestTimeout = defaultRequestTimeout
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sctx, scancel := context.WithCancel(context.Background())
	return &Store{
		client:         client,
		endpoints:      endpoints,
		kinds:          newRegistry(kinds, lookup),
		requestTimeout: requestTimeout,
		logger:         logger,
		now:            time.Now,
		newUID:         uuid.NewString,
		ctx:            sctx,
		cancel:         scancel,
	}, nil
}

// Close ends all watches and closes the etcd connection.
func (s *Store) Close() error {
	s.cancel()
	if err := s.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("close etcd client: %w", err)
	}
	return nil
}

// Etcd returns the underlying client, for data outside the resource tree
// (IPAM). It is closed by Close.
func (s *Store) Etcd() *clientv3.Client { return s.client }

// callCtx applies the request timeout to contexts without a deadline.
func (s *Store) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.requestTimeout)
}

// etcdErr wraps an error from the etcd client so that it names the cluster.
func (s *Store) etcdErr(err error) error {
	return fmt.Errorf("etcd at %s: %w", s.endpoints, err)
}

func tlsConfig(cfg datastore.Config) (*tls.Config, error) {
	if cfg.CACertFile == "" && cfg.CertFile == "" && cfg.KeyFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CACertFile != "" {
		data, err := os.ReadFile(cfg.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", cfg.CACertFile)
		}
		tc.RootCAs = pool
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, fmt.Errorf("client certificate (%q) and key (%q) must be given together", cfg.CertFile, cfg.KeyFile)
	}
	if cfg.CertFile != "" {
		// Read separately so that the error names the unreadable file.
		certPEM, err := os.ReadFile(cfg.CertFile)
		if err != nil {
			return nil, fmt.Errorf("read client certificate: %w", err)
		}
		keyPEM, err := os.ReadFile(cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("read client key: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("load client certificate %s and key %s: %w", cfg.CertFile, cfg.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// diagnose explains why no endpoint answered: the etcd client only says
// "context deadline exceeded", while a direct dial tells a refused
// connection from a certificate problem. It returns "" when every endpoint
// accepts a connection (and a TLS handshake, where one applies).
func diagnose(endpoints []string, tlsCfg *tls.Config) string {
	var reasons []string
	for _, ep := range endpoints {
		if err := probeEndpoint(ep, tlsCfg); err != nil {
			reasons = append(reasons, ep+": "+err.Error())
		}
	}
	return strings.Join(reasons, "; ")
}

func probeEndpoint(ep string, tlsCfg *tls.Config) error {
	const timeout = time.Second
	host, useTLS := ep, tlsCfg != nil
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return err
		}
		switch u.Scheme {
		case "http":
			useTLS = false
		case "https":
			useTLS = true
		default:
			return nil // unix sockets and the like: nothing to add
		}
		host = u.Host
	}
	conn, err := net.DialTimeout("tcp", host, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if !useTLS {
		return nil
	}
	tc := &tls.Config{}
	if tlsCfg != nil {
		tc = tlsCfg.Clone()
	}
	if tc.ServerName == "" {
		if h, _, err := net.SplitHostPort(host); err == nil {
			tc.ServerName = h
		}
	}
	tconn := tls.Client(conn, tc)
	tconn.SetDeadline(time.Now().Add(timeout))
	return tconn.Handshake()
}
