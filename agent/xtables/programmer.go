package xtables

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projectcalico/calico-node/internal/policy"
)

// Stats says what one Apply changed.
type Stats struct {
	ChainsWritten int
	ChainsDeleted int
	HooksFixed    int
	SetsWritten   int
	SetsDeleted   int
	Restores      int // iptables-restore calls (0 or 1)
}

// Changed reports whether Apply touched the kernel at all.
func (s Stats) Changed() bool {
	return s.ChainsWritten+s.ChainsDeleted+s.HooksFixed+s.SetsWritten+s.SetsDeleted > 0
}

// Programmer applies one IP family's desired state.
type Programmer struct {
	b       Backend
	r       Runner
	log     *slog.Logger
	MaxElem int // ipset maxelem; 0 = felix's default

	// known is what the kernel held after our last successful Apply,
	// so that the next one diffs without reading the kernel back (an
	// iptables-save and ipset save of a large ruleset cost more than the
	// change itself). nil: read the kernel on the next Apply. Invalidate
	// and every failure reset it, so drift made by others is found on the
	// agent's periodic resync, as with felix.
	known *kernelState
	// hashes are the rule hashes of the chains of the last Apply, by
	// table and chain, kept with the identity of the rules they hash:
	// policy.Compiler hands back an unchanged chain's very rules, so only
	// changed chains are hashed again. Unlike known it describes no
	// kernel state, so failures keep it.
	hashes map[string]map[string]hashMemo
	// lastHashes are the rule hashes, by table and chain index, of the
	// chains the last writeTables wrote (for kernelState.after).
	lastHashes map[string]chainHashes

	restores     prometheus.Counter
	restoreErrs  prometheus.Counter
	ipsetRuns    prometheus.Counter
	restoreTimes prometheus.Observer
	m            *Metrics
	ipVersion    string // Felix's ip_version label: "4", "6"
}

// Metrics are shared by the programmers of both families: calico-node's
// own (calico_*, by family) and Felix's iptables and ipset metrics
// (felix_*, with Felix's names, types, labels and help).
type Metrics struct {
	Restores, RestoreErrors, IPSetRestores *prometheus.CounterVec
	RestoreSeconds                         *prometheus.HistogramVec

	FelixRestores, FelixRestoreErrors prometheus.Counter
	FelixSaves, FelixSaveErrors       prometheus.Counter
	FelixChains, FelixRules           *prometheus.GaugeVec   // ip_version, table
	FelixLinesExecuted                *prometheus.CounterVec // ip_version, table
	FelixIPSets                       *prometheus.GaugeVec   // ip_version: inet, inet6
	FelixIPSetsTotal                  prometheus.Gauge
	FelixIPSetCalls, FelixIPSetErrors prometheus.Counter
	FelixIPSetLinesExecuted           prometheus.Counter
}

