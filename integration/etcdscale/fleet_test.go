package etcdscale

import (
	"bufio"
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

// fleet is the agent processes of one run and what they reported.
type fleet struct {
	procs    []*fleetProc
	hub      *fleetProc // the fan-out, if the nodes read one
	hubAddr  string
	launched time.Time

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every report
	synced  map[string][2]time.Time
	gnp     map[int]*arrival // gen -> processes whose nodes all have it in their caches
	gnpc    map[int]*arrival // gen -> processes whose nodes all compiled it
	// gnpByProc: gen -> process -> its last node's arrival (ETCD_SCALE_DEBUG's
	// report of where the time went).
	gnpByProc map[int]map[int]time.Time
	pods      map[string]*arrival // ns/name -> processes that have it all
	podMiss   map[string]int      // ns/name -> agents that saw it deleted before routing it
	stats     map[int]procStats   // process index -> last stats
	verify    map[string]verifyLine
	errs      []string
	exited    int

	stopOnce sync.Once
}

type arrival struct {
	procs, agents int
	last          time.Time
}

type fleetProc struct {
	index  int
	nodes  []string
	proc   *proctest.Proc
	stdin  io.WriteCloser
	stderr *proctest.Log
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
	return &fleet{changed: make(chan struct{}), synced: map[string][2]time.Time{}, gnp: map[int]*arrival{}, gnpc: map[int]*arrival{}, gnpByProc: map[int]map[int]time.Time{},
		pods: map[string]*arrival{}, podMiss: map[string]int{}, stats: map[int]procStats{}, verify: map[string]verifyLine{}}
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
		fp := f.start(tb, idx, fmt.Sprintf("agents-%d", idx), nice, env)
		fp.nodes = g
		f.procs = append(f.procs, fp)
		if !f.wait(syncTimeout, func() bool {
			for _, n := range g {
				if _, ok := f.synced[n]; !ok {
					return false
				}
			}
			return true
		}) {
			tb.Fatalf("agents-%d: %d nodes not in sync after %s%s", idx, len(g), syncTimeout, f.problems())
		}
	}
}

// start runs this test binary as a child with env at the given niceness,
// reading its reports as process idx's (-1: the fan-out).
func (f *fleet) start(tb testing.TB, idx int, name string, nice int, env []string) *fleetProc {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command("nice", "-n", strconv.Itoa(nice), exe) // nice execs: the PID is the child's
	cmd.Env = append(append(proctest.EnvWithout("CALICO_ETCD_SCALE_", "ETCD_", "GOMEMLIMIT=", "GOGC="),
		profileEnv+"="+os.Getenv("ETCD_SCALE_CPUPROFILE")), env...)
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
	fp := &fleetProc{index: idx, stdin: stdin, stderr: &proctest.Log{}}
	cmd.Stderr = fp.stderr
	fp.proc, err = proctest.Launch(name, cmd)
	wr.Close()
	if err != nil {
		rd.Close()
		tb.Fatal(err)
	}
	go f.read(idx, rd)
	return fp
}

// startHub runs the fan-out (at normal priority, as etcd: it is the
// cluster's, not a node's) and waits until it serves.
func (f *fleet) startHub(tb testing.TB, endpoints []string) {
	tb.Helper()
	f.hub = f.start(tb, -1, "fanout", 0, []string{agentEnv + "=hub", endpointsEnv + "=" + strings.Join(endpoints, ",")})
	tb.Cleanup(f.stop)
	if !f.wait(2*time.Minute, func() bool { return f.hubAddr != "" }) {
		tb.Fatalf("fan-out not serving after 2 minutes%s", f.problems())
	}
}

func (f *fleet) read(idx int, rd *os.File) {
	defer rd.Close()
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 4<<20) // the stats line carries histograms
	for sc.Scan() {
		f.report(idx, strings.Fields(sc.Text()))
	}
	f.mu.Lock()
	f.exited++
	f.notifyLocked()
	f.mu.Unlock()
}

