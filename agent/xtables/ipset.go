package xtables

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/internal/policy"
)

type savedSet struct {
	typ     string
	maxElem int
	members []string // sorted
}

// setPrefixes are the name prefixes of our sets of this family: the live
// sets and the scratch set.
func (p *Programmer) setPrefixes() []string { return setPrefixes(p.b.Family) }

func setPrefixes(family int) []string {
	v := fmt.Sprint(family)
	return []string{"cali" + v + "0", "cali" + v + "t"}
}

func (p *Programmer) ours(name string) bool { return hasPrefix(name, p.setPrefixes()) }

// IsOurSet reports whether an IP set is calico-node's, of either family:
// the live sets cali40*/cali60* (policy's names) and the scratch sets
// cali4t*/cali6t* a restore fills before swapping.
func IsOurSet(name string) bool {
	return hasPrefix(name, setPrefixes(4)) || hasPrefix(name, setPrefixes(6))
}

func hasPrefix(s string, prefixes []string) bool {
	for _, pre := range prefixes {
		if strings.HasPrefix(s, pre) {
			return true
		}
	}
	return false
}

// readSets parses `ipset save` for our sets of this family.
func (p *Programmer) readSets(ctx context.Context) (map[string]*savedSet, error) {
	p.m.FelixIPSetCalls.Inc()
	out, err := p.r.Run(ctx, "ipset", []string{"save"}, "")
	if err != nil {
		p.m.FelixIPSetErrors.Inc()
		return nil, fmt.Errorf("read ip sets: %w", err)
	}
	sets := map[string]*savedSet{}
	total := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "create" {
			total++
		}
		if len(f) < 3 || !p.ours(f[1]) {
			continue
		}
		switch f[0] {
		case "create":
			sets[f[1]] = &savedSet{typ: f[2], maxElem: createMaxElem(f[3:])}
		case "add":
			if s := sets[f[1]]; s != nil {
				s.members = append(s.members, f[2])
			}
		}
	}
	for _, s := range sets {
		slices.Sort(s.members)
	}
	p.m.FelixIPSetsTotal.Set(float64(total))
	return sets, nil
}

// restoreSets runs one `ipset restore` of payload, counted as Felix
// counts its ipset calls and lines.
func (p *Programmer) restoreSets(ctx context.Context, payload string) error {
	p.ipsetRuns.Inc()
	p.m.FelixIPSetCalls.Inc()
	p.m.FelixIPSetLinesExecuted.Add(float64(strings.Count(payload, "\n")))
	if _, err := p.r.Run(ctx, "ipset", []string{"restore"}, payload); err != nil {
		p.m.FelixIPSetErrors.Inc()
		return err
	}
	return nil
}

// createMaxElem is the maxelem option of an `ipset save` create line's
// options, or 0 without one.
func createMaxElem(opts []string) int {
	for i := 0; i+1 < len(opts); i++ {
		if opts[i] == "maxelem" {
			n, _ := strconv.Atoi(opts[i+1])
			return n
		}
	}
	return 0
}

// maxElem is the maxelem of the sets the programmer writes.
func (p *Programmer) maxElem() int {
	if p.MaxElem > 0 {
		return p.MaxElem
	}
	return policy.DefaultIPSetMaxElem
}

// setsPayload is the `ipset restore` input that makes the sets in have
// (ours in the kernel) hold want, and how many sets it writes.
//
// A set that exists with the wanted type and size gets only its added and
// removed members ("add"/"del"): a new pod's address joining its profile's
// set is one line, not a refill of the whole set. A new set, or one of
// another maxelem (maxIpsetSize changed), is filled through a scratch set
// and swapped in (policy.RenderIPSets).
func (p *Programmer) setsPayload(want []policy.IPSet, have map[string]*savedSet) (string, int, error) {
	var payload strings.Builder
	// A scratch set left by an interrupted run goes first.
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if strings.HasPrefix(name, p.setPrefixes()[1]) {
			payload.WriteString("destroy " + name + "\n")
		}
	}
	var rewrite []policy.IPSet
	n := 0
	for _, s := range want {
		cur := have[s.Name]
		if cur != nil && cur.typ != s.Type {
			return "", 0, fmt.Errorf("ip set %s exists with type %s, want %s", s.Name, cur.typ, s.Type)
		}
		members := sortedCopy(s.Members)
		switch {
		case cur == nil || cur.maxElem != p.maxElem():
			rewrite = append(rewrite, s)
			n++
		case !slices.Equal(cur.members, members):
			writeSetDelta(&payload, s.Name, cur.members, members)
			n++
		}
	}
	payload.WriteString(policy.RenderIPSets(rewrite, p.MaxElem))
	return payload.String(), n, nil
}

// writeSetDelta writes the "del" and "add" lines that turn the members
// have into want (both sorted). -exist: a member the kernel lists in
// another spelling is not an error.
func writeSetDelta(b *strings.Builder, name string, have, want []string) {
	i, j := 0, 0
	for i < len(have) || j < len(want) {
		switch {
		case j == len(want) || i < len(have) && have[i] < want[j]:
			b.WriteString("del " + name + " " + have[i] + " -exist\n")
			i++
		case i == len(have) || want[j] < have[i]:
			b.WriteString("add " + name + " " + want[j] + " -exist\n")
			j++
		default:
			i++
			j++
		}
	}
}

// staleSetsPayload is the `ipset restore` input that destroys our sets
// nothing wants, and how many.
func (p *Programmer) staleSetsPayload(want []policy.IPSet, have map[string]*savedSet) (string, int) {
	keep := map[string]bool{}
	for _, s := range want {
		keep[s.Name] = true
	}
	var payload strings.Builder
	n := 0
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if !keep[name] && !strings.HasPrefix(name, p.setPrefixes()[1]) {
			payload.WriteString("destroy " + name + "\n")
			n++
		}
	}
	return payload.String(), n
}

func (p *Programmer) destroyStaleSets(ctx context.Context, want []policy.IPSet, have map[string]*savedSet, st *Stats) error {
	payload, n := p.staleSetsPayload(want, have)
	if n == 0 {
		return nil
	}
	if err := p.restoreSets(ctx, payload); err != nil {
		return fmt.Errorf("destroy stale ip sets: %w", err)
	}
	st.SetsDeleted = n
	return nil
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
