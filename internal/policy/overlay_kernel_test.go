package policy_test

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// TestKernelOverlayPackets sends real UDP packets through the compiled
// rules: a throwaway "host" namespace with a deny-all host endpoint on its
// eth0 and a VXLAN pool, and a peer namespace behind eth0 that is node2
// (10.0.0.11) or, with another source address, an outsider (192.0.2.1).
// The kernel's addrtype and set matches must pick the same packets the
// simulator does: node2's VXLAN is accepted by the overlay rule, the
// outsider's dropped by the overlay's drop rule, and the host may send
// VXLAN, and nothing else, to node2. Needs root, unshare, nsenter, bash,
// ip, ipset and iptables.
func TestKernelOverlayPackets(t *testing.T) {
	needNetns(t, "nsenter", "bash", "ip", "ipset", "iptables-restore", "iptables-save")
	s := denyAllHost(base())
	s.Config.IPv6 = false
	s.IPPools = []api.IPPool{overlayPool("v4", "10.65.0.0/16", api.VXLANModeAlways, api.IPIPModeNever)}
	res := policy.Compile(s)
	if len(res.Problems) > 0 {
		t.Fatalf("problems: %v", res.Problems)
	}
	script := loadFamily(t, res.V4)
	script += peerScript + `
inpeer ip addr add 192.0.2.1/32 dev eth0
sleep 1
send() { bash -c "echo vxlan > /dev/udp/$1/$2" 2>/dev/null && echo "$3 sent" || echo "$3 refused"; }
# node2 -> host, then the outsider -> host (the route picks the source).
inpeer bash -c "$(declare -f send); send 10.0.0.10 4789 from-node"
inpeer ip route replace 10.0.0.10/32 dev eth0 src 192.0.2.1
inpeer bash -c "$(declare -f send); send 10.0.0.10 4789 from-outsider"
send 10.0.0.11 4789 vxlan-to-node
send 10.0.0.11 4790 other-to-node
sleep 0.2
iptables-save -c -t filter
`
	out, err := exec.Command("unshare", "-n", "bash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("script failed: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"from-node sent", "from-outsider sent", "vxlan-to-node sent", "other-to-node refused"} {
		if !strings.Contains(text, want) {
			t.Errorf("want %q in the output", want)
		}
	}
	for comment, want := range map[string]int{
		"Allow IPv4 VXLAN packets from allowed hosts":     1,
		"Drop IPv4 VXLAN packets from non-allowed hosts":  1,
		"Allow IPv4 VXLAN packets to other allowed hosts": 1,
	} {
		re := regexp.MustCompile(`(?m)^\[(\d+):\d+\] -A cali-\w+ .*"` + regexp.QuoteMeta(comment) + `"`)
		m := re.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("no rule %q in iptables-save", comment)
			continue
		}
		if m[1] != fmt.Sprint(want) {
			t.Errorf("rule %q counted %s packets, want %d", comment, m[1], want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}
