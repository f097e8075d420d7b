package controllers

import (
	"context"
	"log/slog"
	"net"
	"strconv"

	"github.com/projectcalico/calico-node/internal/pprofserve"
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
		srv  *pprofserve.Server
		port int32
	)
	stop := func() {
		if srv == nil {
			return
		}
		srv.Shutdown()
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
				srv = p.start(port)
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
func (p *profiler) start(port int32) *pprofserve.Server {
	addr := net.JoinHostPort("localhost", strconv.Itoa(int(port)))
	srv, err := pprofserve.Start(addr, "KubeControllersConfiguration debugProfilePort", p.log)
	if err != nil {
		p.log.Error("cannot serve debugProfilePort", "addr", addr, "err", err)
		return nil
	}
	return srv
}
