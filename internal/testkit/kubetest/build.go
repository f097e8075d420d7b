package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Version is the Kubernetes release the harness builds and runs.
const Version = "1.36.3"

// Binaries are the paths of the built Kubernetes programs.
type Binaries struct {
	APIServer         string
	ControllerManager string
	Kubectl           string
	// Kubelet is only run by StartNode, Scheduler only by clusters
	// started WithScheduler; they are built with the others so that
	// `make kube-bins` fills the whole cache in one go.
	Kubelet   string
	Scheduler string
}

// binaryNames are the programs built, in build order; kube-apiserver first
// because most of the compile work is shared with the others.
var binaryNames = []string{"kube-apiserver", "kube-controller-manager", "kubectl", "kubelet", "kube-scheduler"}

// BinDir is the directory holding (or receiving) the binaries of Version.
func BinDir() (string, error) {
	root := os.Getenv("CALICO_KUBE_BIN_DIR")
	if root == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("locate cache directory (set CALICO_KUBE_BIN_DIR): %w", err)
		}
		root = filepath.Join(cache, "calico-node", "kube-bin")
	}
	return filepath.Join(root, "v"+Version), nil
}

func binariesIn(dir string) Binaries {
	return Binaries{
		APIServer:         filepath.Join(dir, "kube-apiserver"),
		ControllerManager: filepath.Join(dir, "kube-controller-manager"),
		Kubectl:           filepath.Join(dir, "kubectl"),
		Kubelet:           filepath.Join(dir, "kubelet"),
		Scheduler:         filepath.Join(dir, "kube-scheduler"),
	}
}

// missing lists the binaries not yet in dir.
func missing(dir string) []string {
	var out []string
	for _, name := range binaryNames {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode()&0o111 == 0 {
			out = append(out, name)
		}
	}
	return out
}

// EnsureBinaries returns the cached binaries, building the missing ones
// first. Concurrent callers, in this process or others, serialise on a
// lock file in the cache directory, so each binary is built once. Build
// progress goes to progress (may be nil).
func EnsureBinaries(ctx context.Context, progress io.Writer) (Binaries, error) {
	if progress == nil {
		progress = io.Discard
	}
	dir, err := BinDir()
	if err != nil {
		return Binaries{}, err
	}
	if len(missing(dir)) == 0 {
		return binariesIn(dir), nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("create %s: %w", dir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".build.lock"), progress)
	if err != nil {
		return Binaries{}, err
	}
	defer unlock()
	// Another process may have built them while we waited.
	todo := missing(dir)
	if len(todo) == 0 {
		return binariesIn(dir), nil
	}
	if err := build(ctx, dir, todo, progress); err != nil {
		return Binaries{}, err
	}
	return binariesIn(dir), nil
}

