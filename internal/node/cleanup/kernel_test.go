package cleanup_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/cniinstall"
	"github.com/projectcalico/calico-node/internal/node/agentlock"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// node is a throwaway network namespace playing a node, with its data,
// CNI and run directories in a temporary directory: nothing the test does
// reaches the machine's own namespace or /var/lib/calico, /var/run/calico,
// /etc/cni, /opt/cni.
type node struct {
	ns                   *netnstest.NS
	data, conf, bin, run string
}

func newNode(t *testing.T) *node {
	t.Helper()
	root := t.TempDir()
	n := &node{
		ns:   netnstest.New(t, "cleanup"),
		data: filepath.Join(root, "data"), conf: filepath.Join(root, "net.d"),
		bin: filepath.Join(root, "bin"), run: filepath.Join(root, "calico"),
	}
	// The node's NIC: a veth whose peer plays the next hop.
	for _, args := range [][]string{
		{"link", "add", "uplink0", "type", "veth", "peer", "name", "uplink0p"},
		{"addr", "add", "192.0.2.10/24", "dev", "uplink0"},
		{"-6", "addr", "add", "fd00:192::10/64", "dev", "uplink0", "nodad"},
		{"addr", "add", "192.0.2.1/24", "dev", "uplink0p"},
		{"link", "set", "uplink0", "up"},
		{"link", "set", "uplink0p", "up"},
		{"route", "add", "default", "via", "192.0.2.1"},
	} {
		n.ns.MustRun(t, "ip", args...)
	}
	return n
}

func (n *node) sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	return n.ns.MustRun(t, name, args...)
}

