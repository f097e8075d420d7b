package health_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/projectcalico/calico-node/internal/node/health"
)

func ExampleServer_Handler() {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	agg := health.NewAggregator()
	agg.Now = func() time.Time { return now }
	dataplane := agg.Register("dataplane", true, true, 90*time.Second)
	bgp := agg.Register("bgp", true, false, 0)
	dataplane.Report(true, false, "waiting for datastore sync")
	bgp.Report(true, false, "")

	srv := health.NewServer("127.0.0.1:9099", agg, nil, slog.New(slog.DiscardHandler))
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readiness", nil))
	fmt.Println(rec.Code)
	fmt.Print(rec.Body.String())
	// Output:
	// 503
	// not ready
	// COMPONENT  TIMEOUT  LIVENESS  READINESS  DETAIL
	// bgp        -        live      -
	// dataplane  1m30s    live      not ready  waiting for datastore sync
}
