// Package pprofserve serves Go's pprof endpoints (/debug/pprof/) on an
// address of their own, for the two debug ports calico-node honours:
// Felix's debugPort (the agent's process) and kube-controllers'
// debugProfilePort. Its handlers are on a mux of their own, not
// http.DefaultServeMux, on which net/http/pprof's init also registers
// and which nothing in calico-node serves.
//
// Thread safety: a Server is started and shut down by one goroutine.
package pprofserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Server is one listening pprof server.
type Server struct {
	srv  *http.Server
	done chan struct{}
	// Addr is the address it listens on (the port resolved).
	Addr string
}

// Start listens on addr and serves in a goroutine of its own until
// Shutdown. what names the setting in the logs.
func Start(addr, what string, logger *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serve pprof (%s) on %s: %w", what, addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s := &Server{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
		Addr: ln.Addr().String(),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("profiling server failed", "addr", s.Addr, "err", err)
		}
	}()
	logger.Info("serving pprof ("+what+")", "addr", s.Addr)
	return s, nil
}

// Shutdown stops the server, waiting up to 5 s for requests in flight
// (a CPU profile runs for its seconds), and returns once it stopped.
func (s *Server) Shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	<-s.done
}
