// Package embedetcd runs the single-node etcd that `calico-node run` starts
// when no --etcd-endpoints are configured, so one node works with nothing
// else installed.
//
// # Model
//
// A Server is an actor for the agent's run.Group: New takes a Config, Run
// starts etcd, serves until its context is done and then closes etcd
// cleanly. Ready is closed once etcd serves clients; Endpoints lists the
// client URLs to give the etcd client.
//
// # Design
//
// The server is a plain single-member cluster whose state lives in
// Config.DataDir, so a restart on the same directory keeps the data (etcd
// finds its WAL and rejoins as the same member). Choices that differ from
// etcd's defaults, and why:
//
//   - Auto-compaction is periodic with a retention of one hour. Calico's
//     datastore keeps every revision otherwise and a node's etcd would grow
//     forever; an hour is far longer than any watcher needs to resume after a
//     restart, and a watcher that resumes from a compacted revision relists
//     (the datastore's contract), so nothing is lost by compacting.
//   - etcd's own logging (zap) is bridged into the agent's slog logger at warn
//     level, with the few warnings that are expected for an embedded,
//     loopback-only server demoted to debug. The agent's log therefore shows
//     only what an operator should act on.
//   - Listen errors are translated: a taken port says which address and that
//     another etcd may be running, pointing at --etcd-endpoints.
//
// # Thread safety
//
// Run must be called once. Ready and Endpoints are safe to call from any
// goroutine at any time.
package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Default listen URLs, as a standalone etcd would use.
const (
	DefaultClientURL = "http://127.0.0.1:2379"
	DefaultPeerURL   = "http://127.0.0.1:2380"
	DefaultName      = "calico-node"
)

// CompactionRetention is the auto-compaction retention (periodic mode); see
// the package doc for why one hour.
const CompactionRetention = "1h"

// Config configures the embedded etcd.
type Config struct {
	// DataDir holds etcd's WAL and database. Required; created (mode 0700)
	// when missing.
	DataDir string
	// ClientURL is where clients connect. Default DefaultClientURL.
	ClientURL string
	// PeerURL is the raft peer URL. Nothing connects to it in a single-member
	// cluster, but etcd needs one; keep it on loopback. Default
	// DefaultPeerURL.
	PeerURL string
	// Name is the member name. Default DefaultName.
	Name string
	// Logger receives etcd's warnings and errors. Default slog.Default().
	Logger *slog.Logger
}

// Server is the embedded etcd actor.
type Server struct {
	cfg   Config
	log   *slog.Logger
	ready chan struct{}

	mu        sync.Mutex
	endpoints []string
}

// New returns a Server for cfg, filling in defaults. Nothing starts until Run.
func New(cfg Config) *Server {
	if cfg.ClientURL == "" {
		cfg.ClientURL = DefaultClientURL
	}
	if cfg.PeerURL == "" {
		cfg.PeerURL = DefaultPeerURL
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		ready:     make(chan struct{}),
		endpoints: []string{cfg.ClientURL},
	}
}

// Ready is closed once etcd has become leader of its one-member cluster and
// serves clients.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Endpoints returns the client URLs: the configured one until Ready, then the
// addresses actually listened on (which differ when the port was 0).
func (s *Server) Endpoints() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.endpoints...)
}

// Run starts etcd and serves until ctx is done, then closes it and returns
// nil. It returns an error if etcd cannot start (data dir, listen address,
// corrupt data) or stops on its own.
func (s *Server) Run(ctx context.Context) error {
	var closing atomic.Bool
	ecfg, err := s.etcdConfig(&closing)
	if err != nil {
		return err
	}
	// Create the directory ourselves so the error names it; etcd would
	// create it too but with a less helpful message.
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("embedded etcd: create data dir %s: %w", s.cfg.DataDir, err)
	}

	e, err := embed.StartEtcd(ecfg)
	if err != nil {
		return startError(err)
	}
	// Close stops the client and peer servers and waits for etcd's
	// goroutines, so once Run returns the data dir and ports are free again.
	defer func() {
		closing.Store(true)
		e.Close()
	}()

	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return unexpectedStop(err)
	case <-e.Server.StopNotify():
		return errors.New("embedded etcd: stopped before becoming ready")
	case <-ctx.Done():
		s.log.Info("embedded etcd stopping before it became ready")
		return nil
	}

	eps := make([]string, 0, len(e.Clients))
	for _, l := range e.Clients {
		eps = append(eps, "http://"+l.Addr().String())
	}
	s.mu.Lock()
	s.endpoints = eps
	s.mu.Unlock()
	close(s.ready)
	s.log.Info("embedded etcd ready", "endpoints", eps, "dataDir", s.cfg.DataDir)

	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return unexpectedStop(err)
	case <-e.Server.StopNotify():
		return errors.New("embedded etcd: server stopped unexpectedly")
	}
}

func unexpectedStop(err error) error {
	if err == nil {
		return errors.New("embedded etcd: stopped serving unexpectedly")
	}
	return fmt.Errorf("embedded etcd: %w", err)
}

// startError turns StartEtcd's errors into ones an operator can act on.
func startError(err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		addr := "its listen address"
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Addr != nil {
			addr = opErr.Addr.String()
		}
		return fmt.Errorf("embedded etcd: listen %s: address already in use; is another etcd running? set --etcd-endpoints to use it: %w", addr, err)
	}
	return fmt.Errorf("embedded etcd: start: %w", err)
}

func (s *Server) etcdConfig(closing *atomic.Bool) (*embed.Config, error) {
	if s.cfg.DataDir == "" {
		return nil, errors.New("embedded etcd: no data dir configured")
	}
	clientURL, err := parseURL("client", s.cfg.ClientURL)
	if err != nil {
		return nil, err
	}
	peerURL, err := parseURL("peer", s.cfg.PeerURL)
	if err != nil {
		return nil, err
	}

	c := embed.NewConfig()
	c.Name = s.cfg.Name
	c.Dir = s.cfg.DataDir
	c.ListenClientUrls = []url.URL{*clientURL}
	c.AdvertiseClientUrls = []url.URL{*clientURL}
	c.ListenPeerUrls = []url.URL{*peerURL}
	c.AdvertisePeerUrls = []url.URL{*peerURL}
	c.InitialCluster = c.InitialClusterFromName(c.Name)
	c.AutoCompactionMode = embed.CompactorModePeriodic
	c.AutoCompactionRetention = CompactionRetention
	c.LogLevel = "warn"
	c.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(newSlogCore(s.log, zapcore.WarnLevel, closing)))
	return c, nil
}

func parseURL(what, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: parse %s URL %q: %w", what, raw, err)
	}
	if u.Scheme != "http" || u.Host == "" {
		// TLS for the embedded server would need certificates we don't
		// manage; it only ever listens on loopback.
		return nil, fmt.Errorf("embedded etcd: %s URL %q: want http://HOST:PORT", what, raw)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return nil, fmt.Errorf("embedded etcd: %s URL %q: %w", what, raw, err)
	}
	return u, nil
}
