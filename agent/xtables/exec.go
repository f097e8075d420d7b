package xtables

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
)

// Runner executes a command with stdin and returns its stdout. The real
// one execs; tests substitute a fake.
type Runner interface {
	Run(ctx context.Context, name string, args []string, stdin string) (string, error)
}

// ExecRunner runs commands with os/exec.
type ExecRunner struct{}

// Run implements Runner.
func (ExecRunner) Run(ctx context.Context, name string, args []string, stdin string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Backend names the commands of one iptables flavour for one IP family.
type Backend struct {
	Mode    string // "nft" or "legacy"
	Save    string // e.g. "iptables-nft-save"
	Restore string // e.g. "iptables-nft-restore"
	Family  int    // 4 or 6
}

var modeRE = regexp.MustCompile(`\((nf_tables|legacy)\)`)

// Detect returns the backend the host's `iptables` (or `ip6tables`)
// command uses, so our rules land where every other tool on the host looks.
func Detect(ctx context.Context, r Runner, family int) (Backend, error) {
	base := "iptables"
	if family == 6 {
		base = "ip6tables"
	}
	out, err := r.Run(ctx, base, []string{"--version"}, "")
	if err != nil {
		return Backend{}, fmt.Errorf("detect iptables backend: %w (is the iptables package installed?)", err)
	}
	mode := "legacy"
	if m := modeRE.FindStringSubmatch(out); m != nil && m[1] == "nf_tables" {
		mode = "nft"
	}
	return BackendFor(mode, family), nil
}

// Modes returns the iptables flavours Detect can answer. Both may hold
// rules on one host (a host that switched, or tools that disagree), each in
// its own tables.
func Modes() []string { return []string{"nft", "legacy"} }

// BackendFor names the commands of mode ("nft" or "legacy") for family.
func BackendFor(mode string, family int) Backend {
	base := "iptables"
	if family == 6 {
		base = "ip6tables"
	}
	return Backend{Mode: mode, Save: base + "-" + mode + "-save", Restore: base + "-" + mode + "-restore", Family: family}
}
