// Package cnimain runs the CNI plugins (calico, calico-ipam) from its
// init, before the packages only the rest of the binary needs are
// initialised.
//
// Why: a Go process initialises every package linked into it before
// main, and the one calico-node binary links the embedded etcd server,
// gobgp, the gRPC gateway and more, whose package init (metric
// registrations, protobuf descriptors) the plugin does not need. Go
// initialises packages in dependency order, the first ready one by
// import path at each step (Go 1.21+); this package depends only on
// package cni, so its init runs as soon as cni and cni's dependencies
// are initialised, and then runs the command and exits. What the plugin
// skips so (about 25 packages: etcd's server, auth, lease, MVCC and WAL,
// the gRPC gateway and reflection, pprof, calicoctl) is what lay after
// cni in that order: ~20-40% of the plugin process's start
// (docs/benchmarks.md, CNI ADD/DEL).
//
// Package cnientry's init runs earlier still and hands the command to the
// node's agent; this is the path when no agent takes it.
//
// Design: the init does exactly what main would (cni.Main, exit status 1
// on an error it has already reported); it runs with the main goroutine
// locked to the main thread, as every init does, which the plugin does
// not mind: its namespace work runs in goroutines of its own (ns.Do).
package cnimain

import (
	"os"
	"path/filepath"

	"github.com/projectcalico/calico-node/internal/cni"
)

func init() {
	switch name := filepath.Base(os.Args[0]); name {
	case cni.NetworkPlugin, cni.IPAMPlugin:
		if cni.Main(name) != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
}
