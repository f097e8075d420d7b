package kubetest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

const (
	// PauseImage is the sandbox image containerd is configured with.
	PauseImage = "registry.k8s.io/pause:3.10"
	// TestImage is a busybox image (Debian's busybox-static) with every
	// applet linked: sh, sleep, ping, wget, nc, httpd, ip.
	TestImage = "docker.io/local/busybox:1"
)

// pauseSource is the sandbox process: it waits for SIGTERM/SIGINT and
// reaps zombies, which is all the pause container does.
const pauseSource = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 8)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range c {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
`

// ensureImages builds the pause and busybox image tarballs (OCI image
// layouts for `ctr images import`) into dir unless they are there. No
// registry is involved: pause is compiled here, busybox is the host's
// static binary.
func ensureImages(ctx context.Context, dir string) (pause, busybox string, err error) {
	pause, busybox = filepath.Join(dir, "pause.tar"), filepath.Join(dir, "busybox.tar")
	if fileExists(pause) && fileExists(busybox) {
		return pause, busybox, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("create %s: %w", dir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"), io.Discard)
	if err != nil {
		return "", "", err
	}
	defer unlock()
	if fileExists(pause) && fileExists(busybox) {
		return pause, busybox, nil
	}
	work, err := os.MkdirTemp(dir, "work-")
	if err != nil {
		return "", "", fmt.Errorf("create work dir: %w", err)
	}
	defer os.RemoveAll(work)

	// pause
	src := filepath.Join(work, "pause-src")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "main.go"), []byte(pauseSource), 0o644)
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module pause\n\ngo 1.22\n"), 0o644)
	cmd := exec.CommandContext(ctx, goTool(), "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(work, "pause"), ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("build pause: %w\n%s", err, out)
	}
	pauseBin, err := os.ReadFile(filepath.Join(work, "pause"))
	if err != nil {
		return "", "", fmt.Errorf("read pause: %w", err)
	}
	layer := newLayer()
	for _, d := range []string{"proc", "sys", "dev", "etc"} {
		layer.dir(d)
	}
	layer.file("pause", 0o755, pauseBin)
	if err := writeImage(filepath.Join(work, "pause.tar"), PauseImage, []string{"/pause"}, layer); err != nil {
		return "", "", err
	}

	// busybox
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return "", "", fmt.Errorf("read /bin/busybox (apt-get install busybox-static): %w", err)
	}
	// The image has no libraries: a dynamically linked busybox (Debian's
	// "busybox" package) would not start in it.
	if f, err := elf.NewFile(bytes.NewReader(bb)); err != nil {
		return "", "", fmt.Errorf("/bin/busybox: %w", err)
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				return "", "", fmt.Errorf("/bin/busybox is dynamically linked: apt-get install busybox-static")
			}
		}
	}
	list, err := exec.CommandContext(ctx, "/bin/busybox", "--list").Output()
	if err != nil {
		return "", "", fmt.Errorf("busybox --list: %w", err)
	}
	layer = newLayer()
	for _, d := range []string{"bin", "proc", "sys", "dev", "etc", "tmp", "root"} {
		layer.dir(d)
	}
	layer.file("bin/busybox", 0o755, bb)
	applets := strings.Fields(string(list))
	sort.Strings(applets)
	for _, a := range applets {
		if a != "busybox" {
			layer.symlink("bin/"+a, "busybox")
		}
	}
	layer.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"))
	layer.file("etc/group", 0o644, []byte("root:x:0:\nnobody:x:65534:\n"))
	if err := writeImage(filepath.Join(work, "busybox.tar"), TestImage, []string{"/bin/sh"}, layer); err != nil {
		return "", "", err
	}
	// Rename last: an image in the cache is always complete.
	if err := os.Rename(filepath.Join(work, "pause.tar"), pause); err != nil {
		return "", "", fmt.Errorf("install pause image: %w", err)
	}
	if err := os.Rename(filepath.Join(work, "busybox.tar"), busybox); err != nil {
		return "", "", fmt.Errorf("install busybox image: %w", err)
	}
	return pause, busybox, nil
}

// layer is an uncompressed image layer being written.
type layer struct {
	buf bytes.Buffer
	tw  *tar.Writer
}

func newLayer() *layer {
	l := &layer{}
	l.tw = tar.NewWriter(&l.buf)
	return l
}

func (l *layer) dir(name string) {
	l.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755})
}

func (l *layer) file(name string, mode int64, data []byte) {
	l.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))})
	l.tw.Write(data)
}

func (l *layer) symlink(name, target string) {
	l.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777})
}

// writeImage writes an OCI image layout tarball of one layer, tagged name.
func writeImage(out, name string, entrypoint []string, l *layer) error {
	if err := l.tw.Close(); err != nil {
		return fmt.Errorf("close layer: %w", err)
	}
	blobs := map[string][]byte{}
	blob := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		d := hex.EncodeToString(sum[:])
		blobs[d] = b
		return "sha256:" + d, len(b)
	}
	layerDigest, layerSize := blob(l.buf.Bytes())
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/bin:/usr/bin:/sbin:/usr/sbin"}, "Entrypoint": entrypoint, "WorkingDir": "/"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	configDigest, configSize := blob(config)
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": configDigest, "size": configSize},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layerSize}},
	})
	manifestDigest, manifestSize := blob(manifest)
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifestDigest, "size": manifestSize,
			"platform":    map[string]string{"architecture": runtime.GOARCH, "os": "linux"},
			"annotations": map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name[strings.LastIndex(name, ":")+1:]},
		}},
	})

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, data []byte) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))})
		tw.Write(data)
	}
	add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	add("index.json", index)
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		add("blobs/sha256/"+d, blobs[d])
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write image %s: %w", name, err)
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write image %s: %w", name, err)
	}
	return nil
}
