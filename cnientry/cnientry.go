// Package cnientry runs the CNI plugins from a package initialiser, before
// the rest of the binary is initialised.
//
// Why: kubelet and containerd execute /opt/cni/bin/calico (and
// calico-ipam) for every pod, and each execution pays for the init of
// every package linked into the binary, whether the plugin uses it or
// not: the embedded etcd server, gobgp, client-go's scheme, Prometheus
// collectors. That was ~15 ms of a ~35 ms ADD. Go initialises packages in
// dependency order, so by the time this package's init runs, everything
// the cni package imports is ready; the packages only the agent and the
// CLI use mostly are not, and for a plugin invocation they never will
// be: init exits the process when the plugin is done.
//
// main imports this package for its side effect. Under any other name the
// binary was started as, init returns at once and main dispatches as usual.
package cnientry

import (
	"os"
	"path/filepath"

	"github.com/projectcalico/calico-node/cni"
)

func init() {
	name := filepath.Base(os.Args[0])
	if name != cni.NetworkPlugin && name != cni.IPAMPlugin {
		return
	}
	if err := cni.Main(name); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}
