package xtables

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/projectcalico/calico-node/internal/policy"
)

type savedSet struct {
	typ     string
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
			sets[f[1]] = &savedSet{typ: f[2]}
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

// setsPayload is the `ipset restore` input that makes the sets in have
// (ours in the kernel) hold want, and how many sets it writes.
func (p *Programmer) setsPayload(want []policy.IPSet, have map[string]*savedSet) (string, int, error) {
	var payload strings.Builder
	// A scratch set left by an interrupted run goes first.
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if strings.HasPrefix(name, p.setPrefixes()[1]) {
			payload.WriteString("destroy " + name + "\n")
		}
	}
	var changed []policy.IPSet
	for _, s := range want {
		cur := have[s.Name]
		if cur != nil && cur.typ == s.Type && slices.Equal(cur.members, sortedCopy(s.Members)) {
			continue
		}
		if cur != nil && cur.typ != s.Type {
			return "", 0, fmt.Errorf("ip set %s exists with type %s, want %s", s.Name, cur.typ, s.Type)
		}
		changed = append(changed, s)
	}
	payload.WriteString(policy.RenderIPSets(changed, p.MaxElem))
	return payload.String(), len(changed), nil
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
