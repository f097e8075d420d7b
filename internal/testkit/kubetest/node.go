package kubetest

import (
	"bufio"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/internal/testkit/pkitest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// NodeName is the name of the node StartNode runs. kubelet listens on
// 127.0.0.1 only; with this name and NodeAPIServerArgs the apiserver
// reaches it at localhost:10250 (no DNS), so `kubectl exec` works.
const NodeName = "localhost"

// NodeAPIServerArgs are the apiserver flags StartNode's cluster needs:
// pass them to Start with WithAPIServerArgs.
func NodeAPIServerArgs() []string {
	return []string{"--kubelet-preferred-address-types=Hostname"}
}

// cniPluginsPkg is the reference CNI plugins module (required by go.mod).
const cniPluginsPkg = "github.com/containernetworking/plugins/plugins/"

// kubeletTunables are the kernel settings kubelet changes on start;
// StopNode puts them back.
var kubeletTunables = []string{"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward"}

// Node is a running kubelet + containerd on this machine.
type Node struct {
	Name string
	// Dir holds every file of the node; CNIBinDir and CNIConfDir are the
	// directories containerd takes CNI plugins and the conflist from
	// (they hold the reference plugins ptp, host-local and loopback).
	Dir, CNIBinDir, CNIConfDir string
	// CRIEndpoint is containerd's socket.
	CRIEndpoint string
	// KubeletLog and ContainerdLog are the components' logs.
	KubeletLog, ContainerdLog string

	cluster *Cluster
	sock    string
	cgroup  string
}

// NodeOption changes what StartNode runs.
type NodeOption func(*Node)

// WithCNIDirs makes containerd take CNI plugins from binDir and the
// conflist from confDir, e.g. the standard /opt/cni/bin and /etc/cni/net.d
// that a CNI DaemonSet's hostPath volumes name (made private to the test
// with PrivateHostDirs).
func WithCNIDirs(binDir, confDir string) NodeOption {
	return func(n *Node) { n.CNIBinDir, n.CNIConfDir = binDir, confDir }
}

// StartNode runs containerd (Debian's, with its CRI plugin, and runc) and
// kubelet Version as node NodeName of c, in the caller's network
// namespace, and waits until kubelet has registered the Node. That
// namespace is the node's "host" namespace, where kubelet, the CNI plugin
// and a node agent put their chains, routes and links: it must be a
// private one the test made (the test binary re-executed by
// netnstest.Reexec, with c started there too), never the machine's.
// The Node is Ready once a CNI conflist is in CNIConfDir. t.Cleanup deletes
// every pod (kubelet runs CNI DEL), stops both by PID, kills what they
// left, unmounts, and restores the iptables chains and sysctls kubelet
// changed. c must have been started with WithAPIServerArgs(NodeAPIServerArgs()...).
func StartNode(t testing.TB, c *Cluster, opts ...NodeOption) *Node {
	t.Helper()
	if os.Getenv("CALICO_KUBE_TESTS") == "skip" {
		t.Skip("CALICO_KUBE_TESTS=skip: not running kubelet")
	}
	if os.Geteuid() != 0 {
		t.Fatal("kubetest: a kubelet node needs root")
	}
	if inMachineNetNS() {
		t.Fatal("kubetest: StartNode would program the machine's own network namespace: run the test binary in a private one (netnstest.Reexec)")
	}
	for _, cmd := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables-save", "nsenter"} {
		if _, err := exec.LookPath(cmd); err != nil {
			t.Fatalf("kubetest: %s not found (apt-get install containerd runc util-linux iptables; scripts/deps.sh does)", cmd)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	bins, err := EnsureBinaries(ctx, os.Stderr)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	binDir, _ := BinDir()
	pauseTar, busyboxTar, err := ensureImages(ctx, filepath.Join(binDir, "images"))
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	pluginDir, err := ensureCNIPlugins(ctx, filepath.Join(binDir, "cni-plugins"))
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}

	// Unix socket paths are short (108 bytes): not under t.TempDir().
	dir, err := os.MkdirTemp("", "kubenode-")
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{
		Name: NodeName, Dir: dir, cluster: c,
		CNIBinDir: filepath.Join(dir, "cni", "bin"), CNIConfDir: filepath.Join(dir, "cni", "net.d"),
		sock: filepath.Join(dir, "containerd.sock"), cgroup: filepath.Base(dir),
		KubeletLog: filepath.Join(dir, "kubelet.log"), ContainerdLog: filepath.Join(dir, "containerd.log"),
	}
	n.CRIEndpoint = "unix://" + n.sock
	for _, o := range opts {
		o(n)
	}
	base := takeBaseline()
	var procs []*process
	t.Cleanup(func() { n.stop(t, procs, base) })

	cd := filepath.Join(dir, "containerd")
	kd := filepath.Join(dir, "kubelet")
	for _, d := range []string{n.CNIBinDir, n.CNIConfDir, cd, filepath.Join(kd, "root"), filepath.Join(kd, "pod-logs"), filepath.Join(kd, "volume-plugins")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"ptp", "host-local", "loopback"} {
		data, err := os.ReadFile(filepath.Join(pluginDir, p))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(n.CNIBinDir, p), data, 0o755)
	}

	// containerd with its CRI plugin; everything under dir.
	runc, _ := exec.LookPath("runc")
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = "%[3]s.ttrpc"
[debug]
  address = "%[4]s/debug.sock"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "%[4]s/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  # root in a container may lack CAP_SYS_RESOURCE: runc cannot lower
  # oom_score_adj below the parent's, so clamp it.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = %[6]q
        Root = "%[4]s/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "%[4]s/certs.d"
`, filepath.Join(cd, "root"), filepath.Join(cd, "state"), n.sock, cd, PauseImage, runc, n.CNIBinDir, n.CNIConfDir)
	if err := os.WriteFile(filepath.Join(cd, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ctrd, err := startProcess(mustLook("containerd"), dir, "containerd", "--config", filepath.Join(cd, "config.toml"))
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	procs = append(procs, ctrd)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if out, err := n.ctr("version"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("kubetest: containerd not serving: %v %s\n%s", err, out, ctrd.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, img := range []string{pauseTar, busyboxTar} {
		if out, err := n.ctr("images", "import", img); err != nil {
			t.Fatalf("kubetest: import %s: %v\n%s", img, err, out)
		}
	}

	// kubelet's cgroup root must exist in every hierarchy (cgroup v1).
	for _, m := range cgroupMounts() {
		cg := filepath.Join(m, n.cgroup)
		os.MkdirAll(cg, 0o755)
		if data, err := os.ReadFile(filepath.Join(m, "cpuset.cpus")); err == nil {
			os.WriteFile(filepath.Join(cg, "cpuset.cpus"), data, 0o644)
			mems, _ := os.ReadFile(filepath.Join(m, "cpuset.mems"))
			os.WriteFile(filepath.Join(cg, "cpuset.mems"), mems, 0o644)
		}
	}

	nodeIP, err := firstGlobalIPv4()
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	kubeconfig := filepath.Join(kd, "kubeconfig")
	if err := n.writeNodeCredentials(kubeconfig); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	// Pods must not query the machine's real DNS server.
	os.WriteFile(filepath.Join(kd, "resolv.conf"), []byte("nameserver 127.0.0.1\n"), 0o644)
	kcfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
cgroupDriver: cgroupfs
cgroupRoot: /%s
cgroupsPerQOS: true
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: %s
podLogsDir: %s
volumePluginDir: %s
resolvConf: %s
clusterDomain: cluster.local
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
  x509:
    clientCAFile: %s
authorization:
  mode: AlwaysAllow
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 90
serializeImagePulls: false
`, n.cgroup, n.CRIEndpoint, filepath.Join(kd, "pod-logs"), filepath.Join(kd, "volume-plugins"), filepath.Join(kd, "resolv.conf"), c.CAFile)
	if err := os.WriteFile(filepath.Join(kd, "config.yaml"), []byte(kcfg), 0o644); err != nil {
		t.Fatal(err)
	}
	kl, err := startProcess(bins.Kubelet, dir, "kubelet", "--config="+filepath.Join(kd, "config.yaml"),
		"--kubeconfig="+kubeconfig, "--root-dir="+filepath.Join(kd, "root"), "--cert-dir="+filepath.Join(kd, "pki"),
		"--hostname-override="+n.Name, "--node-ip="+nodeIP, "--v=2")
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	procs = append(procs, kl)
	deadline = time.Now().Add(readyTimeout)
	for {
		if _, err := c.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{}); err == nil {
			break
		}
		select {
		case <-kl.Done():
			t.Fatalf("kubetest: kubelet exited:\n%s", kl.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubetest: kubelet did not register node %s:\n%s", n.Name, kl.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return n
}

// WaitReady waits until the Node is Ready (kubelet reports NetworkReady
// once containerd has loaded a CNI conflist).
func (n *Node) WaitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		node, err := n.cluster.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubetest: node %s not Ready after %s: %v %+v", n.Name, timeout, err, node.Status.Conditions)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ImportImage imports an OCI image archive (package ociimage, `make
// image`) into the node's containerd under the name it carries: kubelet
// then runs it for a pod naming it with imagePullPolicy IfNotPresent or
// Never, no registry asked.
func (n *Node) ImportImage(t testing.TB, archive string) {
	t.Helper()
	if out, err := n.ctr("images", "import", archive); err != nil {
		t.Fatalf("kubetest: import %s: %v\n%s", archive, err, out)
	}
}

func (n *Node) ctr(args ...string) (string, error) {
	out, err := exec.Command("ctr", append([]string{"-a", n.sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

// writeNodeCredentials writes kubelet's kubeconfig with a client
// certificate of system:node:<name> signed by the cluster CA.
func (n *Node) writeNodeCredentials(path string) error {
	ca, err := pkitest.LoadCA(n.cluster.CAFile, filepath.Join(filepath.Dir(n.cluster.CAFile), "ca.key"))
	if err != nil {
		return err
	}
	certFile, keyFile := path+".crt", path+".key"
	leaf := pkitest.Leaf{
		Subject: pkix.Name{CommonName: "system:node:" + n.Name, Organization: []string{"system:nodes"}},
		Usage:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := ca.Issue(leaf, certFile, keyFile); err != nil {
		return err
	}
	return WriteKubeconfig(path, "kubetest", n.cluster.URL, n.cluster.CAFile, certFile, keyFile)
}

// stop undoes StartNode. Pods go first, through the API, so that kubelet
// stops their sandboxes and containerd runs CNI DEL for each (addresses
// released, veths and routes gone) while the CNI plugin can still work.
func (n *Node) stop(t testing.TB, procs []*process, base baseline) {
	ctx := context.Background()
	if len(procs) == 2 {
		pods, err := n.cluster.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, p := range pods.Items {
				n.cluster.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, ForceDelete())
			}
		}
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			out, err := n.ctr("tasks", "ls", "-q")
			if err == nil && strings.TrimSpace(out) == "" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if out, _ := n.ctr("tasks", "ls", "-q"); strings.TrimSpace(out) != "" {
			t.Errorf("kubetest: pod tasks still running at teardown: %s", out)
		}
	}
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop()
	}
	// Shims of our containerd outlive it; so do processes in our cgroups.
	killMatching(func(pid int, cmdline string) bool {
		return strings.Contains(cmdline, " -address "+n.sock+" ")
	})
	for _, m := range cgroupMounts() {
		filepath.Walk(filepath.Join(m, n.cgroup), func(p string, info os.FileInfo, err error) error {
			if err == nil && info.Name() == "cgroup.procs" {
				data, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(data)) {
					var pid int
					fmt.Sscan(f, &pid)
					if pid > 0 {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			return nil
		})
	}
	time.Sleep(200 * time.Millisecond)
	// Mounts under dir, deepest first (kubelet's tmpfs volumes, netns
	// bind mounts, overlay rootfs, shm).
	for i := 0; i < 3; i++ {
		mps := mountsUnder(n.Dir + "/")
		if len(mps) == 0 {
			break
		}
		for _, mp := range mps {
			flags := 0
			if i == 2 {
				flags = syscall.MNT_DETACH
			}
			syscall.Unmount(mp, flags)
		}
	}
	if mps := mountsUnder(n.Dir + "/"); len(mps) > 0 {
		t.Errorf("kubetest: still mounted: %v", mps)
	}
	for _, m := range cgroupMounts() {
		removeTree(filepath.Join(m, n.cgroup))
	}
	base.restore(t, n.Dir)
	os.RemoveAll(n.Dir)
}

// inMachineNetNS reports whether this process shares the network
// namespace of PID 1 (the machine's, or the container's the tests run in).
func inMachineNetNS() bool {
	self, err1 := os.Readlink("/proc/self/ns/net")
	pid1, err2 := os.Readlink("/proc/1/ns/net")
	return err1 == nil && err2 == nil && self == pid1
}

// baseline is the host state kubelet and containerd change outside their
// own directories.
type baseline struct {
	sysctl                    map[string]string
	chains                    map[string]bool // "iptables filter KUBE-X"
	nftTables                 map[string]bool // "ip filter"
	varLogContainers, varCNI  bool
	varKubelet, runContainerd bool
}

func takeBaseline() baseline {
	b := baseline{sysctl: map[string]string{}, chains: map[string]bool{}, nftTables: map[string]bool{}}
	for _, k := range kubeletTunables {
		if v, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(k, ".", "/")); err == nil {
			b.sysctl[k] = strings.TrimSpace(string(v))
		}
	}
	for _, c := range iptablesChains() {
		b.chains[c] = true
	}
	for _, tb := range nftTables() {
		b.nftTables[tb] = true
	}
	b.varLogContainers = fileExists("/var/log/containers")
	b.varCNI = fileExists("/var/lib/cni")
	b.varKubelet = fileExists("/var/lib/kubelet")
	b.runContainerd = fileExists("/run/containerd")
	return b
}

// restore removes the KUBE-* and CNI-* chains (and the jumps to them)
// that were not there before, empty nftables tables iptables-nft created
// for them (all in the node's own network namespace), and puts the kernel
// settings back (those kubelet changes are the machine's, not per
// namespace).
func (b baseline) restore(t testing.TB, dir string) {
	for _, c := range iptablesChains() {
		f := strings.Fields(c)
		if b.chains[c] || !(strings.HasPrefix(f[2], "KUBE-") || strings.HasPrefix(f[2], "CNI-")) {
			continue
		}
		RemoveChain(f[0], f[1], f[2])
	}
	for _, tb := range nftTables() {
		if b.nftTables[tb] {
			continue
		}
		f := strings.Fields(tb)
		out, err := exec.Command("nft", "list", "table", f[0], f[1]).Output()
		if err == nil && !nftHasRules(string(out)) {
			exec.Command("nft", "delete", "table", f[0], f[1]).Run()
		}
	}
	for k, v := range b.sysctl {
		p := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
		if cur, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(cur)) != v {
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				t.Errorf("kubetest: restore %s=%s: %v", k, v, err)
			}
		}
	}
	if fileExists("/var/log/containers") {
		entries, _ := os.ReadDir("/var/log/containers")
		for _, e := range entries {
			p := filepath.Join("/var/log/containers", e.Name())
			if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, dir+"/") {
				os.Remove(p)
			}
		}
		if !b.varLogContainers {
			os.Remove("/var/log/containers")
		}
	}
	if !b.varCNI {
		os.RemoveAll("/var/lib/cni")
	}
	if !b.varKubelet {
		// kubelet's hard-coded device-plugin socket directory.
		os.RemoveAll("/var/lib/kubelet")
	}
	if !b.runContainerd {
		os.RemoveAll("/run/containerd")
	}
}

// RemoveChain deletes an iptables chain of table and every rule of the
// table that jumps to it. cmd is "iptables" or "ip6tables".
func RemoveChain(cmd, table, chain string) {
	out, _ := exec.Command(cmd+"-save", "-t", table).Output()
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-A ") && (strings.HasSuffix(line, " -j "+chain) || strings.Contains(line, " -j "+chain+" ") ||
			strings.HasSuffix(line, " -g "+chain) || strings.Contains(line, " -g "+chain+" ")) {
			args := append([]string{"-t", table, "-D"}, xtables.SplitRule(strings.TrimPrefix(line, "-A "))...)
			exec.Command(cmd, args...).Run()
		}
	}
	exec.Command(cmd, "-t", table, "-F", chain).Run()
	exec.Command(cmd, "-t", table, "-X", chain).Run()
}

