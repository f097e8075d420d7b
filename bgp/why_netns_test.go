package bgp

import (
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// calicoctl runs the test binary as calicoctl against an agent's socket.
func (a *agent) calicoctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	args = append(args, "--bgp-status-socket", a.socket)
	out, err := exec.Command(testbin.Dir(t)+"/calicoctl", args...).CombinedOutput()
	return string(out), err
}

func (a *agent) routesJSON(t *testing.T) RoutesReport {
	t.Helper()
	out, err := a.calicoctl(t, "node", "routes", "-o", "json")
	if err != nil {
		t.Fatalf("calicoctl node routes: %v\n%s", err, out)
	}
	var rep RoutesReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("node routes -o json: %v\n%s", err, out)
	}
	return rep
}

func (a *agent) why(t *testing.T, prefix string) (WhyReport, string) {
	t.Helper()
	out, err := a.calicoctl(t, "node", "bgp", "why", prefix, "-o", "json")
	if err != nil {
		t.Fatalf("calicoctl node bgp why %s: %v\n%s", prefix, err, out)
	}
	var rep WhyReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bgp why -o json: %v\n%s", err, out)
	}
	text, err := a.calicoctl(t, "node", "bgp", "why", prefix)
	if err != nil {
		t.Fatalf("calicoctl node bgp why %s: %v\n%s", prefix, err, text)
	}
	t.Logf("calicoctl node bgp why %s:\n%s", prefix, text)
	return rep, text
}

// routeRow is what `node routes` must say of one path.
type routeRow struct {
	prefix, from string
	best         bool
	filtered     bool
	stale        bool
	kernel       string
}

func rowsOf(rep RoutesReport) []routeRow {
	var out []routeRow
	for _, r := range rep.Routes {
		out = append(out, routeRow{r.Prefix, r.From, r.Best, r.Filtered, r.Stale, r.Kernel})
	}
	return out
}

func peerOf(t *testing.T, rep WhyReport, addr string) WhyPeer {
	t.Helper()
	for _, p := range rep.Peers {
		if p.Peer == addr {
			return p
		}
	}
	t.Fatalf("bgp why %s: no peer %s in %+v", rep.Prefix, addr, rep.Peers)
	return WhyPeer{}
}

