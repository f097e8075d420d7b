// Command plot draws the etcd scale harness's figures against the number
// of nodes, one PNG per figure, from the results BenchmarkEtcdScale wrote
// (integration/etcdscale.ResultsFile). `make bench-etcd-scale` runs it
// after the benchmark; docs/benchmarks.md shows the PNGs.
//
//	go run ./integration/etcdscale/plot -in docs/img/etcd-scale.json -out docs/img
//
// Figures measured at a pod rate below the 30 pods/s target (the harness
// caps pods/s × nodes; see docs/benchmarks.md) are drawn as measured and,
// dashed, scaled to 30 pods/s where they grow in proportion to the pods
// started (etcd's watch events and its CPU when nodes watch it, the
// fan-out's CPU). etcd's CPU behind a fan-out is mostly the writes' and a
// fixed baseline, so it is drawn as measured only.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"image/color"
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

// charts are the figures, by file name. Runs without a mode are direct
// (results written before the fan-out mode existed).
func charts(res etcdscale.Results, target float64) map[string]chart {
	byMode := map[string][]etcdscale.Run{}
	for _, r := range res.Runs {
		m := r.Mode
		if m == "" {
			m = "direct"
		}
		byMode[m] = append(byMode[m], r)
	}
	// line is one series of f over the runs of a mode; scaled multiplies
	// each point by target / the run's pod rate.
	line := func(name, mode string, f func(r etcdscale.Run) float64, scaled, dashed bool, col color.RGBA) series {
		s := series{name: name, dashed: dashed, color: col}
		for _, r := range byMode[mode] {
			v := f(r)
			if scaled {
				v *= target / r.TargetPodRate
			}
			s.x, s.y = append(s.x, float64(r.Nodes)), append(s.y, v)
		}
		return s
	}
	keep := func(ss ...series) []series {
		var out []series
		for _, s := range ss {
			if len(s.x) > 0 {
				out = append(out, s)
			}
		}
		return out
	}
	const xl = "simulated nodes"
	budget := res.Runs[0].Budget
	measured := fmt.Sprintf("(pods/s = min(%g, %g / nodes))", target, budget)
	tgt := fmt.Sprintf("scaled to %g pods/s", target)
	blue, red, green, orange, purple, brown := palette[0], palette[1], palette[2], palette[3], palette[4], palette[5]
	return map[string]chart{
		"etcd-scale-cpu.png": {
			title: "CPU during pod churn: etcd (3 members together), the fan-out", xLabel: xl, yLabel: "cores",
			series: keep(
				line("etcd, nodes watching it, measured "+measured, "direct", func(r etcdscale.Run) float64 { return r.EtcdCPU }, false, false, blue),
				line("etcd, nodes watching it, "+tgt, "direct", func(r etcdscale.Run) float64 { return r.EtcdCPU }, true, true, blue),
				line("etcd, nodes reading a fan-out, measured", "fanout", func(r etcdscale.Run) float64 { return r.EtcdCPU }, false, false, green),
				line("the fan-out itself, "+tgt, "fanout", func(r etcdscale.Run) float64 { return r.HubCPU }, true, true, orange),
			),
		},
		"etcd-scale-watch-events.png": {
			title: "watch events etcd sends per second (3 members together)", xLabel: xl, yLabel: "events/s", logY: true,
			series: keep(
				line("nodes watching etcd, measured", "direct", func(r etcdscale.Run) float64 { return r.WatchEventsPerS }, false, false, blue),
				line("nodes watching etcd, "+tgt, "direct", func(r etcdscale.Run) float64 { return r.WatchEventsPerS }, true, true, blue),
				line("nodes reading a fan-out, measured", "fanout", func(r etcdscale.Run) float64 { return r.WatchEventsPerS }, false, false, green),
				line("watchers etcd holds (3 per node watching it)", "direct", func(r etcdscale.Run) float64 { return r.Watchers }, false, false, purple),
			),
		},
		"etcd-scale-memory.png": {
			title: "etcd memory and database (largest member, end of churn)", xLabel: xl, yLabel: "MB",
			series: keep(
				line("etcd RSS, nodes watching it", "direct", func(r etcdscale.Run) float64 { return r.EtcdRSS }, false, false, blue),
				line("etcd RSS, nodes reading a fan-out", "fanout", func(r etcdscale.Run) float64 { return r.EtcdRSS }, false, false, green),
				line("the fan-out's RSS", "fanout", func(r etcdscale.Run) float64 { return r.HubRSS }, false, false, orange),
				line("database size", "direct", func(r etcdscale.Run) float64 { return r.DBSize }, false, false, brown),
			),
		},
		"etcd-scale-agent.png": {
			title: "one simulated node's cost (nodes watching etcd)", xLabel: xl, yLabel: "us, MB, ms",
			series: keep(
				line("CPU per watch event received, us (microseconds)", "direct", func(r etcdscale.Run) float64 { return r.AgentUsPerEvent }, false, false, blue),
				line("live heap, MB (packed processes)", "direct", func(r etcdscale.Run) float64 { return r.AgentHeapPerNode }, false, false, red),
				line("RSS of a one-node process, MB", "direct", func(r etcdscale.Run) float64 { return r.AgentRSSCalib }, false, false, green),
				line("one policy.Compile of the cluster, ms", "direct", func(r etcdscale.Run) float64 { return r.CompileMs }, false, false, orange),
			),
		},
		"etcd-scale-latency.png": {
			title: "write -> every node has it (outside the member's outage)", xLabel: xl, yLabel: "ms", logY: true,
			series: keep(
				line("policy change in every cache, p50", "direct", func(r etcdscale.Run) float64 { return r.PolicyCachedAllP50 }, false, false, blue),
				line("policy change in every cache, p99", "direct", func(r etcdscale.Run) float64 { return r.PolicyCachedAllP99 }, false, true, blue),
				line("new pod routed by every node, p50", "direct", func(r etcdscale.Run) float64 { return r.PodAllP50 }, false, false, red),
				line("new pod routed by every node, p99", "direct", func(r etcdscale.Run) float64 { return r.PodAllP99 }, false, true, red),
				line("policy change compiled (one-node processes), p50", "direct", func(r etcdscale.Run) float64 { return r.PolicyCompiledAllP50 }, false, false, purple),
				line("policy change in every cache via the fan-out, p50", "fanout", func(r etcdscale.Run) float64 { return r.PolicyCachedAllP50 }, false, false, green),
			),
		},
		"etcd-scale-bgp-sessions.png": {
			title: "BGP sessions in the cluster (bgp.Compute, both ends counted)", xLabel: xl, yLabel: "sessions", logY: true,
			series: keep(
				line("full node-to-node mesh (Calico's default)", "direct", func(r etcdscale.Run) float64 { return float64(r.SessionsMesh) }, false, false, red),
				line("3 route reflectors, mesh off (Calico's advice above 100 nodes)", "direct", func(r etcdscale.Run) float64 { return float64(r.SessionsRR) }, false, false, blue),
			),
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
