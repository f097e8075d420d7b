package scaletest

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Ms is d in milliseconds, for tables.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Pct is the q-quantile of ds (nearest rank); 0 for none.
func Pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// UnixNano reads a report line's time (Unix nanoseconds); the zero Unix
// time when it is not a number.
func UnixNano(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Unix(0, n)
}

// LoadAverage is /proc/loadavg's first three fields, "?" if unreadable.
func LoadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if fs := strings.Fields(string(data)); err == nil && len(fs) >= 3 {
		return strings.Join(fs[:3], " ")
	}
	return "?"
}

// ProcCPU is the user+system CPU time of process pid, from /proc (clock
// ticks of 10 ms: USER_HZ is 100 on Linux).
func ProcCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields start after its ")".
	s := string(data)
	fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fs) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fs))
	}
	utime, err1 := strconv.ParseInt(fs[11], 10, 64)
	stime, err2 := strconv.ParseInt(fs[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, fs[11], fs[12])
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// ProcRSS is the resident memory of process pid in KiB.
func ProcRSS(pid int) (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.Atoi(strings.Fields(rest)[0])
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// Samples is a scrape of a Prometheus text endpoint: name -> samples.
type Samples map[string][]Sample

// Sample is one sample line: its labels and value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

var labelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// ParseProm reads Prometheus text exposition; lines it cannot read
// (comments, a value that is not a number) are skipped.
func ParseProm(text string) Samples {
	out := Samples{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name, labels, _ := strings.Cut(line[:sp], "{")
		s := Sample{Labels: map[string]string{}, Value: v}
		for _, m := range labelRE.FindAllStringSubmatch(labels, -1) {
			s.Labels[m[1]] = m[2]
		}
		out[name] = append(out[name], s)
	}
	return out
}

// Sum adds the samples of name whose labels match the label/value pairs
// given.
func (p Samples) Sum(name string, match ...string) float64 {
	total := 0.0
	for _, s := range p[name] {
		if s.matches(match) {
			total += s.Value
		}
	}
	return total
}

// By sums the matching samples of name per value of label.
func (p Samples) By(name, label string, match ...string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range p[name] {
		if s.matches(match) {
			out[s.Labels[label]] += s.Value
		}
	}
	return out
}

func (s Sample) matches(pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		if s.Labels[pairs[i]] != pairs[i+1] {
			return false
		}
	}
	return true
}
