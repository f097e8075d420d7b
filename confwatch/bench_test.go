package confwatch

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/etcd"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

const (
	benchEndpoints = 10000
	benchPolicies  = 1000
	benchUpdates   = 5000
	resourcePrefix = "/calico/resources/v3/projectcalico.org/"
)

func order(f float64) *float64 { return &f }

// wepKV renders one WorkloadEndpoint as Calico stores it.
func wepKV(i, gen int) (string, string) {
	ns := fmt.Sprintf("ns%d", i%20)
	w := &api.WorkloadEndpoint{}
	w.Kind, w.APIVersion = "WorkloadEndpoint", api.GroupVersion
	w.Namespace = ns
	w.Spec = api.WorkloadEndpointSpec{
		Orchestrator: "k8s", Node: fmt.Sprintf("node%d", i%100), Pod: fmt.Sprintf("pod-%d", i),
		Endpoint: "eth0", IPNetworks: []string{fmt.Sprintf("10.%d.%d.%d/32", 64+i>>16, (i>>8)&255, i&255)},
		Profiles: []string{"kns." + ns}, InterfaceName: fmt.Sprintf("cali%011x", i),
	}
	w.Labels = map[string]string{"app": fmt.Sprintf("app%d", i%50), "gen": strconv.Itoa(gen)}
	w.Default()
	w.UID = fmt.Sprintf("uid-%d", i)
	b, _ := json.Marshal(w)
	return resourcePrefix + "workloadendpoints/" + ns + "/" + w.Name, string(b)
}

func policyKV(i int) (string, string) {
	p := &api.GlobalNetworkPolicy{}
	p.Kind, p.APIVersion = "GlobalNetworkPolicy", api.GroupVersion
	p.Name = fmt.Sprintf("default.pol-%d", i)
	p.Annotations = map[string]string{"projectcalico.org/metadata": fmt.Sprintf(`{"name":"pol-%d"}`, i)}
	port := api.SinglePort(uint16(1000 + i%5000))
	tcp := api.ProtocolFromString("TCP")
	p.Spec = api.GlobalNetworkPolicySpec{
		Order:    order(float64(i)),
		Selector: fmt.Sprintf("app == 'app%d'", i%50),
		Ingress: []api.Rule{{
			Action: "Allow", Protocol: &tcp,
			Source:      api.EntityRule{Selector: fmt.Sprintf("app == 'app%d'", (i+1)%50)},
			Destination: api.EntityRule{Ports: []api.Port{port}},
		}},
	}
	p.Default()
	b, _ := json.Marshal(p)
	return resourcePrefix + "globalnetworkpolicies/" + p.Name, string(b)
}

// putAll writes kvs in transactions of 100 puts (etcd's default op limit
// is 128).
func putAll(tb testing.TB, kv *clientv3.Client, kvs [][2]string) {
	tb.Helper()
	for i := 0; i < len(kvs); i += 100 {
		var ops []clientv3.Op
		for _, p := range kvs[i:min(i+100, len(kvs))] {
			ops = append(ops, clientv3.OpPut(p[0], p[1]))
		}
		if _, err := kv.Txn(context.Background()).Then(ops...).Commit(); err != nil {
			tb.Fatal(err)
		}
	}
}

func populate(tb testing.TB, kv *clientv3.Client) {
	var kvs [][2]string
	for i := 0; i < benchEndpoints; i++ {
		k, v := wepKV(i, 0)
		kvs = append(kvs, [2]string{k, v})
	}
	for i := 0; i < benchPolicies; i++ {
		k, v := policyKV(i)
		kvs = append(kvs, [2]string{k, v})
	}
	putAll(tb, kv, kvs)
}