// lockFile takes an exclusive flock on path, waiting for ctx.
func lockFile(ctx context.Context, path string, progress io.Writer) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	announced := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !announced {
			fmt.Fprintf(progress, "kubetest: waiting for another process building Kubernetes binaries (%s)\n", path)
			announced = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for build lock %s: %w", path, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// goTool is the go command on PATH, else the one of the official
// tarball's install location (PATH may be minimal under make or sudo).
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if p := "/usr/local/go/bin/go"; fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// stagingReplace matches the staging replace lines of k8s.io/kubernetes'
// go.mod: "\tk8s.io/api => ./staging/src/k8s.io/api".
var stagingReplace = regexp.MustCompile(`(?m)^\s+(k8s\.io/[a-z0-9-]+)\s+=>\s+\./staging/`)

// goDirective matches the go version line of a go.mod.
var goDirective = regexp.MustCompile(`(?m)^go ([0-9.]+)\s*$`)

func build(ctx context.Context, dir string, names []string, progress io.Writer) error {
	start := time.Now()
	src := filepath.Join(filepath.Dir(dir), "src-v"+Version)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("create build module %s: %w", src, err)
	}
	fmt.Fprintf(progress, "kubetest: building %s v%s into %s (cold: several minutes, ~2 GB RAM)\n", strings.Join(names, ", "), Version, dir)
	env := append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "CGO_ENABLED=0", "GOWORK=off")
	run := func(logName string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, goTool(), args...)
		cmd.Dir = src
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if logName != "" {
			os.WriteFile(filepath.Join(src, logName), out.Bytes(), 0o644)
		}
		if err != nil {
			return out.Bytes(), fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(out.Bytes(), 30))
		}
		return out.Bytes(), nil
	}

	// The module proxy gives k8s.io/kubernetes' go.mod; its staging
	// modules are published as k8s.io/<name> v0.<minor>.<patch>.
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module kubetestbuild\n"), 0o644); err != nil {
		return fmt.Errorf("write go.mod: %w", err)
	}
	out, err := run("", "mod", "download", "-json", "k8s.io/kubernetes@v"+Version)
	if err != nil {
		return fmt.Errorf("download k8s.io/kubernetes@v%s from the module proxy: %w", Version, err)
	}
	var dl struct{ GoMod, Error string }
	if err := json.Unmarshal(out, &dl); err != nil || dl.GoMod == "" {
		return fmt.Errorf("download k8s.io/kubernetes@v%s: no go.mod in %q (%v)", Version, out, dl.Error)
	}
	kmod, err := os.ReadFile(dl.GoMod)
	if err != nil {
		return fmt.Errorf("read k8s.io/kubernetes go.mod: %w", err)
	}
	staging := "v0." + strings.TrimPrefix(Version, "1.")
	var gomod strings.Builder
	gomod.WriteString("module kubetestbuild\n\n")
	if m := goDirective.FindSubmatch(kmod); m != nil {
		fmt.Fprintf(&gomod, "go %s\n\n", m[1])
	}
	fmt.Fprintf(&gomod, "require k8s.io/kubernetes v%s\n\nreplace (\n", Version)
	for _, m := range stagingReplace.FindAllSubmatch(kmod, -1) {
		fmt.Fprintf(&gomod, "\t%s => %s %s\n", m[1], m[1], staging)
	}
	gomod.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod.String()), 0o644); err != nil {
		return fmt.Errorf("write go.mod: %w", err)
	}
	tools := "//go:build tools\n\npackage tools\n\nimport (\n"
	for _, n := range binaryNames {
		tools += fmt.Sprintf("\t_ %q\n", "k8s.io/kubernetes/cmd/"+n)
	}
	tools += ")\n"
	if err := os.WriteFile(filepath.Join(src, "tools.go"), []byte(tools), 0o644); err != nil {
		return fmt.Errorf("write tools.go: %w", err)
	}
	if _, err := run("tidy.log", "mod", "tidy"); err != nil {
		return err
	}

	minor := strings.SplitN(Version, ".", 3)[1]
	ld := "-s -w"
	stamp := time.Now().UTC().Format(time.RFC3339)
	for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		ld += fmt.Sprintf(" -X %[1]s.gitVersion=v%[2]s -X %[1]s.gitMajor=1 -X %[1]s.gitMinor=%[3]s -X %[1]s.gitTreeState=clean -X %[1]s.buildDate=%[4]s", p, Version, minor, stamp)
	}
	for _, n := range names {
		t0 := time.Now()
		tmp := filepath.Join(dir, n+".tmp")
		if _, err := run("build-"+n+".log", "build", "-trimpath", "-ldflags", ld, "-o", tmp, "k8s.io/kubernetes/cmd/"+n); err != nil {
			return err
		}
		// Rename last: a binary in the cache is always complete.
		if err := os.Rename(tmp, filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("install %s: %w", n, err)
		}
		fmt.Fprintf(progress, "kubetest: built %s in %s\n", n, time.Since(t0).Round(time.Second))
	}
	fmt.Fprintf(progress, "kubetest: build done in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
