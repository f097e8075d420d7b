package xtables

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Counter is one rule's packet and byte counters.
type Counter struct {
	Packets, Bytes uint64
}

// ReadCounters returns the kernel's counters of our rules in table (our
// chains' rules and our hooks), by rule hash: `iptables-save -c -t
// table` of backend b, read without changing anything.
func ReadCounters(ctx context.Context, r Runner, b Backend, table string) (map[string]Counter, error) {
	out, err := r.Run(ctx, b.Save, []string{"-c", "-t", table}, "")
	if err != nil {
		return nil, fmt.Errorf("read counters of table %s: %w", table, err)
	}
	return parseCounters(out), nil
}

// parseCounters reads `iptables-save -c` output: "[packets:bytes] -A
// chain rule...".
func parseCounters(save string) map[string]Counter {
	out := map[string]Counter{}
	for _, line := range strings.Split(save, "\n") {
		if !strings.HasPrefix(line, "[") {
			continue
		}
		counts, rest, ok := strings.Cut(line[1:], "] -A ")
		if !ok {
			continue
		}
		pk, by, ok := strings.Cut(counts, ":")
		if !ok {
			continue
		}
		_, spec, _ := strings.Cut(rest, " ")
		hash := RuleHash(spec)
		if hash == "" {
			continue
		}
		p, err1 := strconv.ParseUint(pk, 10, 64)
		b, err2 := strconv.ParseUint(by, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out[hash] = Counter{Packets: p, Bytes: b}
	}
	return out
}
