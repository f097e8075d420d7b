package netnstest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
)

// ReexecOption changes the namespaces Reexec gives the child.
type ReexecOption func(*syscall.SysProcAttr)

// PrivateMounts gives the child a private mount namespace as well, every
// mount in it private (no propagation to or from the machine's): what it
// mounts (a node's host paths, see kubetest.PrivateHostPaths) is seen by
// it and its children only, and goes away with them.
func PrivateMounts() ReexecOption {
	// As Unshareflags, Go's fork makes "/" recursively private before
	// exec.
	return func(a *syscall.SysProcAttr) { a.Unshareflags |= syscall.CLONE_NEWNS }
}

// parentMountNSEnv carries the mount namespace of the process that called
// Reexec to the child, which cannot always read PID 1's.
const parentMountNSEnv = "CALICO_TEST_PARENT_MOUNT_NS"

// InPrivateMountNS reports whether this process runs in a mount namespace
// of its own: re-executed by Reexec with PrivateMounts (or one of its
// children), not in the machine's.
func InPrivateMountNS() bool {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return false
	}
	if pid1, err := os.Readlink("/proc/1/ns/mnt"); err == nil && pid1 == self {
		return false
	}
	parent := os.Getenv(parentMountNSEnv)
	return parent != "" && parent != self
}

// Reexec runs this test binary again, with the same arguments, in a new
// private network namespace that dies with it, and returns the child's exit
// code. env (set to "1" in the child) tells the child it is the re-executed
// one. A TestMain calls it when running as root, so that a package's tests
// play a whole node without touching the machine's own namespace.
func Reexec(env string, opts ...ReexecOption) int {
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	for _, o := range opts {
		o(cmd.SysProcAttr)
	}
	if mnt, err := os.Readlink("/proc/self/ns/mnt"); err == nil && cmd.SysProcAttr.Unshareflags&syscall.CLONE_NEWNS != 0 {
		cmd.Env = append(cmd.Env, parentMountNSEnv+"="+mnt)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "run tests in a private network namespace:", err)
		return 1
	}
	// Pass interrupts on so that the child's cleanups (processes, pod
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

// StartPinned starts cmd from an OS thread that stays alive, locked and
// waiting, until cmd exits, and returns cmd.Wait's result on done. Linux
// delivers Pdeathsig when the *thread* that forked the child ends, and Go
// ends threads whose goroutine exited while locked (as namespace-switching
// code does): a child started from such a thread would be killed at random.
// Pinning the forking thread makes Pdeathsig mean "the test process died".
func StartPinned(cmd *exec.Cmd) (done <-chan error, err error) {
	ch := make(chan error, 1)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		ch <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return ch, nil
}