// BenchmarkConfwatch measures, against a real etcd holding 10,000
// WorkloadEndpoints and 1,000 policies:
//   - sync-ms: confwatch start to in-sync (every kind listed and decoded),
//     beside raw-get-ms, one plain etcd range read of the same keys;
//   - agent-ready-ms / agent-rss-MB: a real `calico-node run` process from
//     exec to /readiness 200, and its resident memory then;
//   - events/s: typed updates delivered to a subscriber while a writer
//     updates 5,000 endpoints, beside raw-events/s, a bare etcd watch of the
//     same writes.
//
// Run: make bench-confwatch
func BenchmarkConfwatch(b *testing.B) {
	srv := etcdtest.Start(b)
	kv := srv.Client(b)
	populate(b, kv)
	ctx := context.Background()
	store, err := etcd.New(ctx, datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()

	for b.Loop() {
		t0 := time.Now()
		resp, err := kv.Get(ctx, resourcePrefix, clientv3.WithPrefix())
		if err != nil {
			b.Fatal(err)
		}
		raw := time.Since(t0)
		if len(resp.Kvs) < benchEndpoints+benchPolicies {
			b.Fatalf("populated %d keys", len(resp.Kvs))
		}

		wctx, cancel := context.WithCancel(ctx)
		w := New(store, quiet(), nil)
		t1 := time.Now()
		go w.Run(wctx)
		<-w.Synced()
		sync := time.Since(t1)
		b.ReportMetric(float64(sync.Milliseconds()), "sync-ms")
		b.ReportMetric(float64(raw.Milliseconds()), "raw-get-ms")
		b.ReportMetric(sync.Seconds()/raw.Seconds(), "sync/raw")

		// Watch throughput: confwatch subscriber vs a bare etcd watch.
		sub := w.Subscribe("WorkloadEndpoint")
		sub.Next(wctx) // snapshot
		rawCh := kv.Watch(wctx, resourcePrefix+"workloadendpoints/", clientv3.WithPrefix())
		var kvs [][2]string
		for i := 0; i < benchUpdates; i++ {
			k, v := wepKV(i, 1)
			kvs = append(kvs, [2]string{k, v})
		}
		rawDone := make(chan time.Duration, 1)
		start := time.Now()
		go func() {
			n := 0
			for r := range rawCh {
				n += len(r.Events)
				if n >= benchUpdates {
					rawDone <- time.Since(start)
					return
				}
			}
		}()
		putAll(b, kv, kvs)
		got := 0
		for got < benchUpdates {
			ups, err := sub.Next(wctx)
			if err != nil {
				b.Fatal(err)
			}
			got += len(ups)
		}
		typed := time.Since(start)
		rawDur := <-rawDone
		cancel()
		b.ReportMetric(benchUpdates/typed.Seconds(), "events/s")
		b.ReportMetric(benchUpdates/rawDur.Seconds(), "raw-events/s")

		ready, rss := agentStartup(b, srv.Endpoints)
		b.ReportMetric(float64(ready.Milliseconds()), "agent-ready-ms")
		b.ReportMetric(float64(rss)/1024, "agent-rss-MB")
	}
}

// agentStartup runs `calico-node run` against the populated etcd and
// returns the time to readiness and the RSS (KiB) at that point.
func agentStartup(b *testing.B, endpoints []string) (time.Duration, int) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(testbin.Path(b), "run", "--health-addr", addr, "--data-dir", b.TempDir())
	cmd.Env = []string{"ETCD_ENDPOINTS=" + strings.Join(endpoints, ","), "NODENAME=bench", "IP=198.51.100.250", "NO_DEFAULT_POOLS=true", "CALICO_NETWORKING_BACKEND=none", "CALICO_DATAPLANE=none", "CALICO_CNI_SOCKET=none"}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	for time.Since(t0) < time.Minute {
		resp, err := http.Get("http://" + addr + "/readiness")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return time.Since(t0), rssKiB(b, cmd.Process.Pid)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatal("agent not ready within a minute")
	return 0, 0
}

func rssKiB(b *testing.B, pid int) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			return n
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
