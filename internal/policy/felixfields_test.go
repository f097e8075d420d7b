package policy_test

import (
	"net/netip"
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

// TestNATOutgoingExclusions: IPPoolsAndHostIPs also keeps traffic to the
// cluster's hosts unmasqueraded, in both families, with the all-hosts-net
// set of the nodes' addresses even without IP-in-IP (felix keeps the set
// for either).
func TestNATOutgoingExclusions(t *testing.T) {
	for _, tc := range []struct {
		excl string
		want []string
	}{
		{"IPPoolsOnly", []string{"-A cali-nat-outgoing -m set --match-set cali40masq-ipam-pools src -m set ! --match-set cali40network-ip-pools dst --jump MASQUERADE"}},
		{"IPPoolsAndHostIPs", []string{"-A cali-nat-outgoing -m set --match-set cali40masq-ipam-pools src -m set ! --match-set cali40network-ip-pools dst -m set ! --match-set cali40all-hosts-net dst --jump MASQUERADE"}},
	} {
		t.Run(tc.excl, func(t *testing.T) {
			excl := api.NATOutgoingExclusionsType(tc.excl)
			s := &policy.Snapshot{Node: node, IPPools: []api.IPPool{pool("p", "10.65.0.0/16", true), pool("p6", "fd00:65::/64", true)},
				Nodes:  overlayNodes(),
				Config: policy.ConfigFromFelix(&api.FelixConfigurationSpec{NATOutgoingExclusions: &excl})}
			res := policy.Compile(s)
			got := ruleActions(t, res.V4, policy.TableNAT, "cali-nat-outgoing")
			if !slices.Equal(got, tc.want) {
				t.Errorf("cali-nat-outgoing:\n got %q\nwant %q", got, tc.want)
			}
			got6 := ruleActions(t, res.V6, policy.TableNAT, "cali-nat-outgoing")
			if hosts := strings.Contains(strings.Join(got6, "\n"), "! --match-set cali60all-hosts-net dst"); hosts != (tc.excl == "IPPoolsAndHostIPs") {
				t.Errorf("IPv6 cali-nat-outgoing excludes hosts: %v, want %v: %q", hosts, !hosts, got6)
			}
			for _, f := range []*policy.Family{res.V4, res.V6} {
				var members []string
				found := false
				for _, set := range f.IPSets {
					if set.ID == "all-hosts-net" {
						found, members = true, set.Members
					}
				}
				if found != (tc.excl == "IPPoolsAndHostIPs") {
					t.Errorf("IPv%d all-hosts-net set present: %v", f.Version, found)
				}
				if found && len(members) == 0 {
					t.Errorf("IPv%d all-hosts-net has no members", f.Version)
				}
			}
		})
	}
}

// TestServiceLoopPrevention: serviceLoopPrevention's three values, felix's
// sorted order of the ranges, and no chain at all while BGP advertises no
// service range.
func TestServiceLoopPrevention(t *testing.T) {
	cidrs := policy.ServiceCIDRs(&api.BGPConfigurationSpec{
		ServiceLoadBalancerIPs: []api.ServiceLoadBalancerIPBlock{{CIDR: "203.0.113.0/24"}},
		ServiceClusterIPs:      []api.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}},
	})
	for _, tc := range []struct {
		name, value string
		cidrs       []string
		want        []string // nil: no cali-cidr-block
	}{
		{"unset drops", "", cidrs, []string{
			"-A cali-cidr-block --destination 10.96.0.0/12 --jump DROP",
			"-A cali-cidr-block --destination 203.0.113.0/24 --jump DROP",
		}},
		{"reject", "Reject", cidrs, []string{
			"-A cali-cidr-block --destination 10.96.0.0/12 --jump REJECT",
			"-A cali-cidr-block --destination 203.0.113.0/24 --jump REJECT",
		}},
		{"disabled", "Disabled", cidrs, nil},
		{"nothing advertised", "Drop", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &policy.Snapshot{Node: node,
				Config: policy.ConfigFromFelix(&api.FelixConfigurationSpec{IPv6Support: ptr(false), ServiceLoopPrevention: tc.value})}
			s.Config.ServiceCIDRs = tc.cidrs
			f := policy.Compile(s).V4
			fwd := strings.Join(ruleActions(t, f, policy.TableFilter, "cali-FORWARD"), "\n")
			if jumps := strings.Contains(fwd, "--jump cali-cidr-block"); jumps != (tc.want != nil) {
				t.Fatalf("cali-FORWARD jumps to cali-cidr-block: %v, want %v", jumps, tc.want != nil)
			}
			if tc.want == nil {
				return
			}
			if got := ruleActions(t, f, policy.TableFilter, "cali-cidr-block"); !slices.Equal(got, tc.want) {
				t.Errorf("cali-cidr-block:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestInterfaceExclude: a host endpoint given by expectedIPs is never
// resolved to an excluded interface (Felix's default: kube-ipvs0, which
// holds every Service's address, the host's too); entries are names or
// /regular expressions/; a host endpoint naming an excluded interface gets
// no chains, and says so.
func TestInterfaceExclude(t *testing.T) {
	hostIP := netip.MustParseAddr("10.0.0.10")
	ifaces := map[string][]netip.Addr{"eth0": {hostIP}, "kube-ipvs0": {hostIP}, "ens5": {hostIP}}
	for _, tc := range []struct {
		name, exclude string
		named         string // the second endpoint's interfaceName
		want          []string
		problem       bool
	}{
		{"default", "", "", []string{"ens5", "eth0"}, false},
		{"names and expressions", "kube-ipvs0,/^e(th|ns)[0-9]$/", "", nil, false},
		{"only a name: kube-ipvs0 no more excluded", "ens5", "", []string{"eth0", "kube-ipvs0"}, false},
		{"named excluded interface", "", "kube-ipvs0", []string{"ens5", "eth0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &policy.Snapshot{Node: node, HostInterfaces: ifaces,
				HostEndpoints: []api.HostEndpoint{hep("by-ip", "", nil, []string{"10.0.0.10"}, "projectcalico-default-allow")},
				Config:        policy.ConfigFromFelix(&api.FelixConfigurationSpec{IPv6Support: ptr(false), InterfaceExclude: tc.exclude})}
			if tc.named != "" {
				s.HostEndpoints = append(s.HostEndpoints, hep("named", tc.named, nil, nil, "projectcalico-default-allow"))
			}
			res := policy.Compile(s)
			var got []string
			for _, tb := range res.V4.Tables() {
				if tb.Name != policy.TableFilter {
					continue
				}
				for _, c := range tb.Chains {
					if iface, ok := strings.CutPrefix(c.Name, "cali-fh-"); ok {
						got = append(got, iface)
					}
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("host endpoint chains on %q, want %q", got, tc.want)
			}
			problem := slices.ContainsFunc(res.Problems, func(p string) bool { return strings.Contains(p, "excluded by interfaceExclude") })
			if problem != tc.problem {
				t.Errorf("problem reported: %v, want %v (%q)", problem, tc.problem, res.Problems)
			}
		})
	}
}
