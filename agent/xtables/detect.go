package xtables

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// kubeletHints are the chains kubelet makes with the host's iptables
// flavour so that containers can tell which one the host uses.
var kubeletHints = []string{":KUBE-IPTABLES-HINT ", ":KUBE-KUBELET-CANARY "}

// DetectMode returns the iptables flavour ("nft" or "legacy") the host's
// other iptables users (kubelet, kube-proxy) program, so that our rules
// land beside theirs. want is FELIX_IPTABLESBACKEND's choice ("legacy",
// "nft", or "" for felix's Auto).
//
// In a container `iptables --version` tells the image's default, not the
// host's, so Auto looks at the rules, as felix's Auto and Kubernetes'
// iptables-wrappers do: the flavour that has kubelet's hint chains; else
// the one with more rules (both families); else, on a host with no rules
// at all, what `iptables --version` says. Only existing tables are read
// (whole-ruleset saves, no -t): naming a table would make the legacy
// kernel module create it.
func DetectMode(ctx context.Context, r Runner, want string) (string, error) {
	switch want {
	case "nft", "legacy":
		return want, nil
	case "":
	default:
		return "", fmt.Errorf("iptables backend %q: want legacy, nft or auto", want)
	}
	saves := map[string]string{}
	for _, mode := range Modes() {
		var all strings.Builder
		for _, family := range []int{4, 6} {
			// A flavour or family whose commands are missing has no rules.
			out, _ := r.Run(ctx, BackendFor(mode, family).Save, nil, "")
			all.WriteString(out)
		}
		saves[mode] = all.String()
	}
	// legacy first, as iptables-wrappers: a host that moved to nft may
	// keep stale legacy rules, but kubelet re-makes its hint on start in
	// the flavour it uses now and only there.
	for _, mode := range []string{"legacy", "nft"} {
		for _, hint := range kubeletHints {
			if strings.Contains(saves[mode], hint) {
				return mode, nil
			}
		}
	}
	legacy, nft := countRules(saves["legacy"]), countRules(saves["nft"])
	switch {
	case legacy > nft:
		return "legacy", nil
	case nft > legacy:
		return "nft", nil
	}
	b, err := Detect(ctx, r, 4)
	if err != nil {
		return "", err
	}
	return b.Mode, nil
}

// countRules counts the rules ("-A" lines) of iptables-save output.
func countRules(save string) int {
	n := 0
	for _, line := range strings.Split(save, "\n") {
		if strings.HasPrefix(line, "-A ") {
			n++
		}
	}
	return n
}

var versionRE = regexp.MustCompile(`v?(\d+)\.(\d+)(?:\.(\d+))?`)

// RandomFully reports whether MASQUERADE and SNAT take --random-fully
// with backend b on this kernel (release, as /proc/sys/kernel/osrelease
// has it): iptables 1.6.2 or later on Linux 3.14 or later, Felix's test.
// Felix adds the option to natOutgoing's rules whenever it is supported.
func RandomFully(ctx context.Context, r Runner, b Backend, release string) bool {
	out, err := r.Run(ctx, b.Save, []string{"--version"}, "")
	if err != nil {
		return false
	}
	return randomFullySupported(out, release)
}

func randomFullySupported(iptablesVersion, kernelRelease string) bool {
	ipt, ok1 := parseVersion(iptablesVersion)
	ker, ok2 := parseVersion(kernelRelease)
	return ok1 && ok2 && !versionLess(ipt, [3]int{1, 6, 2}) && !versionLess(ker, [3]int{3, 14, 0})
}

func parseVersion(s string) ([3]int, bool) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return [3]int{}, false
	}
	var v [3]int
	for i := range 3 {
		if m[i+1] != "" {
			v[i], _ = strconv.Atoi(m[i+1])
		}
	}
	return v, true
}

func versionLess(a, b [3]int) bool {
	for i := range 3 {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
