package controllers

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"
)

// profiler serves Go's pprof endpoints on localhost:<debugProfilePort>
// while KubeControllersConfiguration sets the port, as Calico's
// kube-controllers does (its debug server binds localhost too). It runs
// in the leader's term: the profile is of the calico-node process that
// runs the controllers, which is what Calico's is of its own process.
// A change of port moves the server; 0 stops it.
type profiler struct {
	src *kccSource
	log *slog.Logger
}

func (p *profiler) run(ctx context.Context) {
	var (
		srv  *http.Server
		done chan struct{}
		port int32
	)
	stop := func() {
		if srv == nil {
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
		<-done
		p.log.Info("profiling server stopped", "port", port)
		srv = nil
	}
	defer stop()
	for {
		rc, changed := p.src.current()
		if rc.profilePort != port || (srv == nil && port != 0) {
			stop()
			port = rc.profilePort
			if port != 0 {
				srv, done = p.start(port)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// start listens on localhost:port; nil if it cannot (logged: the port is
// taken), tried again at the next configuration change.
func (p *profiler) start(port int32) (*http.Server, chan struct{}) {
	addr := net.JoinHostPort("localhost", strconv.Itoa(int(port)))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.log.Error("cannot serve debugProfilePort", "addr", addr, "err", err)
		return nil, nil
	}
	// A mux of its own: net/http/pprof's init also registers on
	// http.DefaultServeMux, which nothing in calico-node serves.
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("profiling server failed", "addr", addr, "err", err)
		}
	}()
	p.log.Info("serving pprof (KubeControllersConfiguration debugProfilePort)", "addr", ln.Addr().String())
	return srv, done
}
