package xtables

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/policy"
)

// handFamily is a filter table of hand-made chains: each chain's rules
// are given as labels, a letter being a rule of its own ("accept from
// 10.0.<chain>.<letter>"), "dup" a rule that may repeat ("return"),
// "drop" a trailing drop as the dispatch chains have. FORWARD's hook
// jumps to cali-root, which jumps to each chain (so that a new chain is
// also a rule inserted into cali-root).
func handFamily(chains map[string][]string) *policy.Family {
	t := policy.Table{Name: policy.TableFilter}
	root := policy.Chain{Name: "cali-root"}
	for _, name := range slices.Sorted(maps.Keys(chains)) {
		root.Rules = append(root.Rules, policy.Rule{Action: policy.Jump{Chain: name}})
		c := policy.Chain{Name: name}
		for _, l := range chains[name] {
			var r policy.Rule
			switch l {
			case "dup":
				r = policy.Rule{Action: policy.Return{}}
			case "drop":
				r = policy.Rule{Comment: []string{"Unknown interface"}, Action: policy.Drop{}}
			default:
				src := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(len(name)), name[len(name)-1], l[0]}), 32)
				r = policy.Rule{Match: policy.Match{policy.MatchNet{Dir: policy.Src, Net: src}}, Action: policy.Accept{}}
			}
			c.Rules = append(c.Rules, r)
		}
		t.Chains = append(t.Chains, c)
	}
	t.Chains = append(t.Chains, root)
	slices.SortFunc(t.Chains, func(a, b policy.Chain) int { return strings.Compare(a.Name, b.Name) })
	t.Hooks = []policy.Hook{{Chain: "FORWARD", Rule: policy.Rule{Action: policy.Jump{Chain: root.Name}}}}
	return &policy.Family{Version: 4, Filter: t}
}

// normalSave is iptables-save output without counters and comments, each
// table's chain headers sorted and each chain's rules in order, chains
// sorted: two namespaces holding the same rules print the same, whatever
// order their chains were created in.
func normalSave(save string) string {
	type table struct {
		heads []string
		rules map[string][]string
	}
	tables := map[string]*table{}
	var cur *table
	for _, l := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			cur = &table{rules: map[string][]string{}}
			tables[l] = cur
		case strings.HasPrefix(l, ":") && cur != nil:
			name, _, _ := strings.Cut(l[1:], " ")
			cur.heads = append(cur.heads, name)
		case strings.HasPrefix(l, "-A ") && cur != nil:
			chain, _, _ := strings.Cut(l[3:], " ")
			cur.rules[chain] = append(cur.rules[chain], l)
		}
	}
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		t := tables[name]
		slices.Sort(t.heads)
		b.WriteString(name + "\n:" + strings.Join(t.heads, "\n:") + "\n")
		for _, c := range t.heads {
			for _, r := range t.rules[c] {
				b.WriteString(r + "\n")
			}
		}
	}
	return b.String()
}

