// Package testbin gives tests the calico-node binary and its argv[0] names.
//
// `make test` builds the binary once and exports CALICO_NODE_BIN; a plain
// `go test` of one package builds it into a temporary directory instead, at
// most once per test process, as `make build` does (CGO_ENABLED=0, the
// urfave_cli_no_docs tag).
//
// Thread safety: Path and Dir are safe to call from parallel tests.
package testbin

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/projectcalico/calico-node/cniinstall"
)

var (
	once     sync.Once
	built    string
	buildErr error
	buildOut []byte

	staticOnce     sync.Once
	staticBuilt    string
	staticBuildErr error
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
		buildOut, buildErr = build(built)
	})
	if buildErr != nil {
		t.Fatalf("build calico-node: %v\n%s", buildErr, buildOut)
	}
	return built
}

// Static returns a statically linked calico-node, as the image holds it:
// Path when that is one (`make build`'s is), else one built once per test
// process (CALICO_NODE_BIN may be a developer's cgo build).
func Static(t testing.TB) string {
	t.Helper()
	p := Path(t)
	if static, err := isStatic(p); err != nil {
		t.Fatalf("calico-node binary %s: %v", p, err)
	} else if static {
		return p
	}
	staticOnce.Do(func() {
		dir, err := os.MkdirTemp("", "calico-node-static-")
		if err != nil {
			staticBuildErr = err
			return
		}
		staticBuilt = filepath.Join(dir, "calico-node")
		if out, err := build(staticBuilt); err != nil {
			staticBuildErr = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if staticBuildErr != nil {
		t.Fatalf("build static calico-node: %v", staticBuildErr)
	}
	return staticBuilt
}

// build builds calico-node as `make build` does, with the CNI plugins
// install-cni chains after it (portmap, bandwidth) beside it.
func build(out string) ([]byte, error) {
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "urfave_cli_no_docs", "-o", out, ".")
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return b, err
	}
	for _, p := range cniinstall.ChainedPlugins {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(filepath.Dir(out), p), cniPluginsMeta+p)
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return b, err
		}
	}
	return nil, nil
}

// cniPluginsMeta is where containernetworking/plugins keeps portmap and
// bandwidth.
const cniPluginsMeta = "github.com/containernetworking/plugins/plugins/meta/"

// isStatic reports whether an ELF executable has no program interpreter.
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
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
