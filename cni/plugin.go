package cni

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/projectcalico/calico-node/buildinfo"
)

// Plugin names as installed in the CNI bin dir.
const (
	NetworkPlugin = "calico"
	IPAMPlugin    = "calico-ipam"
)

// SupportedVersions are the CNI spec versions both plugins speak.
var SupportedVersions = version.PluginSupports("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

// Main runs one plugin invocation as the runtime drives it and returns the
// error already reported on stdout (the caller only sets the exit code).
func Main(plugin string) error {
	funcs := skel.CNIFuncs{
		Add:    notYet(plugin, "ADD"),
		Del:    notYet(plugin, "DEL"),
		Check:  notYet(plugin, "CHECK"),
		GC:     notYet(plugin, "GC"),
		Status: notYet(plugin, "STATUS"),
	}
	about := fmt.Sprintf("%s CNI plugin, %s", plugin, buildinfo.String())
	if err := skel.PluginMainFuncsWithError(funcs, SupportedVersions, about); err != nil {
		// skel has already printed the CNI error JSON on stdout.
		return err
	}
	return nil
}

// notYet answers commands this build does not implement with a proper CNI
// error instead of pretending to succeed.
func notYet(plugin, cmd string) func(*skel.CmdArgs) error {
	return func(*skel.CmdArgs) error {
		return types.NewError(types.ErrInternal, fmt.Sprintf("%s: %s is not implemented in this build", plugin, cmd), "")
	}
}
