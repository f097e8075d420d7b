package embedetcd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// started runs srv in the background and waits until it is ready. The
// returned stop cancels it and returns Run's result.
func started(t *testing.T, srv *Server) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var stopped bool
	var result error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case result = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("Run did not return after cancel")
			}
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	select {
	case <-srv.Ready():
	case err := <-done:
		stopped = true
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("embedded etcd not ready after 30s")
	}
	return stop
}

func client(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRunPersistsAcrossRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etcd")
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t))
	// Everything at info and above, as the agent would log by default.
	var logs proctest.Log
	cfg := Config{
		DataDir:   dir,
		ClientURL: clientURL,
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t)),
		Logger:    slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil)),
	}

	srv := New(cfg)
	stop := started(t, srv)
	if got := srv.Endpoints(); len(got) != 1 || got[0] != clientURL {
		t.Fatalf("Endpoints() = %v, want [%s]", got, clientURL)
	}
	c := client(t, srv.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/calico/test/key", "value-1"); err != nil {
		t.Fatalf("put: %v", err)
	}
	c.Close()
	if err := stop(); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}

	// The port must be free again once Run returned.
	l, err := net.Listen("tcp", strings.TrimPrefix(clientURL, "http://"))
	if err != nil {
		t.Fatalf("client port still held after Run returned: %v", err)
	}
	l.Close()

	srv2 := New(cfg)
	stop2 := started(t, srv2)
	c2 := client(t, srv2.Endpoints())
	resp, err := c2.Get(ctx, "/calico/test/key")
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "value-1" {
		t.Fatalf("after restart got %v, want value-1", resp.Kvs)
	}
	c2.Close()
	if err := stop2(); err != nil {
		t.Fatalf("second Run after cancel = %v, want nil", err)
	}

	// A clean start, restart and stop is nothing an operator must act on:
	// etcd's own chatter stays out of the agent's log.
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("unexpected log line: %s", line)
		}
	}
}

func TestLogBridgeKeepsRealWarnings(t *testing.T) {
	// A data dir someone else created world-readable is worth a warning;
	// that one must still reach the agent's log.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs proctest.Log
	srv := New(Config{
		DataDir:   dir,
		ClientURL: fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t)),
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t)),
		Logger:    slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil)),
	})
	stop := started(t, srv)
	if err := stop(); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	got := logs.String()
	if !strings.Contains(got, `level=WARN msg="check file permission"`) {
		t.Errorf("data dir permission warning missing from log:\n%s", got)
	}
	if strings.Contains(got, "single port") {
		t.Errorf("expected-noise warning reached the log:\n%s", got)
	}
}

func TestRunPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	taken := l.Addr().String()

	srv := New(Config{
		DataDir:   t.TempDir(),
		ClientURL: "http://" + taken,
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t)),
		Logger:    testLogger(t),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = srv.Run(ctx)
	if err == nil {
		t.Fatal("Run on a taken port returned nil")
	}
	texttest.Contains(t, "error", err.Error(), "listen "+taken, "address already in use", "--etcd-endpoints")
	select {
	case <-srv.Ready():
		t.Error("Ready closed although etcd never started")
	default:
	}
}

func TestRunConfigErrors(t *testing.T) {
	// A regular file where the data dir's parent should be makes MkdirAll
	// fail even for root.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no data dir", Config{}, "no data dir"},
		{"data dir cannot be created", Config{DataDir: filepath.Join(file, "etcd")}, "create data dir " + filepath.Join(file, "etcd")},
		{"bad client URL", Config{DataDir: t.TempDir(), ClientURL: "127.0.0.1:2379"}, "client URL"},
		{"https client URL", Config{DataDir: t.TempDir(), ClientURL: "https://127.0.0.1:2379"}, "want http://HOST:PORT"},
		{"peer URL without port", Config{DataDir: t.TempDir(), PeerURL: "http://127.0.0.1"}, "peer URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Logger = testLogger(t)
			err := New(tt.cfg).Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run() = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

func TestRunCancelledBeforeReady(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	srv := New(Config{
		DataDir:   t.TempDir(),
		ClientURL: fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t)),
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t)),
		Logger:    testLogger(t),
	})
	if err := srv.Run(ctx); err != nil {
		t.Fatalf("Run with cancelled ctx = %v, want nil", err)
	}
}