// NewMetrics registers the programmer metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Restores: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "calico_iptables_restore_calls_total", Help: "iptables-restore invocations.",
		}, []string{"family"}),
		RestoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "calico_iptables_restore_errors_total", Help: "Failed iptables-restore invocations.",
		}, []string{"family"}),
		IPSetRestores: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "calico_ipset_restore_calls_total", Help: "ipset restore invocations.",
		}, []string{"family"}),
		RestoreSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "calico_iptables_restore_seconds", Help: "Duration of iptables-restore calls.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"family"}),
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m.FelixRestores = counter("felix_iptables_restore_calls", "Number of iptables-restore calls.")
	m.FelixRestoreErrors = counter("felix_iptables_restore_errors", "Number of iptables-restore errors.")
	m.FelixSaves = counter("felix_iptables_save_calls", "Number of iptables-save calls.")
	m.FelixSaveErrors = counter("felix_iptables_save_errors", "Number of iptables-save errors.")
	m.FelixChains = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "felix_iptables_chains", Help: "Number of active iptables chains."}, []string{"ip_version", "table"})
	m.FelixRules = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "felix_iptables_rules", Help: "Number of active iptables rules."}, []string{"ip_version", "table"})
	m.FelixLinesExecuted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_iptables_lines_executed", Help: "Number of iptables rule updates executed."}, []string{"ip_version", "table"})
	m.FelixIPSets = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "felix_ipsets_calico", Help: "Number of active Calico IP sets."}, []string{"ip_version"})
	m.FelixIPSetsTotal = prometheus.NewGauge(prometheus.GaugeOpts{Name: "felix_ipsets_total", Help: "Total number of active IP sets."})
	m.FelixIPSetCalls = counter("felix_ipset_calls", "Number of ipset commands executed.")
	m.FelixIPSetErrors = counter("felix_ipset_errors", "Number of ipset command failures.")
	m.FelixIPSetLinesExecuted = counter("felix_ipset_lines_executed", "Number of ipset operations executed.")
	if reg != nil {
		reg.MustRegister(m.Restores, m.RestoreErrors, m.IPSetRestores, m.RestoreSeconds,
			m.FelixRestores, m.FelixRestoreErrors, m.FelixSaves, m.FelixSaveErrors, m.FelixChains, m.FelixRules,
			m.FelixLinesExecuted, m.FelixIPSets, m.FelixIPSetsTotal, m.FelixIPSetCalls, m.FelixIPSetErrors, m.FelixIPSetLinesExecuted)
	}
	return m
}

// New returns a programmer for backend b.
func New(b Backend, r Runner, m *Metrics, logger *slog.Logger) *Programmer {
	if m == nil {
		m = NewMetrics(nil)
	}
	fam := fmt.Sprint(b.Family)
	return &Programmer{
		b: b, r: r, log: logger.With("component", "iptables", "family", b.Family),
		restores: m.Restores.WithLabelValues(fam), restoreErrs: m.RestoreErrors.WithLabelValues(fam),
		ipsetRuns: m.IPSetRestores.WithLabelValues(fam), restoreTimes: m.RestoreSeconds.WithLabelValues(fam),
		m: m, ipVersion: fam,
	}
}

// kernelState is our view of our part of the kernel: each table as
// iptables-save showed it (or as we then wrote it) and our ip sets.
type kernelState struct {
	tables map[string]savedTable
	sets   map[string]*savedSet
}

// SetMaxIPSetSize sets the maxelem of the IP sets the next Apply creates
// or rewrites (FelixConfiguration maxIpsetSize); 0 is Felix's default.
func (p *Programmer) SetMaxIPSetSize(n int) { p.MaxElem = n }

// Invalidate makes the next Apply read the kernel instead of trusting
// what the programmer last wrote: call it on the periodic resync.
func (p *Programmer) Invalidate() { p.known = nil }

// read loads our ip sets and the tables of f from the kernel.
func (p *Programmer) read(ctx context.Context, f *policy.Family) (*kernelState, error) {
	sets, err := p.readSets(ctx)
	if err != nil {
		return nil, err
	}
	k := &kernelState{tables: map[string]savedTable{}, sets: sets}
	// One iptables-save of every table rather than one per table: each
	// run costs a process start and (nft) a read of the whole ruleset
	// anyway. A table it does not print does not exist yet: empty.
	p.m.FelixSaves.Inc()
	out, err := p.r.Run(ctx, p.b.Save, nil, "")
	if err != nil {
		p.m.FelixSaveErrors.Inc()
		return nil, fmt.Errorf("read tables: %w", err)
	}
	saved := splitSave(out)
	for _, t := range f.Tables() {
		k.tables[t.Name] = parseSave(saved[t.Name])
	}
	return k, nil
}

