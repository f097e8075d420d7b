// Package buildinfo reports the version the binary was built as. Version and
// Commit are stamped at link time (-ldflags "-X .../buildinfo.Version=v1.2.3
// -X .../buildinfo.Commit=<sha>", as the Makefile does); without Commit the
// VCS revision comes from the Go toolchain's embedded build info.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// MainPackage is the import path of this project's main package, as Go
// records it in every calico-node binary it builds (debug/buildinfo): how
// a file is recognised as a copy of calico-node (`calico-node cleanup`).
const MainPackage = "github.com/projectcalico/calico-node"

// Version is set by the linker; it is never written at run time.
var Version = "dev"

// Commit is the git commit the binary was built from, set by the linker
// (the Go toolchain's own stamp is missing where the build has no .git,
// as in a container build context).
var Commit = ""

// Revision returns the VCS revision the binary was built from, or "unknown".
func Revision() string {
	if Commit != "" {
		return Commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// String is the one-line version banner shared by every entry point.
func String() string {
	return fmt.Sprintf("calico-node %s (revision %s, %s, %s/%s)", Version, Revision(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
