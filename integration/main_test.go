package integration

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
// private "node" network namespace.
const nodeNetNSEnv = "CALICO_INTEGRATION_NODE_NETNS"

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(nodeNetNSEnv) != "":
		if err := setupNode(); err != nil {
			fmt.Fprintln(os.Stderr, "set up the node namespace:", err)
			os.Exit(1)
		}
		// This node's agent serves CNI on a socket of its own, and the
		// plugins libcni runs here hand their commands to it (both read
		// the variable): agents of other tests on this machine, in other
		// namespaces, never get them.
		dir, err := os.MkdirTemp("", "calico-integration")
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
		os.Exit(m.Run()) // the tests skip themselves without root
	}
}

func requireNode(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	if os.Getenv(nodeNetNSEnv) == "" {
		t.Skip("needs root: runs in private network namespaces")
	}
}

// setupNode brings loopback up and turns forwarding on, as on a node.
func setupNode() error {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("set lo up: %w: %s", err, out)
	}
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}
