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
	"strings"
	"sync"
	"testing"
)

// ChainedPlugins are cniinstall.ChainedPlugins, built beside calico-node
// as `make build` builds them. (A copy: cniinstall's tests use this
// package; its TestChainedPluginsBuilt keeps the two equal.)
var ChainedPlugins = []string{"portmap", "bandwidth"}

// The binaries built for this test process, each at most once.
var (
	built       = sync.OnceValues(func() (string, error) { return buildInto("calico-node-bin-") })
	builtStatic = sync.OnceValues(func() (string, error) { return buildInto("calico-node-static-") })
)

// Path returns the absolute path of the calico-node binary.
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CALICO_NODE_BIN"); p != "" {
		return p
	}
	p, err := built()
	if err != nil {
		t.Fatalf("build calico-node: %v", err)
	}
	return p
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
	p, err := builtStatic()
	if err != nil {
		t.Fatalf("build static calico-node: %v", err)
	}
	return p
}

// buildInto builds calico-node into a new temporary directory named
// prefix* and returns its path.
func buildInto(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "calico-node")
	if out, err := build(p); err != nil {
		return "", fmt.Errorf("%w\n%s", err, out)
	}
	return p, nil
}

// build builds calico-node as `make build` does, with the CNI plugins
// install-cni chains after it (portmap, bandwidth) beside it.
func build(out string) ([]byte, error) {
	args := []string{"build", "-trimpath", "-tags", "urfave_cli_no_docs"}
	// The commit, as the Makefile stamps it.
	if rev, err := exec.Command("git", "-C", RepoRoot(), "rev-parse", "HEAD").Output(); err == nil {
		args = append(args, "-ldflags", "-X github.com/projectcalico/calico-node/internal/buildinfo.Commit="+strings.TrimSpace(string(rev)))
	}
	cmd := exec.Command("go", append(args, "-o", out, ".")...)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return b, err
	}
	for _, p := range ChainedPlugins {
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
