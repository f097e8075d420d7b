package cleanup

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/projectcalico/calico-node/cniinstall"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

const calicoConflist = `{"name": "k8s-pod-network", "cniVersion": "0.3.1",
  "plugins": [{"type": "calico", "ipam": {"type": "calico-ipam"}}, {"type": "portmap"}]}`

// layout is a node's CNI, run and data directories in a temporary
// directory.
type layout struct {
	root string
	cfg  Config
}

func newLayout(t *testing.T) *layout {
	root := t.TempDir()
	l := &layout{root: root, cfg: Config{
		DataDir:      filepath.Join(root, "data"),
		CNIConfDir:   filepath.Join(root, "net.d"),
		CNIBinDir:    filepath.Join(root, "bin"),
		CNIConfName:  cniinstall.DefaultConfName,
		CNISocket:    filepath.Join(root, "run", "calico", "cni.sock"),
		BGPSocket:    filepath.Join(root, "run", "calico", "bgp.sock"),
		IPAMLockFile: filepath.Join(root, "run", "calico", "ipam.lock"),
		StatusSocket: filepath.Join(root, "run", "calico", "status.sock"),
		StatusDir:    filepath.Join(root, "run", "calico", "endpoint-status"),
	}}
	for _, d := range []string{l.cfg.DataDir, l.cfg.CNIConfDir, l.cfg.CNIBinDir, filepath.Dir(l.cfg.CNISocket)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func (l *layout) write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (l *layout) conf(name string) string { return filepath.Join(l.cfg.CNIConfDir, name) }
func (l *layout) bin(name string) string  { return filepath.Join(l.cfg.CNIBinDir, name) }

// socket leaves a unix socket file nobody listens on, as a killed agent
// does.
func socket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
}

// everything cniinstall and the agent leave on a node.
func (l *layout) ours(t *testing.T) {
	if err := os.Symlink(testbin.Path(t), l.bin("calico")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("calico", l.bin("calico-ipam")); err != nil {
		t.Fatal(err)
	}
	l.write(t, l.conf(cniinstall.DefaultConfName), calicoConflist)
	l.write(t, l.conf(cniinstall.KubeconfigName), cniinstall.KubeconfigHeader+"apiVersion: v1\nkind: Config\n")
	for _, n := range cniinstall.TLSFileNames() {
		l.write(t, filepath.Join(l.conf(cniinstall.TLSDirName), n), "pem")
	}
	socket(t, l.cfg.CNISocket)
	socket(t, l.cfg.BGPSocket)
	socket(t, l.cfg.StatusSocket)
	l.write(t, filepath.Join(l.cfg.StatusDir, ".agent"), `{"node":"node1"}`)
	l.write(t, filepath.Join(l.cfg.StatusDir, "k8s default%2Fweb eth0"), `{"revision":"3"}`)
	l.write(t, l.cfg.IPAMLockFile, "")
	l.write(t, filepath.Join(l.cfg.DataDir, "agent.lock"), "")
	l.write(t, filepath.Join(l.cfg.DataDir, "nodename"), "node1")
	l.write(t, filepath.Join(l.cfg.DataDir, "etcd", "member", "snap", "db"), "data")
}

func planned(l *layout, opt Options) (removed, kept []string) {
	cfg := l.cfg
	cfg.Options = opt
	paths, keptItems := planFiles(readFiles(cfg), opt)
	for _, p := range paths {
		removed = append(removed, p.Kind+" "+strings.TrimPrefix(p.Path, l.root+"/"))
	}
	for _, k := range keptItems {
		kept = append(kept, strings.TrimPrefix(k.Item.Name, l.root+"/"))
	}
	return removed, kept
}

func TestPlanFilesOurs(t *testing.T) {
	l := newLayout(t)
	l.ours(t)
	// Someone else's files beside ours.
	l.write(t, l.conf("99-other.conflist"), `{"name":"other","cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}`)
	l.write(t, l.bin("bridge"), "#!/bin/sh\n")
	l.write(t, filepath.Join(l.cfg.DataDir, "mtu"), "1440")

	removed, kept := planned(l, Options{})
	want := []string{
		"symlink bin/calico", "symlink bin/calico-ipam",
		"file net.d/10-calico.conflist", "file net.d/calico-kubeconfig",
		"file net.d/calico-tls/etcd-ca", "file net.d/calico-tls/etcd-cert", "file net.d/calico-tls/etcd-key",
		"directory net.d/calico-tls",
		"socket run/calico/cni.sock", "socket run/calico/bgp.sock", "socket run/calico/status.sock", "file run/calico/ipam.lock",
		"directory run/calico/endpoint-status", "directory run/calico",
		"file data/agent.lock",
	}
	if !slices.Equal(removed, want) {
		t.Errorf("removed:\n%q\nwant:\n%q", removed, want)
	}
	if len(kept) != 0 {
		t.Errorf("kept %q", kept)
	}

	// The datastore goes only when asked; the data dir stays while it
	// holds anything else.
	removed, _ = planned(l, Options{RemoveData: true})
	if !slices.Contains(removed, "directory data/etcd") || !slices.Contains(removed, "file data/nodename") || slices.Contains(removed, "directory data") {
		t.Errorf("with RemoveData: %q", removed)
	}
	os.Remove(filepath.Join(l.cfg.DataDir, "mtu"))
	removed, _ = planned(l, Options{RemoveData: true})
	if removed[len(removed)-1] != "directory data" {
		t.Errorf("an emptied data dir is not removed last: %q", removed)
	}
}

func TestPlanFilesNotOurs(t *testing.T) {
	l := newLayout(t)
	// Another Calico's plugin (a shell script here) and its config: both
	// stay, as do the TLS files that config uses.
	l.write(t, l.bin("calico"), "#!/bin/sh\necho stock calico\n")
	os.Chmod(l.bin("calico"), 0o755)
	if err := os.Symlink("calico", l.bin("calico-ipam")); err != nil {
		t.Fatal(err)
	}
	l.write(t, l.conf(cniinstall.DefaultConfName), calicoConflist)
	l.write(t, filepath.Join(l.conf(cniinstall.TLSDirName), "etcd-ca"), "pem")
	l.write(t, l.conf(cniinstall.KubeconfigName), "# Kubeconfig file for Calico CNI plugin.\napiVersion: v1\n")
	// Not what their names promise.
	l.write(t, l.cfg.CNISocket, "a regular file")
	l.write(t, l.cfg.IPAMLockFile, "someone's data")
	l.write(t, filepath.Join(l.cfg.DataDir, "etcd", "notes.txt"), "no member/ here")
	// Felix's endpoint status files: no calico-node marker.
	l.write(t, filepath.Join(l.cfg.StatusDir, "k8s default%2Fweb eth0"), "")

	removed, kept := planned(l, Options{RemoveData: true})
	if len(removed) != 0 {
		t.Errorf("removed %q", removed)
	}
	wantKept := []string{
		"bin/calico", "bin/calico-ipam", "net.d/10-calico.conflist", "net.d/calico-kubeconfig",
		"net.d/calico-tls/etcd-ca", "run/calico/cni.sock", "run/calico/ipam.lock", "run/calico/endpoint-status", "data/etcd",
	}
	if !slices.Equal(kept, wantKept) {
		t.Errorf("kept:\n%q\nwant:\n%q", kept, wantKept)
	}
}

func TestPlanFilesBusy(t *testing.T) {
	l := newLayout(t)
	l.write(t, l.cfg.IPAMLockFile, "")
	f, err := os.Open(l.cfg.IPAMLockFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// A config that names no calico plugin is not ours even with our
	// plugin gone.
	l.write(t, l.conf(cniinstall.DefaultConfName), `{"name":"x","cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}`)
	removed, kept := planned(l, Options{})
	if len(removed) != 0 || !slices.Equal(kept, []string{"net.d/10-calico.conflist", "run/calico/ipam.lock"}) {
		t.Errorf("removed %q, kept %q", removed, kept)
	}
}