// normalSets is `ipset save` of our sets, sorted, without the random
// initval of each create line.
func normalSets(save string) string {
	var lines []string
	for _, l := range strings.Split(save, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || !IsOurSet(f[1]) {
			continue
		}
		if i := slices.Index(f, "initval"); i >= 0 && i+1 < len(f) {
			f = slices.Delete(f, i, i+2)
		}
		lines = append(lines, strings.Join(f, " "))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// removes reports the lines of an iptables-restore payload that flush,
// delete or replace something in a chain the kernel had before: a
// ":chain" header of an existing chain, -D, -F, -R, -X.
func removes(payload string, existing func(chain string) bool) []string {
	var out []string
	for _, l := range strings.Split(payload, "\n") {
		name, _, _ := strings.Cut(strings.TrimPrefix(l, ":"), " ")
		switch {
		case strings.HasPrefix(l, ":") && existing(name):
			out = append(out, l)
		case strings.HasPrefix(l, "-D "), strings.HasPrefix(l, "-F "), strings.HasPrefix(l, "-R "), strings.HasPrefix(l, "-X "):
			out = append(out, l)
		}
	}
	return out
}

// TestAppliesMatchAFreshProgram: after each of a sequence of changes
// (rules inserted at the start, middle and end of chains, equal rules
// inserted among equal rules, then rules removed and moved, then a
// different ruleset), the namespace the programmer kept updating holds
// exactly what a fresh program of the same state writes into an empty
// one, the programmer's record of the kernel is what the kernel holds,
// and the changes that only add rules were written without removing or
// flushing anything.
func TestAppliesMatchAFreshProgram(t *testing.T) {
	steps := []struct {
		name       string
		chains     map[string][]string
		insertOnly bool
	}{
		{"start", map[string][]string{"cali-a": {"x", "y", "drop"}, "cali-b": {"dup", "p"}}, false},
		{"insert at the start", map[string][]string{"cali-a": {"w", "x", "y", "drop"}, "cali-b": {"dup", "p"}}, true},
		{"insert in the middle and before the drop", map[string][]string{"cali-a": {"w", "x", "m", "y", "n", "drop"}, "cali-b": {"dup", "p"}}, true},
		{"insert at the end", map[string][]string{"cali-a": {"w", "x", "m", "y", "n", "drop", "z"}, "cali-b": {"dup", "p", "q"}}, true},
		{"equal rules among equal rules, a new chain", map[string][]string{"cali-a": {"w", "x", "m", "y", "n", "drop", "z"}, "cali-b": {"dup", "dup", "p", "dup", "q", "dup"}, "cali-c": {"c"}}, true},
		{"many at once, everywhere", map[string][]string{"cali-a": {"a", "b", "w", "c", "x", "d", "m", "e", "y", "f", "n", "g", "drop", "z", "h"}, "cali-b": {"dup", "dup", "p", "dup", "q", "dup"}, "cali-c": {"b", "c", "d"}}, true},
		{"remove", map[string][]string{"cali-a": {"a", "w", "x", "m", "drop"}, "cali-b": {"dup", "p", "q"}, "cali-c": {"b", "c", "d"}}, false},
		{"move", map[string][]string{"cali-a": {"w", "a", "x", "m", "drop"}, "cali-b": {"p", "dup", "q"}, "cali-c": {"b", "c", "d"}}, false},
		{"insert and remove in one chain", map[string][]string{"cali-a": {"w", "k", "x", "m", "drop"}, "cali-b": {"p", "dup", "q"}, "cali-c": {"b", "c", "d"}}, false},
		{"a different ruleset", map[string][]string{"cali-d": {"r", "s", "drop"}}, false},
		{"and insertions into it", map[string][]string{"cali-d": {"q", "r", "s", "t", "drop", "u"}}, true},
	}
	for _, mode := range []string{"nft", "legacy"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			b := BackendFor(mode, 4)
			r := newNS(t)
			p := New(b, r, nil, quiet())
			var prev *policy.Family
			for i, step := range steps {
				f := handFamily(step.chains)
				r.log = nil
				st, err := p.Apply(ctx, f)
				if err != nil {
					t.Fatalf("step %d (%s): %v", i, step.name, err)
				}
				if step.insertOnly {
					existing := func(c string) bool { return prev.Filter.Chain(c) != nil }
					if bad := removes(strings.Join(r.log, ""), existing); len(bad) > 0 {
						t.Errorf("step %d (%s) only adds rules, yet its restore removes or flushes: %q\n%s", i, step.name, bad, strings.Join(r.log, ""))
					}
				}
				fresh := newNS(t)
				if _, err := New(b, fresh, nil, quiet()).Apply(ctx, f); err != nil {
					t.Fatalf("step %d (%s), fresh program: %v", i, step.name, err)
				}
				if got, want := normalSave(r.sh(t, b.Save)), normalSave(fresh.sh(t, b.Save)); got != want {
					t.Errorf("step %d (%s): the kernel after the applies differs from a fresh program's:\n--- after the applies\n%s--- fresh\n%s", i, step.name, got, want)
				}
				assertKnownIsKernel(t, fmt.Sprintf("step %d (%s)", i, step.name), p, f, st)
				prev = f
			}
		})
	}
}

