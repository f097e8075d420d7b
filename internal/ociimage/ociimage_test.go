package ociimage

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/cniinstall"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

func TestSlimExcluded(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"usr/share/doc/iptables/changelog.Debian.gz", true},
		{"usr/share/doc/iptables/copyright", false},
		{"usr/share/doc/iptables/", false},
		{"usr/share/doc/", false},
		{"usr/share/man/man8/iptables.8.gz", true},
		{"usr/share/man/", false},
		{"usr/share/locale/de/LC_MESSAGES/x.mo", true},
		{"usr/share/lintian/overrides/libc6", true},
		{"usr/share/ca-certificates/mozilla/ISRG_Root_X1.crt", false},
		{"usr/sbin/xtables-nft-multi", false},
	} {
		if got := slimExcluded(tc.name); got != tc.want {
			t.Errorf("slimExcluded(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMergedUsr(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"lib/x86_64-linux-gnu/libc.so.6", "usr/lib/x86_64-linux-gnu/libc.so.6", true},
		{"lib64/ld-linux-x86-64.so.2", "usr/lib64/ld-linux-x86-64.so.2", true},
		{"sbin/ip", "usr/sbin/ip", true},
		{"bin/", "", false},
		{"lib/", "", false},
		{"usr/lib/os-release", "usr/lib/os-release", true},
		{"library/x", "library/x", true},
		{"etc/ethertypes", "etc/ethertypes", true},
	} {
		got, ok := mergedUsr(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("mergedUsr(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// The iptables package's postinst (Debian bookworm), abridged to one
// family: legacy at 10, nft at 20, each with two slaves.
const iptablesPostinst = `#!/bin/sh
set -e
if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ]; then
	update-alternatives \
	  --install /usr/sbin/iptables iptables /usr/sbin/iptables-legacy 10 \
	  --slave /usr/sbin/iptables-restore iptables-restore /usr/sbin/iptables-legacy-restore \
	  --slave /usr/sbin/iptables-save iptables-save /usr/sbin/iptables-legacy-save
        update-alternatives \
          --install /usr/sbin/iptables iptables /usr/sbin/iptables-nft 20 \
          --slave /usr/sbin/iptables-restore iptables-restore /usr/sbin/iptables-nft-restore \
          --slave /usr/sbin/iptables-save iptables-save /usr/sbin/iptables-nft-save
        update-alternatives --install /usr/sbin/ebtables ebtables /usr/sbin/ebtables-nft 20
fi
`

func TestAlternatives(t *testing.T) {
	got := chooseAlternatives(alternatives(iptablesPostinst))
	want := []alternative{
		{link: "/usr/sbin/ebtables", name: "ebtables", target: "/usr/sbin/ebtables-nft", priority: 20},
		{link: "/usr/sbin/iptables", name: "iptables", target: "/usr/sbin/iptables-nft", priority: 20, slaves: []alternative{
			{link: "/usr/sbin/iptables-restore", name: "iptables-restore", target: "/usr/sbin/iptables-nft-restore"},
			{link: "/usr/sbin/iptables-save", name: "iptables-save", target: "/usr/sbin/iptables-nft-save"},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("alternatives:\ngot  %+v\nwant %+v", got, want)
	}
	if got := alternatives("#!/bin/sh\nset -e\nldconfig\n"); len(got) != 0 {
		t.Errorf("a script without update-alternatives: %+v", got)
	}
}

// TestBuild builds the calico-node image from Debian's packages (the
// host's apt sources; downloaded once into the cache) and the binary,
// unpacks it as a runtime would and runs its tools in it: the image is
// usable, not just well-formed. The same inputs give the same digest,
// with the base layer cached or built anew.
func TestBuild(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: runs the image's programs chrooted into its root filesystem")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := testbin.Static(t)
	cache, err := DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "image.tar")
	digest, err := Build(ctx, Options{Binary: bin, Out: out, CacheDir: cache, Name: "example.test/calico-node:t1"})
	if err != nil {
		t.Fatal(err)
	}

	// The base layer again, from the same packages but not from the
	// cache: same bytes, same image.
	fresh := filepath.Join(dir, "cache")
	if err := os.MkdirAll(fresh, 0o755); err != nil {
		t.Fatal(err)
	}
	// The packages are the cached ones (no second download).
	if err := os.Symlink(filepath.Join(cache, "debs"), filepath.Join(fresh, "debs")); err != nil {
		t.Fatal(err)
	}
	again, err := Build(ctx, Options{Binary: bin, Out: filepath.Join(dir, "again.tar"), CacheDir: fresh, Name: "example.test/calico-node:t1"})
	if err != nil {
		t.Fatal(err)
	}
	if again != digest {
		t.Errorf("same packages and binary, different image: %s then %s", digest, again)
	}

	cfg, root := unpackImage(t, out, filepath.Join(dir, "rootfs"))
	if cfg.Config.Entrypoint[0] != "/usr/bin/calico-node" || !reflect.DeepEqual(cfg.Config.Cmd, []string{"run"}) {
		t.Errorf("entrypoint %v cmd %v, want the Dockerfile's [/usr/bin/calico-node] [run]", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	for _, link := range []string{"calicoctl", "calico", "calico-ipam"} {
		if target, err := os.Readlink(filepath.Join(root, "usr/bin", link)); err != nil || target != "calico-node" {
			t.Errorf("/usr/bin/%s -> %q (%v), want calico-node", link, target, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "usr/share/man/man8/iptables.8.gz")); err == nil {
		t.Error("man pages in the image")
	}
	if data, err := os.ReadFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")); err != nil || strings.Count(string(data), "BEGIN CERTIFICATE") < 100 {
		t.Errorf("CA bundle: %d certificates (%v)", strings.Count(string(data), "BEGIN CERTIFICATE"), err)
	}
	// What the dataplane runs, with the image's libraries only.
	for _, tc := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"iptables", "--version"}, "(nf_tables)"},
		{[]string{"iptables-legacy-save", "--version"}, "(legacy)"},
		{[]string{"ip6tables-restore", "--version"}, "(nf_tables)"},
		{[]string{"ipset", "--version"}, "ipset v"},
		{[]string{"ip", "-V"}, "iproute2"},
		{[]string{"calico-node", "version"}, ""},
		{[]string{"calicoctl", "--help"}, "calicoctl"},
	} {
		// Path and Args as the image sees them: chroot comes before exec.
		cmd := &exec.Cmd{Path: lookIn(t, root, tc.cmd[0]), Args: tc.cmd, Env: cfg.Config.Env, Dir: "/",
			SysProcAttr: &syscall.SysProcAttr{Chroot: root}}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v in the image: %v\n%s", tc.cmd, err, out)
		}
	}
	// The plugins install-cni chains after calico, as CNI runs them.
	for _, name := range cniinstall.ChainedPlugins {
		cmd := &exec.Cmd{Path: lookIn(t, root, name), Args: []string{name}, Env: append(cfg.Config.Env, "CNI_COMMAND=VERSION"), Dir: "/",
			Stdin: strings.NewReader(`{"cniVersion": "1.0.0"}`), SysProcAttr: &syscall.SysProcAttr{Chroot: root}}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "supportedVersions") {
			t.Errorf("%s VERSION in the image: %v\n%s", name, err, out)
		}
	}
}

type imageConfig struct {
	Config struct {
		Entrypoint, Cmd, Env []string
	}
}

// unpackImage reads an OCI archive and applies its layers to dir, as a
// runtime's snapshotter would (the image has no whiteouts).
func unpackImage(t *testing.T, archive, dir string) (imageConfig, string) {
	t.Helper()
	blobs := map[string][]byte{}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		blobs[h.Name] = data
	}
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, blobs["index.json"])
	}
	if name := index.Manifests[0].Annotations["io.containerd.image.name"]; name != "example.test/calico-node:t1" {
		t.Errorf("image name %q", name)
	}
	blob := func(d string) []byte {
		b, ok := blobs[blobPath(d)]
		if !ok {
			t.Fatalf("no blob %s", d)
		}
		if digest(b) != d {
			t.Fatalf("blob %s has digest %s", d, digest(b))
		}
		return b
	}
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	var cfg imageConfig
	if err := json.Unmarshal(blob(manifest.Config.Digest), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, l := range manifest.Layers {
		lr := tar.NewReader(strings.NewReader(string(blob(l.Digest))))
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, h.Name)
			switch h.Typeflag {
			case tar.TypeDir:
				err = os.MkdirAll(p, os.FileMode(h.Mode)&os.ModePerm)
			case tar.TypeSymlink:
				os.Remove(p)
				err = os.Symlink(h.Linkname, p)
			case tar.TypeLink:
				err = os.Link(filepath.Join(dir, h.Linkname), p)
			case tar.TypeReg:
				var data []byte
				if data, err = io.ReadAll(lr); err == nil {
					err = os.WriteFile(p, data, os.FileMode(h.Mode)&os.ModePerm)
				}
			}
			if err != nil {
				t.Fatalf("layer %s: %s: %v", l.Digest, h.Name, err)
			}
		}
	}
	return cfg, dir
}

// lookIn finds name on the image's PATH, following its links inside root.
func lookIn(t *testing.T, root, name string) string {
	t.Helper()
	for _, d := range []string{"/usr/sbin", "/usr/bin"} {
		if _, err := os.Lstat(filepath.Join(root, d, name)); err == nil {
			return filepath.Join(d, name)
		}
	}
	t.Fatalf("%s not in the image", name)
	return ""
}
