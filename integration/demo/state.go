package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/projectcalico/calico-node/internal/atomicfile"
)

// state is the record of what the demo created, written to
// <state-dir>/state.json as it goes so that `down` can undo a run that
// stopped half way.
type state struct {
	path       string
	Namespaces []string `json:"namespaces"` // in creation order
	Procs      []proc   `json:"processes"`
}

// proc identifies a process across PID reuse: the kernel's start time of
// the PID must still match.
type proc struct {
	Name  string `json:"name"`
	PID   int    `json:"pid"`
	Start uint64 `json:"startTime"`
}

func statePath(stateDir string) string { return filepath.Join(stateDir, "state.json") }

func (s *state) save() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if err := atomicfile.WriteFile(s.path, data, 0o600); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

func (s *state) addNamespace(name string) error {
	s.Namespaces = append(s.Namespaces, name)
	return s.save()
}

func (s *state) addProc(name string, pid int) error {
	st, err := startTime(pid)
	if err != nil {
		return fmt.Errorf("record %s: %w", name, err)
	}
	s.Procs = append(s.Procs, proc{Name: name, PID: pid, Start: st})
	return s.save()
}

// startTime is field 22 of /proc/PID/stat (clock ticks since boot).
func startTime(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read process %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; fields after it start
	// after the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, fmt.Errorf("read process %d: malformed stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("read process %d: malformed stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// alive reports whether p is still the process that was recorded.
func (p proc) alive() bool {
	st, err := startTime(p.PID)
	return err == nil && st == p.Start
}

// down removes what state.json records: processes (SIGTERM, then SIGKILL),
// namespaces (pods first; deleting a namespace deletes its veth ends and
// with them their peers), then the state directory. A missing state
// directory is not an error: there is nothing to remove.
func down(o options, out io.Writer) error {
	data, err := os.ReadFile(statePath(o.stateDir))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(o.stateDir); errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(out, "no demo to remove (%s does not exist)\n", o.stateDir)
			return nil
		}
		fmt.Fprintf(out, "removing %s (no state file)\n", o.stateDir)
		return os.RemoveAll(o.stateDir)
	}
	if err != nil {
		return fmt.Errorf("read state: %w", err)
	}
	var s state
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("read state %s: %w", statePath(o.stateDir), err)
	}
	var errs []error

	// Listeners, agents and the relay first, then the API server, etcd
	// last: each stops while what it talks to still answers, so agents
	// stop cleanly and kube-apiserver's graceful shutdown does not wait
	// on a gone etcd.
	procs := slices.Clone(s.Procs)
	slices.Reverse(procs)
	tier := func(p proc) int {
		switch p.Name {
		case apiserverProc:
			return 1
		case "etcd":
			return 2
		}
		return 0
	}
	for t := 0; t <= 2; t++ {
		errs = append(errs, stopProcs(slices.DeleteFunc(slices.Clone(procs), func(p proc) bool { return tier(p) != t })))
	}
	fmt.Fprintf(out, "stopped %d processes\n", len(procs))

	nss := slices.Clone(s.Namespaces)
	slices.Reverse(nss)
	removed := 0
	for _, ns := range nss {
		if !namespaceExists(ns) {
			continue
		}
		if b, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete namespace %s: %v: %s", ns, err, strings.TrimSpace(string(b))))
			continue
		}
		removed++
	}
	fmt.Fprintf(out, "deleted %d network namespaces\n", removed)

	if err := os.RemoveAll(o.stateDir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", o.stateDir, err))
	} else {
		fmt.Fprintf(out, "removed %s\n", o.stateDir)
	}
	return errors.Join(errs...)
}

// stopProcs stops every process of procs at once: SIGTERM, SIGKILL after
// 10 s.
func stopProcs(procs []proc) error {
	for _, p := range procs {
		if p.alive() {
			syscall.Kill(p.PID, syscall.SIGTERM)
		}
	}
	var errs []error
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range procs {
		for p.alive() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if p.alive() {
			syscall.Kill(p.PID, syscall.SIGKILL)
			for i := 0; p.alive() && i < 250; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
		if p.alive() {
			errs = append(errs, fmt.Errorf("process %s (pid %d) did not exit", p.Name, p.PID))
		}
	}
	return errors.Join(errs...)
}

func namespaceExists(name string) bool {
	_, err := os.Stat(filepath.Join("/var/run/netns", name))
	return err == nil
}