// assertKnownIsKernel: what the programmer believes the kernel holds
// after an Apply (it diffs the next Apply against it) is what a fresh read
// of the kernel finds, chain by chain and set by set.
// An Apply that fixed hooks keeps none (the next one reads the kernel).
func assertKnownIsKernel(t *testing.T, what string, p *Programmer, f *policy.Family, st Stats) {
	t.Helper()
	if p.known == nil {
		if st.HooksFixed == 0 {
			t.Fatalf("%s: the programmer kept no record of the kernel", what)
		}
		return
	}
	read, err := p.read(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range f.Tables() {
		got, want := p.known.tables[tb.Name], read.tables[tb.Name]
		for _, c := range want.order {
			if IsOurChain(c) && !slices.Equal(got.chains[c], want.chains[c]) {
				t.Errorf("%s: the programmer believes %s %s holds %q, the kernel holds %q", what, tb.Name, c, got.chains[c], want.chains[c])
			}
		}
		for c := range got.chains {
			if _, ok := want.chains[c]; !ok && IsOurChain(c) {
				t.Errorf("%s: the programmer believes %s %s exists; the kernel lacks it", what, tb.Name, c)
			}
		}
	}
	if !reflect.DeepEqual(p.known.sets, read.sets) {
		t.Errorf("%s: the programmer believes the sets are %v, the kernel holds %v", what, setsString(p.known.sets), setsString(read.sets))
	}
}

func setsString(sets map[string]*savedSet) string {
	var b strings.Builder
	for _, n := range slices.Sorted(maps.Keys(sets)) {
		fmt.Fprintf(&b, "%s %+v; ", n, *sets[n])
	}
	return b.String()
}

// podSnapshot is snapshot(true) with n more frontends, whose interfaces
// spread over the dispatch chains' prefix tree: "cali" and a letter
// from "abcd", so that some letters get a child chain.
func podSnapshot(n int) *policy.Snapshot {
	s := snapshot(true)
	for i := range n {
		w := s.WorkloadEndpoints[1]
		w.Name = fmt.Sprintf("front%d", i)
		w.Spec.Pod = w.Name
		w.Spec.InterfaceName = fmt.Sprintf("cali%c%010d", "abcd"[i%4], i)
		w.Spec.IPNetworks = []string{fmt.Sprintf("10.65.1.%d/32", i+1)}
		s.WorkloadEndpoints = append(s.WorkloadEndpoints, w)
	}
	return s
}

// withPod is s with one more frontend on interface iface.
func withPod(s *policy.Snapshot, iface, ip string) *policy.Snapshot {
	c := *s
	w := s.WorkloadEndpoints[1]
	w.Name, w.Spec.Pod, w.Spec.InterfaceName, w.Spec.IPNetworks = iface, iface, iface, []string{ip}
	c.WorkloadEndpoints = append(slices.Clone(s.WorkloadEndpoints), w)
	return &c
}

// TestNewPodOnlyAdds: what a new pod's ADD makes the programmer write (its
// endpoint chains, its rule in each dispatch chain, its address in the IP
// sets that select it) adds to the kernel and removes nothing, also when
// its rule goes into a dispatch child chain before the chain's trailing
// drop. On nf_tables a commit that removes or flushes anything costs
// ~12 ms more, which a pod's ADD waits for.
func TestNewPodOnlyAdds(t *testing.T) {
	base := podSnapshot(9) // cali{a,b} get child chains, cali{c,d} too, plus the three singles
	cases := []struct{ name, iface string }{
		{"into the root dispatch chain", "calie000000000"},
		{"into a child dispatch chain", "calia9999999999"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := policy.Compile(base).V4
			after := policy.Compile(withPod(base, tc.iface, "10.65.2.1/32")).V4
			p := New(BackendFor("nft", 4), nil, nil, quiet())
			known := (&kernelState{tables: map[string]savedTable{}, sets: map[string]*savedSet{}}).after(before, hashesOf(before), p.maxElem())
			plan, err := p.planAgainst(after, known)
			if err != nil {
				t.Fatal(err)
			}
			existing := func(c string) bool { _, ok := known.tables[policy.TableFilter].chains[c]; return ok }
			if bad := removes(plan.Restore, existing); len(bad) > 0 {
				t.Errorf("a new pod's restore removes or flushes: %q\n%s", bad, plan.Restore)
			}
			if !strings.Contains(plan.Restore, ":cali-fw-"+tc.iface+" ") || !strings.Contains(plan.Restore, "-I cali-from-wl-dispatch") {
				t.Errorf("the plan lacks the pod's chain or its dispatch rule:\n%s", plan.Restore)
			}
			for _, l := range strings.Split(plan.IPSets, "\n") {
				if l != "" && !strings.HasPrefix(l, "add ") {
					t.Errorf("a new pod's ipset restore does more than add members: %q\n%s", l, plan.IPSets)
				}
			}
			if !strings.Contains(plan.IPSets, " 10.65.2.1 ") {
				t.Errorf("the pod's address joins no set:\n%s", plan.IPSets)
			}
		})
	}
}