// cleanup runs `calico-node cleanup` inside the node, pointed at its
// directories, and returns its output and exit.
func (n *node) cleanup(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := n.ns.Command(testbin.Path(t), append([]string{"cleanup",
		"--data-dir", n.data, "--cni-conf-dir", n.conf, "--cni-bin-dir", n.bin,
		"--cni-socket", filepath.Join(n.run, "cni.sock"),
		"--bgp-status-socket", filepath.Join(n.run, "bgp.sock"),
		"--ipam-lock-file", filepath.Join(n.run, "ipam.lock"),
		"--status-socket", filepath.Join(n.run, "status.sock"),
		"--endpoint-status-path-prefix", n.run,
	}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// state is what the node's kernel holds, as the tools print it.
func (n *node) state(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, c := range [][]string{
		{"iptables-nft-save"}, {"ip6tables-nft-save"}, {"iptables-legacy-save"},
		{"ipset", "list", "-n"},
		{"ip", "-4", "route", "show", "table", "all"}, {"ip", "-6", "route", "show", "table", "all"},
		{"ip", "-o", "link", "show"},
	} {
		fmt.Fprintf(&b, "### %s\n%s", strings.Join(c, " "), n.sh(t, c[0], c[1:]...))
	}
	return b.String()
}

// startAgent runs `calico-node run` in the node the way `make run` runs it
// on a machine: embedded etcd, default pools (here VXLAN, both families),
// install-cni into the node's directories.
func (n *node) startAgent(t *testing.T) *proctest.Proc {
	t.Helper()
	cmd := n.ns.Command(testbin.Path(t), "run",
		"--data-dir", n.data, "--install-cni", "--cni-conf-dir", n.conf, "--cni-bin-dir", n.bin,
		"--cni-socket", filepath.Join(n.run, "cni.sock"),
		"--status-socket", filepath.Join(n.run, "status.sock"))
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "NODENAME=cleanup-node",
		"FELIX_ENDPOINTSTATUSPATHPREFIX=" + n.run,
		"IP=192.0.2.10/24", "IP6=fd00:192::10/64",
		"CALICO_IPV4POOL_CIDR=10.77.0.0/16", "CALICO_IPV4POOL_VXLAN=Always",
		"CALICO_IPV6POOL_CIDR=fd00:77::/48", "CALICO_IPV6POOL_VXLAN=Always",
		"CALICO_NETWORKING_BACKEND=vxlan",
	}
	p := proctest.Start(t, "calico-node", cmd)
	p.WaitFor(t, 90*time.Second, "VXLAN devices, blackholes, policy chains, IP sets and the CNI config", func() bool {
		st := n.stateQuiet()
		return strings.Contains(st, "vxlan.calico:") && strings.Contains(st, "vxlan-v6.calico:") &&
			regexp.MustCompile(`blackhole 10\.77\.\S+ proto 80`).MatchString(st) &&
			regexp.MustCompile(`blackhole fd00:77:\S+ dev lo proto 80`).MatchString(st) &&
			strings.Count(st, ":cali-INPUT - ") == 2 && strings.Contains(st, "cali40masq-ipam-pools") &&
			exists(filepath.Join(n.conf, cniinstall.DefaultConfName)) && exists(filepath.Join(n.bin, "calico-ipam"))
	})
	return p
}

// stateQuiet is state for polling: errors (a namespace mid-change) give "".
func (n *node) stateQuiet() string {
	var b strings.Builder
	for _, c := range [][]string{
		{"iptables-nft-save"}, {"ip6tables-nft-save"}, {"ipset", "list", "-n"},
		{"ip", "route", "show", "table", "all"}, {"ip", "-6", "route", "show", "table", "all"}, {"ip", "-o", "link", "show"},
	} {
		out, _ := n.ns.Command(c[0], c[1:]...).CombinedOutput()
		b.Write(out)
	}
	return b.String()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// TestCleanupAfterAgent: a node as the real agent left it, plus other
// software's chains, sets, routes, devices and files; cleanup removes
// exactly the agent's, says what it removed, and refuses while the agent
// runs.
func TestCleanupAfterAgent(t *testing.T) {
	n := newNode(t)
	agent := n.startAgent(t)

	// While the agent runs: refused, nothing touched.
	before := n.state(t)
	out, err := n.cleanup(t)
	if err == nil || !strings.Contains(out, "calico-node run is running on this node") || !strings.Contains(out, agentlock.Path(n.data)) {
		t.Fatalf("cleanup while the agent runs: %v\n%s", err, out)
	}
	if !strings.Contains(out, fmt.Sprintf("PID %d", agent.Cmd.Process.Pid)) {
		t.Errorf("refusal does not name the agent's PID %d:\n%s", agent.Cmd.Process.Pid, out)
	}
	// A dry run reports and changes nothing, agent or not.
	dry, err := n.cleanup(t, "--dry-run")
	if err != nil || !strings.Contains(dry, "would remove device vxlan.calico (vxlan)") || !strings.Contains(dry, "note: calico-node run is running") {
		t.Errorf("dry run while the agent runs: %v\n%s", err, dry)
	}
	if !exists(filepath.Join(n.conf, cniinstall.DefaultConfName)) || !strings.Contains(n.state(t), "vxlan.calico:") {
		t.Fatalf("a refused or dry cleanup changed the node:\nbefore:\n%s\nafter:\n%s", before, n.state(t))
	}
	if err := agent.Stop(20 * time.Second); err != nil {
		t.Fatalf("stop agent: %v", err)
	}

	// Other software's state, including names that look like ours.
	for _, c := range [][]string{
		{"iptables", "-N", "calico-user"},
		{"iptables", "-A", "calico-user", "-s", "192.0.2.50", "-j", "ACCEPT"},
		{"iptables", "-I", "INPUT", "1", "-j", "calico-user"},
		{"ip6tables", "-N", "cali"},
		{"ip6tables", "-A", "OUTPUT", "-j", "cali"},
		{"ipset", "create", "calico-foreign", "hash:ip"},
		{"ipset", "create", "cali41-user", "hash:net"},
		{"ip", "link", "add", "vxlan.other", "type", "vxlan", "id", "42", "dstport", "4790", "local", "192.0.2.10"},
		{"ip", "link", "set", "vxlan.other", "up"},
		{"ip", "route", "add", "203.0.113.0/24", "dev", "vxlan.other", "proto", "static"},
		{"ip", "route", "add", "198.51.100.0/24", "dev", "uplink0", "proto", "12"},
		{"ip", "route", "add", "198.51.101.0/24", "dev", "uplink0", "proto", "81", "table", "100"},
		// A pod's host veth as the CNI plugin makes it, its route, and a
		// veth named like one that is not.
		{"ip", "link", "add", "cali0123456789a", "address", "ee:ee:ee:ee:ee:ee", "type", "veth", "peer", "name", "pod0"},
		{"ip", "link", "set", "cali0123456789a", "up"},
		{"ip", "route", "add", "10.77.0.5/32", "dev", "cali0123456789a", "proto", "80"},
		{"ip", "link", "add", "califoreign0", "type", "veth", "peer", "name", "other0"},
	} {
		n.sh(t, c[0], c[1:]...)
	}
	for name, content := range map[string]string{
		filepath.Join(n.conf, "99-other.conflist"):       `{"name":"other","cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}`,
		filepath.Join(n.conf, cniinstall.KubeconfigName): "# someone else's\napiVersion: v1\n",
		filepath.Join(n.bin, "bridge"):                   "#!/bin/sh\n",
	} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	out, err = n.cleanup(t)
	if err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out)
	}
	texttest.Contains(t, "cleanup output", out,
		`removed iptables rule -A INPUT -m comment --comment "cali:`,
		"removed iptables chain cali-INPUT (IPv4 filter, ",
		"removed iptables chain cali-INPUT (IPv6 filter, ",
		"removed iptables chain cali-POSTROUTING (IPv4 nat, ",
		"removed ip set cali40masq-ipam-pools\n",
		"removed ip set cali60all-vxlan-net\n",
		"removed route blackhole 10.77.",
		"removed route blackhole fd00:77:",
		"removed route 10.77.0.5/32 dev cali0123456789a proto 80\n",
		"removed device vxlan.calico (vxlan)\n",
		"removed device vxlan-v6.calico (vxlan)\n",
		"removed file "+filepath.Join(n.bin, "calico")+"\n",
		"removed symlink "+filepath.Join(n.bin, "calico-ipam")+"\n",
		"removed file "+filepath.Join(n.conf, cniinstall.DefaultConfName)+"\n",
		"removed file "+agentlock.Path(n.data)+"\n",
		"kept workload interface cali0123456789a (veth): ",
		"kept file "+filepath.Join(n.conf, cniinstall.KubeconfigName)+": not written by calico-node\n",
	)
	if !regexp.MustCompile(`(?m)^removed \d+ objects$`).MatchString(out) {
		t.Errorf("no summary line")
	}
	if t.Failed() {
		t.Logf("cleanup output:\n%s", out)
	}

	after := n.state(t)
	for _, gone := range []string{":cali-", "cali:", "cali40", "cali60", "proto 80", "vxlan.calico", "vxlan-v6.calico"} {
		if strings.Contains(after, gone) {
			t.Errorf("%q still on the node", gone)
		}
	}
	for _, stays := range []string{
		":calico-user - ", "-A INPUT -j calico-user", "-A calico-user -s 192.0.2.50/32 -j ACCEPT",
		":cali - ", "-A OUTPUT -j cali",
		"calico-foreign", "cali41-user",
		"203.0.113.0/24 dev vxlan.other proto static", "198.51.100.0/24 dev uplink0 proto bird",
		"198.51.101.0/24 dev uplink0 table 100 proto 81",
		"vxlan.other:", "cali0123456789a@pod0:", "califoreign0@other0:", "uplink0@uplink0p:",
	} {
		if !strings.Contains(after, stays) {
			t.Errorf("%q was removed", stays)
		}
	}
	for _, path := range []string{
		filepath.Join(n.conf, "99-other.conflist"), filepath.Join(n.conf, cniinstall.KubeconfigName),
		filepath.Join(n.bin, "bridge"), filepath.Join(n.data, "etcd", "member"), filepath.Join(n.data, "nodename"),
	} {
		if !exists(path) {
			t.Errorf("%s was removed", path)
		}
	}
	if t.Failed() {
		t.Logf("node after cleanup:\n%s", after)
	}

	// The pods' veths and the datastore go only when asked.
	out, err = n.cleanup(t, "--workloads", "--remove-data")
	if err != nil {
		t.Fatalf("cleanup --workloads --remove-data: %v\n%s", err, out)
	}
	want := strings.Join([]string{
		"removed workload interface cali0123456789a (veth)",
		"removed directory " + filepath.Join(n.data, "etcd"),
		"removed file " + filepath.Join(n.data, "nodename"),
		"removed directory " + n.data,
	}, "\n")
	if !strings.Contains(out, want) {
		t.Errorf("cleanup --workloads --remove-data:\n%s\nwant the lines:\n%s", out, want)
	}
	after = n.state(t)
	if strings.Contains(after, "cali0123456789a") || !strings.Contains(after, "califoreign0") {
		t.Errorf("after --workloads:\n%s", after)
	}
	if exists(n.data) {
		t.Errorf("data dir %s still there", n.data)
	}

	// Nothing left: a third run says so and succeeds.
	out, err = n.cleanup(t)
	if err != nil || !strings.Contains(out, "nothing of calico-node's to remove") {
		t.Errorf("third cleanup: %v\n%s", err, out)
	}
}

// TestForce: while something holds the agent lock cleanup refuses, naming
// the holder; --force cleans up anyway (here state in both iptables
// backends) but leaves the held lock.
func TestForce(t *testing.T) {
	n := newNode(t)
	if err := os.MkdirAll(n.data, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := agentlock.Shared(agentlock.Path(n.data))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	for _, ipt := range []string{"iptables-nft", "iptables-legacy"} {
		n.sh(t, ipt, "-N", "cali-INPUT")
		n.sh(t, ipt, "-A", "cali-INPUT", "-m", "comment", "--comment", "cali:AAAAAAAAAAAAAAAA", "-j", "ACCEPT")
		n.sh(t, ipt, "-I", "INPUT", "1", "-m", "comment", "--comment", "cali:0123456789abcdef", "-j", "cali-INPUT")
		n.sh(t, ipt, "-A", "INPUT", "-s", "192.0.2.60", "-j", "DROP")
	}
	n.sh(t, "ip", "link", "add", "vxlan.calico", "type", "vxlan", "id", "4096", "dstport", "4789", "local", "192.0.2.10")
	n.sh(t, "ip", "route", "add", "blackhole", "10.78.0.0/26", "proto", "80")

	out, err := n.cleanup(t)
	if err == nil || !strings.Contains(out, fmt.Sprintf("is locked by PID %d", os.Getpid())) || !strings.Contains(out, "--force") {
		t.Fatalf("cleanup with the agent lock held: %v\n%s", err, out)
	}
	if st := n.state(t); !strings.Contains(st, "vxlan.calico") || strings.Count(st, ":cali-INPUT") != 2 {
		t.Fatalf("refused cleanup changed the node:\n%s", st)
	}

	out, err = n.cleanup(t, "--force")
	if err != nil {
		t.Fatalf("cleanup --force: %v\n%s", err, out)
	}
	texttest.Contains(t, "cleanup --force output", out,
		"warning: calico-node run is running on this node",
		"removed iptables chain cali-INPUT (IPv4 filter, nft)",
		"removed iptables chain cali-INPUT (IPv4 filter, legacy)",
		`removed iptables rule -A INPUT -m comment --comment "cali:0123456789abcdef" -j cali-INPUT (IPv4 filter, legacy)`,
		"removed route blackhole 10.78.0.0/26 proto 80",
		"removed device vxlan.calico (vxlan)",
		"kept file "+agentlock.Path(n.data)+": a running agent holds it",
	)
	st := n.state(t)
	if strings.Contains(st, "cali") || strings.Contains(st, "proto 80") || strings.Count(st, "-A INPUT -s 192.0.2.60/32 -j DROP") != 2 {
		t.Errorf("after cleanup --force:\n%s", st)
	}
	if !exists(agentlock.Path(n.data)) {
		t.Error("the held agent lock was removed")
	}
}
