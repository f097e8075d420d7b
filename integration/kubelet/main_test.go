package kubelet

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// nodeNetNSEnv marks the re-executed test process that runs inside the
// node's private network namespace.
const nodeNetNSEnv = "CALICO_KUBELET_TEST_NODE_NETNS"

// The node's address, on its uplink (a documentation range: the uplink is
// a veth whose peer is in the same namespace, nothing ever leaves it).
const nodeAddr = "192.0.2.1/24"

// Run as root, the test binary re-executes itself in a private network
// namespace: the node's. kube-apiserver, kubelet, containerd, the agent
// and the pods' host ends all live there, and it dies with the test
// process; the machine's own namespace is never programmed.
func TestMain(m *testing.M) {
	switch {
	case os.Getenv(nodeNetNSEnv) != "":
		if err := setupNode(); err != nil {
			fmt.Fprintln(os.Stderr, "set up the node namespace:", err)
			os.Exit(1)
		}
		// The agent serves CNI on a socket of its own; containerd passes
		// the variable on to the plugins it runs.
		dir, err := os.MkdirTemp("", "calico-kubelet")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv(cnientry.SocketEnv, filepath.Join(dir, "cni.sock"))
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	case os.Geteuid() == 0:
		os.Exit(netnstest.Reexec(nodeNetNSEnv))
	default:
		os.Exit(m.Run()) // TestKubeletNode fails: it needs root
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
