package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

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
	if os.Getenv("CNI_COMMAND") == "VERSION" {
		return printErr(answerVersion(os.Stdin, os.Stdout))
	}
	about := fmt.Sprintf("%s CNI plugin, %s", plugin, buildinfo.String())
	if err := skel.PluginMainFuncsWithError(funcs, SupportedVersions, about); err != nil {
		return printErr(err)
	}
	return nil
}

// printErr reports err as the CNI error JSON on stdout, which is all a
// runtime reads.
func printErr(err error) error {
	if err == nil {
		return nil
	}
	var e *types.Error
	if !errors.As(err, &e) {
		e = types.NewError(types.ErrInternal, err.Error(), "")
	}
	if perr := e.Print(); perr != nil {
		return perr
	}
	return e
}

// answerVersion answers VERSION as the spec words it: the response carries the
// cniVersion of the request (skel would answer with the newest version
// instead), plus every version we support. A request without cniVersion is
// a 0.1.0 request.
func answerVersion(stdin io.Reader, stdout io.Writer) error {
	data, err := io.ReadAll(stdin)
	if err != nil {
		return types.NewError(types.ErrIOFailure, "read stdin: "+err.Error(), "")
	}
	var req struct {
		CNIVersion string `json:"cniVersion"`
	}
	if len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, &req); err != nil {
			return types.NewError(types.ErrDecodingFailure, "decode VERSION request: "+err.Error(), "")
		}
	}
	if req.CNIVersion == "" {
		req.CNIVersion = "0.1.0"
	}
	if !slices.Contains(SupportedVersions.SupportedVersions(), req.CNIVersion) {
		return types.NewError(types.ErrIncompatibleCNIVersion, "incompatible CNI versions",
			fmt.Sprintf("config is %q, plugin supports %q", req.CNIVersion, SupportedVersions.SupportedVersions()))
	}
	return json.NewEncoder(stdout).Encode(struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
	}{req.CNIVersion, SupportedVersions.SupportedVersions()})
}

// notYet answers commands this build does not implement with a proper CNI
// error instead of pretending to succeed.
func notYet(plugin, cmd string) func(*skel.CmdArgs) error {
	return func(*skel.CmdArgs) error {
		return types.NewError(types.ErrInternal, fmt.Sprintf("%s: %s is not implemented in this build", plugin, cmd), "")
	}
}
