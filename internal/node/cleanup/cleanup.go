package cleanup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/projectcalico/calico-node/internal/node/agentlock"
)

// Config says where calico-node's files are and what the user asked for.
type Config struct {
	// DataDir is the agent's data directory (--data-dir): its lock, the
	// embedded etcd's data and the nodename file.
	DataDir string
	// CNIConfDir, CNIBinDir and CNIConfName are where cniinstall wrote
	// (--cni-conf-dir, --cni-bin-dir, --cni-conf-name).
	CNIConfDir, CNIBinDir, CNIConfName string
	// CNISocket, BGPSocket and IPAMLockFile are the agent's sockets and
	// the CNI plugin's IPAM lock; "" leaves one out.
	CNISocket, BGPSocket, IPAMLockFile string
	// StatusSocket is the agent's status socket, StatusDir its endpoint
	// status directory (<endpointStatusPathPrefix>/endpoint-status); ""
	// leaves one out.
	StatusSocket, StatusDir string
	Options
	// Force cleans up even while an agent runs on the node.
	Force bool
	// DryRun reports what would be removed and changes nothing.
	DryRun bool
}

// ErrFailed is wrapped by Run's error when something of calico-node's
// could not be read or removed.
var ErrFailed = errors.New("cleanup incomplete")

// Run removes what calico-node made in this process's network namespace
// and on disk, writing one line per object to out, and returns an error
// when it refused (an agent runs) or something could not be read or
// removed.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	lockPath := agentlock.Path(cfg.DataDir)
	var lock *agentlock.Lock
	running := false
	if cfg.DryRun {
		held, err := agentlock.Held(lockPath)
		if err != nil {
			return err
		}
		running = held
	} else {
		// Held until the end: no agent starts while we remove.
		l, err := agentlock.Exclusive(lockPath)
		switch {
		case errors.Is(err, agentlock.ErrAgentRunning):
			running = true
		case err != nil:
			return err
		}
		lock = l
		defer lock.Release()
	}
	var why []string
	if running {
		why = append(why, runningReason(lockPath))
	}
	if cfg.CNISocket != "" && answers(cfg.CNISocket) {
		why = append(why, "an agent answers on "+cfg.CNISocket)
	}
	if len(why) > 0 {
		reason := "calico-node run is running on this node (" + strings.Join(why, "; ") + ")"
		switch {
		case cfg.DryRun:
			fmt.Fprintf(out, "note: %s: without --force, cleanup refuses to run\n", reason)
		case !cfg.Force:
			return fmt.Errorf("%s: stop it first, or use --force (the agent puts back what it owns as long as it runs)", reason)
		default:
			fmt.Fprintf(out, "warning: %s; cleaning up anyway (--force)\n", reason)
		}
	}

	h, err := newHost()
	if err != nil {
		return err
	}
	defer h.close()
	obs, readErrs := h.read(ctx, cfg)
	obs.Files.AgentLock.Busy = running
	for _, err := range readErrs {
		fmt.Fprintf(out, "could not read: %v\n", err)
	}
	plan := Make(obs, cfg.Options)

	var removed, failed int
	if cfg.DryRun {
		for _, it := range plan.Items() {
			fmt.Fprintf(out, "would remove %s\n", it)
			removed++
		}
	} else {
		removed, failed = apply(ctx, h, plan, out)
	}
	for _, k := range plan.Kept {
		fmt.Fprintf(out, "kept %s\n", k)
	}
	failed += len(readErrs)

	verb := "removed"
	if cfg.DryRun {
		verb = "would remove"
	}
	switch {
	case removed == 0 && failed == 0:
		fmt.Fprintln(out, "nothing of calico-node's to remove")
	case removed > 0:
		fmt.Fprintf(out, "%s %d objects\n", verb, removed)
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d objects could not be read or removed (see above)", ErrFailed, failed)
	}
	return nil
}

// apply removes everything in plan, in order, reporting each object.
func apply(ctx context.Context, h *host, plan Plan, out io.Writer) (removed, failed int) {
	report := func(it Item, err error) {
		if err != nil {
			failed++
			fmt.Fprintf(out, "could not remove %s: %v\n", it, err)
			return
		}
		removed++
		fmt.Fprintf(out, "removed %s\n", it)
	}
	for _, t := range plan.Tables {
		err := h.removeTable(ctx, t)
		for _, it := range t.Items() {
			report(it, err)
		}
	}
	for _, s := range plan.Sets {
		report(setItem(s), h.destroySet(ctx, s))
	}
	for _, r := range plan.Routes {
		report(routeItem(r), h.removeRoute(r))
	}
	for _, l := range plan.Devices {
		report(deviceItem(l), h.removeLink(l))
	}
	for _, a := range plan.Addrs {
		report(addrItem(a), h.removeAddr(a))
	}
	for _, l := range plan.Workloads {
		report(workloadItem(l), h.removeLink(l))
	}
	for _, p := range plan.Files {
		report(pathItem(p), removePath(p))
	}
	return removed, failed
}

// runningReason names the lock and, when /proc/locks tells, its holders.
func runningReason(lockPath string) string {
	s := lockPath + " is locked"
	if pids, err := agentlock.Holders(lockPath); err == nil && len(pids) > 0 {
		var ps []string
		for _, p := range pids {
			ps = append(ps, fmt.Sprint(p))
		}
		s += " by PID " + strings.Join(ps, ", ")
	}
	return s
}
