package node

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
)

func TestDebugAddr(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec *api.FelixConfigurationSpec
		want string
	}{
		{"no environment", nil, ""},
		{"unset", &api.FelixConfigurationSpec{}, ""},
		{"port 0", &api.FelixConfigurationSpec{DebugPort: new(int)}, ""},
		{"port only", &api.FelixConfigurationSpec{DebugPort: ptr(6060)}, "localhost:6060"},
		{"host and port", &api.FelixConfigurationSpec{DebugPort: ptr(6060), DebugHost: ptr("0.0.0.0")}, "0.0.0.0:6060"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := debugAddr(tc.spec); got != tc.want {
				t.Errorf("debugAddr = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDebugServerServesPprof: FELIX_DEBUGPORT's server answers pprof's
// index and a heap profile, and stops with its context.
func TestDebugServerServesPprof(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- debugServer(addr, slog.New(slog.DiscardHandler))(ctx) }()
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/debug/pprof/")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("debug server never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(body, "heap") {
		t.Errorf("pprof index does not list the heap profile:\n%s", body)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("heap profile: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("debug server returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("debug server did not stop with its context")
	}
	if _, err := http.Get("http://" + addr + "/debug/pprof/"); err == nil {
		t.Error("still serving after it stopped")
	}
}

func ptr[T any](v T) *T { return &v }
