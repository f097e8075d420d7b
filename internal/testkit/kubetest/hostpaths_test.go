package kubetest

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// A missing host path is made below its deepest existing ancestor, links
// resolved (/var/run/calico on a host where /var/run → /run).
func TestSplitExisting(t *testing.T) {
	root := t.TempDir()
	root, _ = filepath.EvalSymlinks(root)
	for _, d := range []string{"run", "var", "etc/cni"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../run", filepath.Join(root, "var/run")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		anc  string
		rest []string
	}{
		{"var/run/calico", "run", []string{"calico"}},
		{"etc/cni/net.d", "etc/cni", []string{"net.d"}},
		{"etc/cni", "etc/cni", nil},
		{"opt/cni/bin", "", []string{"opt", "cni", "bin"}},
		{"var/lib/calico", "var", []string{"lib", "calico"}},
	} {
		anc, rest := splitExisting(filepath.Join(root, tc.path))
		if want := filepath.Join(root, tc.anc); anc != want || !reflect.DeepEqual(rest, tc.rest) {
			t.Errorf("splitExisting(%s) = %s, %q; want %s, %q", tc.path, anc, rest, want, tc.rest)
		}
	}
}
