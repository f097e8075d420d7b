package kubetest

import "testing"

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
