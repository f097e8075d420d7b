package cleanup

import (
	"fmt"
	"strings"

	"github.com/projectcalico/calico-node/agent/xtables"
)

// ownsSet and ownsChain are xtables' ownership rules: the programmer and
// the cleanup must never disagree on them.
func ownsSet(name string) bool   { return xtables.IsOurSet(name) }
func ownsChain(name string) bool { return xtables.IsOurChain(name) }

// TablePlan is what to remove from one table of one backend and family:
// the hook rules in other chains, then our chains (flushed, then deleted).
type TablePlan struct {
	Mode   string // "nft" or "legacy"
	Family int
	Table  string
	Hooks  []string // rules as iptables-save prints them: "-A INPUT ..."
	Chains []string
}

// Items are the table's removals as reported.
func (t TablePlan) Items() []Item {
	var out []Item
	for _, h := range t.Hooks {
		out = append(out, Item{Kind: "iptables rule", Name: h, Where: where(t)})
	}
	for _, c := range t.Chains {
		out = append(out, Item{Kind: "iptables chain", Name: c, Where: where(t)})
	}
	return out
}

// Payload is the `iptables-restore --noflush` input that removes it all in
// one transaction: a ":chain" header flushes the chain, so that no rule of
// ours still jumps to a chain being deleted; the hooks go by their exact
// text, as the programmer removes a misplaced hook.
func (t TablePlan) Payload() string {
	var b strings.Builder
	b.WriteString("*" + t.Table + "\n")
	for _, c := range t.Chains {
		b.WriteString(":" + c + " - [0:0]\n")
	}
	for _, h := range t.Hooks {
		b.WriteString("-D " + strings.TrimPrefix(h, "-A ") + "\n")
	}
	for _, c := range t.Chains {
		b.WriteString("-X " + c + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// savedTable is one table of an iptables-save.
type savedTable struct {
	name   string
	chains []string // in save order
	rules  []savedRule
}

type savedRule struct {
	chain string
	spec  string // everything after "-A <chain> "
}

func (r savedRule) String() string { return "-A " + r.chain + " " + r.spec }

// parseTables splits iptables-save output into its tables.
func parseTables(text string) []savedTable {
	var out []savedTable
	var cur *savedTable
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r")
		switch {
		case strings.HasPrefix(line, "*"):
			out = append(out, savedTable{name: strings.TrimSpace(line[1:])})
			cur = &out[len(out)-1]
		case cur == nil:
		case strings.HasPrefix(line, ":"):
			if f := strings.Fields(line[1:]); len(f) > 0 {
				cur.chains = append(cur.chains, f[0])
			}
		case strings.HasPrefix(line, "-A "):
			chain, spec, _ := strings.Cut(line[3:], " ")
			cur.rules = append(cur.rules, savedRule{chain: chain, spec: spec})
		case line == "COMMIT":
			cur = nil
		}
	}
	return out
}

// planSaved plans one iptables-save: a TablePlan for every table holding
// something of ours, the chains kept, and the IP sets of ours that rules we
// keep still use (set name -> why), which must stay too.
//
// Ownership is the programmer's: chains named cali-*, and in other chains
// the rules carrying our hash comment (the hooks). A chain of ours that a
// rule we did not write jumps to is kept, and with it every chain of ours
// it reaches: deleting it would fail, and flushing it would silently change
// what that rule does.
func planSaved(s Saved) ([]TablePlan, []Kept, map[string]string) {
	var plans []TablePlan
	var kept []Kept
	keepSets := map[string]string{}
	for _, t := range parseTables(s.Text) {
		tp := TablePlan{Mode: s.Mode, Family: s.Family, Table: t.name}
		ours := map[string]bool{}
		for _, c := range t.chains {
			if ownsChain(c) {
				ours[c] = true
			}
		}
		keep := map[string]string{}    // chain -> why
		edges := map[string][]string{} // our chain -> our chains it jumps to
		var foreign []savedRule        // rules we keep
		for _, r := range t.rules {
			tokens := xtables.SplitRule(r.spec)
			switch {
			case ours[r.chain]:
				for _, tgt := range jumpTargets(tokens) {
					if ours[tgt] {
						edges[r.chain] = append(edges[r.chain], tgt)
					}
				}
			case xtables.RuleHash(r.spec) != "":
				tp.Hooks = append(tp.Hooks, r.String())
			default:
				foreign = append(foreign, r)
				for _, tgt := range jumpTargets(tokens) {
					if ours[tgt] && keep[tgt] == "" {
						keep[tgt] = fmt.Sprintf("a rule calico-node did not write jumps to it: %s", r)
					}
				}
			}
		}
		// Everything a kept chain reaches stays as it is.
		queue := make([]string, 0, len(keep))
		for _, c := range t.chains {
			if keep[c] != "" {
				queue = append(queue, c)
			}
		}
		for len(queue) > 0 {
			c := queue[0]
			queue = queue[1:]
			for _, tgt := range edges[c] {
				if keep[tgt] == "" {
					keep[tgt] = "kept chain " + c + " jumps to it"
					queue = append(queue, tgt)
				}
			}
		}
		for _, r := range t.rules {
			if ours[r.chain] && keep[r.chain] != "" {
				foreign = append(foreign, r)
			}
		}
		// IP sets that a rule we keep matches on cannot be destroyed.
		for _, r := range foreign {
			for _, set := range matchSets(xtables.SplitRule(r.spec)) {
				if ownsSet(set) {
					if _, ok := keepSets[set]; !ok {
						keepSets[set] = fmt.Sprintf("a rule that stays uses it (%s %s, %s): %s", familyName(s.Family), t.name, s.Mode, r)
					}
				}
			}
		}
		for _, c := range t.chains {
			if !ours[c] {
				continue
			}
			if why := keep[c]; why != "" {
				kept = append(kept, Kept{Item: Item{Kind: "iptables chain", Name: c, Where: where(tp)}, Why: why})
				continue
			}
			tp.Chains = append(tp.Chains, c)
		}
		if len(tp.Chains)+len(tp.Hooks) > 0 {
			plans = append(plans, tp)
		}
	}
	return plans, kept, keepSets
}

// jumpTargets are the chains a rule jumps or goes to.
func jumpTargets(words []string) []string {
	return argsOf(words, "-j", "--jump", "-g", "--goto")
}

// matchSets are the IP sets a rule matches on (`-m set --match-set NAME
// dir`; iptables-save prints --match-set).
func matchSets(words []string) []string {
	return argsOf(words, "--match-set")
}

func argsOf(words []string, opts ...string) []string {
	var out []string
	for i := 0; i+1 < len(words); i++ {
		for _, o := range opts {
			if words[i] == o {
				out = append(out, words[i+1])
			}
		}
	}
	return out
}
