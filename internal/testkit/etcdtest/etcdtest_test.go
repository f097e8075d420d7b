package etcdtest

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

type starter struct {
	name  string
	start func(testing.TB, ...Option) *Server
}

var starters = []starter{
	{"binary", Start},
	{"embedded", StartEmbedded},
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestPutGetRestart(t *testing.T) {
	for _, st := range starters {
		for _, withTLS := range []bool{false, true} {
			name := st.name
			var opts []Option
			if withTLS {
				name += "/tls"
				opts = append(opts, WithTLS())
			}
			t.Run(name, func(t *testing.T) {
				s := st.start(t, opts...)
				wantScheme := "http://127.0.0.1:"
				if withTLS {
					wantScheme = "https://127.0.0.1:"
				}
				if len(s.Endpoints) != 1 || !strings.HasPrefix(s.Endpoints[0], wantScheme) {
					t.Fatalf("Endpoints = %v, want one %s URL", s.Endpoints, wantScheme)
				}
				c := s.Client(t)
				ctx := ctxT(t)
				if _, err := c.Put(ctx, "/k", "v1"); err != nil {
					t.Fatalf("put: %v", err)
				}
				endpoint := s.Endpoints[0]

				s.Restart(t)
				if s.Endpoints[0] != endpoint {
					t.Errorf("endpoint after Restart = %s, want %s", s.Endpoints[0], endpoint)
				}
				// The old client reconnects to the restarted server.
				resp, err := c.Get(ctx, "/k")
				if err != nil {
					t.Fatalf("get after restart: %v", err)
				}
				if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
					t.Fatalf("get after restart = %v, want v1 (data dir kept)", resp.Kvs)
				}
			})
		}
	}
}

func TestTLSRejectsClientWithoutCA(t *testing.T) {
	for _, st := range starters {
		t.Run(st.name, func(t *testing.T) {
			s := st.start(t, WithTLS())
			c, err := clientv3.New(clientv3.Config{
				Endpoints: s.Endpoints,
				Logger:    zap.NewNop(),
			})
			if err != nil {
				t.Fatalf("new client: %v", err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, err := c.Get(ctx, "/k"); err == nil {
				t.Fatal("get without CA and client certificate succeeded, want TLS failure")
			}
		})
	}
}

func TestCompact(t *testing.T) {
	for _, st := range starters {
		t.Run(st.name, func(t *testing.T) {
			s := st.start(t)
			c := s.Client(t)
			ctx := ctxT(t)
			first, err := c.Put(ctx, "/k", "v1")
			if err != nil {
				t.Fatalf("put: %v", err)
			}
			last, err := c.Put(ctx, "/k", "v2")
			if err != nil {
				t.Fatalf("put: %v", err)
			}
			s.Compact(t, last.Header.Revision)
			_, err = c.Get(ctx, "/k", clientv3.WithRev(first.Header.Revision))
			if !errors.Is(err, rpctypes.ErrCompacted) {
				t.Fatalf("get at compacted revision: err = %v, want %v", err, rpctypes.ErrCompacted)
			}
		})
	}
}

func TestStop(t *testing.T) {
	for _, st := range starters {
		t.Run(st.name, func(t *testing.T) {
			s := st.start(t)
			c := s.Client(t)
			s.Stop()
			s.Stop() // idempotent
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			if _, err := c.Get(ctx, "/k"); err == nil {
				t.Fatal("get after Stop succeeded")
			}
		})
	}
}

// TestCleanupKillsProcess checks that the etcd child does not outlive the
// test that started it, also when that test fails.
func TestCleanupKillsProcess(t *testing.T) {
	var pid int
	// A failing subtest would fail this test too, so the "failure" is
	// simulated with SkipNow, which also ends the subtest early; cleanup
	// runs the same way in both cases.
	t.Run("start", func(t *testing.T) {
		s := Start(t)
		pid = s.proc.Cmd.Process.Pid
		t.Skip("ended early on purpose, as a failure would end it: its cleanup must still stop etcd")
	})
	if pid == 0 {
		t.Fatal("no pid recorded")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("etcd pid %d still exists after cleanup (kill -0: %v)", pid, err)
	}
}

func TestEtcdEnv(t *testing.T) {
	t.Setenv("ETCD_DATA_DIR", "/nonexistent")
	for _, kv := range etcdEnv() {
		if strings.HasPrefix(kv, "ETCD_DATA_DIR=") {
			t.Fatalf("etcdEnv passes %q to the child", kv)
		}
	}
}

// A server with a unix socket serves the same data there, also after a
// restart (the old socket file must not be in the way).
func TestUnixSocket(t *testing.T) {
	s := Start(t, WithUnixSocket())
	if !strings.HasPrefix(s.UnixEndpoint, "unix:///") {
		t.Fatalf("UnixEndpoint = %q, want an absolute unix:// URL", s.UnixEndpoint)
	}
	if _, err := s.Client(t).Put(ctxT(t), "k", "v"); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.UnixEndpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Get(ctxT(t), "k")
		c.Close()
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
			t.Fatalf("round %d: get over %s: %v %v", round, s.UnixEndpoint, resp, err)
		}
		s.Restart(t)
	}
}