// Apply makes the kernel match f. On error the kernel may be partly
// updated; the caller retries and the next Apply (which re-reads the
// kernel) finishes the job.
func (p *Programmer) Apply(ctx context.Context, f *policy.Family) (st Stats, err error) {
	known := p.known
	p.known = nil // until this Apply has succeeded
	if known == nil || !known.covers(f) {
		if known, err = p.read(ctx, f); err != nil {
			return st, err
		}
	}
	actualSets := known.sets
	// 1. IP sets first: new rules may reference them. A change that
	// creates no set (members only, as a new pod's address in its
	// profile's set) cannot leave a rule referencing a set the kernel
	// lacks: then ipset restore runs beside iptables-restore, and a
	// pod's CNI ADD, which waits for this Apply, waits for one process
	// instead of two in a row.
	setsPayload, setsN, err := p.setsPayload(f.IPSets, actualSets)
	if err != nil {
		return st, err
	}
	var setsDone chan error
	switch {
	case setsPayload == "":
	case createsNoSet(f.IPSets, actualSets):
		setsDone = make(chan error, 1)
		go func() { setsDone <- p.restoreSets(ctx, setsPayload) }()
	default:
		if err := p.restoreSets(ctx, setsPayload); err != nil {
			return st, fmt.Errorf("ipset restore: %w", err)
		}
		st.SetsWritten = setsN
	}
	st, err = p.writeTables(ctx, f, known, st)
	if setsDone != nil {
		if serr := <-setsDone; serr != nil {
			return st, errors.Join(err, fmt.Errorf("ipset restore: %w", serr))
		}
		st.SetsWritten = setsN
	}
	if err != nil {
		return st, err
	}
	// 3. Sets nothing references any more.
	if err := p.destroyStaleSets(ctx, f.IPSets, actualSets, &st); err != nil {
		return st, err
	}
	// Chain writes and deletions are easy to account for; fixed hooks sit
	// among other software's rules in the built-in chains, which only a
	// fresh read shows exactly.
	if st.HooksFixed == 0 {
		p.known = known.after(f, p.lastHashes, p.maxElem())
	}
	p.setGauges(f)
	if st.Changed() {
		p.log.Debug("programmed", "chains", st.ChainsWritten, "deleted", st.ChainsDeleted, "hooks", st.HooksFixed, "sets", st.SetsWritten, "setsDeleted", st.SetsDeleted)
	}
	return st, nil
}

// createsNoSet reports whether every set of want is already in have.
func createsNoSet(want []policy.IPSet, have map[string]*savedSet) bool {
	for _, s := range want {
		if have[s.Name] == nil {
			return false
		}
	}
	return true
}

// writeTables writes the difference between f's tables and known in one
// iptables-restore; p.lastHashes gets the rule hashes of f's chains.
func (p *Programmer) writeTables(ctx context.Context, f *policy.Family, known *kernelState, st Stats) (Stats, error) {
	// 2. All tables in one iptables-restore.
	var payload strings.Builder
	hashes := map[string]chainHashes{}
	lines := map[string]int{}
	memo := map[string]map[string]hashMemo{}
	for _, t := range f.Tables() {
		hashes[t.Name], memo[t.Name] = hashChains(t, p.hashes[t.Name])
		section := diffTable(t, known.tables[t.Name], hashes[t.Name], &st)
		// Felix counts the rule lines of each table's section: chain
		// headers, rules, deletions, not the *table and COMMIT lines.
		lines[t.Name] = max(strings.Count(section, "\n")-2, 0)
		payload.WriteString(section)
	}
	p.hashes, p.lastHashes = memo, hashes
	if payload.Len() > 0 {
		start := time.Now()
		p.restores.Inc()
		p.m.FelixRestores.Inc()
		st.Restores = 1
		if _, err := p.r.Run(ctx, p.b.Restore, []string{"--noflush", "--wait"}, payload.String()); err != nil {
			p.restoreErrs.Inc()
			p.m.FelixRestoreErrors.Inc()
			return st, fmt.Errorf("iptables-restore: %w", err)
		}
		p.restoreTimes.Observe(time.Since(start).Seconds())
		for table, n := range lines {
			if n > 0 {
				p.m.FelixLinesExecuted.WithLabelValues(p.ipVersion, table).Add(float64(n))
			}
		}
	}
	return st, nil
}

