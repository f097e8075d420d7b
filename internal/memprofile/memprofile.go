// Package memprofile turns the Go runtime's heap profiler off, from its
// init, unless the process serves it: the agent's debug port
// (FELIX_DEBUGPORT) is the only way to read a heap profile of
// calico-node, and it is off by default.
//
// Why: the runtime samples one allocation per 512 KiB by default, and
// each sample walks the allocating goroutine's stack, reading the
// binary's function tables (pages of the executable the process then
// keeps mapped), and records the stack in a bucket table of its own
// (1.4 MiB reserved). On an idle agent that was ~0.7 MiB of resident
// memory (docs/benchmarks.md) for profiles nobody could fetch.
//
// Design: Go initialises packages in dependency order, then by import
// path; this package imports only os, strings and runtime, so main
// imports it first and its init runs before the large packages' (the
// embedded etcd, gobgp, client-go), whose allocations are then not
// sampled either. GODEBUG=memprofilerate=N, set by a user, is left as
// the runtime read it.
package memprofile

import (
	"os"
	"runtime"
	"strings"
)

func init() {
	if !Wanted(os.Environ()) {
		runtime.MemProfileRate = 0
	}
}

// Wanted reports whether environ (os.Environ's form) keeps the heap
// profiler on: a FELIX_DEBUGPORT other than empty or 0 (FELIX_* names
// are case-insensitive after the prefix, as package felixenv reads
// them), or a memprofilerate in GODEBUG. In doubt it is on: a debug
// port whose value felixenv rejects stops the agent anyway.
func Wanted(environ []string) bool {
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case strings.EqualFold(name, "FELIX_DEBUGPORT") && strings.HasPrefix(name, "FELIX_"):
			if v := strings.TrimSpace(value); v != "" && v != "0" {
				return true
			}
		case name == "GODEBUG" && strings.Contains(value, "memprofilerate="):
			return true
		}
	}
	return false
}
