package epstatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultSocket is where the agent serves its status API (the timelines
// `calicoctl node timeline` prints).
const DefaultSocket = "/var/run/calico/status.sock"

// TimelinePath is the API's one request: GET
// /v1/timeline?namespace=NS&name=POD.
const TimelinePath = "/v1/timeline"

// Answer is an agent's answer to a timeline request.
type Answer struct {
	Node string `json:"node"`
	// BGP: the agent's BGP speaker reports what it advertises (without
	// it there is no route_advertised stage).
	BGP     bool     `json:"bgp"`
	Records []Record `json:"records"`
}

// Handler serves the tracker's timelines.
func (t *Tracker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+TimelinePath, func(w http.ResponseWriter, r *http.Request) {
		ns, name := r.URL.Query().Get("namespace"), r.URL.Query().Get("name")
		if ns == "" || name == "" {
			http.Error(w, "namespace and name are required", http.StatusBadRequest)
			return
		}
		t.mu.Lock()
		bgp := t.bgp
		t.mu.Unlock()
		a := Answer{Node: t.node, BGP: bgp, Records: t.Timeline(ns, name)}
		if a.Records == nil {
			a.Records = []Record{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a)
	})
	return mux
}

// Server is the status API actor: HTTP on a unix socket only root can
// open (timelines name pods and their addresses).
type Server struct {
	path string
	t    *Tracker
	log  *slog.Logger
}

// NewServer serves t on the unix socket at path.
func NewServer(path string, t *Tracker, logger *slog.Logger) *Server {
	return &Server{path: path, t: t, log: logger.With("component", "status-api")}
}

// Run serves until ctx is done. A socket left by an earlier agent is
// replaced.
func (s *Server) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return fmt.Errorf("status socket directory: %w", err)
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale status socket %s: %w", s.path, err)
	}
	old := syscall.Umask(0o077)
	l, err := net.Listen("unix", s.path)
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("listen on status socket %s: %w", s.path, err)
	}
	srv := &http.Server{Handler: s.t.Handler(), ReadHeaderTimeout: 5 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	defer stop()
	s.log.Info("serving the status API", "socket", s.path)
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("status socket %s: %w", s.path, err)
	}
	return nil
}

// ErrNoAgent is returned by Query when nothing listens on the socket.
var ErrNoAgent = errors.New("no calico-node agent answers")

// Query asks the agent at socket for the timelines of the pod (or
// endpoint) name in namespace.
func Query(ctx context.Context, socket, namespace, name string) (*Answer, error) {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	defer client.CloseIdleConnections()
	u := "http://agent" + TimelinePath + "?" + url.Values{"namespace": {namespace}, "name": {name}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, fmt.Errorf("%w on %s: %v", ErrNoAgent, socket, op.Err)
		}
		return nil, fmt.Errorf("ask the agent on %s: %w", socket, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read the answer of the agent on %s: %w", socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the agent on %s: %s: %s", socket, resp.Status, body)
	}
	var a Answer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("decode the answer of the agent on %s: %w", socket, err)
	}
	return &a, nil
}