// setGauges sets Felix's gauges of what is programmed: chains and rules
// per table, and IP sets.
func (p *Programmer) setGauges(f *policy.Family) {
	for _, t := range f.Tables() {
		rules := 0
		for i := range t.Chains {
			rules += len(t.Chains[i].Rules)
		}
		p.m.FelixChains.WithLabelValues(p.ipVersion, t.Name).Set(float64(len(t.Chains)))
		p.m.FelixRules.WithLabelValues(p.ipVersion, t.Name).Set(float64(rules + len(t.Hooks)))
	}
	fam := "inet"
	if p.b.Family == 6 {
		fam = "inet6"
	}
	p.m.FelixIPSets.WithLabelValues(fam).Set(float64(len(f.IPSets)))
}

// covers reports whether k has every table f needs.
func (k *kernelState) covers(f *policy.Family) bool {
	for _, t := range f.Tables() {
		if _, ok := k.tables[t.Name]; !ok {
			return false
		}
	}
	return true
}

// after is k once f has been written over it without hook fixes: every
// chain of f holds f's rules, our other chains are gone, every set of f
// holds its members with maxElem (a set of another maxelem was
// rewritten), and stale and scratch sets are gone.
func (k *kernelState) after(f *policy.Family, hashes map[string]chainHashes, maxElem int) *kernelState {
	out := &kernelState{tables: map[string]savedTable{}, sets: map[string]*savedSet{}}
	for _, t := range f.Tables() {
		old := k.tables[t.Name]
		nt := savedTable{chains: map[string][]string{}, specs: old.specs}
		for _, name := range old.order {
			if !IsOurChain(name) || t.Chain(name) != nil {
				nt.chains[name] = old.chains[name]
				nt.order = append(nt.order, name)
			}
		}
		for i := range t.Chains {
			c := &t.Chains[i]
			if _, ok := nt.chains[c.Name]; !ok {
				nt.order = append(nt.order, c.Name)
			}
			nt.chains[c.Name] = hashes[t.Name][i]
		}
		out.tables[t.Name] = nt
	}
	for _, s := range f.IPSets {
		out.sets[s.Name] = &savedSet{typ: s.Type, maxElem: maxElem, members: sortedCopy(s.Members)}
	}
	return out
}

// chainHashes are the rule hashes of each chain of a table, by index.
type chainHashes [][]string

// hashMemo is one chain's rule hashes and the rules they were computed
// from.
type hashMemo struct {
	id     policy.RulesIdentity
	hashes []string
}

// hashChains hashes every rule of t, on all CPUs: rendering and hashing
// the rules of a large ruleset is most of the CPU time of a small change.
// A chain whose rules are those of the same chain in prev (the very
// slice: see policy.Compiler) keeps its hashes. It returns the hashes and
// the memo for the next call.
func hashChains(t *policy.Table, prev map[string]hashMemo) (chainHashes, map[string]hashMemo) {
	out := make(chainHashes, len(t.Chains))
	var todo []int
	for i := range t.Chains {
		c := &t.Chains[i]
		if id, ok := c.Identity(); ok {
			if m, hit := prev[c.Name]; hit && m.id == id {
				out[i] = m.hashes
				continue
			}
		}
		todo = append(todo, i)
	}
	workers := min(runtime.GOMAXPROCS(0), 8, max(len(todo)/64, 1))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for j := w; j < len(todo); j += workers {
				i := todo[j]
				out[i] = t.Chains[i].Hashes()
			}
		})
	}
	wg.Wait()
	memo := make(map[string]hashMemo, len(t.Chains))
	for i := range t.Chains {
		if id, ok := t.Chains[i].Identity(); ok {
			memo[t.Chains[i].Name] = hashMemo{id: id, hashes: out[i]}
		}
	}
	return out, memo
}

