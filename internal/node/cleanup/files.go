package cleanup

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/projectcalico/calico-node/agent/epstatus"
	"github.com/projectcalico/calico-node/cniinstall"
	"github.com/projectcalico/calico-node/internal/cni/cnientry"
)

// FileFact is what the reader found at one path.
type FileFact struct {
	Path    string
	Exists  bool
	Mode    fs.FileMode // as lstat(2) reports it
	Size    int64
	Target  string   // a symlink's target, as written
	Head    []byte   // the content of a small regular file (configuration)
	Binary  bool     // a calico-node executable, or a symlink to one
	Entries []string // a directory's entries
	Busy    bool     // a socket someone answers on, a lock someone holds
}

func (f FileFact) regular() bool { return f.Exists && f.Mode.IsRegular() }
func (f FileFact) dir() bool     { return f.Exists && f.Mode.IsDir() }
func (f FileFact) symlink() bool { return f.Exists && f.Mode&fs.ModeSymlink != 0 }
func (f FileFact) socket() bool  { return f.Exists && f.Mode&fs.ModeSocket != 0 }

func (f FileFact) kind() string {
	switch {
	case f.symlink():
		return "symlink"
	case f.socket():
		return "socket"
	case f.dir():
		return "directory"
	}
	return "file"
}

// Files are the facts about everything on disk calico-node may have
// written (cniinstall, the CNI plugin, the agent, the embedded etcd).
type Files struct {
	Plugin, IPAM FileFact   // <cni bin dir>/calico, calico-ipam
	Conf         FileFact   // <cni conf dir>/<conf name>
	Kubeconfig   FileFact   // <cni conf dir>/calico-kubeconfig
	TLS          []FileFact // <cni conf dir>/calico-tls/etcd-*
	TLSDir       FileFact
	Sockets      []FileFact // the CNI server's, the BGP and the agent status sockets
	StatusDir    FileFact   // the agent's endpoint status files
	IPAMLock     FileFact   // the CNI plugin's IPAM lock file
	RunDirs      []FileFact // the directories holding those, when named calico
	AgentLock    FileFact   // <data dir>/agent.lock
	Etcd         FileFact   // <data dir>/etcd: the embedded etcd's data
	Nodename     FileFact   // <data dir>/nodename
	DataDir      FileFact
}

