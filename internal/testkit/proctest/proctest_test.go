package proctest

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// sh runs a shell script as a test child.
func sh(t *testing.T, script string) *Proc {
	t.Helper()
	return Start(t, "sh", exec.Command("sh", "-c", script))
}

func TestStop(t *testing.T) {
	tests := []struct {
		name       string
		script     string
		wantKilled bool
		wantExit   bool // exit status 0
		exited     bool // Stop is called after the process has exited
	}{
		// The ready line makes sure the trap is set before the signal.
		{"exits on SIGTERM", `trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done`, false, true, false},
		{"ignores SIGTERM", `trap '' TERM; echo ready; while :; do sleep 0.05; done`, true, false, false},
		{"already exited", `echo ready`, false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := sh(t, tt.script)
			deadline := time.Now().Add(5 * time.Second)
			for !strings.Contains(p.Log.String(), "ready") && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if tt.exited {
				// "ready" is printed before the shell exits: under load
				// Stop could otherwise still find it running.
				select {
				case <-p.Done():
				case <-time.After(5 * time.Second):
					t.Fatal("no exit")
				}
			}
			err := p.Stop(300 * time.Millisecond)
			if got := errors.Is(err, ErrKilled); got != tt.wantKilled {
				t.Errorf("Stop = %v, killed %v, want %v", err, got, tt.wantKilled)
			}
			if tt.wantExit && err != nil {
				t.Errorf("Stop = %v, want a clean exit", err)
			}
			if p.Running() {
				t.Error("still running after Stop")
			}
			// Idempotent, and a reaped process is never signalled again.
			if err2 := p.Stop(time.Second); tt.wantExit && err2 != nil {
				t.Errorf("second Stop = %v", err2)
			}
			p.Kill()
		})
	}
}

func TestLogAndTail(t *testing.T) {
	p := sh(t, `for i in 1 2 3 4 5; do echo line$i; done; echo err >&2`)
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("no exit")
	}
	if p.Err() != nil {
		t.Fatalf("exit: %v", p.Err())
	}
	if got, want := p.Log.Tail(2), "line5\nerr"; got != want {
		t.Errorf("Tail(2) = %q, want %q", got, want)
	}
	if got := p.Log.Tail(100); !strings.HasPrefix(got, "line1\n") || !strings.HasSuffix(got, "err") {
		t.Errorf("Tail(100) = %q, want everything", got)
	}
}

// LaunchLogged appends to the log file, so a restarted server keeps the
// output of its earlier runs.
func TestLaunchLogged(t *testing.T) {
	path := t.TempDir() + "/x.log"
	for i := range 2 {
		p, err := LaunchLogged("echo", exec.Command("echo", "run"+strconv.Itoa(i)), path)
		if err != nil {
			t.Fatal(err)
		}
		<-p.Done()
		if p.Log != nil {
			t.Error("output captured in Log as well as in the file")
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(data); !strings.Contains(s, "run0\n") || !strings.Contains(s, "run1\n") || strings.Count(s, "=== start echo: echo run") != 2 {
		t.Errorf("log file:\n%s", s)
	}
}

// fatalTB records the first Fatal and ends the goroutine as t.Fatal does.
type fatalTB struct {
	testing.TB
	msg atomic.Pointer[string]
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	m := fmt.Sprintf(format, args...)
	f.msg.Store(&m)
	runtime.Goexit()
}

// waitFails runs fn with a TB whose Fatal ends fn, and returns the
// message ("" if fn returned without one).
func waitFails(t *testing.T, fn func(tb testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	if m := f.msg.Load(); m != nil {
		return *m
	}
	return ""
}

func TestWait(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	long := `while :; do sleep 0.05; done`
	tests := []struct {
		name    string
		script  string
		wait    func(p *Proc, tb testing.TB)
		wantMsg string // "" = the wait succeeds
	}{
		{"condition met", long, func(p *Proc, tb testing.TB) {
			n := 0
			p.WaitFor(tb, 5*time.Second, "three polls", func() bool { n++; return n == 3 })
		}, ""},
		{"process exits", `echo bye; exit 3`, func(p *Proc, tb testing.TB) {
			p.WaitFor(tb, 5*time.Second, "forever", func() bool { return false })
		}, "sh exited before forever: exit status 3\nbye"},
		{"timeout", long, func(p *Proc, tb testing.TB) {
			p.WaitFor(tb, 300*time.Millisecond, "forever", func() bool { return false })
		}, "sh: no forever within 300ms"},
		{"http ready", long, func(p *Proc, tb testing.TB) {
			time.AfterFunc(200*time.Millisecond, func() { ready.Store(true) })
			p.WaitHTTP(tb, 5*time.Second, srv.URL)
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := sh(t, tt.script)
			msg := waitFails(t, func(tb testing.TB) { tt.wait(p, tb) })
			if tt.wantMsg == "" && msg != "" {
				t.Errorf("wait failed: %s", msg)
			}
			if tt.wantMsg != "" && !strings.HasPrefix(msg, tt.wantMsg) {
				t.Errorf("wait failure %q, want it to start with %q", msg, tt.wantMsg)
			}
		})
	}
}

func TestEnvWithout(t *testing.T) {
	t.Setenv("ETCD_ENDPOINTS", "http://elsewhere")
	t.Setenv("KUBECONFIG", "/elsewhere")
	t.Setenv("PROCTEST_KEEP", "1")
	env := strings.Join(EnvWithout("ETCD_", "KUBECONFIG="), "\n")
	for _, v := range []string{"ETCD_ENDPOINTS=", "KUBECONFIG="} {
		if strings.Contains(env, v) {
			t.Errorf("%s passed on", v)
		}
	}
	if !strings.Contains(env, "PROCTEST_KEEP=1") {
		t.Error("unrelated variable dropped")
	}
}

const helperEnv = "PROCTEST_HELPER"

// A child outlives neither a test binary killed without running its
// cleanups: the helper (this test binary again) starts a sleep, prints its
// PID and is SIGKILLed; the sleep must die too.
func TestChildDiesWithTestProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "1" {
		p, err := Launch("sleep", exec.Command("sleep", "60"))
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("pid", p.Cmd.Process.Pid)
		select {}
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestChildDiesWithTestProcess$")
	helper.Env = append(os.Environ(), helperEnv+"=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Wait()
	defer helper.Process.Kill()
	var pid int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "pid %d", &pid); err == nil {
			break
		}
		t.Logf("helper: %s", sc.Text())
	}
	if pid == 0 {
		t.Fatal("helper printed no child pid")
	}
	helper.Process.Kill()
	helper.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child %d outlived the killed test process", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie waiting for init.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
