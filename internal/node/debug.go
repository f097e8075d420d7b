package node

import (
	"context"
	"log/slog"
	"net"
	"strconv"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/pprofserve"
)

// debugAddr is where the agent serves Go's pprof: FELIX_DEBUGPORT (and
// FELIX_DEBUGHOST, default localhost) at start, as Felix serves its own
// process's profiles there; "" (the default) serves none.
func debugAddr(felix *api.FelixConfigurationSpec) string {
	if felix == nil || felix.DebugPort == nil || *felix.DebugPort <= 0 {
		return ""
	}
	host := "localhost"
	if felix.DebugHost != nil && *felix.DebugHost != "" {
		host = *felix.DebugHost
	}
	return net.JoinHostPort(host, strconv.Itoa(*felix.DebugPort))
}

// debugServer serves pprof on addr until ctx is done. A port it cannot
// listen on is logged and leaves the agent running: a debugging aid is
// no reason to stop the node's dataplane.
func debugServer(addr string, logger *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		srv, err := pprofserve.Start(addr, "FELIX_DEBUGPORT", logger)
		if err != nil {
			logger.Error("cannot serve the debug port", "err", err)
			<-ctx.Done()
			return nil
		}
		<-ctx.Done()
		srv.Shutdown()
		return nil
	}
}
