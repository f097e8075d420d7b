package xtables

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/policy"
)

// BenchmarkNewPodRestore: what a new pod's restores cost the kernel, the
// commit that inserts its dispatch rules (as Apply writes it) against
// the one that rewrites the changed dispatch chains whole (as Apply did
// before it inserted), and the ipset restore that adds its address
// against the refill and swap of its sets, side by side in one namespace
// holding a node's ruleset of XTABLES_BENCH_PODS pods (default 20). Each
// iteration adds a pod both ways (removing it in between, untimed).
//
//	go test -run '^$' -bench BenchmarkNewPodRestore -benchtime 40x ./agent/xtables/
func BenchmarkNewPodRestore(b *testing.B) {
	ctx := context.Background()
	r := newNS(b)
	be, err := Detect(ctx, r, 4)
	if err != nil {
		b.Skip(err)
	}
	p := New(be, r, nil, quiet())
	base := podSnapshot(envInt("XTABLES_BENCH_PODS", 20))
	baseF := policy.Compile(base).V4
	if _, err := p.Apply(ctx, baseF); err != nil {
		b.Fatal(err)
	}
	var ins, rew, setAdd, setSwap []time.Duration
	timed := func(name string, args []string, stdin string) time.Duration {
		t0 := time.Now()
		if _, err := r.Run(ctx, name, args, stdin); err != nil {
			b.Fatalf("%s: %v\n%s", name, err, stdin)
		}
		return time.Since(t0)
	}
	undo := func() {
		p.Invalidate()
		if _, err := p.Apply(ctx, baseF); err != nil {
			b.Fatal(err)
		}
	}
	restore := []string{"--noflush", "--wait"}
	for i := 0; b.Loop(); i++ {
		// A new interface into the root dispatch chain, as most pods of a
		// node with many pods are: "calie" has no chain of its own.
		pod := policy.Compile(withPod(base, fmt.Sprintf("calie%010d", i), "10.65.3.1/32")).V4
		p.Invalidate()
		plan, err := p.Plan(ctx, pod)
		if err != nil {
			b.Fatal(err)
		}
		if !strings.Contains(plan.Restore, "-I cali-from-wl-dispatch ") || strings.Contains(plan.Restore, ":cali-from-wl-dispatch ") {
			b.Fatalf("the new pod's restore does not insert:\n%s", plan.Restore)
		}
		ins = append(ins, timed(be.Restore, restore, plan.Restore))
		setAdd = append(setAdd, timed("ipset", []string{"restore"}, plan.IPSets))
		undo()
		rewrite, sets := wholeRewrite(pod, plan)
		rew = append(rew, timed(be.Restore, restore, rewrite))
		setSwap = append(setSwap, timed("ipset", []string{"restore"}, sets))
		undo()
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	mi, mr, ma, ms := med(ins), med(rew), med(setAdd), med(setSwap)
	b.ReportMetric(mi, "insert-ms")
	b.ReportMetric(mr, "rewrite-ms")
	b.ReportMetric(ma, "ipset-add-ms")
	b.ReportMetric(ms, "ipset-swap-ms")
	b.Logf("new pod's iptables-restore p50: %.1f ms inserting, %.1f ms rewriting the dispatch chains; ipset restore %.1f ms adding, %.1f ms swapping", mi, mr, ma, ms)
}

// wholeRewrite is what Apply wrote for plan before it inserted: each chain
// plan inserts into, rewritten whole beside the new chains, and each set
// plan adds to, refilled and swapped.
func wholeRewrite(f *policy.Family, plan Plan) (rules, sets string) {
	var chains []policy.Chain
	for _, l := range strings.Split(plan.Restore, "\n") {
		var name string
		switch {
		case strings.HasPrefix(l, ":"):
			name, _, _ = strings.Cut(l[1:], " ")
		case strings.HasPrefix(l, "-I "), strings.HasPrefix(l, "-A "):
			name, _, _ = strings.Cut(l[3:], " ")
		}
		if c := f.Filter.Chain(name); c != nil && !slices.ContainsFunc(chains, func(o policy.Chain) bool { return o.Name == name }) {
			chains = append(chains, *c)
		}
	}
	var changed []policy.IPSet
	for _, l := range strings.Split(plan.IPSets, "\n") {
		if w := strings.Fields(l); len(w) > 1 && !slices.ContainsFunc(changed, func(s policy.IPSet) bool { return s.Name == w[1] }) {
			if s := f.IPSet(w[1]); s != nil {
				changed = append(changed, *s)
			}
		}
	}
	return policy.Render(policy.TableFilter, chains), policy.RenderIPSets(changed, 0)
}

// envInt is the integer in the environment variable name, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