// iptablesChains lists "iptables TABLE CHAIN" and "ip6tables TABLE CHAIN"
// for every chain of the host.
func iptablesChains() []string {
	var out []string
	for _, cmd := range []string{"iptables", "ip6tables"} {
		data, err := exec.Command(cmd + "-save").Output()
		if err != nil {
			continue
		}
		table := ""
		for _, line := range strings.Split(string(data), "\n") {
			switch {
			case strings.HasPrefix(line, "*"):
				table = line[1:]
			case strings.HasPrefix(line, ":"):
				out = append(out, cmd+" "+table+" "+strings.Fields(line[1:])[0])
			}
		}
	}
	sort.Strings(out)
	return out
}

// HostChains lists the host's iptables chains as "iptables TABLE CHAIN".
func HostChains() []string { return iptablesChains() }

func nftTables() []string {
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return nil
	}
	var tables []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "table" {
			tables = append(tables, f[1]+" "+f[2])
		}
	}
	return tables
}

// nftHasRules reports whether an `nft list table` output has a rule.
func nftHasRules(listing string) bool {
	for _, line := range strings.Split(listing, "\n") {
		l := strings.TrimSpace(line)
		if l == "" || l == "}" || strings.HasPrefix(l, "table ") || strings.HasPrefix(l, "chain ") ||
			strings.HasPrefix(l, "type ") || strings.HasPrefix(l, "policy ") || strings.HasPrefix(l, "#") {
			continue
		}
		return true
	}
	return false
}

