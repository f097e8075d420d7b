package etcdscale

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/scaletest"
)

// monitor samples the etcd members once a second: CPU and RSS from /proc
// (by PID: a restarted member is a new process) and their /metrics.
// Counters are kept cumulative across a member's restart, which starts
// its own counters from zero again.
type monitor struct {
	c *etcdtest.Cluster

	mu       sync.Mutex
	counters map[string]map[string]*counter // member -> name -> value
	gauges   map[string]map[string]float64  // member -> name -> last value
	maxSlow  float64                        // slow watchers, all members, largest sample
	errs     int
	// agents, once set, is the agent processes' CPU; timeline records,
	// every second, etcd's, the agents' and the whole machine's CPU
	// (cumulative seconds), to show where the time went.
	agents   func() time.Duration
	timeline []tick
}

type tick struct {
	at                    time.Time
	etcd, agents, machine float64
	events, watchers      float64 // events sent (cumulative), watchers held
}

// machineBusy is the CPU seconds all processes of the machine have used
// (/proc/stat: user, nice, system, irq, softirq, steal).
func machineBusy() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
	total := 0.0
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		if i < len(f) {
			v, _ := strconv.ParseFloat(f[i], 64)
			total += v
		}
	}
	return total / 100 // USER_HZ
}

// counter is a cumulative value whose source may restart from zero.
type counter struct{ base, last float64 }

func (c *counter) observe(v float64) {
	if v < c.last {
		c.base += c.last
	}
	c.last = v
}

func (c *counter) value() float64 { return c.base + c.last }

// The members' counters the harness reads (etcd 3.4's names).
var counterNames = []string{
	"etcd_debugging_mvcc_events_total",          // events sent to watchers
	"etcd_network_client_grpc_sent_bytes_total", // bytes sent to clients
	"etcd_mvcc_txn_total",
	"etcd_server_leader_changes_seen_total",
}

var gaugeNames = []string{
	"etcd_debugging_mvcc_watcher_total",
	"etcd_debugging_mvcc_watch_stream_total",
	"etcd_debugging_mvcc_slow_watcher_total",
	"etcd_mvcc_db_total_size_in_bytes",
	"etcd_mvcc_db_total_size_in_use_in_bytes",
}

func newMonitor(c *etcdtest.Cluster) *monitor {
	m := &monitor{c: c, counters: map[string]map[string]*counter{}, gauges: map[string]map[string]float64{}}
	for _, mem := range c.Members {
		m.counters[mem.Name] = map[string]*counter{"cpu": {}}
		for _, n := range counterNames {
			m.counters[mem.Name][n] = &counter{}
		}
		m.gauges[mem.Name] = map[string]float64{}
	}
	return m
}

// run samples until ctx ends.
func (m *monitor) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		m.sample()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (m *monitor) sample() {
	for _, mem := range m.c.Members {
		pid := mem.PID()
		if pid == 0 {
			// A member that is down holds no watchers and no memory.
			m.mu.Lock()
			clear(m.gauges[mem.Name])
			m.mu.Unlock()
			continue
		}
		cpu, err1 := scaletest.ProcCPU(pid)
		rss, err2 := scaletest.ProcRSS(pid)
		samples, err3 := scrape(mem.ClientURL)
		m.mu.Lock()
		if err1 == nil {
			m.counters[mem.Name]["cpu"].observe(cpu.Seconds())
		}
		if err2 == nil {
			m.gauges[mem.Name]["rss"] = float64(rss) * 1024
		}
		if err3 == nil {
			for _, n := range counterNames {
				m.counters[mem.Name][n].observe(samples.Sum(n))
			}
			for _, n := range gaugeNames {
				m.gauges[mem.Name][n] = samples.Sum(n)
			}
		}
		if err1 != nil || err2 != nil || err3 != nil {
			m.errs++ // a member killed between PID and read
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	slow := 0.0
	for _, g := range m.gauges {
		slow += g["etcd_debugging_mvcc_slow_watcher_total"]
	}
	m.maxSlow = max(m.maxSlow, slow)
	t := tick{at: time.Now(), machine: machineBusy()}
	for _, cs := range m.counters {
		t.etcd += cs["cpu"].value()
		t.events += cs["etcd_debugging_mvcc_events_total"].value()
	}
	for _, g := range m.gauges {
		t.watchers += g["etcd_debugging_mvcc_watcher_total"]
	}
	agents := m.agents
	m.mu.Unlock()
	if agents != nil {
		t.agents = agents().Seconds()
	}
	m.mu.Lock()
	m.timeline = append(m.timeline, t)
	m.mu.Unlock()
}

// setAgents starts counting the agents' CPU in the timeline.
func (m *monitor) setAgents(f func() time.Duration) {
	m.mu.Lock()
	m.agents = f
	m.mu.Unlock()
}

// cpuTimeline is the per-second CPU use (cores) of etcd, the agents and
// everything else on the machine between from and to, one line each.
func (m *monitor) cpuTimeline(from, to time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sb strings.Builder
	for i := 1; i < len(m.timeline); i++ {
		a, b := m.timeline[i-1], m.timeline[i]
		if b.at.Before(from) || b.at.After(to) || a.agents == 0 {
			continue
		}
		d := b.at.Sub(a.at).Seconds()
		etcd, agents, all := (b.etcd-a.etcd)/d, (b.agents-a.agents)/d, (b.machine-a.machine)/d
		fmt.Fprintf(&sb, "%5.1f s: etcd %.2f, agents %.2f, rest of the machine %.2f cores; %.0f watch events/s, %.0f watchers\n",
			b.at.Sub(from).Seconds(), etcd, agents, all-etcd-agents, (b.events-a.events)/d, b.watchers)
	}
	return sb.String()
}

// reading is the monitor's state at one moment.
type reading struct {
	at       time.Time
	counters map[string]map[string]float64
	gauges   map[string]map[string]float64
	maxSlow  float64
}

// read samples now and returns the totals.
func (m *monitor) read() reading {
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := reading{at: time.Now(), counters: map[string]map[string]float64{}, gauges: map[string]map[string]float64{}, maxSlow: m.maxSlow}
	for mem, cs := range m.counters {
		r.counters[mem] = map[string]float64{}
		for n, c := range cs {
			r.counters[mem][n] = c.value()
		}
	}
	for mem, gs := range m.gauges {
		r.gauges[mem] = map[string]float64{}
		for n, v := range gs {
			r.gauges[mem][n] = v
		}
	}
	return r
}

// resetMaxSlow starts a new window for the slow watcher maximum.
func (m *monitor) resetMaxSlow() {
	m.mu.Lock()
	m.maxSlow = 0
	m.mu.Unlock()
}

// delta is the sum over members of counter name between two readings.
func delta(a, b reading, name string) float64 {
	total := 0.0
	for mem := range b.counters {
		total += b.counters[mem][name] - a.counters[mem][name]
	}
	return total
}

// memberDelta is the same per member, in member order.
func memberDelta(c *etcdtest.Cluster, a, b reading, name string) []float64 {
	var out []float64
	for _, mem := range c.Members {
		out = append(out, b.counters[mem.Name][name]-a.counters[mem.Name][name])
	}
	return out
}

// gaugeSum and gaugeMax over members of a gauge's last value.
func gaugeSum(r reading, name string) float64 {
	total := 0.0
	for _, g := range r.gauges {
		total += g[name]
	}
	return total
}

func gaugeMax(r reading, name string) float64 {
	out := 0.0
	for _, g := range r.gauges {
		out = max(out, g[name])
	}
	return out
}
