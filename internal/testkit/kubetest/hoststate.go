package kubetest

import (
	"fmt"
	"net"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// CheckHostRestored records what pods and the agent change in this
// process's network namespace (a node's: cali links, routes of Calico's
// protocol 80, cali-/KUBE-/CNI- chains, cali ipsets) and, when the test
// ends, fails it if that is not as it was. Cleanups run last-registered
// first: call it before starting what must be gone by then.
func CheckHostRestored(t testing.TB) {
	t.Helper()
	before := hostState(t)
	t.Cleanup(func() {
		if after := hostState(t); after != before {
			t.Errorf("node namespace not restored:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

func hostState(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "links: %v\n", CaliLinks(t))
	routes, _ := exec.Command("ip", "route", "show", "proto", "80").Output()
	fmt.Fprintf(&b, "proto-80 routes: %q\n", routes)
	var chains []string
	for _, c := range HostChains() {
		f := strings.Fields(c)
		if strings.HasPrefix(f[2], "cali") || strings.HasPrefix(f[2], "KUBE-") || strings.HasPrefix(f[2], "CNI-") {
			chains = append(chains, c)
		}
	}
	fmt.Fprintf(&b, "chains: %v\n", chains)
	fmt.Fprintf(&b, "ipsets: %v\n", caliIPSets())
	return b.String()
}

// CaliLinks lists the cali* interfaces of this network namespace, sorted.
func CaliLinks(t testing.TB) []string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, "cali") {
			out = append(out, i.Name)
		}
	}
	sort.Strings(out)
	return out
}

func caliIPSets() []string {
	out, err := exec.Command("ipset", "list", "-n").Output()
	if err != nil {
		return nil
	}
	var sets []string
	for _, s := range strings.Fields(string(out)) {
		if strings.HasPrefix(s, "cali") {
			sets = append(sets, s)
		}
	}
	return sets
}

// AgentState is what an agent makes in the node's namespace and leaves
// there for its next start, as felix does: cali-* chains, cali ipsets and
// routes of protocol 80 (block blackholes).
type AgentState struct {
	chains, ipsets map[string]bool
	routes         string
}

// TakeAgentState records the agent's state as it is now.
func TakeAgentState() AgentState {
	s := AgentState{chains: map[string]bool{}, ipsets: map[string]bool{}}
	for _, c := range HostChains() {
		if strings.HasPrefix(strings.Fields(c)[2], "cali") {
			s.chains[c] = true
		}
	}
	for _, set := range caliIPSets() {
		s.ipsets[set] = true
	}
	out, _ := exec.Command("ip", "route", "show", "proto", "80").Output()
	s.routes = string(out)
	return s
}

// RemoveSince deletes the agent's chains (and the jumps into them), ipsets
// and protocol-80 routes that were not there at before: what the agent
// the test started made. The test owns only what it made, even in a
// namespace of its own.
func (before AgentState) RemoveSince() {
	now := TakeAgentState()
	// Chains may reference each other: a second pass gets the rest.
	for pass := 0; pass < 2; pass++ {
		for _, c := range HostChains() {
			if f := strings.Fields(c); now.chains[c] && !before.chains[c] {
				RemoveChain(f[0], f[1], f[2])
			}
		}
	}
	for set := range now.ipsets {
		if !before.ipsets[set] {
			exec.Command("ipset", "destroy", set).Run()
		}
	}
	had := map[string]bool{}
	for _, r := range strings.Split(before.routes, "\n") {
		had[r] = true
	}
	for _, r := range strings.Split(now.routes, "\n") {
		if r != "" && !had[r] {
			exec.Command("ip", append([]string{"route", "del"}, strings.Fields(r)...)...).Run()
		}
	}
}
