package etcdscale

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/projectcalico/calico-node/internal/testkit/scaletest"
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

var metricsClient = &http.Client{Timeout: 5 * time.Second}

// scrape reads an etcd member's /metrics (served on its client URL).
func scrape(clientURL string) (scaletest.Samples, error) {
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
	return scaletest.ParseProm(string(body)), nil
}
