package main

import (
	"image/color"
	"testing"

	"github.com/projectcalico/calico-node/integration/etcdscale"
)

// TestChartsDrawEveryFigure: each figure of a results file becomes an
// image in which every series' colour appears (its points were drawn
// inside the canvas), on linear and logarithmic axes.
func TestChartsDrawEveryFigure(t *testing.T) {
	res := etcdscale.Results{Runs: []etcdscale.Run{
		{Nodes: 100, TargetPodRate: 30, EtcdCPU: 0.5, WatchEventsPerS: 12000, Watchers: 300, EtcdRSS: 170, DBSize: 7,
			AgentUsPerEvent: 40, AgentHeapPerNode: 2, AgentRSSCalib: 40, CompileMs: 0.9,
			PolicyCachedAllP50: 200, PolicyCachedAllP99: 900, PodAllP50: 150, PodAllP99: 800, PolicyCompiledAllP50: 40,
			SessionsMesh: 9900, SessionsRR: 588},
		{Nodes: 1000, TargetPodRate: 3, EtcdCPU: 0.5, WatchEventsPerS: 15000, Watchers: 3000, EtcdRSS: 450, DBSize: 6,
			AgentUsPerEvent: 42, AgentHeapPerNode: 4.4, AgentRSSCalib: 45, CompileMs: 1.7,
			PolicyCachedAllP50: 500, PolicyCachedAllP99: 2000, PodAllP50: 1700, PodAllP99: 3000, PolicyCompiledAllP50: 270,
			SessionsMesh: 999000, SessionsRR: 5988},
		{Nodes: 100, Mode: "fanout", TargetPodRate: 30, EtcdCPU: 0.2, WatchEventsPerS: 200, EtcdRSS: 90, HubCPU: 0.1, HubRSS: 60, PolicyCachedAllP50: 30},
		{Nodes: 1000, Mode: "fanout", TargetPodRate: 3, EtcdCPU: 0.05, WatchEventsPerS: 20, EtcdRSS: 90, HubCPU: 0.2, HubRSS: 80, PolicyCachedAllP50: 300},
	}}
	cs := charts(res, 30)
	if len(cs) != 6 {
		t.Fatalf("%d charts, want 6", len(cs))
	}
	for name, c := range cs {
		img, err := c.render()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() != width || b.Dy() != height {
			t.Errorf("%s: %v, want %dx%d", name, b, width, height)
		}
		seen := map[color.RGBA]int{}
		for y := range height {
			for x := range width {
				seen[img.RGBAAt(x, y)]++
			}
		}
		for i, s := range c.series {
			col := s.color
			if col.A == 0 {
				col = palette[i]
			}
			// The legend alone draws 25 pixels; the markers 49 each (two
			// runs per mode).
			if n := seen[col]; n < 25+49*2 {
				t.Errorf("%s: series %q has %d pixels, want its legend and 2 markers", name, c.series[i].name, n)
			}
			if len(s.x) != 2 {
				t.Errorf("%s: series %q has %d points, want 2", name, s.name, len(s.x))
			}
		}
	}
}

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi    float64
		first     float64
		last      float64
		maxLength int
	}{
		{0, 1000, 0, 1000, 8},
		{0, 0.51, 0, 0.6, 8},
		{0, 13740, 0, 14000, 9},
	} {
		ts := linearTicks(tc.lo, tc.hi)
		if ts[0] != tc.first || ts[len(ts)-1] < tc.hi || len(ts) > tc.maxLength {
			t.Errorf("linearTicks(%v, %v) = %v", tc.lo, tc.hi, ts)
		}
	}
	if got := logTicks(588, 999000); got[0] != 100 || got[len(got)-1] != 1e6 {
		t.Errorf("logTicks = %v, want 100 … 1e6", got)
	}
}

// TestLabelsAreASCII: the bitmap font has no glyph beyond ASCII; a "µ"
// would be drawn as a box.
func TestLabelsAreASCII(t *testing.T) {
	for name, c := range charts(etcdscale.Results{Runs: []etcdscale.Run{{Nodes: 1, TargetPodRate: 1}}}, 30) {
		texts := []string{c.title, c.xLabel, c.yLabel}
		for _, s := range c.series {
			texts = append(texts, s.name)
		}
		for _, s := range texts {
			for _, r := range s {
				if r > 127 {
					t.Errorf("%s: label %q has %q, which the font cannot draw", name, s, r)
				}
			}
		}
	}
}
