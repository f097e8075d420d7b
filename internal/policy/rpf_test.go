package policy_test

import (
	"net/netip"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/sim"
)

// TestSpoofedSourcesAreDropped: a workload that sends with another pod's
// address is dropped in raw PREROUTING, before any policy (which could
// otherwise allow it as that pod), unless its endpoint's
// allowSpoofedSourcePrefixes cover the source and the operator allows
// spoofing; its own traffic, and IPv6 neighbour discovery from link-local
// addresses, pass. Both raw layouts are checked: the short one and felix's
// one with doNotTrack host endpoint policy on the node.
func TestSpoofedSourcesAreDropped(t *testing.T) {
	const (
		webIP, dbIP, clientIP = "10.65.0.1", "10.65.0.2", "10.65.0.3"
		dualIface             = "cali5e6f7a8b9c0"
	)
	snapshot := func(untracked bool, spoofing string, prefixes ...string) *policy.Snapshot {
		s := base()
		s.Config = policy.ConfigFromFelix(&api.FelixConfigurationSpec{WorkloadSourceSpoofing: spoofing})
		// client may send as web, and as anything in 192.0.2.0/24.
		spoofs(prefixes...)(&s.WorkloadEndpoints[2])
		s.WorkloadEndpoints = append(s.WorkloadEndpoints,
			wep("ns1", "dual", dualIface, map[string]string{"app": "dual"}, []string{"10.65.0.5", "fd00:65::5"}))
		if untracked {
			s.HostEndpoints = append(s.HostEndpoints, hep("node1-eth0", "eth0", map[string]string{"host": "node1"}, []string{hostIP}))
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, gnp("untracked", api.GlobalNetworkPolicySpec{
				Selector: "host == 'node1'", DoNotTrack: true, ApplyOnForward: true,
				Ingress: []api.Rule{{Action: api.Allow, Protocol: proto("TCP"), Destination: api.EntityRule{Ports: ports("11211")}}}}))
		}
		return s
	}
	spoofed := func(src string, want sim.Verdict) walk {
		w := walk{path: sim.Forward, in: ifClient, out: ifDB, src: src, dst: dbIP, proto: 6, dport: 5432, want: want}
		if want == sim.Drop {
			w.decidedIn = "raw PREROUTING"
		}
		return w
	}
	named := func(name string, w walk) walk { w.name = name; return w }
	common := []walk{
		named("own address passes", spoofed(clientIP, sim.Accept)),
		named("own address to the host gets to policy", walk{path: sim.Input, in: ifClient, src: clientIP, dst: hostIP, proto: 17, dport: 53, want: sim.Drop, decidedIn: "filter INPUT"}),
		named("from outside the cluster is not checked", walk{path: sim.Forward, in: "eth0", out: ifDB, src: "203.0.113.9", dst: dbIP, proto: 6, dport: 5432, want: sim.Accept}),
		named("v6 with another pod's address", walk{path: sim.Forward, in: dualIface, out: "eth0", src: "fd00:65::9", dst: "2001:db8::1", proto: 6, dport: 443, want: sim.Drop, decidedIn: "raw PREROUTING"}),
		named("v6 own address", walk{path: sim.Forward, in: dualIface, out: "eth0", src: "fd00:65::5", dst: "2001:db8::1", proto: 6, dport: 443, want: sim.Accept}),
		named("v6 neighbour solicitation from link-local", walk{path: sim.Input, in: dualIface, src: "fe80::5", dst: "fe80::1", proto: 58, icmpType: 135, want: sim.Accept}),
		named("v6 duplicate address detection from ::", walk{path: sim.Input, in: dualIface, src: "::", dst: "ff02::1:ff00:5", proto: 58, icmpType: 135, want: sim.Accept}),
	}
	for _, untracked := range []bool{false, true} {
		name := "short raw chain"
		if untracked {
			name = "felix layout with doNotTrack policy"
		}
		t.Run(name, func(t *testing.T) {
			t.Run("no prefixes", func(t *testing.T) {
				runWalks(t, snapshot(untracked, ""), append(common[:len(common):len(common)],
					named("another pod's address is dropped", spoofed(webIP, sim.Drop)),
					named("an outside address is dropped", spoofed("192.0.2.7", sim.Drop)),
					named("the host's address is dropped", spoofed(hostIP, sim.Drop)),
				))
			})
			t.Run("prefixes allowed", func(t *testing.T) {
				runWalks(t, snapshot(untracked, "Any", webIP, "192.0.2.0/24", "fd00:65::9"), append(common[:len(common):len(common)],
					named("another pod's address in the prefixes passes", spoofed(webIP, sim.Accept)),
					named("an address in a prefix passes", spoofed("192.0.2.7", sim.Accept)),
					named("an address outside them is still dropped", spoofed(dbIP, sim.Drop)),
				))
			})
		})
	}
	t.Run("prefixes without workloadSourceSpoofing Any are refused", func(t *testing.T) {
		s := snapshot(false, "Disabled", webIP)
		res := policy.Compile(s)
		if len(res.Problems) != 1 {
			t.Fatalf("problems %q, want the refused prefixes reported", res.Problems)
		}
		sets := mustSets(t, res.V4)
		hop := sim.Hop{Path: sim.Forward, In: ifClient, Out: ifDB}
		pkt := sim.Packet{Src: netip.MustParseAddr(webIP), Dst: netip.MustParseAddr(dbIP), Proto: 6, SrcPort: 40000, DstPort: 5432}
		got, err := sim.Walk(res.V4, sets.WithRoutes(sim.RoutesFor(s, "eth0")), hop, pkt)
		if err != nil {
			t.Fatal(err)
		}
		checkExplainHop(t, s, res, hop, pkt)
		if got.Verdict != sim.Drop || got.DecidedIn() != "raw PREROUTING" {
			t.Errorf("%v in %s, want DROP in raw PREROUTING; trace %v", got.Verdict, got.DecidedIn(), got.Trace())
		}
	})
}
