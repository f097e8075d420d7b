package bgp

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/agent/routeproto"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// BenchmarkBGP measures what a user waits for (make bench-bgp):
//
//   - block-latency: from a new block affinity in etcd for node A to its
//     kernel route on node B (A's IPAM watch, A's UPDATE, B's import, B's
//     route table), p50 and p99 over 100 blocks, one at a time;
//   - install-10k: a BIRD router enables 10,000 routes at once; time until
//     all are kernel routes on a calico-node, and, in the same run, on a
//     second BIRD importing them into its own kernel table; and the CPU
//     time each receiver spent meanwhile (the figure a loaded machine
//     disturbs least: the time waits for the CPU, the CPU time does not).
func BenchmarkBGP(b *testing.B) {
	b.Run("block-latency", benchBlockLatency)
	b.Run("install-10k", benchInstall10k)
}

func benchBlockLatency(b *testing.B) {
	f := newFabric(b)
	f.apply(poolObj("pool", "10.244.0.0/16"))
	ha, hb := f.host("a", "192.0.2.11"), f.host("b", "192.0.2.12")
	na, nb := f.agent(ha, "a"), f.agent(hb, "b")
	na.waitSessions(b, 60*time.Second, "192.0.2.12")
	nb.waitSessions(b, 30*time.Second, "192.0.2.11")

	updates := subscribeRoutes(b, hb.ns)
	const n = 100
	var lat []time.Duration
	for b.Loop() {
		lat = lat[:0]
		for i := range n {
			cidr := fmt.Sprintf("10.244.%d.0/26", 100+i)
			start := time.Now()
			f.affine("a", cidr)
			deadline := time.After(30 * time.Second)
		wait:
			for {
				select {
				case u := <-updates:
					if u.Type == unix.RTM_NEWROUTE && u.Protocol == routeproto.Calico && u.Dst != nil && u.Dst.String() == cidr {
						lat = append(lat, time.Since(start))
						break wait
					}
				case <-deadline:
					b.Fatalf("no route for %s on b", cidr)
				}
			}
		}
		// Clean up for a next round.
		for i := range n {
			f.del(affinityKey("a", fmt.Sprintf("10.244.%d.0/26", 100+i)))
		}
		waitRoutes(b, hb, 30*time.Second, nil, "10.244.100.0/26", fmt.Sprintf("10.244.%d.0/26", 100+n-1))
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	fmt.Fprintf(os.Stdout, "block on node A -> kernel route on node B, %d blocks: p50 %s, p99 %s, max %s\n",
		len(lat), p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), lat[len(lat)-1].Round(100*time.Microsecond))
}

// subscribeRoutes streams route changes in a namespace.
func subscribeRoutes(t testing.TB, ns string) <-chan netlink.RouteUpdate {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ch := make(chan netlink.RouteUpdate, 1024)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	if err := netlink.RouteSubscribeWithOptions(ch, done, netlink.RouteSubscribeOptions{Namespace: &h, ReceiveBufferSize: 4 << 20}); err != nil {
		t.Fatal(err)
	}
	return ch
}

