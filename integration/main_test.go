package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
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
		os.Exit(m.Run())
	case os.Geteuid() == 0:
		os.Exit(reexecInNodeNetNS())
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

// reexecInNodeNetNS runs this test binary again in a new network namespace
// that dies with it (and with everything the agent programmed in it).
func reexecInNodeNetNS() int {
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), nodeNetNSEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "run tests in a private network namespace:", err)
		return 1
	}
	// Pass interrupts on so that the child's cleanups (agent, etcd, pod
	// namespaces) run.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.ExitCode()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// setupNode brings loopback up and turns forwarding on, as on a node.
func setupNode() error {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("set lo up: %w: %s", err, out)
	}
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}
