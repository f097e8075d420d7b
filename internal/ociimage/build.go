package ociimage

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/projectcalico/calico-node/cniinstall"
)

// DefaultName is the image reference deploy/calico-node.yaml and
// deploy/calico-node-kdd.yaml name (imagePullPolicy IfNotPresent): an
// image imported under it is used as it is, no registry asked.
const DefaultName = "localhost:5000/calico-node:dev"

// baseFormat changes whenever writeBase would write a different layer
// from the same packages, so that cached base layers are rebuilt.
const baseFormat = "calico-node-base/1"

// Options say what Build builds.
type Options struct {
	// Binary is the calico-node executable; statically linked (built with
	// CGO_ENABLED=0, as `make build` and the Dockerfile do), since
	// install-cni copies it onto hosts of any libc as the CNI plugin.
	// The plugins install-cni chains after calico (cniinstall.ChainedPlugins:
	// portmap, bandwidth) are taken from beside it, as `make build` leaves
	// them, and go beside it in the image.
	Binary string
	// Name is the image reference; DefaultName when empty.
	Name string
	// Out is the OCI archive to write.
	Out string
	// CacheDir holds downloaded packages and the base layer;
	// DefaultCacheDir() when empty.
	CacheDir string
	// Labels are the image config's labels (e.g. the version).
	Labels map[string]string
	// Progress receives one line per slow step (may be nil).
	Progress io.Writer
}

// DefaultCacheDir is $CALICO_IMAGE_CACHE, else ~/.cache/calico-node/image.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv("CALICO_IMAGE_CACHE"); d != "" {
		return d, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locate cache directory (set CALICO_IMAGE_CACHE): %w", err)
	}
	return filepath.Join(c, "calico-node", "image"), nil
}