func cgroupMounts() []string {
	data, _ := os.ReadFile("/proc/mounts")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && (f[2] == "cgroup" || f[2] == "cgroup2") {
			out = append(out, f[1])
		}
	}
	return out
}

// mountsUnder lists mount points below prefix, deepest first.
func mountsUnder(prefix string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], prefix) {
			out = append(out, f[4])
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// removeTree removes a cgroup directory tree bottom-up (cgroup
// directories are removed with rmdir, not unlink of their files).
func removeTree(root string) {
	var dirs []string
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		syscall.Rmdir(dirs[i])
	}
}

// killMatching SIGKILLs the processes whose command line matches.
func killMatching(match func(pid int, cmdline string) bool) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid == os.Getpid() {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if match(pid, strings.ReplaceAll(string(data), "\x00", " ")) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func firstGlobalIPv4() (string, error) {
	out, err := exec.Command("ip", "-4", "-o", "addr", "show", "scope", "global").Output()
	if err != nil {
		return "", fmt.Errorf("list addresses: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[2] == "inet" {
			return strings.SplitN(f[3], "/", 2)[0], nil
		}
	}
	return "", fmt.Errorf("no global IPv4 address for the node's InternalIP")
}

func mustLook(name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		return name
	}
	return p
}

// ensureCNIPlugins builds the reference plugins ptp, host-local and
// loopback (containerd's CRI plugin needs loopback) from the project's
// own go.mod into dir.
func ensureCNIPlugins(ctx context.Context, dir string) (string, error) {
	names := []string{"ptp", "host-local", "loopback"}
	have := func() bool {
		for _, n := range names {
			if !fileExists(filepath.Join(dir, n)) {
				return false
			}
		}
		return true
	}
	if have() {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"), os.Stderr)
	if err != nil {
		return "", err
	}
	defer unlock()
	if have() {
		return dir, nil
	}
	for _, p := range []string{"main/ptp", "ipam/host-local", "main/loopback"} {
		tmp := filepath.Join(dir, filepath.Base(p)+".tmp")
		cmd := exec.CommandContext(ctx, goTool(), "build", "-trimpath", "-o", tmp, cniPluginsPkg+p)
		cmd.Dir = testbin.RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build CNI plugin %s: %w\n%s", p, err, out)
		}
		if err := os.Rename(tmp, filepath.Join(dir, filepath.Base(p))); err != nil {
			return "", fmt.Errorf("install CNI plugin %s: %w", p, err)
		}
	}
	return dir, nil
}