// planFiles decides which of the files are calico-node's:
//
//   - the plugin <bin>/calico when it is a calico-node binary (its Go build
//     information names this project's main package) or a symlink to one;
//     <bin>/calico-ipam likewise, or when it is the relative symlink to
//     "calico" cniinstall makes and calico is ours or gone;
//   - the CNI config when it configures the "calico" plugin and that plugin
//     is ours or gone: with another Calico's plugin in place it is that
//     Calico's configuration;
//   - calico-kubeconfig when it starts with cniinstall's header line;
//   - the etcd TLS copies with the CNI config they belong to;
//   - the sockets when they are sockets, the IPAM lock when it is the empty
//     lock file nobody holds, the agent lock when no agent holds it;
//   - the endpoint status directory with its files when calico-node's
//     marker is in it (felix's, without one, stays);
//   - with RemoveData, the embedded etcd's data directory (it has etcd's
//     member/ directory) and the nodename file;
//   - a directory when everything in it goes: calico-tls, a run directory
//     named calico, and (with RemoveData) the data directory.
func planFiles(f Files, opt Options) ([]Path, []Kept) {
	var out []Path
	var kept []Kept
	gone := map[string]bool{}
	remove := func(fact FileFact, all bool) {
		out = append(out, Path{Kind: fact.kind(), Path: fact.Path, All: all})
		gone[fact.Path] = true
	}
	keep := func(fact FileFact, why string) {
		if fact.Exists {
			kept = append(kept, Kept{Item: Item{Kind: fact.kind(), Name: fact.Path}, Why: why})
		}
	}
	emptied := func(d FileFact) bool {
		if !d.dir() {
			return false
		}
		for _, e := range d.Entries {
			if !gone[filepath.Join(d.Path, e)] {
				return false
			}
		}
		return true
	}

	pluginOurs := f.Plugin.Exists && f.Plugin.Binary
	pluginGoneOrOurs := !f.Plugin.Exists || pluginOurs
	if pluginOurs {
		remove(f.Plugin, false)
	} else {
		keep(f.Plugin, "not a calico-node binary")
	}
	if f.IPAM.Exists && (f.IPAM.Binary || f.IPAM.symlink() && f.IPAM.Target == cnientry.NetworkPlugin && pluginGoneOrOurs) {
		remove(f.IPAM, false)
	} else {
		keep(f.IPAM, "not a calico-node binary")
	}

	confOurs := false
	switch {
	case !f.Conf.Exists:
	case !f.Conf.regular() || !configuresCalico(f.Conf.Head):
		keep(f.Conf, "does not configure the calico plugin")
	case !pluginGoneOrOurs:
		keep(f.Conf, "configures "+f.Plugin.Path+", which is not calico-node's")
	default:
		confOurs = true
		remove(f.Conf, false)
	}
	if f.Kubeconfig.regular() && bytes.HasPrefix(f.Kubeconfig.Head, []byte(cniinstall.KubeconfigHeader)) {
		remove(f.Kubeconfig, false)
	} else {
		keep(f.Kubeconfig, "not written by calico-node")
	}
	for _, t := range f.TLS {
		if confOurs && t.regular() {
			remove(t, false)
		} else {
			keep(t, "belongs to a CNI configuration that stays")
		}
	}
	if emptied(f.TLSDir) {
		remove(f.TLSDir, false)
	}

	for _, s := range f.Sockets {
		if s.socket() {
			remove(s, false)
		} else {
			keep(s, "not a socket")
		}
	}
	switch {
	case !f.IPAMLock.Exists:
	case f.IPAMLock.Busy:
		keep(f.IPAMLock, "a CNI plugin holds it")
	case !f.IPAMLock.regular() || f.IPAMLock.Size != 0:
		keep(f.IPAMLock, "not the CNI plugin's empty lock file")
	default:
		remove(f.IPAMLock, false)
	}
	switch {
	case !f.StatusDir.Exists:
	case f.StatusDir.dir() && slices.Contains(f.StatusDir.Entries, epstatus.MarkerName):
		remove(f.StatusDir, true)
	default:
		keep(f.StatusDir, "no "+epstatus.MarkerName+" marker: not calico-node's endpoint status directory")
	}
	for _, d := range f.RunDirs {
		if filepath.Base(d.Path) == "calico" && emptied(d) {
			remove(d, false)
		}
	}

	switch {
	case !f.AgentLock.Exists:
	case f.AgentLock.Busy:
		keep(f.AgentLock, "a running agent holds it")
	default:
		remove(f.AgentLock, false)
	}
	if !opt.RemoveData {
		return out, kept
	}
	if f.Etcd.dir() && slices.Contains(f.Etcd.Entries, "member") {
		remove(f.Etcd, true)
	} else {
		keep(f.Etcd, "not an etcd data directory (no member/)")
	}
	if f.Nodename.regular() {
		remove(f.Nodename, false)
	} else {
		keep(f.Nodename, "not a file")
	}
	if emptied(f.DataDir) {
		remove(f.DataDir, false)
	}
	return out, kept
}

// configuresCalico reports whether a CNI configuration (a .conflist or a
// single plugin's .conf) runs the calico plugin.
func configuresCalico(data []byte) bool {
	var c struct {
		Type    string `json:"type"`
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if json.Unmarshal(data, &c) != nil {
		return false
	}
	if c.Type == cnientry.NetworkPlugin {
		return true
	}
	for _, p := range c.Plugins {
		if p.Type == cnientry.NetworkPlugin {
			return true
		}
	}
	return false
}
