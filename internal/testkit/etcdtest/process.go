package etcdtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/projectcalico/calico-node/internal/testkit/proctest"
)

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
	cmd := exec.Command(s.binary, args...)
	cmd.Dir = s.unixDir // where a unix listener's socket goes; "" = ours
	cmd.Env = etcdEnv()
	p, err := proctest.LaunchLogged("etcd", cmd, s.logPath)
	if err != nil {
		return err
	}

	if err := s.waitReady(p.Done()); err != nil {
		p.Stop(stopGrace)
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
	env := proctest.EnvWithout("ETCD_")
	if runtime.GOARCH != "amd64" {
		env = append(env, "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
	}
	return env
}
