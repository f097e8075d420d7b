package policy_test

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// base is the cluster most golden cases start from: two namespaces, three
// local pods and a remote one, with their profiles.
func base() *policy.Snapshot {
	return &policy.Snapshot{
		Node: node,
		WorkloadEndpoints: []api.WorkloadEndpoint{
			wep("ns1", "web", "cali1a2b3c4d5e6", map[string]string{"app": "web"}, []string{"10.65.0.1"}, sa("frontend"),
				namedPorts(api.WorkloadEndpointPort{Name: "http", Protocol: api.ProtocolFromString("TCP"), Port: 80})),
			wep("ns1", "db", "cali2b3c4d5e6f7", map[string]string{"app": "db"}, []string{"10.65.0.2"}, sa("backend"),
				namedPorts(
					api.WorkloadEndpointPort{Name: "pg", Protocol: api.ProtocolFromString("TCP"), Port: 5432},
					api.WorkloadEndpointPort{Name: "dns", Protocol: api.ProtocolFromString("UDP"), Port: 53},
				)),
			wep("ns2", "client", "cali3c4d5e6f7a8", map[string]string{"app": "client"}, []string{"10.65.0.3"}),
			wep("ns2", "remote", "cali9f8e7d6c5b4", map[string]string{"app": "web"}, []string{"10.65.1.7"}, onNode("node2"),
				namedPorts(api.WorkloadEndpointPort{Name: "http", Protocol: api.ProtocolFromString("TCP"), Port: 8080})),
		},
		Profiles: []api.Profile{
			nsProfile("ns1", map[string]string{"team": "blue"}),
			nsProfile("ns2", map[string]string{"team": "red"}),
			saProfile("ns1", "frontend", map[string]string{"role": "web"}),
			saProfile("ns1", "backend", map[string]string{"role": "data"}),
		},
		IPPools: []api.IPPool{pool("default-ipv4-ippool", "10.65.0.0/16", false)},
	}
}

func allow(src, dst api.EntityRule) api.Rule {
	return api.Rule{Action: api.Allow, Source: src, Destination: dst}
}

type goldenCase struct {
	name string
	edit func(s *policy.Snapshot)
}

