package health

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// shutdownTimeout bounds how long Run waits for in-flight requests once its
// context is done; probes and scrapes are short, so this is generous.
const shutdownTimeout = 5 * time.Second

// Server is the health and metrics HTTP actor.
type Server struct {
	addr      string
	agg       *Aggregator
	gatherer  prometheus.Gatherer
	log       *slog.Logger
	listening chan struct{}

	mu    sync.Mutex
	bound string
}

// NewServer returns a Server that will listen on addr ("127.0.0.1:9099",
// ":9099"; port 0 picks a free port) and serve agg's health and gatherer's
// metrics. A nil gatherer leaves /metrics out. Nothing listens until Run.
func NewServer(addr string, agg *Aggregator, gatherer prometheus.Gatherer, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	return &Server{
		addr:      addr,
		agg:       agg,
		gatherer:  gatherer,
		log:       logger,
		listening: make(chan struct{}),
	}
}

// Listening is closed once Run is listening; Addr is valid from then on. It
// is never closed if Run fails to listen, so wait on Run's result as well.
func (s *Server) Listening() <-chan struct{} { return s.listening }

// Addr returns the address Run listens on ("127.0.0.1:41234" when the
// configured port was 0), or "" before it listens.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound
}

// Run listens and serves until ctx is done, then shuts down gracefully and
// returns nil. It returns an error if it cannot listen or serving fails.
func (s *Server) Run(ctx context.Context) error {
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("health server: listen %s: %w", s.addr, err)
	}
	s.mu.Lock()
	s.bound = l.Addr().String()
	s.mu.Unlock()
	close(s.listening)
	s.log.Info("health server listening", "addr", s.bound)

	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	select {
	case err := <-served:
		return fmt.Errorf("health server: serve %s: %w", s.bound, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Warn("health server did not shut down gracefully", "err", err)
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("health server: serve %s: %w", s.bound, err)
	}
	return nil
}

// Handler returns the HTTP handler Run serves: /liveness, /readiness and,
// with a gatherer, /metrics.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// "GET" patterns also match HEAD, which some probes use; other
	// methods get 405 from the mux.
	mux.HandleFunc("GET /liveness", func(w http.ResponseWriter, r *http.Request) {
		s.serveHealth(w, r, true)
	})
	mux.HandleFunc("GET /readiness", func(w http.ResponseWriter, r *http.Request) {
		s.serveHealth(w, r, false)
	})
	if s.gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{
			ErrorLog: promLogger{s.log},
			// A failing collector should not hide every other metric.
			ErrorHandling: promhttp.ContinueOnError,
		}))
	}
	return mux
}

func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request, liveness bool) {
	sum := s.agg.Summary()
	good := sum.Ready
	if liveness {
		good = sum.Live
	}
	status := http.StatusOK
	if !good {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(jsonSummary(sum))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	writeText(w, sum, liveness)
}

// writeText renders the summary as a table in the style of felix's health
// output:
//
//	ready
//	COMPONENT  TIMEOUT  LIVENESS  READINESS  DETAIL
//	bgp        20s      live      ready      3 peers established
func writeText(w io.Writer, sum Summary, liveness bool) {
	switch {
	case liveness && sum.Live:
		fmt.Fprintln(w, "live")
	case liveness:
		fmt.Fprintln(w, "not live")
	case sum.Ready:
		fmt.Fprintln(w, "ready")
	default:
		fmt.Fprintln(w, "not ready")
	}
	if len(sum.Components) == 0 {
		return
	}
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tTIMEOUT\tLIVENESS\tREADINESS\tDETAIL")
	for _, c := range sum.Components {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, timeoutString(c.Timeout), livenessString(c), readinessString(c), c.Detail)
	}
	_ = tw.Flush()
	// tabwriter pads the cell before an empty detail; drop that padding.
	for line := range strings.Lines(table.String()) {
		fmt.Fprintln(w, strings.TrimRight(line, " \n"))
	}
}

func timeoutString(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.String()
}

func livenessString(c Component) string {
	switch {
	case !c.CheckLive:
		return "-"
	case c.Stale:
		return "timed out"
	case c.Live:
		return "live"
	default:
		return "not live"
	}
}

func readinessString(c Component) string {
	switch {
	case !c.CheckReady:
		return "-"
	case c.Stale:
		return "timed out"
	case c.Ready:
		return "ready"
	default:
		return "not ready"
	}
}

type jsonComponent struct {
	Name       string    `json:"name"`
	Liveness   string    `json:"liveness"`
	Readiness  string    `json:"readiness"`
	Detail     string    `json:"detail,omitempty"`
	Timeout    string    `json:"timeout,omitempty"`
	LastReport time.Time `json:"lastReport"`
}

type jsonHealth struct {
	Live       bool            `json:"live"`
	Ready      bool            `json:"ready"`
	Components []jsonComponent `json:"components"`
}

func jsonSummary(sum Summary) jsonHealth {
	out := jsonHealth{Live: sum.Live, Ready: sum.Ready, Components: make([]jsonComponent, 0, len(sum.Components))}
	for _, c := range sum.Components {
		jc := jsonComponent{
			Name:       c.Name,
			Liveness:   livenessString(c),
			Readiness:  readinessString(c),
			Detail:     c.Detail,
			LastReport: c.LastReport.UTC(),
		}
		if c.Timeout > 0 {
			jc.Timeout = c.Timeout.String()
		}
		out.Components = append(out.Components, jc)
	}
	return out
}

// promLogger adapts slog to promhttp's Println-style error log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Warn("serving metrics", "err", strings.TrimSpace(fmt.Sprintln(v...)))
}
