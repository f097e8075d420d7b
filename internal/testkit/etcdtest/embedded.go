package etcdtest

import (
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEmbedded starts an in-process etcd on the current ports. Called with
// s.mu held.
func (s *Server) startEmbedded() error {
	cfg := embed.NewConfig()
	cfg.Name = memberName
	cfg.Dir = s.DataDir
	clientURL, err := url.Parse(s.clientURL())
	if err != nil {
		return fmt.Errorf("parse client URL: %w", err)
	}
	peerURL, err := url.Parse(s.peerURL())
	if err != nil {
		return fmt.Errorf("parse peer URL: %w", err)
	}
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	// Test data is thrown away; fsync only slows the tests down.
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{s.logPath}
	if s.pki != nil {
		cfg.ClientTLSInfo.CertFile = s.pki.serverCertFile
		cfg.ClientTLSInfo.KeyFile = s.pki.serverKeyFile
		cfg.ClientTLSInfo.TrustedCAFile = s.pki.caFile
		cfg.ClientTLSInfo.ClientCertAuth = true
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%w: %v", errPortInUse, err)
		}
		return fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(readyTimeout):
		e.Close()
		return fmt.Errorf("embedded etcd not ready after %s; log %s:\n%s", readyTimeout, s.logPath, s.logTail())
	}
	// ReadyNotify fires once the member has published itself; the same
	// health check as for the binary confirms that clients are served.
	stopped := make(chan struct{})
	go func() {
		<-e.Server.StopNotify()
		close(stopped)
	}()
	if err := s.waitReady(stopped); err != nil {
		e.Close()
		return err
	}
	s.etcd = e
	return nil
}