func benchInstall10k(b *testing.B) {
	const n = 10000
	f := newFabric(b)
	needBIRD(b)
	f.apply(
		poolObj("pool", "10.244.0.0/16"),
		bgpPeerObj("sender", api.BGPPeerSpec{PeerIP: "192.0.2.1", ASNumber: 65000}),
	)
	hs, hr, hc := f.host("sender", "192.0.2.1"), f.host("birdrx", "192.0.2.2"), f.host("calico", "192.0.2.11")
	var routesConf strings.Builder
	for i := range n {
		fmt.Fprintf(&routesConf, "  route 10.244.%d.%d/32 blackhole;\n", i>>8, i&255)
	}
	sender := f.bird(hs, `
log stderr { warning, error, fatal };
router id 192.0.2.1;
protocol device { }
protocol direct { ipv4; }
protocol static bench {
  ipv4;
  disabled;
`+routesConf.String()+`}
template bgp feed {
  local 192.0.2.1 as 65000;
  ipv4 { import none; export where source = RTS_STATIC; };
}
protocol bgp calico from feed { neighbor 192.0.2.11 as 64512; }
protocol bgp birdrx from feed { neighbor 192.0.2.2 as 65001; }
`)
	rx := f.bird(hr, `
log stderr { warning, error, fatal };
router id 192.0.2.2;
protocol device { }
protocol direct { ipv4; }
protocol kernel { ipv4 { export where source = RTS_BGP; }; }
protocol bgp sender {
  local 192.0.2.2 as 65001;
  neighbor 192.0.2.1 as 65000;
  ipv4 { import all; export none; };
}
`)
	nc := f.agent(hc, "calico")
	nc.waitSessions(b, 60*time.Second, "192.0.2.1")
	sender.waitEstablished(b, 30*time.Second, "calico", "birdrx")

	var calicoTime, birdTime, calicoCPU, birdCPU time.Duration
	calicoPID, birdPID := nc.p.Cmd.Process.Pid, rx.p.Cmd.Process.Pid
	for b.Loop() {
		var wg sync.WaitGroup
		calicoCPU0, birdCPU0 := cpuTime(b, calicoPID), cpuTime(b, birdPID)
		start := time.Now()
		sender.ctl(b, "enable", "bench")
		wg.Go(func() { calicoTime = waitCount(b, hc, routeproto.Calico, n, start) })
		wg.Go(func() { birdTime = waitCount(b, hr, birdProto, n, start) })
		wg.Wait()
		calicoCPU, birdCPU = cpuTime(b, calicoPID)-calicoCPU0, cpuTime(b, birdPID)-birdCPU0
		sender.ctl(b, "disable", "bench")
		waitCount(b, hc, routeproto.Calico, 0, time.Now())
		waitCount(b, hr, birdProto, 0, time.Now())
	}
	b.ReportMetric(calicoTime.Seconds()*1000, "calico-ms")
	b.ReportMetric(float64(n)/calicoTime.Seconds(), "calico-routes/s")
	b.ReportMetric(birdTime.Seconds()*1000, "bird-ms")
	b.ReportMetric(float64(n)/birdTime.Seconds(), "bird-routes/s")
	b.ReportMetric(calicoCPU.Seconds()*1000, "calico-cpu-ms")
	b.ReportMetric(birdCPU.Seconds()*1000, "bird-cpu-ms")
	fmt.Fprintf(os.Stdout, "%d routes from a BIRD peer into the kernel: calico-node %s (%.0f routes/s), BIRD %s (%.0f routes/s); CPU time: calico-node %s, BIRD %s\n",
		n, calicoTime.Round(time.Millisecond), float64(n)/calicoTime.Seconds(), birdTime.Round(time.Millisecond), float64(n)/birdTime.Seconds(),
		calicoCPU.Round(time.Millisecond), birdCPU.Round(time.Millisecond))
}

// cpuTime is the time pid's threads have run on a CPU, user and kernel
// (the sum of their schedstat run times, in nanoseconds; a thread that
// exited no longer counts, and neither BIRD nor a Go program ends
// threads in a burst).
func cpuTime(t testing.TB, pid int) time.Duration {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatalf("CPU time of %d: %v", pid, err)
	}
	var sum time.Duration
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, task.Name()))
		if err != nil {
			continue // the thread is gone
		}
		var ns int64
		if _, err := fmt.Sscan(string(b), &ns); err != nil {
			t.Fatalf("CPU time of %d: schedstat %q: %v", pid, b, err)
		}
		sum += time.Duration(ns)
	}
	return sum
}

// waitCount polls until the namespace holds exactly want routes of proto
// inside 10.244.0.0/16 and returns the time since start.
func waitCount(t testing.TB, h *host, proto netlink.RouteProtocol, want int, start time.Time) time.Duration {
	_, pool, _ := net.ParseCIDR("10.244.0.0/16")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rs, err := h.nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: proto}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			t.Error(err)
			return 0
		}
		got := 0
		for _, r := range rs {
			if r.Dst != nil && pool.Contains(r.Dst.IP) {
				got++
			}
		}
		if got == want {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %d routes of protocol %d, want %d", h.ns, got, proto, want)
			return 0
		}
		time.Sleep(10 * time.Millisecond)
	}
}
