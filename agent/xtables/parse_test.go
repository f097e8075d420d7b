package xtables

import (
	"reflect"
	"testing"
)

// Rules read back from iptables-save are replayed as -D arguments (the
// node's cleanup, the test node's teardown): quoting must survive.
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
			if got := SplitRule(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SplitRule = %q, want %q", got, tt.want)
			}
		})
	}
}
