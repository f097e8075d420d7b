package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Main is the TestMain of a package whose tests play a whole node. Run as
// root, the test binary re-executes itself (Reexec with env and opts) and
// exits with the child's code. The re-executed child runs setup, the
// tests, and the undo setup returned. Without root the tests run as they
// are (they skip or fail by themselves: they need the namespace).
func Main(m *testing.M, env string, setup func() (undo func(), err error), opts ...ReexecOption) {
	switch {
	case os.Getenv(env) != "":
		undo, err := setup()
		if err != nil {
			fmt.Fprintln(os.Stderr, "set up the node namespace:", err)
			os.Exit(1)
		}
		code := m.Run()
		if undo != nil {
			undo()
		}
		os.Exit(code)
	case os.Geteuid() == 0:
		os.Exit(Reexec(env, opts...))
	default:
		os.Exit(m.Run())
	}
}

// NodeUplinkAddr is the address SetupNode gives a node's uplink: a
// documentation range, on a veth whose peer stays in the same namespace,
// so nothing sent to it ever leaves.
const NodeUplinkAddr = "192.0.2.1/24"

// SetupNode gives the current namespace (the re-executed child's) what a
// node has: loopback, forwarding on and, with uplink, an uplink "eth0"
// with NodeUplinkAddr and a default route through it (kubelet and the
// agent take the node's IP from it). The uplink is a veth: not every
// kernel has dummy links.
func SetupNode(uplink bool) error {
	steps := [][]string{{"link", "set", "lo", "up"}}
	if uplink {
		steps = append(steps,
			[]string{"link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"},
			[]string{"link", "set", "eth0-peer", "up"},
			[]string{"addr", "add", NodeUplinkAddr, "dev", "eth0"},
			[]string{"link", "set", "eth0", "up"},
			[]string{"route", "add", "default", "dev", "eth0"},
		)
	}
	for _, args := range steps {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v: %w: %s", args, err, out)
		}
	}
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}

// PrivateSocket points the variable env at a socket path in a fresh
// temporary directory and returns what removes the directory. A node's
// agent and the CNI plugins it serves both read the variable, so agents of
// other tests on this machine, in other namespaces, never get the plugins'
// commands.
func PrivateSocket(env, prefix string) (undo func(), err error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	os.Setenv(env, filepath.Join(dir, "cni.sock"))
	return func() { os.RemoveAll(dir) }, nil
}

// RunDirEnv are the variables PrivateRunDir sets: the agent's CNI socket,
// its status socket and the prefix of its endpoint status files, all of
// which live in /var/run/calico on a real node.
var RunDirEnv = []string{"CALICO_CNI_SOCKET", "CALICO_STATUS_SOCKET", "FELIX_ENDPOINTSTATUSPATHPREFIX"}

// PrivateRunDir makes the node's /var/run/calico a fresh temporary
// directory: it points CALICO_CNI_SOCKET, CALICO_STATUS_SOCKET and
// FELIX_ENDPOINTSTATUSPATHPREFIX into it (the agent reads all three, the
// CNI plugins it serves the first) and returns what removes it. Agents
// of other tests on this machine then never get this node's plugins'
// commands, and nothing is written to the machine's /var/run/calico.
func PrivateRunDir(prefix string) (undo func(), err error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	os.Setenv("CALICO_CNI_SOCKET", filepath.Join(dir, "cni.sock"))
	os.Setenv("CALICO_STATUS_SOCKET", filepath.Join(dir, "status.sock"))
	os.Setenv("FELIX_ENDPOINTSTATUSPATHPREFIX", dir)
	return func() { os.RemoveAll(dir) }, nil
}
