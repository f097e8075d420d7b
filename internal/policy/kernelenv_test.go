package policy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/projectcalico/calico-node/internal/policy"
)

// needNetns skips t unless it runs as root with bins on the PATH and may
// create network namespaces: what the kernel tests need.
func needNetns(t *testing.T, bins ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, bin := range append([]string{"unshare"}, bins...) {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s", bin)
		}
	}
	if err := exec.Command("unshare", "-n", "true").Run(); err != nil {
		t.Skipf("cannot create a network namespace: %v", err)
	}
}

// loadFamily writes f's IP sets and tables into files under t's temporary
// directory and returns the shell lines (set -e first) that load them.
func loadFamily(t *testing.T, f *policy.Family) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	script := "set -e\n" +
		"ipset restore -f " + write("sets", policy.RenderIPSets(f.IPSets, 0)) + "\n"
	for _, tbl := range f.Tables() {
		script += "iptables-restore --noflush " + write(tbl.Name, policy.Render(tbl.Name, tbl.Chains, tbl.Hooks...)) + "\n"
	}
	return script
}

// peerScript makes the kernel tests' two ends: the "host" (the test's
// namespace, 10.0.0.10 on eth0) and a peer namespace behind eth0
// (10.0.0.11), held by a sleeping process that the shell kills on its way
// out (and that ends by itself within a minute should the shell be
// killed first); inpeer runs a command in the peer.
const peerScript = `
ip link set lo up
unshare -n sleep 60 & peer=$!
trap 'kill $peer' EXIT
sleep 0.2
inpeer() { nsenter -t $peer -n "$@"; }
ip link add eth0 type veth peer name eth0 netns $peer
ip addr add 10.0.0.10/24 dev eth0
ip link set eth0 up
inpeer ip addr add 10.0.0.11/24 dev eth0
inpeer ip link set lo up
inpeer ip link set eth0 up
`