// Build writes the calico-node image of o.Binary to o.Out and returns its
// manifest digest.
func Build(ctx context.Context, o Options) (string, error) {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.CacheDir == "" {
		d, err := DefaultCacheDir()
		if err != nil {
			return "", err
		}
		o.CacheDir = d
	}
	arch, err := staticELF(o.Binary)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(o.CacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", o.CacheDir, err)
	}
	unlock, err := lock(ctx, filepath.Join(o.CacheDir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()

	base, err := baseLayer(ctx, o.CacheDir, o.Progress)
	if err != nil {
		return "", err
	}
	if base.arch != arch {
		return "", fmt.Errorf("%s is %s, the packages of this host's apt sources are %s", o.Binary, arch, base.arch)
	}

	// The calico-node layer: the Dockerfile's COPY and RUN ln -s.
	tmp, err := os.MkdirTemp(o.CacheDir, "build-")
	if err != nil {
		return "", fmt.Errorf("create work dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	l, err := NewLayer(filepath.Join(tmp, "calico-node.tar"))
	if err != nil {
		return "", err
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		l.Close()
		return "", fmt.Errorf("read %s: %w", o.Binary, err)
	}
	l.Dir("usr", 0o755)
	l.Dir("usr/bin", 0o755)
	l.File("usr/bin/calico-node", 0o755, bin)
	// One binary, several names: argv[0] picks the entry point.
	for _, name := range []string{"calicoctl", "calico", "calico-ipam"} {
		l.Symlink("usr/bin/"+name, "calico-node")
	}
	for _, name := range cniinstall.ChainedPlugins {
		path := filepath.Join(filepath.Dir(o.Binary), name)
		a, err := staticELF(path)
		if err == nil && a != arch {
			err = fmt.Errorf("%s is %s, calico-node %s", path, a, arch)
		}
		if err != nil {
			l.Close()
			return "", fmt.Errorf("the %s CNI plugin beside %s (make build builds it): %w", name, o.Binary, err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			l.Close()
			return "", fmt.Errorf("read %s: %w", path, err)
		}
		l.File("usr/bin/"+name, 0o755, data)
	}
	top, err := l.Close()
	if err != nil {
		return "", err
	}
	return WriteArchive(o.Out, Image{
		Name:       o.Name,
		Arch:       arch,
		Entrypoint: []string{"/usr/bin/calico-node"},
		Cmd:        []string{"run"},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels:     o.Labels,
		Layers:     []Blob{base.Blob, top},
	})
}

// base is the cached base layer.
type base struct {
	Blob
	arch string // GOARCH of its packages
}

// baseLayer resolves the packages and returns the base layer, from the
// cache when it holds one of exactly these packages.
func baseLayer(ctx context.Context, cache string, progress io.Writer) (base, error) {
	archives := filepath.Join(cache, "debs")
	debs, err := Resolve(ctx, archives, Packages)
	if err != nil {
		return base{}, err
	}
	arch := ""
	for _, d := range debs {
		if d.Arch != "all" {
			arch = goArch(d.Arch)
			break
		}
	}
	key := sha256.New()
	fmt.Fprintln(key, baseFormat)
	for _, d := range debs {
		fmt.Fprintln(key, d.File())
	}
	name := "base-" + hex.EncodeToString(key.Sum(nil))[:32]
	layerPath := filepath.Join(cache, name+".tar")
	digestPath := filepath.Join(cache, name+".digest")
	if d, err := os.ReadFile(digestPath); err == nil {
		if st, err := os.Stat(layerPath); err == nil {
			return base{Blob{Path: layerPath, Digest: strings.TrimSpace(string(d)), Size: st.Size()}, arch}, nil
		}
	}

	start := time.Now()
	l, err := NewLayer(layerPath + ".tmp")
	if err != nil {
		return base{}, err
	}
	err = writeBase(ctx, l, archives, debs)
	blob, cerr := l.Close()
	if err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(layerPath + ".tmp")
		return base{}, err
	}
	// The digest file last: a digest in the cache always has its layer.
	if err := os.Rename(layerPath+".tmp", layerPath); err != nil {
		return base{}, fmt.Errorf("cache base layer: %w", err)
	}
	if err := os.WriteFile(digestPath, []byte(blob.Digest+"\n"), 0o644); err != nil {
		return base{}, fmt.Errorf("cache base layer: %w", err)
	}
	blob.Path = layerPath
	fmt.Fprintf(progress, "ociimage: base layer of %d Debian packages (%d MB) in %s\n", len(debs), blob.Size>>20, time.Since(start).Round(time.Millisecond))
	prune(cache, archives, name, debs)
	return base{blob, arch}, nil
}

// prune removes base layers and packages of earlier builds.
func prune(cache, archives, keep string, debs []Deb) {
	old, _ := filepath.Glob(filepath.Join(cache, "base-*"))
	for _, p := range old {
		if !strings.HasPrefix(filepath.Base(p), keep+".") {
			os.Remove(p)
		}
	}
	want := map[string]bool{}
	for _, d := range debs {
		want[d.File()] = true
	}
	files, _ := filepath.Glob(filepath.Join(archives, "*.deb"))
	for _, p := range files {
		if !want[filepath.Base(p)] {
			os.Remove(p)
		}
	}
}

// staticELF checks that path is a statically linked ELF executable and
// returns its GOARCH.
func staticELF(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("binary %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("binary %s is dynamically linked: build it with CGO_ENABLED=0 (make build does)", path)
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_PPC64:
		return "ppc64le", nil
	case elf.EM_S390:
		return "s390x", nil
	case elf.EM_RISCV:
		return "riscv64", nil
	}
	return "", fmt.Errorf("binary %s: unsupported machine %s", path, f.Machine)
}

// goArch maps a Debian architecture to Go's (and OCI's) name.
func goArch(deb string) string {
	switch deb {
	case "ppc64el":
		return "ppc64le"
	case "armhf":
		return "arm"
	case "i386":
		return "386"
	}
	return deb
}

// lock takes an exclusive flock on path, waiting for ctx.
func lock(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for lock %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
