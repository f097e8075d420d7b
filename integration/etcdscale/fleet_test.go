package etcdscale

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/scaletest"
)

// fleet is the agent processes of one run and what they reported; the
// fields below the Fleet are guarded by its lock.
type fleet struct {
	*scaletest.Fleet
	nodes    [][]string // per agent process, its nodes
	hubAddr  string
	launched time.Time

	synced map[string][2]time.Time
	gnp    map[int]*arrival // gen -> processes whose nodes all have it in their caches
	gnpc   map[int]*arrival // gen -> processes whose nodes all compiled it
	// gnpByProc: gen -> process -> its last node's arrival (ETCD_SCALE_DEBUG's
	// report of where the time went).
	gnpByProc map[int]map[int]time.Time
	pods      map[string]*arrival // ns/name -> processes that have it all
	podMiss   map[string]int      // ns/name -> agents that saw it deleted before routing it
	stats     map[int]procStats   // process index -> last stats
	verify    map[string]verifyLine
}

type arrival struct {
	procs, agents int
	last          time.Time
}

type procStats struct {
	updates, kvEvents, warnings, heap, compiles, routeNs, bgpNs int64
	gnpHist, gnpcHist, podHist                                  string
}

type verifyLine struct {
	ok                                 bool
	sessions, rrClients, mesh, rrPeers int
	problem                            string
}

func newFleet() *fleet {
	f := &fleet{synced: map[string][2]time.Time{}, gnp: map[int]*arrival{}, gnpc: map[int]*arrival{}, gnpByProc: map[int]map[int]time.Time{},
		pods: map[string]*arrival{}, podMiss: map[string]int{}, stats: map[int]procStats{}, verify: map[string]verifyLine{}}
	f.Fleet = scaletest.NewFleet(f.report)
	return f
}

// launch starts the agent processes: the first calib nodes one per
// process (the calibration: a node's cost measured alone), the rest
// perProc to a process, one process after the other: each starts once the
// nodes of the one before are in sync (a fleet of a thousand listing the
// cluster at once would hold every list in memory at once, more than this
// shared machine has to spare). Agents run at a lower CPU priority than
// etcd (nice, 10 by default): on a real cluster each has its own machine,
// so here they must not take the CPU etcd needs; what they use is
// measured either way.
//
// A packed process gets a soft memory limit (GOMEMLIMIT) of memPerNode
// per node, so that its garbage collector keeps its heap near what is
// live rather than at twice that; the one-node processes keep Go's
// defaults, as a real agent does.
func (f *fleet) launch(tb testing.TB, names []string, endpoints []string, calib, perProc, memPerNode, nice int, syncTimeout time.Duration) {
	tb.Helper()
	var groups [][]string
	for i := 0; i < len(names); {
		n := perProc
		if i < calib {
			n = 1
		}
		n = min(n, len(names)-i)
		groups = append(groups, names[i:i+n])
		i += n
	}
	f.launched = time.Now()
	tb.Cleanup(f.stop)
	for idx, g := range groups {
		env := []string{agentEnv + "=" + strconv.Itoa(idx), nodesEnv + "=" + strings.Join(g, ","), endpointsEnv + "=" + strings.Join(endpoints, ",")}
		if f.hubAddr != "" {
			env = append(env, fanoutEnv+"="+f.hubAddr)
		}
		if idx < calib {
			env = append(env, policyEnv+"=1")
		} else if memPerNode > 0 {
			env = append(env, fmt.Sprintf("GOMEMLIMIT=%dMiB", max(256, memPerNode*len(g))))
		}
		f.StartAgent(tb, fmt.Sprintf("agents-%d", idx), nice, childEnv(env...))
		f.nodes = append(f.nodes, g)
		if !f.Wait(syncTimeout, func() bool {
			for _, n := range g {
				if _, ok := f.synced[n]; !ok {
					return false
				}
			}
			return true
		}) {
			tb.Fatalf("agents-%d: %d nodes not in sync after %s%s", idx, len(g), syncTimeout, f.Problems())
		}
	}
}

// childEnv is a child's environment: the test's without the harness's own
// settings and Go's memory knobs, plus extra.
func childEnv(extra ...string) []string {
	return append(append(proctest.EnvWithout("CALICO_ETCD_SCALE_", "ETCD_", "GOMEMLIMIT=", "GOGC="),
		profileEnv+"="+os.Getenv("ETCD_SCALE_CPUPROFILE")), extra...)
}

