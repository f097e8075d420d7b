package ctl

import (
	"slices"
	"testing"
)

func TestInterspersedArgs(t *testing.T) {
	tests := []struct{ in, want []string }{
		{[]string{"get", "ippools", "-o", "yaml"}, []string{"get", "-o", "yaml", "ippools"}},
		{[]string{"get", "-o=yaml", "ippool", "p1", "-A"}, []string{"get", "-o=yaml", "-A", "ippool", "p1"}},
		{[]string{"delete", "networkset", "x", "-n", "shop", "--skip-not-exists"}, []string{"delete", "-n", "shop", "--skip-not-exists", "networkset", "x"}},
		{[]string{"patch", "ippool", "p1", "-p", `{"spec":{}}`}, []string{"patch", "-p", `{"spec":{}}`, "ippool", "p1"}},
		{[]string{"apply", "-f", "-"}, []string{"apply", "-f", "-"}},
		{[]string{"get", "x", "--", "-o"}, []string{"get", "x", "--", "-o"}},
		{[]string{"unknownverb", "a", "-b"}, []string{"unknownverb", "a", "-b"}},
		{[]string{"datastore", "migrate", "import", "-f", "etcd-data"}, []string{"datastore", "-f", "etcd-data", "migrate", "import"}},
		// Help after subcommands asks for the last one's help.
		{[]string{"datastore", "migrate", "import", "--help"}, []string{"datastore", "migrate", "import", "--help"}},
		{[]string{"datastore", "migrate", "-h"}, []string{"datastore", "migrate", "-h"}},
		{[]string{"get", "ippools", "--help"}, []string{"get", "--help", "ippools"}},
	}
	for _, tt := range tests {
		if got := InterspersedArgs(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("InterspersedArgs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	got := NormalizeArgs([]string{"-c", "/x.cfg", "get", "ippools", "--etcd-endpoints", "http://e", "-o", "yaml", "--allow-version-mismatch"})
	want := []string{"-c", "/x.cfg", "--etcd-endpoints", "http://e", "--allow-version-mismatch", "get", "-o", "yaml", "ippools"}
	if !slices.Equal(got, want) {
		t.Errorf("NormalizeArgs = %q, want %q", got, want)
	}
	if i := SplitGlobal([]string{"--etcd-endpoints", "http://x", "--allow-version-mismatch", "get", "ippools"}); i != 3 {
		t.Errorf("SplitGlobal = %d, want 3", i)
	}
}
