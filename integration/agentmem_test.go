package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// agentMemory is the memory of a real `calico-node run` process (the
// binary, dataplane on, BGP off, etcd given so no embedded one), read
// from /proc/<pid>/status: idle (registered, nothing but its own Node
// in the datastore, its dataplane programmed) and loaded (objs stored
// and programmed: every local endpoint and policy active).
type agentMemory struct {
	idle, loaded procMem
	// loadedHeap is the Go heap in use after loading (go_memstats_heap_inuse_bytes).
	loadedHeap int64
	// programLoaded is the time from the first object stored to the
	// agent reporting all of them programmed.
	programLoaded time.Duration
}

// settle is how long the agent is left alone before a reading: the
// figures are of a node at rest, after the collector has run.
const settle = 5 * time.Second

// measureAgentMemory runs the agent in this process's (private) network
// namespace against a fresh etcd and reads its memory before and after
// objs are stored. env adds to the agent's environment (GOGC=...,
// GOMEMLIMIT=... to compare settings).
// With DATAPLANE_BENCH_AGENT_PROFILE=dir the agent serves pprof
// (FELIX_DEBUGPORT) and dir gets its heap profiles idle.heap and
// loaded.heap, each taken after the reading (the profile's forced
// collection does not touch the figures).
func measureAgentMemory(b *testing.B, objs []api.Object, env ...string) agentMemory {
	b.Helper()
	profileDir := os.Getenv("DATAPLANE_BENCH_AGENT_PROFILE")
	debug := ""
	if profileDir != "" {
		debug = "127.0.0.1:" + strconv.Itoa(proctest.FreePort(b))
		env = append(env, "FELIX_DEBUGHOST=127.0.0.1", "FELIX_DEBUGPORT="+debug[len("127.0.0.1:"):])
	}
	// heapProfile saves the agent's memory map and its runtime's
	// statistics as they are at the reading, then the profile.
	heapProfile := func(name string, pid int) {
		if profileDir == "" {
			return
		}
		smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
		if err == nil {
			err = os.WriteFile(filepath.Join(profileDir, name+".smaps"), smaps, 0o644)
		}
		if err == nil {
			err = saveURL("http://"+debug+"/debug/pprof/heap?debug=1", filepath.Join(profileDir, name+".txt"))
		}
		if err == nil {
			err = saveURL("http://"+debug+"/debug/pprof/goroutine?debug=1", filepath.Join(profileDir, name+".goroutines"))
		}
		if err == nil {
			err = saveURL("http://"+debug+"/debug/pprof/heap?gc=1", filepath.Join(profileDir, name))
		}
		if err != nil {
			b.Fatalf("agent heap profile: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := etcdtest.Start(b)
	store := storetest.Etcd(b, ctx, srv.Endpoints)
	health := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(b))
	cmd := exec.Command(testbin.Path(b), "run",
		"--etcd-endpoints="+strings.Join(srv.Endpoints, ","),
		"--nodename="+nodeName, "--ip="+nodeIP+"/24", "--no-default-pools",
		"--data-dir="+b.TempDir(), "--health-addr="+health, "--log-level=warning")
	cmd.Env = append(os.Environ(),
		"ETCD_ENDPOINTS=", "DATASTORE_TYPE=", "KUBECONFIG=", "CALICO_NETWORKING_BACKEND=none", "CALICO_DATAPLANE=iptables",
		"FELIX_IPV6SUPPORT=false", "HOSTNAME="+nodeName)
	cmd.Env = append(cmd.Env, env...)
	agent := proctest.Start(b, "calico-node", cmd)
	defer agent.Stop(10 * time.Second)
	metrics := "http://" + health + "/metrics"
	metric := func(sample string) float64 {
		v, err := proctest.MetricValue(metrics, sample)
		if err != nil {
			return -1 // not serving yet
		}
		return v
	}
	agent.WaitFor(b, 2*time.Minute, "dataplane programmed", func() bool {
		return metric("calico_dataplane_apply_latency_seconds_count") >= 1
	})
	time.Sleep(settle)
	var m agentMemory
	m.idle = procMemory(b, agent.Cmd.Process.Pid)
	heapProfile("idle.heap", agent.Cmd.Process.Pid)

	start := time.Now()
	for _, o := range objs {
		if _, err := store.Create(ctx, o); err != nil {
			b.Fatalf("store %s %s: %v", o.Type().Kind, o.Meta().Name, err)
		}
	}
	nEP, nPol := countKind(objs, "WorkloadEndpoint"), countKind(objs, "NetworkPolicy")+countKind(objs, "GlobalNetworkPolicy")
	agent.WaitFor(b, 5*time.Minute, "every endpoint and policy programmed", func() bool {
		return metric("calico_active_local_endpoints") == float64(nEP) && metric("calico_active_policies") == float64(nPol)
	})
	m.programLoaded = time.Since(start)
	time.Sleep(settle)
	m.loaded = procMemory(b, agent.Cmd.Process.Pid)
	m.loadedHeap = int64(metric("go_memstats_heap_inuse_bytes"))
	heapProfile("loaded.heap", agent.Cmd.Process.Pid)
	return m
}

// procMem is a process's memory as /proc/<pid>/status has it: VmRSS,
// VmHWM (the peak RSS), and the RSS split into anonymous memory (the Go
// heap, stacks, the runtime's own) and file pages (the binary's code and
// data mapped from disk).
type procMem struct{ rss, hwm, anon, file int64 }

// procMemory reads the memory of process pid.
func procMemory(b *testing.B, pid int) procMem {
	b.Helper()
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	fields := map[string]*int64{}
	var m procMem
	fields["VmRSS"], fields["VmHWM"], fields["RssAnon"], fields["RssFile"] = &m.rss, &m.hwm, &m.anon, &m.file
	found := 0
	for _, l := range strings.Split(string(st), "\n") {
		name, v, ok := strings.Cut(l, ":")
		if !ok || fields[name] == nil {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/status %s: %v", pid, name, err)
		}
		*fields[name] = kb << 10
		found++
	}
	if found != len(fields) {
		b.Fatalf("/proc/%d/status: want VmRSS, VmHWM, RssAnon and RssFile:\n%s", pid, st)
	}
	return m
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// saveURL writes what a GET of url returns to path.
func saveURL(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	return os.WriteFile(path, body, 0o644)
}
