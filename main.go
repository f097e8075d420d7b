// Plain TCP for every listener: since Go 1.24 net.Listen makes MPTCP
// sockets where the kernel has them, and those refuse TCP_MD5SIG and IP_TTL,
// so BGP passwords and TTL security on gobgp's listener would silently not
// apply.
//go:debug multipathtcp=0

// Command calico-node is Project Calico's container networking in one
// binary. What it does depends on the name it was started under:
//
//	calico       the CNI network plugin (kubelet/containerd execute it)
//	calico-ipam  the CNI IPAM plugin
//	calicoctl    the CLI
//	anything else: the `calico-node` app (run, ctl, status, version)
//
// The CNI plugin path is latency-critical: package cnientry's init hands
// the command to the node's agent before the rest of the binary is
// initialised; when no agent takes it, package cnimain's init runs the
// plugin in this process, before the packages only the agent and the
// CLI need are initialised. main never sees the plugin names.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	// First: the heap profiler off unless the debug port serves it,
	// before the large packages' init allocates (see its doc).
	_ "github.com/projectcalico/calico-node/internal/memprofile"
	// As the CNI plugins, the binary first offers the command to the
	// node's agent from this package's init, before the rest of the
	// binary is initialised (see its doc)...
	_ "github.com/projectcalico/calico-node/internal/cni/cnientry"
	// ... then runs it itself from this one's, before the packages only
	// the agent and the CLI need.
	_ "github.com/projectcalico/calico-node/internal/cni/cnimain"
	"github.com/projectcalico/calico-node/internal/ctl"
	"github.com/projectcalico/calico-node/internal/node"
)

func main() {
	if err := dispatch(filepath.Base(os.Args[0]), os.Args); err != nil {
		os.Exit(1)
	}
}

// dispatch runs the entry point named by argv[0] and returns its error,
// which the entry point has already reported on stderr. (The CNI plugins
// never get here: package cnimain's init runs them.)
func dispatch(name string, args []string) error {
	switch name {
	case "calicoctl":
		return report(ctl.NewApp().Run(calicoctlArgs(args, 1)))
	default:
		if len(args) > 1 && args[1] == "ctl" {
			args = calicoctlArgs(args, 2)
		}
		return report(node.NewApp().Run(args))
	}
}

// calicoctlArgs lets calicoctl flags follow positional arguments, as users
// type them; verbAt is where the calicoctl part of args starts.
func calicoctlArgs(args []string, verbAt int) []string {
	out := append([]string{}, args[:verbAt]...)
	return append(out, ctl.NormalizeArgs(args[verbAt:])...)
}

func report(err error) error {
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
	}
	return err
}
