// Command plot draws the etcd scale harness's figures against the number
// of nodes, one PNG per figure, from the results BenchmarkEtcdScale wrote
// (integration/etcdscale.ResultsFile). `make bench-etcd-scale` runs it
// after the benchmark; docs/benchmarks.md shows the PNGs.
//
//	go run ./integration/etcdscale/plot -in docs/img/etcd-scale.json -out docs/img
//
// Figures measured at a pod rate below the 30 pods/s target (the harness
// caps pods/s × nodes; see docs/benchmarks.md) are drawn as measured and,
// dashed, scaled to 30 pods/s: etcd's work and its watch events grow in
// proportion to the pods started.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"os"
	"path/filepath"

	"github.com/projectcalico/calico-node/integration/etcdscale"
	"github.com/projectcalico/calico-node/internal/atomicfile"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func run() error {
	in := flag.String("in", etcdscale.ResultsFile, "results written by BenchmarkEtcdScale")
	out := flag.String("out", "docs/img", "directory for the PNGs")
	target := flag.Float64("target", 30, "pods per second to scale the rate-bound figures to")
	flag.Parse()
	res, err := etcdscale.ReadResults(*in)
	if err != nil {
		return err
	}
	if len(res.Runs) == 0 {
		return errors.New(*in + ": no runs")
	}
	for name, c := range charts(res, *target) {
		if err := write(filepath.Join(*out, name), c); err != nil {
			return err
		}
		fmt.Println(filepath.Join(*out, name))
	}
	return nil
}

// charts are the figures, by file name.
func charts(res etcdscale.Results, target float64) map[string]chart {
	var n []float64
	col := func(f func(r etcdscale.Run) float64) []float64 {
		var out []float64
		for _, r := range res.Runs {
			out = append(out, f(r))
		}
		return out
	}
	for _, r := range res.Runs {
		n = append(n, float64(r.Nodes))
	}
	scaled := func(f func(r etcdscale.Run) float64) []float64 {
		return col(func(r etcdscale.Run) float64 { return f(r) * target / r.TargetPodRate })
	}
	const xl = "simulated nodes"
	tgt := fmt.Sprintf("scaled to %g pods/s", target)
	return map[string]chart{
		"etcd-scale-cpu.png": {
			title: "etcd CPU during pod churn (3 members together)", xLabel: xl, yLabel: "cores",
			series: []series{
				{name: fmt.Sprintf("measured (pods/s = %g / nodes)", res.Runs[0].Budget), x: n, y: col(func(r etcdscale.Run) float64 { return r.EtcdCPU })},
				{name: tgt, x: n, y: scaled(func(r etcdscale.Run) float64 { return r.EtcdCPU }), dashed: true},
			},
		},
		"etcd-scale-watch-events.png": {
			title: "watch events etcd sends per second (3 members together)", xLabel: xl, yLabel: "events/s", logY: true,
			series: []series{
				{name: "measured", x: n, y: col(func(r etcdscale.Run) float64 { return r.WatchEventsPerS })},
				{name: tgt, x: n, y: scaled(func(r etcdscale.Run) float64 { return r.WatchEventsPerS }), dashed: true},
				{name: "watchers held (3 per node)", x: n, y: col(func(r etcdscale.Run) float64 { return r.Watchers })},
			},
		},
		"etcd-scale-memory.png": {
			title: "etcd memory and database (largest member, end of churn)", xLabel: xl, yLabel: "MB",
			series: []series{
				{name: "etcd RSS", x: n, y: col(func(r etcdscale.Run) float64 { return r.EtcdRSS })},
				{name: "database size", x: n, y: col(func(r etcdscale.Run) float64 { return r.DBSize })},
			},
		},
		"etcd-scale-agent.png": {
			title: "one simulated node's cost", xLabel: xl, yLabel: "µs, MB, ms",
			series: []series{
				{name: "CPU per watch event received, µs", x: n, y: col(func(r etcdscale.Run) float64 { return r.AgentUsPerEvent })},
				{name: "live heap, MB (packed processes)", x: n, y: col(func(r etcdscale.Run) float64 { return r.AgentHeapPerNode })},
				{name: "RSS of a one-node process, MB", x: n, y: col(func(r etcdscale.Run) float64 { return r.AgentRSSCalib })},
				{name: "one policy.Compile of the cluster, ms", x: n, y: col(func(r etcdscale.Run) float64 { return r.CompileMs })},
			},
		},
		"etcd-scale-latency.png": {
			title: "write -> every node has it (outside the member's outage)", xLabel: xl, yLabel: "ms", logY: true,
			series: []series{
				{name: "policy change in every cache, p50", x: n, y: col(func(r etcdscale.Run) float64 { return r.PolicyCachedAllP50 }), color: palette[0]},
				{name: "policy change in every cache, p99", x: n, y: col(func(r etcdscale.Run) float64 { return r.PolicyCachedAllP99 }), dashed: true, color: palette[0]},
				{name: "new pod routed by every node, p50", x: n, y: col(func(r etcdscale.Run) float64 { return r.PodAllP50 }), color: palette[2]},
				{name: "new pod routed by every node, p99", x: n, y: col(func(r etcdscale.Run) float64 { return r.PodAllP99 }), dashed: true, color: palette[2]},
				{name: "policy change compiled (one-node processes), p50", x: n, y: col(func(r etcdscale.Run) float64 { return r.PolicyCompiledAllP50 }), color: palette[4]},
			},
		},
		"etcd-scale-bgp-sessions.png": {
			title: "BGP sessions in the cluster (bgp.Compute, both ends counted)", xLabel: xl, yLabel: "sessions", logY: true,
			series: []series{
				{name: "full node-to-node mesh (Calico's default)", x: n, y: col(func(r etcdscale.Run) float64 { return float64(r.SessionsMesh) })},
				{name: "3 route reflectors, mesh off (Calico's advice above 100 nodes)", x: n, y: col(func(r etcdscale.Run) float64 { return float64(r.SessionsRR) })},
			},
		},
	}
}

func write(path string, c chart) error {
	img, err := c.render()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return atomicfile.WriteFile(path, buf.Bytes(), 0o644)
}
