package etcdtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// process is one run of the etcd binary.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returned
}

// startProcess runs the etcd binary on the current ports. Called with s.mu
// held.
func (s *Server) startProcess() error {
	listen := s.clientURL()
	if s.unixDir != "" {
		scheme := "unix"
		if s.pki != nil {
			scheme = "unixs"
		}
		listen += "," + scheme + "://" + s.unixName()
		// A socket left by a previous run of this server would be in use.
		os.Remove(filepath.Join(s.unixDir, s.unixName()))
	}
	args := []string{
		"--name", memberName,
		"--data-dir", s.DataDir,
		"--listen-client-urls", listen,
		"--advertise-client-urls", s.clientURL(),
		"--listen-peer-urls", s.peerURL(),
		"--initial-advertise-peer-urls", s.peerURL(),
		"--initial-cluster", memberName + "=" + s.peerURL(),
		"--initial-cluster-state", "new",
		// A single member elects itself after one election timeout; short
		// timeouts make startup and Restart fast.
		"--heartbeat-interval", "10",
		"--election-timeout", "100",
		"--logger", "zap",
		"--log-outputs", "stderr",
		"--log-level", "warn",
	}
	if s.pki != nil {
		args = append(args,
			"--cert-file", s.pki.serverCertFile,
			"--key-file", s.pki.serverKeyFile,
			"--trusted-ca-file", s.pki.caFile,
			"--client-cert-auth",
		)
	}
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open etcd log: %w", err)
	}
	defer logFile.Close() // the child keeps its own descriptor
	fmt.Fprintf(logFile, "=== etcdtest: starting %s %s\n", s.binary, strings.Join(args, " "))

	cmd := exec.Command(s.binary, args...)
	cmd.Dir = s.unixDir // where a unix listener's socket goes; "" = ours
	cmd.Env = etcdEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Its own process group keeps a Ctrl-C on the test run from reaching
	// etcd before the cleanup does; it is still signalled by PID only.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", s.binary, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.exited)
	}()

	if err := s.waitReady(p.exited); err != nil {
		p.stop()
		tail := s.logTail()
		if strings.Contains(tail, "address already in use") {
			return fmt.Errorf("%w: %v", errPortInUse, err)
		}
		return fmt.Errorf("%w; etcd log %s:\n%s", err, s.logPath, tail)
	}
	s.proc = p
	return nil
}

// etcdEnv is the environment for the child: the test's, minus ETCD_*
// variables that would override the command line, plus the opt-in etcd 3.4
// requires on architectures it does not officially support.
func etcdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	if runtime.GOARCH != "amd64" {
		env = append(env, "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
	}
	return env
}

// stop terminates the process by its PID: SIGTERM, then SIGKILL if it has
// not exited after stopGrace. It returns once the process is reaped.
func (p *process) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopGrace):
		p.cmd.Process.Kill()
		<-p.exited
	}
}
