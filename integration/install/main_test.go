package install

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// nodeEnv marks the re-executed test process that runs inside the node's
// private network and mount namespaces.
const nodeEnv = "CALICO_INSTALL_TEST_NODE"

// The node's address, on its uplink (a documentation range: the uplink is
// a veth whose peer is in the same namespace, nothing ever leaves it).
const nodeAddr = "192.0.2.1/24"

// Run as root, the test binary re-executes itself in private network and
// mount namespaces: the node's. Everything the node does to its host
// (interfaces, routes, iptables, the files under its hostPath volumes)
// dies with the test process; the machine's own is never changed.
func TestMain(m *testing.M) {
	switch {
	case os.Getenv(nodeEnv) != "":
		if err := setupNode(); err != nil {
			fmt.Fprintln(os.Stderr, "set up the node namespace:", err)
			os.Exit(1)
		}
		os.Exit(m.Run())
	case os.Geteuid() == 0:
		os.Exit(netnstest.Reexec(nodeEnv, netnstest.PrivateMounts()))
	default:
		os.Exit(m.Run()) // the tests fail: they need root
	}
}

// setupNode gives the namespace what a node has: loopback, an uplink with
// the node's address and a default route (kubelet and the agent take the
// node's IP from it), and forwarding on.
func setupNode() error {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		// A veth, not a dummy: kernels without the dummy module exist.
		{"link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"},
		{"link", "set", "eth0-peer", "up"},
		{"addr", "add", nodeAddr, "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "dev", "eth0"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v: %w: %s", args, err, out)
		}
	}
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}