// goldenCases cover every policy field and configuration the compiler
// handles, each as an edit of base().
func goldenCases() []goldenCase {
	tcp, udp := proto("TCP"), proto("UDP")
	return []goldenCase{
		{"profiles-only", func(s *policy.Snapshot) {}},
		{"default-deny-once-selected", func(s *policy.Snapshot) {
			// An ingress policy with no rules: db accepts nothing; egress
			// still falls back to the profile.
			s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "isolate-db", api.NetworkPolicySpec{
				Selector: "app == 'db'", Types: []api.PolicyType{api.PolicyTypeIngress},
			}))
		}},
		{"types-defaulting", func(s *policy.Snapshot) {
			s.NetworkPolicies = append(s.NetworkPolicies,
				// Only egress rules: Egress only.
				np("ns1", "egress-only", api.NetworkPolicySpec{Selector: "app == 'web'",
					Egress: []api.Rule{{Action: api.Allow, Protocol: udp, Destination: api.EntityRule{Ports: ports("53")}}}}),
				// Both: Ingress and Egress.
				np("ns1", "both", api.NetworkPolicySpec{Selector: "app == 'db'",
					Ingress: []api.Rule{{Action: api.Allow}}, Egress: []api.Rule{{Action: api.Deny}}}),
			)
		}},
		{"selectors-and-namespaces", func(s *policy.Snapshot) {
			s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "db-ingress", api.NetworkPolicySpec{
				Selector: "app == 'db'",
				Ingress: []api.Rule{
					// Same namespace only.
					allow(api.EntityRule{Selector: "app == 'web'"}, api.EntityRule{}),
					// Any pod in namespaces of team red.
					allow(api.EntityRule{NamespaceSelector: "team == 'red'"}, api.EntityRule{}),
					// Both together.
					allow(api.EntityRule{Selector: "app == 'client'", NamespaceSelector: "all()"}, api.EntityRule{}),
					// notSelector alone is scoped to the namespace too.
					allow(api.EntityRule{NotSelector: "app == 'web'"}, api.EntityRule{}),
					// global(): host endpoints and global network sets only.
					allow(api.EntityRule{NamespaceSelector: "global()"}, api.EntityRule{}),
				},
			}))
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, gnp("red-egress", api.GlobalNetworkPolicySpec{
				NamespaceSelector: "team == 'red'",
				Egress: []api.Rule{
					{Action: api.Deny, Destination: api.EntityRule{Selector: "app == 'db'"}},
					{Action: api.Allow, Destination: api.EntityRule{NotSelector: "app == 'web'"}},
				},
			}))
		}},
		{"service-accounts", func(s *policy.Snapshot) {
			s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "by-sa", api.NetworkPolicySpec{
				Selector:               "all()",
				ServiceAccountSelector: "role == 'data'",
				Ingress: []api.Rule{
					allow(api.EntityRule{ServiceAccounts: &api.ServiceAccountMatch{Names: []string{"frontend", "admin"}}}, api.EntityRule{}),
					allow(api.EntityRule{ServiceAccounts: &api.ServiceAccountMatch{Selector: "role == 'web'"}, Selector: "app == 'web'"}, api.EntityRule{}),
				},
			}))
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, gnp("sa-global", api.GlobalNetworkPolicySpec{
				ServiceAccountSelector: "all()",
				Types:                  []api.PolicyType{api.PolicyTypeEgress},
				Egress:                 []api.Rule{{Action: api.Allow}},
			}))
		}},
		{"order-tiers-pass-groups", func(s *policy.Snapshot) {
			s.Tiers = append(s.Tiers, tier("security", 100, api.Deny), tier("platform", 200, api.Pass))
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies,
				gnp("security.block-bad", api.GlobalNetworkPolicySpec{Tier: "security", Order: ptr(10.0), Selector: "all()",
					Ingress: []api.Rule{
						{Action: api.Deny, Source: api.EntityRule{Nets: []string{"192.0.2.0/24"}}},
						{Action: api.Pass},
					}}),
				gnp("platform.monitoring", api.GlobalNetworkPolicySpec{Tier: "platform", Selector: "has(app)",
					Ingress: []api.Rule{{Action: api.Allow, Protocol: tcp, Destination: api.EntityRule{Ports: ports("9100")}}}}),
			)
			// Same selector, adjacent: one policy group chain. Unset order
			// sorts last; equal orders by name.
			for _, p := range []struct {
				name  string
				order *float64
			}{{"zeta", ptr(100.0)}, {"alpha", ptr(100.0)}, {"last", nil}, {"first", ptr(1.0)}} {
				s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", p.name, api.NetworkPolicySpec{
					Order: p.order, Selector: "app == 'web'",
					Ingress: []api.Rule{{Action: api.Allow, Protocol: tcp, Destination: api.EntityRule{Ports: ports("80")}}},
				}))
			}
		}},
		{"log-and-annotations", func(s *policy.Snapshot) {
			s.Config.LogPrefix = "audit"
			s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "log-then-deny", api.NetworkPolicySpec{
				Selector: "app == 'db'",
				Ingress: []api.Rule{
					{Action: api.Log, Protocol: tcp, Metadata: &api.RuleMetadata{Annotations: map[string]string{"reason": "audit all tcp"}}},
					{Action: api.Deny, Protocol: tcp},
					{Action: api.Allow},
				},
			}))
		}},
		{"protocols-and-icmp", func(s *policy.Snapshot) {
			s.Config.IPv6 = true
			s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "protocols", api.NetworkPolicySpec{
				Selector: "app == 'web'",
				Ingress: []api.Rule{
					{Action: api.Allow, Protocol: proto("TCP")},
					{Action: api.Allow, Protocol: protoNum(17)},
					{Action: api.Allow, Protocol: proto("SCTP")},
					{Action: api.Allow, Protocol: proto("UDPLite")},
					{Action: api.Allow, Protocol: protoNum(47)},
					{Action: api.Deny, NotProtocol: proto("TCP")},
					{Action: api.Allow, Protocol: proto("ICMP"), ICMP: &api.ICMPFields{Type: ptr(8)}},
					{Action: api.Allow, Protocol: proto("ICMP"), ICMP: &api.ICMPFields{Type: ptr(3), Code: ptr(4)}},
					{Action: api.Deny, Protocol: proto("ICMP"), NotICMP: &api.ICMPFields{Type: ptr(0)}},
					{Action: api.Allow, Protocol: proto("ICMPv6"), ICMP: &api.ICMPFields{Type: ptr(128)}},
					{Action: api.Allow, Protocol: protoNum(58), NotICMP: &api.ICMPFields{Type: ptr(1), Code: ptr(0)}},
				},
			}))
		}},
		{"nets", func(s *policy.Snapshot) {
			s.Config.IPv6 = true
			s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "nets", api.NetworkPolicySpec{
				Selector: "app == 'web'",
				Ingress: []api.Rule{
					allow(api.EntityRule{Nets: []string{"192.0.2.0/24"}}, api.EntityRule{}),
					allow(api.EntityRule{Nets: []string{"192.0.2.0/24", "198.51.100.0/24"}}, api.EntityRule{}),
					allow(api.EntityRule{Nets: []string{"10.0.0.0/8"}, NotNets: []string{"10.65.0.0/16"}}, api.EntityRule{}),
					allow(api.EntityRule{NotNets: []string{"10.1.0.0/16", "10.2.0.0/16"}}, api.EntityRule{Nets: []string{"10.65.0.1/32"}}),
					allow(api.EntityRule{Nets: []string{"2001:db8::/32"}}, api.EntityRule{}),
					// A negated catch-all would match nothing: left out.
					allow(api.EntityRule{NotNets: []string{"0.0.0.0/0"}}, api.EntityRule{}),
				},
				Egress: []api.Rule{
					{Action: api.Deny, Destination: api.EntityRule{Nets: []string{"169.254.169.254/32"}}},
					{Action: api.Allow},
				},
			}))
		}},
		{"ports", func(s *policy.Snapshot) {
			var many []string
			for p := 1000; p < 1020; p++ {
				many = append(many, itoa(p))
			}
			s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "ports", api.NetworkPolicySpec{
				Selector: "app == 'db'",
				Ingress: []api.Rule{
					{Action: api.Allow, Protocol: tcp, Destination: api.EntityRule{Ports: ports("5432", "8000:9000")}},
					{Action: api.Allow, Protocol: tcp, Destination: api.EntityRule{Ports: ports("pg")}},
					{Action: api.Allow, Protocol: udp, Destination: api.EntityRule{Ports: ports("dns", "5353")}},
					{Action: api.Allow, Protocol: tcp, Source: api.EntityRule{Ports: ports("1024:65535")}, Destination: api.EntityRule{NotPorts: ports("22", "pg")}},
					{Action: api.Allow, Protocol: tcp, Destination: api.EntityRule{Ports: ports(many...)}},
				},
				Egress: []api.Rule{
					// Named port of the peers the selector picks.
					{Action: api.Allow, Protocol: tcp, Destination: api.EntityRule{Selector: "app == 'web'", Ports: ports("http")}},
				},
			}))
		}},
		{"network-sets", func(s *policy.Snapshot) {
			s.NetworkSets = append(s.NetworkSets, api.NetworkSet{
				ObjectMeta: api.ObjectMeta{Name: "partners", Namespace: "ns1", Labels: map[string]string{"kind": "partner"}},
				Spec:       api.NetworkSetSpec{Nets: []string{"203.0.113.0/24", "198.51.100.7"}},
			})
			s.GlobalNetworkSets = append(s.GlobalNetworkSets, api.GlobalNetworkSet{
				ObjectMeta: api.ObjectMeta{Name: "internet", Labels: map[string]string{"kind": "internet"}},
				Spec:       api.GlobalNetworkSetSpec{Nets: []string{"0.0.0.0/0"}},
			})
			s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "partners-in", api.NetworkPolicySpec{
				Selector: "app == 'web'",
				Ingress:  []api.Rule{allow(api.EntityRule{Selector: "kind == 'partner'"}, api.EntityRule{})},
			}))
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, gnp("no-internet", api.GlobalNetworkPolicySpec{
				Selector: "app == 'db'",
				Egress: []api.Rule{
					{Action: api.Deny, Destination: api.EntityRule{Selector: "kind == 'internet'", NamespaceSelector: "global()"}},
					{Action: api.Allow},
				},
			}))
		}},
		{"profiles-fallback", func(s *policy.Snapshot) {
			// A user profile with real rules, a missing profile, and a
			// policy that passes to the profiles.
			s.Profiles = append(s.Profiles, api.Profile{
				ObjectMeta: api.ObjectMeta{Name: "restricted"},
				Spec: api.ProfileSpec{
					Ingress:       []api.Rule{{Action: api.Allow, Protocol: tcp, Destination: api.EntityRule{Ports: ports("443")}}},
					Egress:        []api.Rule{{Action: api.Deny, Protocol: udp}, {Action: api.Allow}},
					LabelsToApply: map[string]string{"restricted": "true"},
				},
			})
			s.WorkloadEndpoints = append(s.WorkloadEndpoints,
				wep("ns2", "locked", "cali4d5e6f7a8b9", map[string]string{"app": "locked"}, []string{"10.65.0.4"},
					profiles("restricted", "kns.ns2", "does-not-exist")))
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, gnp("pass-restricted", api.GlobalNetworkPolicySpec{
				Selector: "restricted == 'true'",
				Ingress:  []api.Rule{{Action: api.Pass}},
			}))
		}},
		{"host-endpoints", func(s *policy.Snapshot) {
			s.HostEndpoints = append(s.HostEndpoints,
				hep("node1-eth0", "eth0", map[string]string{"host": "node1", "role": "node"}, []string{"10.0.0.10"}),
				hep("node1-by-ip", "", map[string]string{"host": "node1"}, []string{"10.1.0.10"}),
				hep("node1-all", "*", map[string]string{"host": "node1", "all": "true"}, nil, "kns.ns1"),
				// Another node's endpoint only fills IP sets.
				api.HostEndpoint{ObjectMeta: api.ObjectMeta{Name: "node2-eth0", Labels: map[string]string{"role": "node"}},
					Spec: api.HostEndpointSpec{Node: "node2", InterfaceName: "eth0", ExpectedIPs: []string{"10.0.0.11"}}},
			)
			s.HostInterfaces = map[string][]netip.Addr{"eth1": {netip.MustParseAddr("10.1.0.10")}}
			s.Config.FailsafeInbound = []api.ProtoPort{{Protocol: "TCP", Port: 22}, {Protocol: "TCP", Port: 179, Net: "10.0.0.0/24"}}
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies,
				gnp("deny-all-host", api.GlobalNetworkPolicySpec{Selector: "has(host)", Types: []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress}}),
				gnp("allow-nodes", api.GlobalNetworkPolicySpec{Order: ptr(10.0), Selector: "role == 'node'",
					Ingress: []api.Rule{allow(api.EntityRule{Selector: "role == 'node'"}, api.EntityRule{})}}),
			)
		}},
		{"untracked", func(s *policy.Snapshot) {
			// doNotTrack policy in the raw table, for the endpoints that have
			// some: eth0 in both directions, none for eth1, and not for the
			// "*" endpoint (reported). Failsafe ports include the replies of
			// the other direction's.
			s.HostEndpoints = append(s.HostEndpoints,
				hep("node1-eth0", "eth0", map[string]string{"host": "node1", "untracked": "yes"}, []string{"10.0.0.10"}),
				hep("node1-eth1", "eth1", map[string]string{"host": "node1"}, []string{"10.1.0.10"}),
				hep("node1-all", "*", map[string]string{"host": "node1", "untracked": "yes"}, nil),
			)
			s.Config.FailsafeInbound = []api.ProtoPort{{Protocol: "TCP", Port: 22}}
			s.Config.FailsafeOutbound = []api.ProtoPort{{Protocol: "UDP", Port: 53}, {Protocol: "TCP", Port: 179, Net: "10.0.0.0/24"}}
			s.Config.DenyAction = "REJECT" // raw still drops
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies,
				gnp("untracked-memcached", api.GlobalNetworkPolicySpec{
					Selector: "untracked == 'yes'", DoNotTrack: true, ApplyOnForward: true, Order: ptr(10.0),
					Types: []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress},
					Ingress: []api.Rule{
						{Action: api.Deny, Source: api.EntityRule{Nets: []string{"192.0.2.0/24"}}},
						{Action: api.Allow, Protocol: tcp, Source: api.EntityRule{Selector: "host == 'node1'"}, Destination: api.EntityRule{Ports: ports("11211")}},
					},
					Egress: []api.Rule{{Action: api.Allow, Protocol: tcp, Source: api.EntityRule{Ports: ports("11211")}}},
				}),
				// Two adjacent with one selector: a group chain in raw.
				gnp("untracked-a", api.GlobalNetworkPolicySpec{Selector: "has(untracked)", DoNotTrack: true, ApplyOnForward: true, Order: ptr(20.0),
					Ingress: []api.Rule{{Action: api.Pass, Protocol: udp}}}),
				gnp("untracked-b", api.GlobalNetworkPolicySpec{Selector: "has(untracked)", DoNotTrack: true, ApplyOnForward: true, Order: ptr(21.0),
					Ingress: []api.Rule{{Action: api.Log}}}),
				// Normal policy for the same endpoint stays in filter.
				gnp("host-normal", api.GlobalNetworkPolicySpec{Selector: "has(host)", Ingress: []api.Rule{{Action: api.Allow, Protocol: tcp}}}),
			)
		}},
		{"pre-dnat", func(s *policy.Snapshot) {
			// preDNAT policy in the mangle table, ingress only; the "*"
			// endpoint's is the dispatch default, and RETURN is the allow
			// action when configured.
			s.Config.IPv6 = true
			s.Config.MangleAllowAction = "RETURN"
			s.HostEndpoints = append(s.HostEndpoints,
				hep("node1-eth0", "eth0", map[string]string{"host": "node1", "edge": "yes"}, []string{"10.0.0.10"}),
				hep("node1-eth1", "eth1", map[string]string{"host": "node1"}, []string{"10.1.0.10"}),
				hep("node1-all", "*", map[string]string{"host": "node1", "edge": "yes"}, nil),
			)
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies,
				gnp("nodeport-allowlist", api.GlobalNetworkPolicySpec{
					Selector: "edge == 'yes'", PreDNAT: true, ApplyOnForward: true, Order: ptr(10.0),
					Ingress: []api.Rule{
						{Action: api.Allow, Protocol: tcp, Source: api.EntityRule{Nets: []string{"198.51.100.0/24", "2001:db8:1::/48"}},
							Destination: api.EntityRule{Ports: ports("30000:32767")}},
						{Action: api.Deny, Protocol: tcp, Destination: api.EntityRule{Ports: ports("30000:32767")}},
					},
				}),
				gnp("host-normal", api.GlobalNetworkPolicySpec{Selector: "has(host)", Ingress: []api.Rule{{Action: api.Allow}}}),
			)
		}},
		{"dnat-host-egress", func(s *policy.Snapshot) {
			// Host endpoints' normal egress policy is also in mangle
			// POSTROUTING, for traffic DNAT-ed on the host: allow is
			// RETURN, deny DROP (filter keeps REJECT), profiles last, and
			// the "*" endpoint skips traffic to workloads.
			s.Config.IPv6 = true
			s.Config.DenyAction = "REJECT"
			s.HostEndpoints = append(s.HostEndpoints,
				hep("node1-eth0", "eth0", map[string]string{"host": "node1", "edge": "yes"}, []string{"10.0.0.10"}),
				hep("node1-all", "*", map[string]string{"host": "node1"}, nil, "kns.ns1"),
			)
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies,
				gnp("edge-egress", api.GlobalNetworkPolicySpec{Selector: "edge == 'yes'", Types: []api.PolicyType{api.PolicyTypeEgress},
					Egress: []api.Rule{
						{Action: api.Log, Protocol: tcp, Destination: api.EntityRule{Ports: ports("25")}},
						{Action: api.Deny, Protocol: tcp, Destination: api.EntityRule{Ports: ports("25")}},
						{Action: api.Allow, Destination: api.EntityRule{Selector: "app == 'db'"}},
						{Action: api.Allow, Destination: api.EntityRule{Nets: []string{"198.51.100.0/24", "2001:db8:1::/48"}}},
					}}),
			)
		}},
		{"apply-on-forward", func(s *policy.Snapshot) {
			// Forward chains for every host endpoint: default allow without
			// applyOnForward policy, the policy's tiers with it; the policy
			// without the flag only in the host's own chains.
			s.HostEndpoints = append(s.HostEndpoints,
				hep("node1-eth0", "eth0", map[string]string{"host": "node1", "fwd": "yes"}, []string{"10.0.0.10"}),
				hep("node1-eth1", "eth1", map[string]string{"host": "node1"}, []string{"10.1.0.10"}),
			)
			s.Tiers = append(s.Tiers, tier("platform", 100, api.Pass))
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies,
				gnp("platform.fwd", api.GlobalNetworkPolicySpec{Tier: "platform", Selector: "fwd == 'yes'", ApplyOnForward: true,
					Ingress: []api.Rule{{Action: api.Deny, Source: api.EntityRule{Nets: []string{"192.0.2.0/24"}}}}}),
				gnp("fwd-both", api.GlobalNetworkPolicySpec{Selector: "fwd == 'yes'", ApplyOnForward: true, Order: ptr(2.0),
					Types:   []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress},
					Ingress: []api.Rule{{Action: api.Allow}},
					Egress:  []api.Rule{{Action: api.Deny, Destination: api.EntityRule{Nets: []string{"203.0.113.0/24"}}}, {Action: api.Allow}}}),
				gnp("host-only", api.GlobalNetworkPolicySpec{Selector: "has(host)", Order: ptr(1.0),
					Ingress: []api.Rule{{Action: api.Deny, Source: api.EntityRule{Nets: []string{"198.51.100.0/24"}}}}}),
			)
		}},
		{"nat-outgoing", func(s *policy.Snapshot) {
			s.Config.IPv6 = true
			s.IPPools = []api.IPPool{
				pool("v4-nat", "10.65.0.0/16", true),
				pool("v4-plain", "10.66.0.0/16", false),
				pool("v6-nat", "fd00:65::/64", true),
				func() api.IPPool {
					p := pool("lb", "192.0.2.0/24", false)
					p.Spec.AllowedUses = []api.IPPoolAllowedUse{api.IPPoolAllowedUseLoadBalancer}
					return p
				}(),
			}
		}},
		{"overlay-vxlan", func(s *policy.Snapshot) {
			// VXLAN pools of both families: the other nodes with a tunnel
			// address of the family may send VXLAN to the host and receive
			// it from the host, before host endpoint policy.
			s.Config.IPv6 = true
			s.IPPools = []api.IPPool{
				overlayPool("v4", "10.65.0.0/16", api.VXLANModeAlways, api.IPIPModeNever),
				overlayPool("v6", "fd00:65::/48", api.VXLANModeCrossSubnet, api.IPIPModeNever),
			}
			s.Nodes = overlayNodes()
		}},
		{"overlay-ipip", func(s *policy.Snapshot) {
			// An IP-in-IP pool: every node's IPv4 address, this one's
			// too, and the external nodes. vxlanEnabled turns IPv4 VXLAN
			// on without a pool (felix's override), on another port. The
			// IPv4 VXLAN drop stays DROP whatever the deny action, as in
			// felix; the IP-in-IP one follows it.
			s.Config = policy.ConfigFromFelix(&api.FelixConfigurationSpec{
				IPv6Support: ptr(false), IptablesFilterDenyAction: "Reject",
				VXLANEnabled: ptr(true), VXLANPort: ptr(8472),
				ExternalNodesCIDRList: &[]string{"192.0.2.0/28", "198.51.100.7", "2001:db8::/64"},
			})
			s.IPPools = []api.IPPool{overlayPool("v4", "10.65.0.0/16", api.VXLANModeNever, api.IPIPModeCrossSubnet)}
			s.Nodes = overlayNodes()
		}},
		{"service-loop-prevention", func(s *policy.Snapshot) {
			// BGP advertises service ranges of both families; felix's
			// default (serviceLoopPrevention unset: Drop) drops routed
			// traffic still addressed to them after policy, each family
			// its own ranges.
			s.Config = policy.ConfigFromFelix(&api.FelixConfigurationSpec{})
			s.Config.ServiceCIDRs = policy.ServiceCIDRs(&api.BGPConfigurationSpec{
				ServiceClusterIPs:      []api.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}, {CIDR: "fd00:96::/108"}},
				ServiceExternalIPs:     []api.ServiceExternalIPBlock{{CIDR: "198.51.100.0/24"}},
				ServiceLoadBalancerIPs: []api.ServiceLoadBalancerIPBlock{{CIDR: "203.0.113.10/32"}},
			})
		}},
		{"filter-allow-return", func(s *policy.Snapshot) {
			// iptablesFilterAllowAction Return: every filter rule that
			// would accept what policy allowed returns it to the built-in
			// chain instead (the forward chain's established shortcut
			// setting the accept bit first); failsafe ports, raw and
			// mangle still accept.
			s.Config = policy.ConfigFromFelix(&api.FelixConfigurationSpec{
				IPv6Support: ptr(false), IptablesFilterAllowAction: "Return", DefaultEndpointToHostAction: "Accept",
			})
			s.IPPools = []api.IPPool{overlayPool("v4", "10.65.0.0/16", api.VXLANModeNever, api.IPIPModeAlways)}
			s.Nodes = overlayNodes()
			s.HostEndpoints = []api.HostEndpoint{hep("node1-eth0", "eth0", map[string]string{"host": "yes"}, nil, "projectcalico-default-allow")}
		}},
		{"nat-outgoing-address", func(s *policy.Snapshot) {
			s.Config.NATOutgoingAddress = "192.0.2.1"
			s.IPPools = []api.IPPool{pool("v4-nat", "10.65.0.0/16", true)}
		}},
		{"ipv6-dual-stack", func(s *policy.Snapshot) {
			s.Config.IPv6 = true
			s.WorkloadEndpoints = append(s.WorkloadEndpoints,
				wep("ns1", "dual", "cali5e6f7a8b9c0", map[string]string{"app": "web"}, []string{"10.65.0.5", "fd00:65::5"}))
			s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "dual", api.NetworkPolicySpec{
				Selector: "app == 'web'",
				Ingress: []api.Rule{
					allow(api.EntityRule{Selector: "app == 'web'"}, api.EntityRule{}),
					{Action: api.Allow, IPVersion: ptr(6), Source: api.EntityRule{Nets: []string{"fd00::/8"}}},
					{Action: api.Allow, IPVersion: ptr(4), Protocol: tcp},
				},
			}))
		}},
		{"config", func(s *policy.Snapshot) {
			s.Config = policy.ConfigFromFelix(&api.FelixConfigurationSpec{
				DefaultEndpointToHostAction:    "Return",
				IptablesFilterDenyAction:       "Reject",
				IptablesMangleAllowAction:      "Return",
				ChainInsertMode:                "Append",
				IptablesMarkMask:               ptr(uint32(0x0ff00000)),
				InterfacePrefix:                "cali,tap",
				DisableConntrackInvalidCheck:   ptr(true),
				AllowVXLANPacketsFromWorkloads: ptr(true),
			})
			s.NetworkPolicies = append(s.NetworkPolicies, np("ns1", "deny-db", api.NetworkPolicySpec{
				Selector: "app == 'db'", Ingress: []api.Rule{{Action: api.Deny}}}))
		}},
		{"spoofed-sources", func(s *policy.Snapshot) {
			// The reverse-path check in raw, with the exemptions the
			// operator allowed: web may send from a v4 and a v6 net, client
			// from web's address; the remote pod's ask for nothing here.
			s.Config = policy.ConfigFromFelix(&api.FelixConfigurationSpec{WorkloadSourceSpoofing: "Any"})
			spoofs("192.0.2.0/24", "fd00:99::/64")(&s.WorkloadEndpoints[0])
			spoofs("10.65.0.1")(&s.WorkloadEndpoints[2])
			spoofs("198.51.100.0/24")(&s.WorkloadEndpoints[3])
		}},
		{"spoofed-sources-untracked", func(s *policy.Snapshot) {
			// With doNotTrack policy on the node, felix's layout: workload
			// packets are marked, exempted, checked, and kept from the
			// untracked host endpoint policy.
			s.Config = policy.ConfigFromFelix(&api.FelixConfigurationSpec{WorkloadSourceSpoofing: "Any", IPv6Support: ptr(false)})
			spoofs("192.0.2.0/24")(&s.WorkloadEndpoints[0])
			s.HostEndpoints = append(s.HostEndpoints, hep("node1-eth0", "eth0", map[string]string{"host": "node1"}, []string{"10.0.0.10"}))
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, gnp("untracked", api.GlobalNetworkPolicySpec{
				Selector: "host == 'node1'", DoNotTrack: true, ApplyOnForward: true,
				Ingress: []api.Rule{{Action: api.Allow, Protocol: tcp, Destination: api.EntityRule{Ports: ports("11211")}}}}))
		}},
		{"dispatch-tree", func(s *policy.Snapshot) {
			for _, iface := range []string{"calia01", "calia02", "calia03", "calib01", "calic00"} {
				s.WorkloadEndpoints = append(s.WorkloadEndpoints,
					wep("ns2", "pod-"+iface, iface, nil, []string{"10.65.2." + itoa(len(s.WorkloadEndpoints))}))
			}
		}},
		{"long-names", func(s *policy.Snapshot) {
			s.Tiers = append(s.Tiers, tier("a-rather-long-tier-name", 10, api.Deny))
			s.Profiles = append(s.Profiles, api.Profile{ObjectMeta: api.ObjectMeta{Name: "a-profile-name-longer-than-fits"}})
			s.WorkloadEndpoints[0].Spec.Profiles = append(s.WorkloadEndpoints[0].Spec.Profiles, "a-profile-name-longer-than-fits")
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, gnp("a-rather-long-tier-name.policy-with-a-long-name",
				api.GlobalNetworkPolicySpec{Tier: "a-rather-long-tier-name", Selector: "app == 'web'", Ingress: []api.Rule{{Action: api.Allow}}}))
		}},
		{"problems", func(s *policy.Snapshot) {
			s.NetworkPolicies = append(s.NetworkPolicies,
				np("ns1", "bad-selector", api.NetworkPolicySpec{Selector: "app == ", Ingress: []api.Rule{{Action: api.Allow}}}),
				np("ns1", "bad-rules", api.NetworkPolicySpec{Selector: "app == 'web'", Ingress: []api.Rule{
					{Action: api.Allow, Destination: api.EntityRule{Services: &api.ServiceMatch{Name: "svc"}}},
					{Action: api.Allow, Source: api.EntityRule{Selector: "(("}},
					{Action: api.Allow, Destination: api.EntityRule{Ports: ports("80")}},
					{Action: api.Allow, Protocol: tcp},
				}}),
				// Unsupported matches: Allow and Log rules are left out,
				// Deny rules deny without the match, Pass rules too.
				np("ns1", "unsupported", api.NetworkPolicySpec{Selector: "app == 'db'",
					Ingress: []api.Rule{
						{Action: api.Log, Source: api.EntityRule{Services: &api.ServiceMatch{Name: "svc", Namespace: "ns1"}}},
						{Action: api.Allow, Protocol: tcp, HTTP: &api.HTTPMatch{Methods: []string{"GET"}}},
						{Action: api.Deny, Protocol: tcp, Source: api.EntityRule{Services: &api.ServiceMatch{Name: "svc"}}},
						{Action: api.Pass, Source: api.EntityRule{Services: &api.ServiceMatch{Name: "svc"}}},
						{Action: api.Allow},
					},
					Egress: []api.Rule{
						{Action: api.Deny, Destination: api.EntityRule{Services: &api.ServiceMatch{Name: "kube-dns", Namespace: "kube-system"}}},
						{Action: api.Allow},
					}}),
			)
			s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies,
				// Nothing for workloads: untracked and preDNAT policy is host
				// endpoint policy.
				gnp("untracked", api.GlobalNetworkPolicySpec{
					Selector: "all()", DoNotTrack: true, ApplyOnForward: true, Ingress: []api.Rule{{Action: api.Deny}}}),
				// What validation rejects, enforced as felix would.
				gnp("both-flags", api.GlobalNetworkPolicySpec{
					Selector: "all()", DoNotTrack: true, PreDNAT: true, Ingress: []api.Rule{{Action: api.Deny}}}),
				gnp("prednat-egress", api.GlobalNetworkPolicySpec{
					Selector: "all()", PreDNAT: true, ApplyOnForward: true, Egress: []api.Rule{{Action: api.Deny}}}),
			)
			// No addresses: never given to the dataplane; no interface:
			// reported.
			s.WorkloadEndpoints = append(s.WorkloadEndpoints,
				wep("ns2", "no-ip", "cali6f7a8b9c0d1", nil, nil),
				wep("ns2", "no-iface", "", nil, []string{"10.65.0.9"}),
				// Spoofing asked for without workloadSourceSpoofing: Any:
				// refused and reported, the endpoint keeps its chains.
				wep("ns2", "spoofer", "cali7a8b9c0d1e2", nil, []string{"10.65.0.10"}, spoofs("10.65.0.1")))
		}},
	}
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.edit(s)
			r := policy.Compile(s)
			golden(t, tc.name, dump(r))
			checkConsistent(t, r)
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// checkConsistent asserts what must hold for any compiled result for the
// kernel to accept it: every table is named, every jump target and every
// IP set exists, chain and set names fit the kernel's limits, no multiport
// match has more than 15 slots, REJECT is only used in the filter table
// and NOTRACK only in raw.
func checkConsistent(t *testing.T, r *policy.Result) {
	t.Helper()
	for _, f := range []*policy.Family{r.V4, r.V6} {
		if f == nil {
			continue
		}
		sets := map[string]bool{}
		for _, s := range f.IPSets {
			if len(s.Name) > 31 {
				t.Errorf("IPv%d set %s: name longer than 31", f.Version, s.Name)
			}
			sets[s.Name] = true
		}
		if got := len(f.Tables()); got != 4 {
			t.Errorf("IPv%d: %d named tables, want 4 (raw, mangle, nat, filter)", f.Version, got)
		}
		for _, tbl := range f.Tables() {
			names := map[string]bool{}
			for _, c := range tbl.Chains {
				if len(c.Name) > 28 {
					t.Errorf("IPv%d %s: chain %s: name longer than 28", f.Version, tbl.Name, c.Name)
				}
				if names[c.Name] {
					t.Errorf("IPv%d %s: chain %s twice", f.Version, tbl.Name, c.Name)
				}
				names[c.Name] = true
			}
			check := func(where string, r policy.Rule) {
				switch a := r.Action.(type) {
				case policy.Reject:
					if tbl.Name != policy.TableFilter {
						t.Errorf("IPv%d %s: %s: REJECT is only valid in the filter table", f.Version, tbl.Name, where)
					}
				case policy.NoTrack:
					if tbl.Name != policy.TableRaw {
						t.Errorf("IPv%d %s: %s: NOTRACK is only valid in the raw table", f.Version, tbl.Name, where)
					}
				case policy.Jump:
					if !names[a.Chain] {
						t.Errorf("IPv%d %s: %s jumps to missing chain %s", f.Version, tbl.Name, where, a.Chain)
					}
				case policy.Goto:
					if !names[a.Chain] {
						t.Errorf("IPv%d %s: %s goes to missing chain %s", f.Version, tbl.Name, where, a.Chain)
					}
				}
				for _, c := range r.Match {
					switch m := c.(type) {
					case policy.MatchSet:
						if !sets[m.Set] {
							t.Errorf("IPv%d %s: %s uses missing set %s", f.Version, tbl.Name, where, m.Set)
						}
					case policy.MatchPorts:
						if n := m.Slots(); n > policy.MultiportSlots {
							t.Errorf("IPv%d %s: %s: multiport with %d slots", f.Version, tbl.Name, where, n)
						}
					}
				}
			}
			for _, c := range tbl.Chains {
				for i, r := range c.Rules {
					check(c.Name+"#"+itoa(i), r)
				}
			}
			for _, h := range tbl.Hooks {
				check(h.Chain+" hook", h.Rule)
			}
		}
	}
}
