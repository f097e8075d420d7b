package xtables

import (
	"regexp"
	"strings"

	"github.com/projectcalico/calico-node/internal/policy"
)

// savedTable is what we need to know about one table in the kernel.
type savedTable struct {
	// chains maps every chain name to the hashes of its rules in order
	// ("" for a rule without our hash comment).
	chains map[string][]string
	// specs holds, for built-in chains, the saved text of each of our hook
	// rules (without "-A chain"), to delete misplaced hooks by spec.
	specs map[string][]string
	order []string // chain names in save order
}

var hashRE = regexp.MustCompile(`--comment "?` + regexp.QuoteMeta(policy.HashPrefix) + `([A-Za-z0-9_-]{16})"?`)

// splitSave splits `iptables-save` output of every table into each
// table's part, by name ("*filter" up to its COMMIT).
func splitSave(out string) map[string]string {
	tables := map[string]string{}
	name, start := "", 0
	for i := 0; i < len(out); {
		end := strings.IndexByte(out[i:], '\n')
		if end < 0 {
			end = len(out)
		} else {
			end += i
		}
		line := out[i:end]
		switch {
		case strings.HasPrefix(line, "*"):
			name, start = strings.TrimSpace(line[1:]), i
		case line == "COMMIT" && name != "":
			tables[name] += out[start:min(end+1, len(out))]
			name = ""
		}
		i = end + 1
	}
	return tables
}

// parseSave reads `iptables-save -t TABLE` output.
func parseSave(out string) savedTable {
	t := savedTable{chains: map[string][]string{}, specs: map[string][]string{}}
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, ":"):
			name := strings.Fields(line[1:])
			if len(name) > 0 {
				if _, ok := t.chains[name[0]]; !ok {
					t.chains[name[0]] = nil
					t.order = append(t.order, name[0])
				}
			}
		case strings.HasPrefix(line, "-A "):
			rest := line[3:]
			chain, spec, _ := strings.Cut(rest, " ")
			hash := RuleHash(spec)
			t.chains[chain] = append(t.chains[chain], hash)
			if hash != "" && !IsOurChain(chain) {
				t.specs[chain] = append(t.specs[chain], spec)
			}
		}
	}
	return t
}

// IsOurChain reports whether a chain is calico-node's: every chain named
// cali-* (Calico reserves the prefix; felix owns it the same way).
func IsOurChain(chain string) bool { return strings.HasPrefix(chain, ChainPrefix) }

// ChainPrefix starts the name of every chain calico-node owns.
const ChainPrefix = "cali-"

// RuleHash returns the hash of a rule calico-node wrote, read from its
// "cali:<hash>" comment in a rule as iptables-save prints it (everything
// after "-A <chain> "), or "" for a rule without one: someone else's. In a
// chain that is not ours, a rule with a hash is one of our hooks.
func RuleHash(spec string) string {
	if m := hashRE.FindStringSubmatch(spec); m != nil {
		return m[1]
	}
	return ""
}

// SplitRule splits a rule as iptables-save prints it into its words,
// honouring the double quotes (with backslash escapes) around comments.
func SplitRule(spec string) []string {
	var out []string
	var cur strings.Builder
	inWord, quoted, escaped := false, false, false
	for _, ch := range spec {
		switch {
		case escaped:
			cur.WriteRune(ch)
			escaped = false
		case ch == '\\' && quoted:
			escaped = true
		case ch == '"':
			quoted = !quoted
			inWord = true
		case (ch == ' ' || ch == '\t') && !quoted:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(ch)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}
