package install

import (
	"fmt"
	"net"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// hostState is what pods and the agent change in the node's namespace:
// cali links, routes of Calico's protocol (80), cali-/KUBE-/CNI- chains,
// cali ipsets.
func hostState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "links: %v\n", caliLinks(t))
	routes, _ := exec.Command("ip", "route", "show", "proto", "80").Output()
	fmt.Fprintf(&b, "proto-80 routes: %q\n", routes)
	var chains []string
	for _, c := range kubetest.HostChains() {
		f := strings.Fields(c)
		if strings.HasPrefix(f[2], "cali") || strings.HasPrefix(f[2], "KUBE-") || strings.HasPrefix(f[2], "CNI-") {
			chains = append(chains, c)
		}
	}
	fmt.Fprintf(&b, "chains: %v\n", chains)
	fmt.Fprintf(&b, "ipsets: %v\n", caliIPSets())
	return b.String()
}

func caliLinks(t *testing.T) []string {
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

// agentState is what the calico-node pod makes in the node's namespace
// and leaves there for its next start, as felix does: cali-* chains, cali
// ipsets and routes of protocol 80 (block blackholes).
type agentState struct {
	chains, ipsets map[string]bool
	routes         string
}

func takeAgentState() agentState {
	s := agentState{chains: map[string]bool{}, ipsets: map[string]bool{}}
	for _, c := range kubetest.HostChains() {
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

// removeSince deletes the agent's chains (and the jumps into them), ipsets
// and protocol-80 routes that were not there at before: what the pod the
// test installed made.
func (before agentState) removeSince() {
	now := takeAgentState()
	// Chains may reference each other: a second pass gets the rest.
	for pass := 0; pass < 2; pass++ {
		for _, c := range kubetest.HostChains() {
			if f := strings.Fields(c); now.chains[c] && !before.chains[c] {
				kubetest.RemoveChain(f[0], f[1], f[2])
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
