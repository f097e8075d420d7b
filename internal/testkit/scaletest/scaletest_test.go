package scaletest

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
)

// TestParseProm: samples by name, label matching for Sum and By, comment
// and unreadable lines skipped.
func TestParseProm(t *testing.T) {
	p := ParseProm(`# HELP apiserver_request_total Requests.
apiserver_request_total{verb="LIST",resource="pods"} 3
apiserver_request_total{verb="LIST",resource="nodes"} 2
apiserver_request_total{verb="WATCH",resource="pods"} 5
go_goroutines 40
broken_line not-a-number
`)
	if got := p.Sum("apiserver_request_total", "verb", "LIST"); got != 5 {
		t.Errorf("LIST requests = %v, want 5", got)
	}
	if got := p.Sum("go_goroutines"); got != 40 {
		t.Errorf("goroutines = %v, want 40", got)
	}
	if got, want := p.By("apiserver_request_total", "resource", "verb", "LIST"), map[string]float64{"pods": 3, "nodes": 2}; !maps.Equal(got, want) {
		t.Errorf("LIST by resource = %v, want %v", got, want)
	}
	if _, ok := p["broken_line"]; ok {
		t.Error("a line without a number was read")
	}
}

// TestPct: nearest rank, whatever the order; 0 for no samples.
func TestPct(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	for q, want := range map[float64]time.Duration{0.5: 3, 0.99: 5, 1: 5, 0: 1} {
		if got := Pct(ds, q); got != want {
			t.Errorf("Pct(%v) = %v, want %v", q, got, want)
		}
	}
	if got := Pct(nil, 0.5); got != 0 {
		t.Errorf("Pct(nil) = %v, want 0", got)
	}
}

// TestParallel: every index runs once, the first error is returned.
func TestParallel(t *testing.T) {
	var ran atomic.Int64
	boom := errors.New("boom")
	err := Parallel(4, 100, func(i int) error {
		ran.Add(1)
		if i == 42 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || ran.Load() != 100 {
		t.Errorf("Parallel = %v after %d calls, want boom after 100", err, ran.Load())
	}
}

// TestConnect: retries until the server answers; a configuration error
// ends it at once.
func TestConnect(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	calls := 0
	got, err := Connect(t.Context(), logger, "test server", func(context.Context) (string, error) {
		if calls++; calls < 3 {
			return "", errors.New("connection refused")
		}
		return "store", nil
	})
	if err != nil || got != "store" || calls != 3 {
		t.Errorf("Connect = %q, %v after %d calls; want store after 3", got, err, calls)
	}
	calls = 0
	bad := &datastore.ConfigError{Err: errors.New("no endpoints")}
	if _, err := Connect(t.Context(), logger, "test server", func(context.Context) (string, error) {
		calls++
		return "", bad
	}); !errors.Is(err, bad) || calls != 1 {
		t.Errorf("Connect with a bad configuration = %v after %d calls, want it at once", err, calls)
	}
}
