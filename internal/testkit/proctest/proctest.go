// Package proctest runs the child processes of tests (calico-node agents,
// BIRD, etcd, kube-apiserver, kubelet, containerd) so that none outlives
// the test that started it, and keeps their output for failure messages.
//
// API model: Start runs a command for a test: its output goes to a Log, a
// failure to start fails the test, and t.Cleanup kills it and, when the
// test failed, logs the end of its output. Launch and LaunchLogged are the
// same without a testing.TB, for harness code that returns errors and
// sends a server's output to a log file. A Proc is stopped by its PID
// only: Stop sends SIGTERM and escalates to SIGKILL after a grace period;
// Kill goes straight to SIGKILL. WaitFor and WaitHTTP poll for readiness
// and fail at once when the process exits instead.
//
// Design: every child gets Pdeathsig (SIGKILL) and is forked from a pinned
// OS thread (netnstest.StartPinned explains why the thread matters), so a
// test binary that dies without running its cleanups (a timeout panic, a
// SIGKILL) takes its children with it. Every child also gets its own
// process group, so a Ctrl-C on `go test` reaches the test binary, whose
// cleanups stop the children, rather than the children directly. Stop and
// Kill signal the exec.Cmd's process, which is never signalled after it
// was reaped, so a reused PID is never hit.
//
// Thread safety: a Proc's methods and its Log may be used from any
// goroutine; WaitFor and WaitHTTP follow testing.TB's rules (Fatal only
// from the test's goroutine).
package proctest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// LogLines is how many lines of a process's output a failure message
// quotes: its end, where the reason usually is.
const LogLines = 200

// ErrKilled is wrapped by Stop's error when the process did not exit on
// SIGTERM within the grace period and was killed.
var ErrKilled = errors.New("killed: no exit after SIGTERM")

// Log is a goroutine-safe buffer for the output of a process (or a
// logger) that a test reads while it is still being written.
type Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Tail returns the last n lines written so far.
func (l *Log) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(l.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Proc is a running (or exited) child process.
type Proc struct {
	// Name names the process in failure messages.
	Name string
	Cmd  *exec.Cmd
	// Log holds the process's output when Start or Launch captured it
	// (cmd had neither Stdout nor Stderr set); nil otherwise.
	Log *Log

	done chan struct{} // closed once Cmd.Wait returned
	err  error         // Cmd.Wait's result; read only after done
}

// Launch starts cmd as a child that dies with this process. Its output
// goes to p.Log unless cmd has its own Stdout or Stderr.
func Launch(name string, cmd *exec.Cmd) (*Proc, error) {
	p := &Proc{Name: name, Cmd: cmd, done: make(chan struct{})}
	if cmd.Stdout == nil && cmd.Stderr == nil {
		p.Log = &Log{}
		cmd.Stdout, cmd.Stderr = p.Log, p.Log
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	waited, err := netnstest.StartPinned(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = <-waited
		close(p.done)
	}()
	return p, nil
}

// LaunchLogged is Launch with the process's output appended to the file
// logPath, after a line naming the command (a server restarted by a test
// writes to the same log).
func LaunchLogged(name string, cmd *exec.Cmd, logPath string) (*Proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	defer logFile.Close() // the child has its own descriptor
	fmt.Fprintf(logFile, "=== start %s: %s\n", name, strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	return Launch(name, cmd)
}

// Start is Launch for a test: a failure to start fails it, and t.Cleanup
// kills the process and, if the test failed, logs the end of its output.
// Register cleanups that need the process still running (a graceful Stop,
// a look at its state) after calling Start: cleanups run last-in first-out.
func Start(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p, err := Launch(name, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() && p.Log != nil {
			t.Logf("--- %s log (last %d lines):\n%s", name, LogLines, p.Log.Tail(LogLines))
		}
	})
	return p
}

// Done is closed when the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Err is the process's exit as exec.Cmd.Wait reports it (nil: status 0).
// Only call it after Done is closed.
func (p *Proc) Err() error { return p.err }

// Stop ends the process by its PID: SIGTERM, then SIGKILL if it has not
// exited after grace. It returns once the process is reaped, with its exit
// (Err), or with an error wrapping ErrKilled if it had to be killed. Stop
// on an exited process just returns its exit.
func (p *Proc) Stop(grace time.Duration) error {
	if !p.Running() {
		return p.err
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s: %w within %s", p.Name, ErrKilled, grace)
	}
}

// Kill ends the process by its PID with SIGKILL and waits until it is
// reaped. Kill on an exited process does nothing.
func (p *Proc) Kill() {
	if p.Running() {
		p.Cmd.Process.Kill()
		<-p.done
	}
}

// WaitFor polls cond every 100ms until it returns true. It fails the test
// if the process exits first or timeout passes; what names the awaited
// state in the message ("readiness").
func (p *Proc) WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s exited before %s: %v\n%s", p.Name, what, p.err, p.logTail())
		default:
		}
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: no %s within %s\n%s", p.Name, what, timeout, p.logTail())
}

// WaitHTTP waits (as WaitFor) until a GET of url answers 200 OK, as a
// readiness probe does.
func (p *Proc) WaitHTTP(t testing.TB, timeout time.Duration, url string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second} // a hung probe must not outlast timeout
	p.WaitFor(t, timeout, "200 OK from "+url, func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func (p *Proc) logTail() string {
	if p.Log == nil {
		return "(output not captured)"
	}
	return p.Log.Tail(LogLines)
}

// EnvWithout returns this process's environment without the variables
// whose names start with one of prefixes: a child started with it is not
// pointed elsewhere by the test's own settings (ETCD_ENDPOINTS, KUBECONFIG).
func EnvWithout(prefixes ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		keep := true
		for _, pre := range prefixes {
			if strings.HasPrefix(kv, pre) {
				keep = false
				break
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

// FreePort is a loopback TCP port that was free a moment ago, for a child
// process (or a server the test starts) to listen on.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Metric reads one sample line of a Prometheus text endpoint, e.g.
// `calico_cni_server_requests_total{reason="",result="served"}`; 0 when absent.
func Metric(t testing.TB, url, sample string) float64 {
	t.Helper()
	v, err := MetricValue(url, sample)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// MetricValue is Metric returning its error, for polling a process that
// may not serve yet.
func MetricValue(url, sample string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, fmt.Errorf("metrics %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("metrics %s: %w", url, err)
	}
	return sampleValue(string(body), sample)
}

// Sample reads one sample line of a Prometheus text exposition (see
// Metric); 0 when absent.
func Sample(t testing.TB, body, sample string) float64 {
	t.Helper()
	v, err := sampleValue(body, sample)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func sampleValue(body, sample string) (float64, error) {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("metric line %q: %w", line, err)
			}
			return f, nil
		}
	}
	return 0, nil
}