// TestBIRDRoutesAndWhy: two agents meshed, BIRD as their eBGP ToR, a
// BGPFilter on the ToR session rejecting n2's block on export and one of
// the ToR's routes on import, and a ToR route whose next hop no node can
// reach. `node routes` lists exactly the paths BIRD and the mesh announce,
// with the speaker's best and the kernel's verdict; `bgp why` names the
// BGPFilter rule that rejected a prefix each way, says why an own block
// has its blackhole, why a route is missing from the kernel, and, once n2
// stops, that its block is held stale by graceful restart.
func TestBIRDRoutesAndWhy(t *testing.T) {
	f := newFabric(t)
	needBIRD(t)
	f.apply(
		poolObj("pool", "10.244.0.0/16"),
		bgpFilterObj("tor-filter", api.BGPFilterSpec{
			ExportV4: []api.BGPFilterRuleV4{{Action: api.BGPFilterReject, MatchOperator: api.MatchOperatorIn, CIDR: "10.244.2.0/24"}},
			ImportV4: []api.BGPFilterRuleV4{{Action: api.BGPFilterReject, MatchOperator: api.MatchOperatorEqual, CIDR: "10.244.200.0/24"}},
		}),
		bgpPeerObj("tor", api.BGPPeerSpec{PeerIP: "192.0.2.1", ASNumber: 65000, Filters: []string{"tor-filter"}}),
	)
	_, b, h1, _, a1, a2 := torFabric(t, f, `
protocol static tor_routes {
  ipv4;
  route 10.244.200.0/24 blackhole;
  route 203.0.113.0/24 blackhole;
  route 198.18.0.0/24 blackhole;
}
filter to_nodes {
  if source != RTS_STATIC then reject;
  # A next hop no node has a route to.
  if net = 198.18.0.0/24 then bgp_next_hop = 198.51.100.7;
  accept;
}
template bgp node {
  local 192.0.2.1 as 65000;
  graceful restart on;
  ipv4 { import all; export filter to_nodes; };
}
`)
	waitRoutes(t, h1, 20*time.Second, map[string]string{
		"10.244.1.0/26": "blackhole", "10.244.2.0/26": "via 192.0.2.12", "203.0.113.0/24": "via 192.0.2.1"})

	wantRows := []routeRow{
		{prefix: "10.244.1.0/26", from: "", best: true, kernel: KernelBlackhole},
		{prefix: "10.244.2.0/26", from: "192.0.2.12", best: true, kernel: KernelYes},
		{prefix: "10.244.200.0/24", from: "192.0.2.1", filtered: true},
		{prefix: "198.18.0.0/24", from: "192.0.2.1", best: true, kernel: KernelMissing},
		{prefix: "203.0.113.0/24", from: "192.0.2.1", best: true, kernel: KernelYes},
	}
	var rep RoutesReport
	deadline := time.Now().Add(20 * time.Second)
	for {
		rep = a1.routesJSON(t)
		if slices.Equal(rowsOf(rep), wantRows) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := rowsOf(rep); !slices.Equal(got, wantRows) {
		t.Fatalf("node routes on n1:\n got %+v\nwant %+v", got, wantRows)
	}

	t.Run("node routes text", func(t *testing.T) {
		out, err := a1.calicoctl(t, "node", "routes")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		golden(t, "testdata/node-routes.golden", normAges(out))
	})

	t.Run("own block", func(t *testing.T) {
		rep, text := a1.why(t, "10.244.1.0/26")
		texttest.Contains(t, "origin", rep.Origin, "originated by this node: IPAM block affine to this node")
		for _, peer := range []string{"192.0.2.1", "192.0.2.12"} {
			p := peerOf(t, rep, peer)
			if p.Sent != SentExported {
				t.Errorf("to %s: %s (%s); want exported", peer, p.Sent, p.Detail)
			}
			texttest.Contains(t, "detail", p.Detail, "Calico export: a route this node originates")
		}
		if !rep.Kernel.Installed {
			t.Errorf("kernel: %+v; want installed", rep.Kernel)
		}
		texttest.Contains(t, "kernel verdict", rep.Kernel.Verdict, "installed: own block, blackhole route")
		texttest.Contains(t, "text", text, "10.244.1.0/26 blackhole proto 80 (calico) table main")
	})

	t.Run("BGPFilter export rule", func(t *testing.T) {
		rep, text := a2.why(t, "10.244.2.0/26")
		golden(t, "testdata/why-export-filtered.golden", normAges(text))
		tor := peerOf(t, rep, "192.0.2.1")
		if tor.Sent != SentFiltered {
			t.Errorf("to the ToR: %s (%s); want filtered", tor.Sent, tor.Detail)
		}
		texttest.Contains(t, "detail", tor.Detail, "BGPFilter tor-filter exportV4[0]", "cidr 10.244.2.0/24")
		if p := peerOf(t, rep, "192.0.2.11"); p.Sent != SentExported {
			t.Errorf("to n1: %s (%s); want exported", p.Sent, p.Detail)
		}
		// BIRD agrees: it never got the block.
		if out := b.ctl(t, "show", "route"); strings.Contains(out, "10.244.2.0/26") {
			t.Errorf("BIRD has the filtered block:\n%s", out)
		}
	})

	t.Run("BGPFilter import rule", func(t *testing.T) {
		rep, _ := a1.why(t, "10.244.200.0/24")
		texttest.Contains(t, "received from the ToR", peerOf(t, rep, "192.0.2.1").Received,
			"rejected on import by BGPFilter tor-filter importV4[0]", "matchOperator Equal")
		if rep.Kernel.Installed || rep.Kernel.Wanted != "" {
			t.Errorf("kernel: %+v; want no route", rep.Kernel)
		}
		texttest.Contains(t, "kernel verdict", rep.Kernel.Verdict,
			"no best path: the only path from 192.0.2.1 was rejected on import by BGPFilter tor-filter importV4[0]")
	})

	t.Run("route missing from the kernel", func(t *testing.T) {
		rep, text := a1.why(t, "198.18.0.0/24")
		if rep.Kernel.Installed {
			t.Errorf("kernel: %+v; want not installed", rep.Kernel)
		}
		if rep.Kernel.Wanted != "198.18.0.0/24 via 198.51.100.7" {
			t.Errorf("wanted %q", rep.Kernel.Wanted)
		}
		texttest.Contains(t, "kernel verdict", rep.Kernel.Verdict, "not installed", "next hop 198.51.100.7 is unreachable",
			"the kernel refused it: network is unreachable")
		golden(t, "testdata/why-nexthop-unreachable.golden", normAges(text))
	})

	t.Run("held stale by graceful restart", func(t *testing.T) {
		a2.p.stop(t)
		deadline := time.Now().Add(10 * time.Second)
		var rep WhyReport
		for {
			rep, _ = a1.why(t, "10.244.2.0/26")
			if strings.Contains(peerOf(t, rep, "192.0.2.12").Received, "held stale") || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		n2 := peerOf(t, rep, "192.0.2.12")
		texttest.Contains(t, "received from n2", n2.Received, "held stale by graceful restart: the peer is restarting", "restart time of 2m0s")
		if n2.State == StateEstablished {
			t.Errorf("n2's session is %s", n2.State)
		}
		if !rep.Kernel.Installed {
			t.Errorf("kernel: %+v; the stale route must stay installed", rep.Kernel)
		}
		rows := rowsOf(a1.routesJSON(t))
		if !slices.Contains(rows, routeRow{prefix: "10.244.2.0/26", from: "192.0.2.12", best: true, stale: true, kernel: KernelYes}) {
			t.Errorf("node routes after n2 stopped: %+v; want n2's block stale, best, installed", rows)
		}
	})
}

// normAges replaces the ages (hh:mm:ss), which vary from run to run.
func normAges(s string) string {
	return regexp.MustCompile(`\d\d:\d\d:\d\d`).ReplaceAllString(s, "hh:mm:ss")
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (-update to accept):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}
