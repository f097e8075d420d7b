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
			hash := ""
			if m := hashRE.FindStringSubmatch(spec); m != nil {
				hash = m[1]
			}
			t.chains[chain] = append(t.chains[chain], hash)
			if hash != "" && !isOurs(chain) {
				t.specs[chain] = append(t.specs[chain], spec)
			}
		}
	}
	return t
}

func isOurs(chain string) bool { return strings.HasPrefix(chain, "cali-") }
