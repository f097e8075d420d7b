package xtables

import (
	"context"
	"strings"

	"github.com/projectcalico/calico-node/internal/policy"
)

// Plan is what Apply would write now, in the order it would.
type Plan struct {
	// IPSets is the `ipset restore` input that creates and refills the
	// new sets and adds and deletes the changed members of the others
	// (before the rules that use them).
	IPSets string
	// Restore is the `iptables-restore --noflush` input: the rules missing
	// from chains that only gain rules inserted, other changed chains
	// whole, misplaced hooks, stale chains flushed and deleted.
	Restore string
	// DestroySets is the `ipset restore` input that destroys the sets no
	// rule uses any more (after the rules).
	DestroySets string
	// Stats counts what it would change.
	Stats Stats
}

// Empty reports whether the kernel already holds f.
func (p Plan) Empty() bool { return p.IPSets == "" && p.Restore == "" && p.DestroySets == "" }

// Plan reads the kernel and returns what Apply would write to make it
// hold f, writing nothing (`calico-node plan`). It always reads the
// kernel: it trusts no earlier Apply.
func (p *Programmer) Plan(ctx context.Context, f *policy.Family) (Plan, error) {
	known, err := p.read(ctx, f)
	if err != nil {
		return Plan{}, err
	}
	return p.planAgainst(f, known)
}

// planAgainst is what Apply would write over known to make it hold f.
func (p *Programmer) planAgainst(f *policy.Family, known *kernelState) (Plan, error) {
	var out Plan
	var n int
	var err error
	if out.IPSets, n, err = p.setsPayload(f.IPSets, known.sets); err != nil {
		return out, err
	}
	out.Stats.SetsWritten = n
	var payload strings.Builder
	for _, t := range f.Tables() {
		hashes, _ := hashChains(t, nil)
		payload.WriteString(diffTable(t, known.tables[t.Name], hashes, &out.Stats))
	}
	out.Restore = payload.String()
	if out.Restore != "" {
		out.Stats.Restores = 1
	}
	out.DestroySets, out.Stats.SetsDeleted = p.staleSetsPayload(f.IPSets, known.sets)
	return out, nil
}