// diffTable renders the restore section that turns saved into t, or "".
func diffTable(t *policy.Table, saved savedTable, hashes chainHashes, st *Stats) string {
	var heads, body, tail []string
	for i := range t.Chains {
		c := &t.Chains[i]
		have, exists := saved.chains[c.Name]
		if exists && slices.Equal(have, hashes[i]) {
			continue
		}
		st.ChainsWritten++
		if exists {
			if ins, ok := insertions(c, have, hashes[i]); ok {
				body = append(body, ins...)
				continue
			}
		}
		heads = append(heads, ":"+c.Name+" - [0:0]")
		body = append(body, c.LinesHashed(hashes[i])...)
	}
	// Hooks, per built-in chain.
	hooks := map[string][]policy.Hook{}
	for _, h := range t.Hooks {
		hooks[h.Chain] = append(hooks[h.Chain], h)
	}
	builtins := make([]string, 0, len(hooks)+len(saved.specs))
	for c := range hooks {
		builtins = append(builtins, c)
	}
	for c := range saved.specs {
		if _, ok := hooks[c]; !ok {
			builtins = append(builtins, c)
		}
	}
	sort.Strings(builtins)
	for _, c := range builtins {
		if hooksInPlace(hooks[c], saved.chains[c]) {
			continue
		}
		for _, spec := range saved.specs[c] {
			body = append(body, "-D "+c+" "+spec)
		}
		var ins, app []string
		for _, h := range hooks[c] {
			if h.Append {
				app = append(app, h.Line())
			} else {
				ins = append(ins, h.Line())
			}
		}
		slices.Reverse(ins) // each "-I chain 1" goes in front of the previous
		body = append(body, ins...)
		body = append(body, app...)
		st.HooksFixed++
	}
	// Stale chains of ours: flushed by their header, deleted at the end.
	for _, name := range saved.order {
		if IsOurChain(name) && t.Chain(name) == nil {
			heads = append(heads, ":"+name+" - [0:0]")
			tail = append(tail, "-X "+name)
			st.ChainsDeleted++
		}
	}
	if len(heads)+len(body)+len(tail) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("*" + t.Name + "\n")
	for _, l := range slices.Concat(heads, body, tail) {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// insertions are the lines that turn chain c in the kernel, whose rules
// have the hashes have, into want (c's hashes) by inserting rules only, or
// false when have is not an in-order part of want (a rule to remove or
// move, someone else's rule): then the chain is rewritten whole.
//
// Why: on nf_tables a commit that removes or replaces anything (and the
// ":chain" header that flushes an existing chain is one) costs the kernel
// ~12 ms more than one that only adds, and a new pod's ADD waits for the
// commit that adds its rules to the dispatch chains. Rule hashes do not
// depend on the rules before them (policy.Chain.Hashes), so the rules
// already there keep theirs.
//
// The missing rules are inserted in ascending order of their final place,
// so each "-I chain N" finds the N-1 rules before it already where they
// belong; those after the last rule in the kernel are appended.
func insertions(c *policy.Chain, have, want []string) ([]string, bool) {
	if len(have) >= len(want) {
		return nil, false // equal lists are no change; shorter ones remove
	}
	missing := make([]int, 0, len(want)-len(have))
	j := 0
	for _, h := range have {
		for j < len(want) && want[j] != h {
			missing = append(missing, j)
			j++
		}
		if j == len(want) {
			return nil, false
		}
		j++
	}
	out := make([]string, 0, len(missing)+len(want)-j)
	for _, i := range missing {
		l := c.LineHashed(i, want[i])
		out = append(out, "-I "+c.Name+" "+strconv.Itoa(i+1)+l[len("-A "+c.Name):])
	}
	for i := j; i < len(want); i++ {
		out = append(out, c.LineHashed(i, want[i]))
	}
	return out, true
}

// hooksInPlace: the insert hooks are the chain's first rules, in order, the
// append hooks its last, and no other rule of the chain carries our hash.
func hooksInPlace(want []policy.Hook, have []string) bool {
	var ins, app []string
	for _, h := range want {
		if h.Append {
			app = append(app, h.Hash())
		} else {
			ins = append(ins, h.Hash())
		}
	}
	ours := 0
	for _, h := range have {
		if h != "" {
			ours++
		}
	}
	if ours != len(ins)+len(app) || len(have) < ours {
		return false
	}
	return slices.Equal(have[:len(ins)], ins) && slices.Equal(have[len(have)-len(app):], app)
}
