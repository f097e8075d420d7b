package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// A DaemonSet names host paths in its hostPath volumes (/etc/cni/net.d,
// /opt/cni/bin, /var/lib/calico, /run/xtables.lock, /lib/modules); a
// node's containerd mounts them, and creates them when missing, in its own
// mount namespace. In a test those must be the node's, not the machine's:
// the machine may run a real Calico whose /etc/cni/net.d a test must
// never write, or have no /lib/modules at all. The functions here change
// this process's mount namespace, which must be a private one
// (netnstest.Reexec with netnstest.PrivateMounts): containerd, kubelet and
// every container they start inherit it, and the machine sees none of it.
//
// A path that exists gets a fresh, empty directory (or file) of the test
// bind-mounted over it. A path that does not exist is made inside an
// overlay over its deepest existing ancestor, whose upper layer is the
// test's, so that the machine's directory is not written either; mounts
// below that ancestor are moved onto the overlay so nothing else changes.
// Everything is unmounted, and the test's directories removed, in
// t.Cleanup.

// HostPath is a path of the node's host filesystem that pods mount.
type HostPath struct {
	Path string
	// File: a file, not a directory.
	File bool
	// Shared: the machine's own is used where there is one (pods only
	// read it, e.g. /lib/modules); else, or without Shared, the node gets
	// an empty one of its own.
	Shared bool
}

// PrivateHostPaths gives the node its own host paths (see HostPath).
func PrivateHostPaths(t testing.TB, paths ...HostPath) {
	t.Helper()
	h := newHostPaths(t)
	for _, p := range paths {
		if !filepath.IsAbs(p.Path) {
			t.Fatalf("kubetest: host path %q is not absolute", p.Path)
		}
		if _, err := os.Stat(p.Path); err == nil && p.Shared {
			continue
		}
		h.private(p.Path, !p.File)
	}
}

type hostPaths struct {
	t        testing.TB
	work     string
	overlaid []string // directories with an overlay of ours
}

func newHostPaths(t testing.TB) *hostPaths {
	t.Helper()
	if !netnstest.InPrivateMountNS() {
		t.Fatal("kubetest: host paths would change the machine's mount namespace: run the test binary in a private one (netnstest.Reexec with netnstest.PrivateMounts)")
	}
	work, err := os.MkdirTemp("", "kubenode-paths-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	return &hostPaths{t: t, work: work}
}

// mount mounts and registers the unmount (cleanups run in reverse order:
// the latest mount goes first).
func (h *hostPaths) mount(source, target, fstype string, flags uintptr, data string) {
	h.t.Helper()
	if err := syscall.Mount(source, target, fstype, flags, data); err != nil {
		h.t.Fatalf("kubetest: mount %s on %s: %v", source, target, err)
	}
	if flags&syscall.MS_MOVE == 0 {
		h.t.Cleanup(func() { syscall.Unmount(target, syscall.MNT_DETACH) })
	}
}

func (h *hostPaths) private(path string, dir bool) {
	h.t.Helper()
	anc, rest := splitExisting(path)
	if len(rest) == 0 {
		src, err := os.MkdirTemp(h.work, "bind-")
		if err != nil {
			h.t.Fatal(err)
		}
		if !dir {
			src = filepath.Join(src, "file")
			if err := os.WriteFile(src, nil, 0o600); err != nil {
				h.t.Fatal(err)
			}
		}
		h.mount(src, anc, "", syscall.MS_BIND, "")
		return
	}
	if anc == "/" {
		h.t.Fatalf("kubetest: %s: would need an overlay over /", path)
	}
	covered := false
	for _, o := range h.overlaid {
		covered = covered || anc == o || strings.HasPrefix(anc, o+"/")
	}
	if !covered {
		h.overlay(anc)
		h.overlaid = append(h.overlaid, anc)
	}
	target := filepath.Join(append([]string{anc}, rest...)...)
	var err error
	if dir {
		err = os.MkdirAll(target, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
		err = os.WriteFile(target, nil, 0o600)
	}
	if err != nil {
		h.t.Fatalf("kubetest: make %s in the overlay over %s: %v", path, anc, err)
	}
}

// splitExisting returns the real path of path's deepest existing prefix
// (links resolved: /var/run/x → /run) and the components below it.
func splitExisting(path string) (string, []string) {
	comps := strings.Split(strings.Trim(filepath.Clean(path), "/"), "/")
	cur := "/"
	for i, c := range comps {
		next, err := filepath.EvalSymlinks(filepath.Join(cur, c))
		if err != nil {
			return cur, comps[i:]
		}
		cur = next
	}
	return cur, nil
}

// overlay mounts an overlay over dir whose upper layer is the test's,
// keeping the mounts below dir where they were.
func (h *hostPaths) overlay(dir string) {
	h.t.Helper()
	// The top mounts below dir (an rbind takes the ones below them).
	tops := mountsUnder(dir + "/")
	sort.Strings(tops)
	var keep []string
	for _, mp := range tops {
		if len(keep) > 0 && strings.HasPrefix(mp, keep[len(keep)-1]+"/") {
			continue
		}
		keep = append(keep, mp)
	}
	parked := make([]string, len(keep))
	for i, mp := range keep {
		parked[i] = filepath.Join(h.work, fmt.Sprintf("parked-%d", i))
		st, err := os.Stat(mp)
		if err == nil && st.IsDir() {
			err = os.Mkdir(parked[i], 0o755)
		} else {
			err = os.WriteFile(parked[i], nil, 0o600)
		}
		if err != nil {
			h.t.Fatal(err)
		}
		h.mount(mp, parked[i], "", syscall.MS_BIND|syscall.MS_REC, "")
	}
	upper, err := os.MkdirTemp(h.work, "upper-")
	if err != nil {
		h.t.Fatal(err)
	}
	work, err := os.MkdirTemp(h.work, "work-")
	if err != nil {
		h.t.Fatal(err)
	}
	h.mount("overlay", dir, "overlay", 0, fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", dir, upper, work))
	for i, mp := range keep {
		h.mount(parked[i], mp, "", syscall.MS_MOVE, "")
	}
}
