package etcdscale

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// histogram counts durations in logarithmic buckets (50 per decade, so a
// quantile is within 5% of the true value) from 10 µs up; the agent
// processes send theirs to the parent, which adds them up.
type histogram struct {
	counts map[int]int64
}

const histPerDecade = 50

func (h *histogram) add(d time.Duration) {
	if h.counts == nil {
		h.counts = map[int]int64{}
	}
	us := max(float64(d)/float64(time.Microsecond), 10)
	h.counts[int(math.Floor(math.Log10(us)*histPerDecade))]++
}

// encode is "b:n,b:n,..." ("-" for empty).
func (h *histogram) encode() string {
	if len(h.counts) == 0 {
		return "-"
	}
	var parts []string
	for b, n := range h.counts {
		parts = append(parts, strconv.Itoa(b)+":"+strconv.FormatInt(n, 10))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func (h *histogram) merge(enc string) {
	if enc == "-" {
		return
	}
	if h.counts == nil {
		h.counts = map[int]int64{}
	}
	for _, p := range strings.Split(enc, ",") {
		b, n, ok := strings.Cut(p, ":")
		if !ok {
			continue
		}
		bi, err1 := strconv.Atoi(b)
		ni, err2 := strconv.ParseInt(n, 10, 64)
		if err1 == nil && err2 == nil {
			h.counts[bi] += ni
		}
	}
}

func (h *histogram) total() int64 {
	var n int64
	for _, c := range h.counts {
		n += c
	}
	return n
}

// quantile is the upper edge of the bucket holding the q-quantile.
func (h *histogram) quantile(q float64) time.Duration {
	n := h.total()
	if n == 0 {
		return 0
	}
	keys := make([]int, 0, len(h.counts))
	for b := range h.counts {
		keys = append(keys, b)
	}
	slices.Sort(keys)
	rank := int64(math.Ceil(q * float64(n)))
	var seen int64
	for _, b := range keys {
		seen += h.counts[b]
		if seen >= rank {
			return time.Duration(math.Pow(10, float64(b+1)/histPerDecade) * float64(time.Microsecond))
		}
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct is the q-quantile of ds (nearest rank); 0 for none.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if fs := strings.Fields(string(data)); err == nil && len(fs) >= 3 {
		return strings.Join(fs[:3], " ")
	}
	return "?"
}

// procCPU is the user+system CPU time of process pid, from /proc (clock
// ticks of 10 ms: USER_HZ is 100 on Linux).
func procCPU(pid int) (time.Duration, error) {
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

// procRSS is the resident memory of process pid in KiB.
func procRSS(pid int) (int, error) {
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

// promSamples is a scrape of a Prometheus text endpoint: name -> samples.
type promSamples map[string][]promSample

type promSample struct {
	labels map[string]string
	value  float64
}

var labelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

func parseProm(text string) promSamples {
	out := promSamples{}
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
		s := promSample{labels: map[string]string{}, value: v}
		for _, m := range labelRE.FindAllStringSubmatch(labels, -1) {
			s.labels[m[1]] = m[2]
		}
		out[name] = append(out[name], s)
	}
	return out
}

// sum adds the samples of name whose labels match the pairs given.
func (p promSamples) sum(name string, match ...string) float64 {
	total := 0.0
	for _, s := range p[name] {
		ok := true
		for i := 0; i+1 < len(match); i += 2 {
			if s.labels[match[i]] != match[i+1] {
				ok = false
			}
		}
		if ok {
			total += s.value
		}
	}
	return total
}

var metricsClient = &http.Client{Timeout: 5 * time.Second}

// scrape reads an etcd member's /metrics (served on its client URL).
func scrape(clientURL string) (promSamples, error) {
	resp, err := metricsClient.Get(clientURL + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: HTTP %d", clientURL, resp.StatusCode)
	}
	return parseProm(string(body)), nil
}
