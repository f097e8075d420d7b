// Package testbin gives tests the calico-node binary and its argv[0] names.
//
// `make test` builds the binary once and exports CALICO_NODE_BIN; a plain
// `go test` of one package builds it into a temporary directory instead, at
// most once per test process.
//
// Thread safety: Path and Dir are safe to call from parallel tests.
package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once     sync.Once
	built    string
	buildErr error
	buildOut []byte
)

// Path returns the absolute path of the calico-node binary.
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CALICO_NODE_BIN"); p != "" {
		return p
	}
	once.Do(func() {
		dir, err := os.MkdirTemp("", "calico-node-bin-")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "calico-node")
		cmd := exec.Command("go", "build", "-o", built, ".")
		cmd.Dir = RepoRoot()
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build calico-node: %v\n%s", buildErr, buildOut)
	}
	return built
}

// Dir returns a fresh directory holding calico-node and the symlinks
// calico, calico-ipam and calicoctl to it, as installed on a node.
func Dir(t testing.TB) string {
	t.Helper()
	bin := Path(t)
	dir := t.TempDir()
	for _, name := range []string{"calico-node", "calico", "calico-ipam", "calicoctl"} {
		if err := os.Symlink(bin, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// RepoRoot returns the module's root directory (where go.mod is), found
// from this source file so that tests work from any package directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			panic("testbin: no go.mod above " + file)
		}
		dir = parent
	}
}