// hashesOf are the rule hashes of every chain of f, by table.
func hashesOf(f *policy.Family) map[string]chainHashes {
	out := map[string]chainHashes{}
	for _, t := range f.Tables() {
		out[t.Name], _ = hashChains(t, nil)
	}
	return out
}

// TestNewPodsInTheKernel: new pods applied one by one into a namespace
// (one whose interface turns a single rule of the root into a child
// chain, into a child chain, into the root) leave it
// as a fresh program of the same pods would, sets included.
func TestNewPodsInTheKernel(t *testing.T) {
	ctx := context.Background()
	b := BackendFor("nft", 4)
	r := newNS(t)
	p := New(b, r, nil, quiet())
	s := podSnapshot(9)
	for i, iface := range []string{"", "cali3333333333d", "calia9999999999", "cali1111111111b", "calie000000000", "calif00000000"} {
		if iface != "" {
			s = withPod(s, iface, fmt.Sprintf("10.65.2.%d/32", i))
		}
		f := policy.Compile(s).V4
		st, err := p.Apply(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		fresh := newNS(t)
		if _, err := New(b, fresh, nil, quiet()).Apply(ctx, f); err != nil {
			t.Fatal(err)
		}
		if got, want := normalSave(r.sh(t, b.Save)), normalSave(fresh.sh(t, b.Save)); got != want {
			t.Errorf("after pod %q: tables differ from a fresh program's:\n--- after the applies\n%s--- fresh\n%s", iface, got, want)
		}
		if got, want := normalSets(r.sh(t, "ipset", "save")), normalSets(fresh.sh(t, "ipset", "save")); got != want {
			t.Errorf("after pod %q: sets differ from a fresh program's:\n--- after the applies\n%s\n--- fresh\n%s", iface, got, want)
		}
		assertKnownIsKernel(t, "after pod "+iface, p, f, st)
	}
	// And the pods deleted again, newest first.
	for len(s.WorkloadEndpoints) > 3 {
		s.WorkloadEndpoints = s.WorkloadEndpoints[:len(s.WorkloadEndpoints)-1]
		f := policy.Compile(s).V4
		st, err := p.Apply(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		assertKnownIsKernel(t, fmt.Sprintf("down to %d pods", len(s.WorkloadEndpoints)), p, f, st)
	}
	p.Invalidate()
	if st, err := p.Apply(ctx, policy.Compile(s).V4); err != nil || st.Changed() {
		t.Errorf("after the deletions, a read of the kernel finds changes: %+v %v", st, err)
	}
}

// BenchmarkNewPodRestore: what a new pod's restores cost the kernel, the
// commit that inserts its dispatch rules (as Apply writes it) against
// the one that rewrites the changed dispatch chains whole (as Apply did
// before it inserted), and the ipset restore that adds its address
// against the refill and swap of its sets, side by side in one namespace
// holding a node's ruleset of 23 pods. Each iteration adds a pod both
// ways (removing it in between, untimed).
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
	base := podSnapshot(20)
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