// startHub runs the fan-out (at normal priority, as etcd: it is the
// cluster's, not a node's) and waits until it serves.
func (f *fleet) startHub(tb testing.TB, endpoints []string) {
	tb.Helper()
	f.StartHub(tb, "fanout", 0, childEnv(agentEnv+"=hub", endpointsEnv+"="+strings.Join(endpoints, ",")))
	tb.Cleanup(f.stop)
	if !f.Wait(2*time.Minute, func() bool { return f.hubAddr != "" }) {
		tb.Fatalf("fan-out not serving after 2 minutes%s", f.Problems())
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// report reads a line of process idx, under the Fleet's lock.
func (f *fleet) report(idx int, fs []string) bool {
	if len(fs) < 2 {
		return true
	}
	unixNano := scaletest.UnixNano
	switch {
	case fs[0] == "hub" && len(fs) == 4:
		f.hubAddr = fs[1]
	case fs[0] == "synced" && len(fs) == 4:
		f.synced[fs[1]] = [2]time.Time{unixNano(fs[2]), unixNano(fs[3])}
	case fs[0] == "gnp" && len(fs) == 4:
		f.gnp[atoi(fs[1])] = f.gnp[atoi(fs[1])].add(atoi(fs[2]), unixNano(fs[3]))
		if f.gnpByProc[atoi(fs[1])] == nil {
			f.gnpByProc[atoi(fs[1])] = map[int]time.Time{}
		}
		f.gnpByProc[atoi(fs[1])][idx] = unixNano(fs[3])
	case fs[0] == "gnpc" && len(fs) == 4:
		f.gnpc[atoi(fs[1])] = f.gnpc[atoi(fs[1])].add(atoi(fs[2]), unixNano(fs[3]))
	case fs[0] == "pod" && len(fs) == 4:
		f.pods[fs[1]] = f.pods[fs[1]].add(atoi(fs[2]), unixNano(fs[3]))
	case fs[0] == "podmiss" && len(fs) == 3:
		f.podMiss[fs[1]] += atoi(fs[2])
		f.pods[fs[1]] = f.pods[fs[1]].add(0, time.Time{})
	case fs[0] == "stats" && len(fs) == 11:
		f.stats[idx] = procStats{updates: atoi64(fs[1]), kvEvents: atoi64(fs[2]), warnings: atoi64(fs[3]),
			heap: atoi64(fs[4]), compiles: atoi64(fs[5]), routeNs: atoi64(fs[6]), bgpNs: atoi64(fs[7]),
			gnpHist: fs[8], gnpcHist: fs[9], podHist: fs[10]}
	case fs[0] == "verify" && len(fs) == 8:
		f.verify[fs[1]] = verifyLine{ok: fs[2] == "ok", sessions: atoi(fs[3]), rrClients: atoi(fs[4]),
			mesh: atoi(fs[5]), rrPeers: atoi(fs[6]), problem: fs[7]}
	default:
		return false
	}
	return true
}

func (a *arrival) add(agents int, at time.Time) *arrival {
	if a == nil {
		a = &arrival{}
	}
	a.procs++
	a.agents += agents
	if at.After(a.last) {
		a.last = at
	}
	return a
}

// collectStats asks every process for its counters and waits for them.
func (f *fleet) collectStats(tb testing.TB) map[int]procStats {
	tb.Helper()
	f.Lock()
	clear(f.stats)
	f.Unlock()
	f.Command(tb, "stats")
	if !f.Wait(2*time.Minute, func() bool { return len(f.stats) == len(f.Procs) }) {
		tb.Fatalf("stats from %d of %d agent processes%s", len(f.stats), len(f.Procs), f.Problems())
	}
	f.Lock()
	defer f.Unlock()
	out := map[int]procStats{}
	for k, v := range f.stats {
		out[k] = v
	}
	return out
}

// pids are the agent processes' PIDs; calib are those of the first
// calib (single-node) processes.
func (f *fleet) pids() []int {
	var out []int
	for _, p := range f.Procs {
		out = append(out, p.Proc.Cmd.Process.Pid)
	}
	return out
}

// cpu is the CPU time the agent processes have used, those that could
// be read.
func (f *fleet) cpu() time.Duration {
	d, _ := f.CPU()
	return d
}

// hubCPU and hubRSS (MB) are the fan-out's, 0 without one.
func (f *fleet) hubCPU() time.Duration {
	if f.Hub == nil {
		return 0
	}
	d, _ := scaletest.ProcCPU(f.Hub.Proc.Cmd.Process.Pid)
	return d
}

func (f *fleet) hubRSS() float64 {
	if f.Hub == nil {
		return 0
	}
	kb, _ := scaletest.ProcRSS(f.Hub.Proc.Cmd.Process.Pid)
	return float64(kb) / 1024
}

// rss is each process's resident memory (KiB) and its node count.
func (f *fleet) rss() (perProc []int, nodes []int) {
	for i, p := range f.Procs {
		kb, _ := scaletest.ProcRSS(p.Proc.Cmd.Process.Pid)
		perProc = append(perProc, kb)
		nodes = append(nodes, len(f.nodes[i]))
	}
	return perProc, nodes
}

// stop stops the processes, the fan-out last.
func (f *fleet) stop() { f.Stop(15 * time.Second) }

// syncedTimes is every node's connect → in-sync time and the launch →
// last in-sync time.
func (f *fleet) syncedTimes() (each []time.Duration, all time.Duration) {
	f.Lock()
	defer f.Unlock()
	for _, s := range f.synced {
		each = append(each, s[1].Sub(s[0]))
		all = max(all, s[1].Sub(f.launched))
	}
	slices.Sort(each)
	return each, all
}
