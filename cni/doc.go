// Package cni is the CNI plugin side of the binary: `calico` (the network
// plugin) and `calico-ipam` (the IPAM plugin) are the same executable, chosen
// by argv[0].
//
// Model: a container runtime executes the plugin with CNI_* environment
// variables and the network config on stdin; the plugin answers with a
// result or a CNI error JSON on stdout. Spec versions 0.1.0 through 1.1.0
// are announced by VERSION.
//
// Design: the containernetworking skel package owns the protocol (env
// parsing, version negotiation, error encoding); this package only supplies
// the command functions.
//
// Thread safety: one invocation per process; nothing is shared.
package cni
