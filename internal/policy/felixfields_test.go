package policy_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// ruleActions are the rules of a chain without their hash comments.
func ruleActions(t *testing.T, f *policy.Family, table, chain string) []string {
	t.Helper()
	for _, tb := range f.Tables() {
		if tb.Name != table {
			continue
		}
		c := tb.Chain(chain)
		if c == nil {
			t.Fatalf("no chain %s in table %s", chain, table)
		}
		var out []string
		for _, l := range c.Lines() {
			out = append(out, hashComment.ReplaceAllString(l, ""))
		}
		return out
	}
	t.Fatalf("no table %s", table)
	return nil
}

var hashComment = regexp.MustCompile(`-m comment --comment "cali:[^"]*" `)

// TestNATOutgoingFelixFields: natPortRange, natOutgoingAddress,
// iptablesNATOutgoingInterfaceFilter and --random-fully shape the
// natOutgoing rules as felix's NATOutgoingChain does.
func TestNATOutgoingFelixFields(t *testing.T) {
	const base = "--match-set cali40masq-ipam-pools src -m set ! --match-set cali40network-ip-pools dst"
	tests := []struct {
		name string
		cfg  policy.Config
		want []string
	}{
		{"default", policy.Config{}, []string{
			"-A cali-nat-outgoing -m set " + base + " --jump MASQUERADE",
		}},
		{"random fully", policy.Config{NATRandomFully: true}, []string{
			"-A cali-nat-outgoing -m set " + base + " --jump MASQUERADE --random-fully",
		}},
		{"port range", policy.Config{NATPortRange: policy.PortRange{First: 30000, Last: 30999}, NATRandomFully: true}, []string{
			"-A cali-nat-outgoing -m set " + base + " -p tcp --jump MASQUERADE --to-ports 30000-30999 --random-fully",
			"-A cali-nat-outgoing -m set " + base + " -p tcp --jump RETURN",
			"-A cali-nat-outgoing -m set " + base + " -p udp --jump MASQUERADE --to-ports 30000-30999 --random-fully",
			"-A cali-nat-outgoing -m set " + base + " -p udp --jump RETURN",
			"-A cali-nat-outgoing -m set " + base + " --jump MASQUERADE --random-fully",
		}},
		{"port range with address", policy.Config{NATPortRange: policy.PortRange{First: 1024, Last: 2047}, NATOutgoingAddress: "192.0.2.9"}, []string{
			"-A cali-nat-outgoing -m set " + base + " -p tcp --jump SNAT --to-source 192.0.2.9:1024-2047",
			"-A cali-nat-outgoing -m set " + base + " -p tcp --jump RETURN",
			"-A cali-nat-outgoing -m set " + base + " -p udp --jump SNAT --to-source 192.0.2.9:1024-2047",
			"-A cali-nat-outgoing -m set " + base + " -p udp --jump RETURN",
			"-A cali-nat-outgoing -m set " + base + " --jump SNAT --to-source 192.0.2.9",
		}},
		{"interface filter", policy.Config{NATOutgoingInterface: "eth+"}, []string{
			"-A cali-nat-outgoing -m set " + base + " --out-interface eth+ --jump MASQUERADE",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &policy.Snapshot{Node: node, IPPools: []api.IPPool{pool("p", "10.65.0.0/16", true)}, Config: tc.cfg}
			got := ruleActions(t, policy.Compile(s).V4, policy.TableNAT, "cali-nat-outgoing")
			if !slices.Equal(got, tc.want) {
				t.Errorf("cali-nat-outgoing:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestConfigFromFelixNAT: the FelixConfiguration fields reach Config.
func TestConfigFromFelixNAT(t *testing.T) {
	c := policy.ConfigFromFelix(&api.FelixConfigurationSpec{
		NATPortRange:                       &api.Port{MinPort: 5000, MaxPort: 6000},
		IptablesNATOutgoingInterfaceFilter: "ens3",
	})
	if c.NATPortRange != (policy.PortRange{First: 5000, Last: 6000}) || c.NATOutgoingInterface != "ens3" {
		t.Errorf("ConfigFromFelix = port range %v, interface %q", c.NATPortRange, c.NATOutgoingInterface)
	}
}

// TestLogPrefixSpecifiers: logPrefix's %t, %k, %n and %p are replaced per
// policy or profile, as felix's generateLogPrefix does.
func TestLogPrefixSpecifiers(t *testing.T) {
	logRule := []api.Rule{{Action: api.Log}}
	pol := np("ns1", "default.watch", api.NetworkPolicySpec{Selector: "all()", Ingress: logRule})
	knp := np("ns1", "knp.default.k", api.NetworkPolicySpec{Selector: "all()", Ingress: logRule})
	global := gnp("audit", api.GlobalNetworkPolicySpec{Selector: "all()", Ingress: logRule})
	prof := nsProfile("ns1", nil)
	prof.Spec.Ingress = logRule
	s := &policy.Snapshot{
		Node:                  node,
		WorkloadEndpoints:     []api.WorkloadEndpoint{wep("ns1", "a", "cali1a2b3c4d5e6", nil, []string{"10.65.0.2"})},
		NetworkPolicies:       []api.NetworkPolicy{pol, knp},
		GlobalNetworkPolicies: []api.GlobalNetworkPolicy{global},
		Profiles:              []api.Profile{prof},
	}
	tests := []struct {
		format string
		want   []string // log prefixes, in any order
	}{
		{"", []string{"calico-packet", "calico-packet", "calico-packet", "calico-packet"}},
		{"plain", []string{"plain", "plain", "plain", "plain"}},
		{"%k %p", []string{"np ns1/watch", "knp ns1/knp.default.k", "gnp audit", "pro kns.ns1"}},
		{"%t:%n", []string{"default:watch", "default:knp.default.k", "default:audit", ":kns.ns1"}},
		{"100%%x", []string{"100%%x", "100%%x", "100%%x", "100%%x"}},
	}
	prefixRE := regexp.MustCompile(`--log-prefix "([^"]*): "`)
	for _, tc := range tests {
		t.Run(tc.format, func(t *testing.T) {
			s.Config = policy.Config{LogPrefix: tc.format}
			res := policy.Compile(s)
			var got []string
			for _, tb := range res.V4.Tables() {
				for _, c := range tb.Chains {
					for _, l := range c.Lines() {
						if m := prefixRE.FindStringSubmatch(l); m != nil {
							got = append(got, m[1])
						}
					}
				}
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("log prefixes = %q, want %q\nproblems: %s", got, want, strings.Join(res.Problems, "; "))
			}
		})
	}
}
