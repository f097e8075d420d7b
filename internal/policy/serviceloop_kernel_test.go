package policy_test

import (
	"fmt"
	"os/exec"
	"regexp"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// TestKernelServiceLoopPrevention routes a packet for an advertised
// service address that no service has through the compiled rules: the
// "host" namespace's default route points back at the peer on its eth0,
// which routes the service range to the host (as a BGP router would once
// the range is advertised). Without loop prevention the packet comes back
// to the peer; with felix's default (Drop) the host drops it in
// cali-cidr-block. Needs root, unshare, nsenter, bash, ip, ipset and
// iptables.
func TestKernelServiceLoopPrevention(t *testing.T) {
	needNetns(t, "nsenter", "bash", "ip", "ipset", "iptables-restore", "iptables-save")
	for _, tc := range []struct {
		prevention string
		looped     int // packets back at the peer
		dropped    int // packets the cali-cidr-block rule counted
	}{
		{"", 0, 1},
		{"Disabled", 1, -1},
	} {
		t.Run("prevention="+tc.prevention, func(t *testing.T) {
			s := base()
			s.Config = policy.ConfigFromFelix(&api.FelixConfigurationSpec{IPv6Support: ptr(false), ServiceLoopPrevention: tc.prevention})
			s.Config.ServiceCIDRs = policy.ServiceCIDRs(&api.BGPConfigurationSpec{
				ServiceClusterIPs: []api.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}},
			})
			res := policy.Compile(s)
			script := loadFamily(t, res.V4)
			script += peerScript + `
echo 1 > /proc/sys/net/ipv4/ip_forward
ip route add default via 10.0.0.11
inpeer ip route add 10.96.0.0/12 via 10.0.0.10
inpeer iptables -t raw -A PREROUTING -i eth0 -d 10.96.0.10 -j ACCEPT
sleep 1
inpeer bash -c 'echo loop > /dev/udp/10.96.0.10/53'
sleep 0.3
echo "looped $(inpeer iptables -t raw -L PREROUTING -v -x -n | awk '$3 == "ACCEPT" {print $1}')"
iptables-save -c -t filter
`
			out, err := exec.Command("unshare", "-n", "bash", "-c", script).CombinedOutput()
			if err != nil {
				t.Fatalf("script failed: %v\n%s", err, out)
			}
			text := string(out)
			if want := fmt.Sprintf("looped %d\n", tc.looped); !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want)).MatchString(text) {
				t.Errorf("want %q: the packet should %s", want, map[bool]string{true: "come back to the peer", false: "be dropped on the host"}[tc.looped > 0])
			}
			m := regexp.MustCompile(`(?m)^\[(\d+):\d+\] -A cali-cidr-block -d 10\.96\.0\.0/12 .*-j DROP`).FindStringSubmatch(text)
			switch {
			case tc.dropped < 0 && m != nil:
				t.Errorf("serviceLoopPrevention %s: cali-cidr-block should not drop", tc.prevention)
			case tc.dropped >= 0 && m == nil:
				t.Errorf("no cali-cidr-block DROP rule for 10.96.0.0/12")
			case tc.dropped >= 0 && m[1] != fmt.Sprint(tc.dropped):
				t.Errorf("cali-cidr-block counted %s packets, want %d", m[1], tc.dropped)
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}
