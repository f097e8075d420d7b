package health

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// runServer starts srv on a real loopback listener and returns its base URL.
func runServer(t *testing.T, srv *Server) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run after cancel = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	select {
	case <-srv.Listening():
	case err := <-done:
		t.Fatalf("Run returned before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("server not listening after 10s")
	}
	return "http://" + srv.Addr()
}

func get(t *testing.T, url, accept string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

func TestServerHealthEndpoints(t *testing.T) {
	clock := newFakeClock()
	agg := NewAggregator()
	agg.Now = clock.Now
	agg.Logger = testLogger(t)
	dataplane := agg.Register("dataplane", true, true, 30*time.Second)
	bgp := agg.Register("bgp", true, false, 0)

	base := runServer(t, NewServer("127.0.0.1:0", agg, nil, testLogger(t)))

	// Nothing reported ready yet.
	code, body := get(t, base+"/readiness", "")
	if code != http.StatusServiceUnavailable {
		t.Errorf("readiness before any report = %d, want 503\n%s", code, body)
	}
	if !strings.HasPrefix(body, "not ready\n") || !strings.Contains(body, "dataplane") {
		t.Errorf("readiness body does not list components:\n%s", body)
	}
	if code, body := get(t, base+"/liveness", ""); code != http.StatusOK {
		t.Errorf("liveness before any report = %d, want 200\n%s", code, body)
	}

	dataplane.Report(true, true, "in sync")
	code, body = get(t, base+"/readiness", "")
	if code != http.StatusOK || !strings.HasPrefix(body, "ready\n") || !strings.Contains(body, "in sync") {
		t.Errorf("readiness after ready report = %d, want 200 with detail\n%s", code, body)
	}

	// bgp takes part in liveness only: it going down breaks liveness and
	// leaves readiness alone.
	bgp.Report(false, false, "speaker crashed")
	if code, body := get(t, base+"/liveness", ""); code != http.StatusServiceUnavailable || !strings.Contains(body, "speaker crashed") {
		t.Errorf("liveness with bgp not live = %d, want 503 naming detail\n%s", code, body)
	}
	if code, _ := get(t, base+"/readiness", ""); code != http.StatusOK {
		t.Errorf("readiness with only bgp not live = %d, want 200", code)
	}
	bgp.Report(true, false, "")

	// The dataplane stops reporting: after its timeout it is stale.
	clock.Advance(31 * time.Second)
	code, body = get(t, base+"/readiness", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "timed out") {
		t.Errorf("readiness with stale dataplane = %d, want 503 saying timed out\n%s", code, body)
	}
	if code, _ := get(t, base+"/liveness", ""); code != http.StatusServiceUnavailable {
		t.Errorf("liveness with stale dataplane = %d, want 503", code)
	}

	dataplane.Report(true, true, "in sync")
	code, body = get(t, base+"/readiness", "application/json")
	if code != http.StatusOK {
		t.Fatalf("JSON readiness = %d, want 200\n%s", code, body)
	}
	var got jsonHealth
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("decode JSON readiness: %v\n%s", err, body)
	}
	if !got.Live || !got.Ready || len(got.Components) != 2 {
		t.Fatalf("JSON summary = %+v, want live, ready, 2 components", got)
	}
	dp := got.Components[1]
	if dp.Name != "dataplane" || dp.Readiness != "ready" || dp.Detail != "in sync" || dp.Timeout != "30s" {
		t.Errorf("JSON dataplane row = %+v", dp)
	}
	if got.Components[0].Readiness != "-" {
		t.Errorf("bgp readiness = %q, want - (does not take part)", got.Components[0].Readiness)
	}
}

func TestServerMethods(t *testing.T) {
	agg := NewAggregator()
	base := runServer(t, NewServer("127.0.0.1:0", agg, nil, testLogger(t)))

	resp, err := http.Head(base + "/readiness")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD /readiness = %d, want 200", resp.StatusCode)
	}
	resp, err = http.Post(base+"/readiness", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /readiness = %d, want 405", resp.StatusCode)
	}
	// Without a gatherer there is no metrics endpoint.
	if code, _ := get(t, base+"/metrics", ""); code != http.StatusNotFound {
		t.Errorf("/metrics without gatherer = %d, want 404", code)
	}
}

func TestServerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "calico_test_events_total", Help: "Test events."})
	reg.MustRegister(c)
	c.Add(3)

	base := runServer(t, NewServer("127.0.0.1:0", NewAggregator(), reg, testLogger(t)))
	code, body := get(t, base+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d, want 200", code)
	}
	if !strings.Contains(body, "calico_test_events_total 3") {
		t.Errorf("/metrics does not serve the registered counter:\n%s", body)
	}
	// The private registry only: nothing from the global default one.
	if strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics serves the global registry's collectors:\n%s", body)
	}
}

func TestServerListenError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	srv := NewServer(l.Addr().String(), NewAggregator(), nil, testLogger(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "listen "+l.Addr().String()) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Run on a taken port = %v, want a listen error naming the address", err)
	}
	select {
	case <-srv.Listening():
		t.Error("Listening closed although listen failed")
	default:
	}
	if srv.Addr() != "" {
		t.Errorf("Addr() = %q after failed listen, want empty", srv.Addr())
	}
}