func (f *fleet) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func unixNano(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Unix(0, n)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func (f *fleet) report(idx int, fs []string) {
	if len(fs) < 2 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.notifyLocked()
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
		f.errs = append(f.errs, fmt.Sprintf("agents-%d: %s", idx, strings.Join(fs, " ")))
	}
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

// wait polls cond, under the fleet's lock, after every report until it
// holds; false after timeout or once a process failed or exited.
func (f *fleet) wait(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		ok, broken, ch := cond(), len(f.errs) > 0 || f.exited > 0, f.changed
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

// problems describes failed processes for a failure message.
func (f *fleet) problems() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sb strings.Builder
	for _, e := range f.errs {
		sb.WriteString("\n" + e)
	}
	for _, fp := range append(slices.Clone(f.procs), f.hub) {
		if fp != nil && !fp.proc.Running() {
			fmt.Fprintf(&sb, "\n%s exited (%v):\n%s", fp.proc.Name, fp.proc.Err(), fp.stderr.Tail(20))
		}
	}
	return sb.String()
}

func (f *fleet) command(tb testing.TB, line string) {
	tb.Helper()
	for _, fp := range f.procs {
		if _, err := io.WriteString(fp.stdin, line+"\n"); err != nil {
			tb.Fatalf("%s: %v", fp.proc.Name, err)
		}
	}
}

// collectStats asks every process for its counters and waits for them.
func (f *fleet) collectStats(tb testing.TB) map[int]procStats {
	tb.Helper()
	f.mu.Lock()
	clear(f.stats)
	f.mu.Unlock()
	f.command(tb, "stats")
	if !f.wait(2*time.Minute, func() bool { return len(f.stats) == len(f.procs) }) {
		tb.Fatalf("stats from %d of %d agent processes%s", len(f.stats), len(f.procs), f.problems())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
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
	for _, fp := range f.procs {
		out = append(out, fp.proc.Cmd.Process.Pid)
	}
	return out
}

// cpu is the CPU time the agent processes have used.
func (f *fleet) cpu() time.Duration {
	var sum time.Duration
	for _, pid := range f.pids() {
		d, _ := procCPU(pid)
		sum += d
	}
	return sum
}

// hubCPU and hubRSS (MB) are the fan-out's, 0 without one.
func (f *fleet) hubCPU() time.Duration {
	if f.hub == nil {
		return 0
	}
	d, _ := procCPU(f.hub.proc.Cmd.Process.Pid)
	return d
}

func (f *fleet) hubRSS() float64 {
	if f.hub == nil {
		return 0
	}
	kb, _ := procRSS(f.hub.proc.Cmd.Process.Pid)
	return float64(kb) / 1024
}

// rss is each process's resident memory (KiB) and its node count.
func (f *fleet) rss() (perProc []int, nodes []int) {
	for _, fp := range f.procs {
		kb, _ := procRSS(fp.proc.Cmd.Process.Pid)
		perProc = append(perProc, kb)
		nodes = append(nodes, len(fp.nodes))
	}
	return perProc, nodes
}

// stop closes every process's stdin (they return) and waits for them.
func (f *fleet) stop() {
	f.stopOnce.Do(func() {
		procs := slices.Clone(f.procs)
		if f.hub != nil {
			procs = append(procs, f.hub) // last: the agents read it
		}
		for _, fp := range procs {
			fp.stdin.Close()
		}
		for _, fp := range procs {
			select {
			case <-fp.proc.Done():
			case <-time.After(15 * time.Second):
				fp.proc.Kill()
			}
		}
	})
}

// syncedTimes is every node's connect → in-sync time and the launch →
// last in-sync time.
func (f *fleet) syncedTimes() (each []time.Duration, all time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.synced {
		each = append(each, s[1].Sub(s[0]))
		all = max(all, s[1].Sub(f.launched))
	}
	slices.Sort(each)
	return each, all
}
