package scaletest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/testkit/proctest"
)

// Fleet is the child processes of one harness run, agents and an optional
// hub (the fan-out), and what they reported.
type Fleet struct {
	// Procs are the agent processes in the order started; Hub is the
	// fan-out, nil without one. Both are set by the goroutine that
	// starts them, before the processes are used.
	Procs []*Proc
	Hub   *Proc

	// report reads one line of process idx (-1: the hub) into the
	// harness's state, under mu; false: the line is not in the
	// protocol, which Wait takes for a failure.
	report func(idx int, fields []string) bool

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every line
	errs     []string      // lines report refused
	exited   int           // processes whose stdout closed
	stopOnce sync.Once
}

// Proc is one child process of a Fleet.
type Proc struct {
	Index  int // in Fleet.Procs; -1 for the hub
	Proc   *proctest.Proc
	Stdin  io.WriteCloser
	Stderr *proctest.Log
}

// NewFleet is a Fleet whose lines report reads; see Fleet.report.
func NewFleet(report func(idx int, fields []string) bool) *Fleet {
	return &Fleet{report: report, changed: make(chan struct{})}
}

// StartAgent runs this test binary as the next agent process, named name,
// with env (the whole environment) at the given niceness (0: as the test).
func (f *Fleet) StartAgent(tb testing.TB, name string, nice int, env []string) *Proc {
	tb.Helper()
	p := f.start(tb, len(f.Procs), name, nice, env)
	f.Procs = append(f.Procs, p)
	return p
}

// StartHub runs this test binary as the fleet's hub; see StartAgent.
func (f *Fleet) StartHub(tb testing.TB, name string, nice int, env []string) *Proc {
	tb.Helper()
	f.Hub = f.start(tb, -1, name, nice, env)
	return f.Hub
}

func (f *Fleet) start(tb testing.TB, idx int, name string, nice int, env []string) *Proc {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	if nice != 0 {
		cmd = exec.Command("nice", "-n", strconv.Itoa(nice), exe) // nice execs: the PID is the child's
	}
	cmd.Env = env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	// A pipe of our own rather than StdoutPipe: the reader, not Wait,
	// decides when the output has all been read.
	rd, wr, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout = wr
	p := &Proc{Index: idx, Stdin: stdin, Stderr: &proctest.Log{}}
	cmd.Stderr = p.Stderr
	p.Proc, err = proctest.Launch(name, cmd)
	wr.Close()
	if err != nil {
		rd.Close()
		tb.Fatal(err)
	}
	go f.read(idx, name, rd)
	return p
}

func (f *Fleet) read(idx int, name string, rd *os.File) {
	defer rd.Close()
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 4<<20) // a stats line may carry histograms
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		f.mu.Lock()
		if !f.report(idx, fs) {
			f.errs = append(f.errs, name+": "+strings.Join(fs, " "))
		}
		f.notifyLocked()
		f.mu.Unlock()
	}
	f.mu.Lock()
	f.exited++
	f.notifyLocked()
	f.mu.Unlock()
}

func (f *Fleet) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Lock and Unlock hold the lock report runs under, for the harness's own
// reads of what was reported.
func (f *Fleet) Lock()   { f.mu.Lock() }
func (f *Fleet) Unlock() { f.mu.Unlock() }

// Wait polls cond, under the fleet's lock, after every line until it
// holds; false after timeout or once a process failed or exited.
func (f *Fleet) Wait(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		ok, broken, ch := cond(), f.brokenLocked(), f.changed
		f.mu.Unlock()
		switch {
		case ok:
			return true
		case broken:
			return false
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

// Broken reports whether a process reported a failure or exited.
func (f *Fleet) Broken() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.brokenLocked()
}

func (f *Fleet) brokenLocked() bool { return len(f.errs) > 0 || f.exited > 0 }

// Problems describes failed processes for a failure message: the lines
// not in the protocol, and the end of each exited process's stderr.
func (f *Fleet) Problems() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sb strings.Builder
	for _, e := range f.errs {
		sb.WriteString("\n" + e)
	}
	for _, p := range append(slices.Clone(f.Procs), f.Hub) {
		if p != nil && !p.Proc.Running() {
			fmt.Fprintf(&sb, "\n%s exited (%v):\n%s", p.Proc.Name, p.Proc.Err(), p.Stderr.Tail(20))
		}
	}
	return sb.String()
}

// Command writes line to every agent process's stdin.
func (f *Fleet) Command(tb testing.TB, line string) {
	tb.Helper()
	for _, p := range f.Procs {
		if _, err := io.WriteString(p.Stdin, line+"\n"); err != nil {
			tb.Fatalf("%s: %v", p.Proc.Name, err)
		}
	}
}

// CPU is the CPU time the agent processes have used: the sum of those
// read, and the errors of those that could not be.
func (f *Fleet) CPU() (time.Duration, error) {
	var (
		sum  time.Duration
		errs []error
	)
	for _, p := range f.Procs {
		d, err := ProcCPU(p.Proc.Cmd.Process.Pid)
		sum += d
		errs = append(errs, err)
	}
	return sum, errors.Join(errs...)
}

// Stop closes every process's stdin (the protocol's "stop") and waits up
// to grace for each to exit before killing it; the hub last, since the
// agents read it. Stopping again does nothing.
func (f *Fleet) Stop(grace time.Duration) {
	f.stopOnce.Do(func() {
		procs := slices.Clone(f.Procs)
		if f.Hub != nil {
			procs = append(procs, f.Hub)
		}
		for _, p := range procs {
			p.Stdin.Close()
		}
		for _, p := range procs {
			select {
			case <-p.Proc.Done():
			case <-time.After(grace):
				p.Proc.Kill()
			}
		}
	})
}
