package kubetest

import (
	"reflect"
	"testing"
)

// The teardown deletes jumps to kubelet's chains by replaying
// iptables-save lines as -D arguments: quoting must survive.
func TestSplitRule(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"INPUT -j KUBE-FIREWALL", []string{"INPUT", "-j", "KUBE-FIREWALL"}},
		{`OUTPUT -m comment --comment "kubernetes firewall for dropping marked packets" -j KUBE-FIREWALL`,
			[]string{"OUTPUT", "-m", "comment", "--comment", "kubernetes firewall for dropping marked packets", "-j", "KUBE-FIREWALL"}},
		{`FORWARD -m comment --comment "a \"quoted\" word" -j CNI-X`, []string{"FORWARD", "-m", "comment", "--comment", `a "quoted" word`, "-j", "CNI-X"}},
		{`X --comment "" -j Y`, []string{"X", "--comment", "", "-j", "Y"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := splitRule(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("splitRule = %q, want %q", got, tt.want)
			}
		})
	}
}

// Only nftables tables without rules are removed at teardown.
func TestNftHasRules(t *testing.T) {
	tests := []struct {
		name, listing string
		want          bool
	}{
		{"empty base chains", "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy accept;\n\t}\n}\n", false},
		{"a rule", "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy accept;\n\t\tcounter packets 0 bytes 0 jump KUBE-FIREWALL\n\t}\n}\n", true},
		{"nothing", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nftHasRules(tt.listing); got != tt.want {
				t.Errorf("nftHasRules = %v, want %v", got, tt.want)
			}
		})
	}
}
