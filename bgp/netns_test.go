package bgp

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

func poolObj(name, cidr string) *api.IPPool {
	return &api.IPPool{TypeMeta: api.TypeMeta{Kind: "IPPool"}, ObjectMeta: api.ObjectMeta{Name: name},
		Spec: api.IPPoolSpec{CIDR: cidr, BlockSize: 26}}
}

func bgpConfigObj(name string, f func(*api.BGPConfigurationSpec)) *api.BGPConfiguration {
	c := bgpConfig(name, f)
	c.Kind = "BGPConfiguration"
	return c
}

func bgpPeerObj(name string, spec api.BGPPeerSpec) *api.BGPPeer {
	p := bgpPeer(name, spec)
	p.Kind = "BGPPeer"
	return p
}

// TestMeshThreeNodes: three agents in a full mesh exchange their blocks and
// borrowed addresses as kernel routes; an agent restart keeps its routes at
// the peers (graceful restart); a stopped agent's routes go when the
// restart time runs out and come back with it, and the other sessions never
// notice. On etcd and on the Kubernetes datastore, where the blocks are
// ipamblocks/blockaffinities custom resources.
func TestMeshThreeNodes(t *testing.T) { onBothDatastores(t, testMeshThreeNodes) }

func testMeshThreeNodes(t *testing.T, f *fabric) {
	f.apply(
		poolObj("pool", "10.244.0.0/16"),
		bgpConfigObj("default", func(s *api.BGPConfigurationSpec) {
			s.NodeMeshMaxRestartTime = &api.Duration{Duration: 10 * time.Second}
		}),
	)
	h1, h2, h3 := f.host("n1", "192.0.2.11"), f.host("n2", "192.0.2.12"), f.host("n3", "192.0.2.13")
	n1, n2, n3 := f.agent(h1, "n1"), f.agent(h2, "n2"), f.agent(h3, "n3")
	n1.waitSessions(t, 60*time.Second, "192.0.2.12", "192.0.2.13")
	n2.waitSessions(t, 30*time.Second, "192.0.2.11", "192.0.2.13")
	n3.waitSessions(t, 30*time.Second, "192.0.2.11", "192.0.2.12")

	f.affine("n1", "10.244.1.0/26")
	f.affine("n2", "10.244.2.0/26")
	f.affine("n3", "10.244.3.0/26")
	waitRoutes(t, h1, 20*time.Second, map[string]string{
		"10.244.1.0/26": "blackhole", "10.244.2.0/26": "via 192.0.2.12", "10.244.3.0/26": "via 192.0.2.13"})
	waitRoutes(t, h2, 10*time.Second, map[string]string{
		"10.244.1.0/26": "via 192.0.2.11", "10.244.2.0/26": "blackhole", "10.244.3.0/26": "via 192.0.2.13"})
	waitRoutes(t, h3, 10*time.Second, map[string]string{
		"10.244.1.0/26": "via 192.0.2.11", "10.244.2.0/26": "via 192.0.2.12", "10.244.3.0/26": "blackhole"})

	t.Run("borrowed address", func(t *testing.T) {
		// A workload on n2 holds 10.244.1.9 from n1's block.
		f.put(blockKey("10.244.1.0/26"), blockJSON("10.244.1.0/26", "n1", map[int]string{9: "n2"}))
		waitRoutes(t, h1, 10*time.Second, map[string]string{"10.244.1.9/32": "via 192.0.2.12"})
		waitRoutes(t, h3, 10*time.Second, map[string]string{"10.244.1.9/32": "via 192.0.2.12"})
		f.put(blockKey("10.244.1.0/26"), blockJSON("10.244.1.0/26", "n1", nil))
		waitRoutes(t, h1, 10*time.Second, nil, "10.244.1.9/32")
		waitRoutes(t, h3, 10*time.Second, nil, "10.244.1.9/32")
	})

	t.Run("calicoctl node status", func(t *testing.T) {
		out, err := exec.Command(testbin.Dir(t)+"/calicoctl", "node", "status", "--bgp-status-socket", n1.socket).CombinedOutput()
		if err != nil {
			t.Fatalf("calicoctl node status: %v\n%s", err, out)
		}
		for _, want := range []string{
			"Calico process is running.", "IPv4 BGP status",
			"| PEER ADDRESS |     PEER TYPE     | STATE |  SINCE   |    INFO     |",
			"| 192.0.2.12   | node-to-node mesh | up    |", "| 192.0.2.13   | node-to-node mesh | up    |",
			"No IPv6 peers found.",
		} {
			if !strings.Contains(string(out), want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		out, err = exec.Command(testbin.Path(t), "status", "--bgp-status-socket", t.TempDir()+"/none.sock").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Calico process is not running.") {
			t.Errorf("status without an agent: err %v, output %q", err, out)
		}
	})

	baseline := n2.sessions()["192.0.2.13"]

	t.Run("restart within the restart time keeps the routes", func(t *testing.T) {
		n1.p.stop(t)
		n1.start(t)
		deadline := time.Now().Add(40 * time.Second)
		upAgain := time.Time{}
		for time.Now().Before(deadline) {
			for _, h := range []*host{h2, h3} {
				if got := h.calicoRoutes(t)["10.244.1.0/26"]; got != "via 192.0.2.11" {
					t.Fatalf("%s lost n1's block during the restart (%q)", h.ns, got)
				}
			}
			if upAgain.IsZero() {
				if s := n1.sessions(); s["192.0.2.12"].BGPState == StateEstablished && s["192.0.2.13"].BGPState == StateEstablished {
					upAgain = time.Now()
				}
			} else if time.Since(upAgain) > 2*time.Second {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if upAgain.IsZero() {
			t.Fatal("n1 did not re-establish its sessions")
		}
		// The restarted node has its peers' routes again.
		waitRoutes(t, h1, 10*time.Second, map[string]string{"10.244.2.0/26": "via 192.0.2.12", "10.244.3.0/26": "via 192.0.2.13"})
	})

	t.Run("stopped agent: routes withdrawn after the restart time, back on start", func(t *testing.T) {
		n1.p.stop(t)
		stopped := time.Now()
		time.Sleep(time.Second)
		waitRoutes(t, h2, time.Second, map[string]string{"10.244.1.0/26": "via 192.0.2.11"})
		waitRoutes(t, h2, 30*time.Second, nil, "10.244.1.0/26")
		waitRoutes(t, h3, 5*time.Second, nil, "10.244.1.0/26")
		if held := time.Since(stopped); held < 8*time.Second {
			t.Errorf("n1's block withdrawn after %s, before its 10s restart time", held)
		}
		n1.start(t)
		waitRoutes(t, h2, 60*time.Second, map[string]string{"10.244.1.0/26": "via 192.0.2.11"})
		waitRoutes(t, h3, 10*time.Second, map[string]string{"10.244.1.0/26": "via 192.0.2.11"})
	})

	if now := n2.sessions()["192.0.2.13"]; now.BGPState != StateEstablished || !now.Since.Equal(baseline.Since) {
		t.Errorf("n2-n3 session disturbed by n1's restarts: before %+v, after %+v", baseline, now)
	}
}
