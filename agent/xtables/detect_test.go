package xtables

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// saveRunner answers iptables-*-save with canned rulesets; a command with
// no entry fails as a missing one would.
type saveRunner map[string]string

func (s saveRunner) Run(_ context.Context, name string, args []string, _ string) (string, error) {
	key := strings.TrimSpace(name + " " + strings.Join(args, " "))
	out, ok := s[key]
	if !ok {
		return "", errors.New("exec: " + name + ": not found")
	}
	return out, nil
}

func ruleset(chains []string, rules int) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n")
	for _, c := range chains {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	for i := 0; i < rules; i++ {
		fmt.Fprintf(&b, "-A INPUT -s 198.51.100.%d/32 -j ACCEPT\n", i)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func TestDetectMode(t *testing.T) {
	const nftVersion, legacyVersion = "iptables v1.8.9 (nf_tables)\n", "iptables v1.8.9 (legacy)\n"
	for _, tc := range []struct {
		name string
		want string // FELIX_IPTABLESBACKEND
		host saveRunner
		mode string
	}{
		{"kubelet's hint in nft, image defaults to legacy", "", saveRunner{
			"iptables-nft-save":    ruleset([]string{"KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"}, 0),
			"iptables-legacy-save": ruleset(nil, 30),
			"iptables --version":   legacyVersion,
		}, "nft"},
		{"kubelet's hint in legacy, image defaults to nft", "", saveRunner{
			"iptables-nft-save":    ruleset(nil, 2),
			"iptables-legacy-save": ruleset([]string{"KUBE-IPTABLES-HINT"}, 0),
			"iptables --version":   nftVersion,
		}, "legacy"},
		{"only the canary, in legacy", "", saveRunner{
			"iptables-nft-save":    ruleset(nil, 0),
			"iptables-legacy-save": ruleset([]string{"KUBE-KUBELET-CANARY"}, 0),
			"iptables --version":   nftVersion,
		}, "legacy"},
		{"no hint: more rules in legacy (both families)", "", saveRunner{
			"iptables-nft-save":     ruleset(nil, 3),
			"iptables-legacy-save":  ruleset(nil, 2),
			"ip6tables-legacy-save": ruleset(nil, 2),
			"iptables --version":    nftVersion,
		}, "legacy"},
		{"no hint: more rules in nft", "", saveRunner{
			"iptables-nft-save":    ruleset(nil, 5),
			"iptables-legacy-save": ruleset(nil, 1),
			"iptables --version":   legacyVersion,
		}, "nft"},
		{"no rules anywhere: iptables' own default", "", saveRunner{
			"iptables-nft-save":    ruleset(nil, 0),
			"iptables-legacy-save": ruleset(nil, 0),
			"iptables --version":   legacyVersion,
		}, "legacy"},
		{"no legacy tools", "", saveRunner{
			"iptables-nft-save":  ruleset(nil, 0),
			"iptables --version": nftVersion,
		}, "nft"},
		{"FELIX_IPTABLESBACKEND=Legacy beats the hint", "legacy", saveRunner{
			"iptables-nft-save": ruleset([]string{"KUBE-IPTABLES-HINT"}, 0),
		}, "legacy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode, err := DetectMode(context.Background(), tc.host, tc.want)
			if err != nil || mode != tc.mode {
				t.Errorf("DetectMode = %q, %v; want %q", mode, err, tc.mode)
			}
		})
	}
	if _, err := DetectMode(context.Background(), saveRunner{}, "ebpf"); err == nil {
		t.Error("an unknown backend was accepted")
	}
	if _, err := DetectMode(context.Background(), saveRunner{}, ""); err == nil {
		t.Error("no iptables at all: want an error")
	}
}

func TestRandomFullySupported(t *testing.T) {
	tests := []struct {
		ipt, kernel string
		want        bool
	}{
		{"iptables-nft-save v1.8.9 (nf_tables)", "6.1.0-18-amd64", true},
		{"iptables-save v1.6.2 (legacy)", "3.14.0", true},
		{"iptables-save v1.6.1", "5.10.0", false},
		{"iptables-save v1.8.4 (legacy)", "3.13.11-generic", false},
		{"iptables-save v1.8.4 (legacy)", "4.19.0", true},
		{"garbage", "5.10.0", false},
	}
	for _, tc := range tests {
		if got := randomFullySupported(tc.ipt, tc.kernel); got != tc.want {
			t.Errorf("randomFullySupported(%q, %q) = %v, want %v", tc.ipt, tc.kernel, got, tc.want)
		}
	}
}
