package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// The top-level filter and nat chains, as felix's static.go builds them
// without the features this compiler leaves out (Wireguard host rules,
// IPVS). The raw and mangle chains are in prerouting.go; the overlay's
// rules in encap.go.

// filterAllow is what the filter table does with allowed traffic
// (iptablesFilterAllowAction).
func (c *famCompiler) filterAllow() Action {
	if c.cfg.FilterAllowAction == "RETURN" {
		return Return{}
	}
	return Accept{}
}

func (c *famCompiler) wildcards() []string {
	out := make([]string, len(c.cfg.InterfacePrefixes))
	for i, p := range c.cfg.InterfacePrefixes {
		out[i] = p + "+"
	}
	return out
}

// inputChain: traffic to the host. The overlay's encapsulated packets
// are decided first (accepted from peers, dropped from anyone else: from
// workloads too); from a workload the rest goes to cali-wl-to-host;
// anything else is subject to host endpoint policy.
func (c *famCompiler) inputChain() Chain {
	m := c.marks
	rules := c.encapInputRules()
	for _, w := range c.wildcards() {
		rules = append(rules, Rule{Match: Match{MatchIface{Name: w}}, Action: Goto{chainWorkloadToHost}})
	}
	accepted := c.orig.get(Origin{Kind: OriginAccepted})
	rules = append(rules,
		Rule{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: c.filterAllow(), Origin: accepted},
		Rule{Action: SetMark{Mark: 0, Mask: m.all()}},
		Rule{Action: Jump{chainFromHEPDispatch}},
		Rule{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: c.filterAllow(), Comment: []string{"Host endpoint policy accepted packet."}, Origin: accepted},
	)
	return Chain{Name: chainInput, Rules: rules}
}

// workloadToHostChain applies the workload's egress policy, then the
// configured DefaultEndpointToHostAction.
func (c *famCompiler) workloadToHostChain() Chain {
	var rules []Rule
	if c.version == 6 {
		// A workload must be able to do neighbour discovery and MLD with
		// its router (the host) whatever its egress policy says.
		for _, t := range []uint8{130, 131, 132, 133, 135, 136} {
			rules = append(rules, Rule{Match: Match{MatchProtocol{Num: 58}, MatchICMP{V6: true, Type: t}}, Action: c.filterAllow()})
		}
	}
	rules = append(rules, Rule{Action: Jump{chainFromWLDispatch}})
	var final Action
	switch c.cfg.EndpointToHostAction {
	case "ACCEPT":
		final = c.filterAllow()
	case "RETURN":
		final = Return{}
	default:
		final = Drop{}
	}
	rules = append(rules, Rule{Action: final, Comment: []string{"Configured DefaultEndpointToHostAction"},
		Origin: c.orig.get(Origin{Kind: OriginEndpointToHost, Detail: c.cfg.EndpointToHostAction})})
	return Chain{Name: chainWorkloadToHost, Rules: rules}
}

// outputChain: traffic from the host. Traffic to workloads is not policed
// (as in Calico: the host may always reach its workloads); the host's
// encapsulated packets to its overlay peers are accepted; the rest is
// subject to host endpoint egress policy unless it was DNAT-ed.
func (c *famCompiler) outputChain() Chain {
	m := c.marks
	accepted := c.orig.get(Origin{Kind: OriginAccepted})
	rules := []Rule{{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: c.filterAllow(), Origin: accepted}}
	for _, w := range c.wildcards() {
		rules = append(rules, Rule{Match: Match{MatchIface{Out: true, Name: w}}, Action: Return{},
			Origin: c.orig.get(Origin{Kind: OriginHostToWorkload, Detail: w})})
	}
	rules = append(rules, c.encapOutputRules()...)
	rules = append(rules,
		Rule{Action: SetMark{Mark: 0, Mask: m.all()}},
		Rule{Match: Match{MatchConntrack{Not: true, States: "DNAT"}}, Action: Jump{chainToHEPDispatch}},
		Rule{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: c.filterAllow(), Comment: []string{"Host endpoint policy accepted packet."}, Origin: accepted},
	)
	return Chain{Name: chainOutput, Rules: rules}
}

// forwardChain: routed traffic. A packet gets the applyOnForward ingress
// policy of the host endpoint it came in on (unless its raw or mangle
// policy already accepted it: the accept bit survives from there), the
// egress policy of the workload it came from, the ingress policy of the
// workload it goes to (both, between two local workloads), and the
// applyOnForward egress policy of the host endpoint it leaves by. The
// endpoint chains drop or return with the accept bit, which is acted on
// here. felix puts that final ACCEPT at the end of the built-in FORWARD
// chain; keeping it in our chain leaves a single hook rule in FORWARD, and
// it does the same as felix's own INPUT and OUTPUT chains, which also
// accept directly.
func (c *famCompiler) forwardChain() Chain {
	m := c.marks
	var rules []Rule
	// Established and related traffic of a workload is accepted before
	// the dispatch chains: every endpoint chain a workload's packet can
	// reach (its own, a host endpoint's forward chain) accepts it first
	// thing anyway, and with many endpoints the dispatch is most of the
	// rules a packet walks (~50 with 1,000 endpoints), which showed as
	// several percent of pod-to-pod throughput. The one difference to
	// felix: a connection of an interface no endpoint names any more
	// keeps flowing (felix's dispatch drops it as "Unknown interface");
	// new connections of it are still dropped.
	// With iptablesFilterAllowAction Return the accept bit goes with the
	// packet, as the endpoint chains' established rules set it: mangle
	// POSTROUTING then knows it was routed and leaves it alone.
	allow := c.filterAllow()
	for _, w := range c.wildcards() {
		for _, out := range []bool{false, true} {
			match := Match{MatchIface{Out: out, Name: w}, MatchConntrack{States: "RELATED,ESTABLISHED"}}
			est := c.orig.get(Origin{Kind: OriginEstablished})
			if _, ok := allow.(Accept); !ok {
				rules = append(rules, Rule{Match: match, Action: SetMark{Mark: m.accept, Mask: m.accept}, Origin: est})
			}
			rules = append(rules, Rule{Match: match, Action: allow, Origin: est})
		}
	}
	rules = append(rules,
		Rule{Action: SetMark{Mark: 0, Mask: m.all() &^ m.accept}},
		Rule{Match: Match{MatchMark{Mark: 0, Mask: m.accept}}, Action: Jump{chainFromHEPForward}},
	)
	for _, w := range c.wildcards() {
		rules = append(rules,
			Rule{Match: Match{MatchIface{Name: w}}, Action: Jump{chainFromWLDispatch}},
			Rule{Match: Match{MatchIface{Out: true, Name: w}}, Action: Jump{chainToWLDispatch}},
		)
	}
	rules = append(rules, Rule{Action: Jump{chainToHEPForward}})
	if c.cidrBlockRules() != nil {
		rules = append(rules, Rule{Action: Jump{chainCIDRBlock}})
	}
	rules = append(rules,
		Rule{Match: Match{MatchMark{Mark: m.accept, Mask: m.accept}}, Action: allow, Comment: []string{"Policy explicitly accepted packet."},
			Origin: c.orig.get(Origin{Kind: OriginAccepted})},
	)
	return Chain{Name: chainForward, Rules: rules}
}

// cidrBlockRules are felix's service loop prevention: when BGP
// advertises service ranges, the network routes them to the nodes, and a
// packet for an address of the ranges that no service has (kube-proxy did
// not DNAT it) would follow this node's default route back out, to be
// routed back here, until its TTL ran out. Routed traffic still addressed
// to such a range after policy is dropped or rejected instead. Felix
// always jumps to its (then empty) cali-cidr-block chain; we leave the
// chain and the jump out when there is nothing to block, which changes no
// packet's fate.
func (c *famCompiler) cidrBlockRules() []Rule {
	var action Action
	switch c.cfg.ServiceLoopPrevention {
	case "DISABLED":
		return nil
	case "REJECT":
		action = Reject{}
	default:
		action = Drop{}
	}
	var rules []Rule
	for _, s := range slices.Sorted(slices.Values(c.cfg.ServiceCIDRs)) { // felix's order
		p, err := parsePrefix(s)
		if err != nil || p.Addr().Is6() != (c.version == 6) {
			continue // validation refuses bad ranges; the other family's are its own
		}
		rules = append(rules, Rule{Match: Match{MatchNet{Dir: Dst, Net: p}}, Action: action,
			Origin: c.orig.get(Origin{Kind: OriginServiceLoop, Detail: p.String()})})
	}
	return rules
}

// ServiceCIDRs are the service ranges a BGPConfiguration advertises, in
// the order felix gathers them: cluster IPs, external IPs, load balancer
// IPs. Only the "default" BGPConfiguration's count, as in felix.
func ServiceCIDRs(spec *api.BGPConfigurationSpec) []string {
	if spec == nil {
		return nil
	}
	var out []string
	for _, b := range spec.ServiceClusterIPs {
		out = append(out, b.CIDR)
	}
	for _, b := range spec.ServiceExternalIPs {
		out = append(out, b.CIDR)
	}
	for _, b := range spec.ServiceLoadBalancerIPs {
		out = append(out, b.CIDR)
	}
	return out
}

// failsafeChain accepts the failsafe ports: inbound to the host's ports,
// outbound to remote ports. A failsafe entry with a net only applies to
// that net's family. In the raw table, which sees packets before
// conntrack, the chain also accepts the replies of the other direction's
// failsafe connections, so that doNotTrack policy cannot leave them
// untracked (or drop them); they still need a conntrack entry to pass the
// filter table.
func (c *famCompiler) failsafeChain(name string, inbound, raw bool) Chain {
	own, other := c.cfg.FailsafeInbound, c.cfg.FailsafeOutbound
	if !inbound {
		own, other = other, own
	}
	rules := c.failsafeRules(own, Dst, inbound)
	if raw {
		rules = append(rules, c.failsafeRules(other, Src, inbound)...)
	}
	return Chain{Name: name, Rules: rules}
}

// failsafeRules accepts the ports as the given end's port; the net, if
// any, is the remote end: the source inbound, the destination outbound.
func (c *famCompiler) failsafeRules(ports []api.ProtoPort, portDir Dir, inbound bool) []Rule {
	var rules []Rule
	for _, pp := range ports {
		proto := strings.ToLower(pp.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		m := Match{MatchProtocol{Name: proto}, MatchPorts{Dir: portDir, Ports: []PortRange{{pp.Port, pp.Port}}}}
		if pp.Net != "" {
			n, err := parsePrefix(pp.Net)
			if err != nil || n.Addr().Is6() != (c.version == 6) {
				continue
			}
			dir := Dst
			if inbound {
				dir = Src
			}
			m = append(m, MatchNet{Dir: dir, Net: n})
		}
		detail := proto + ":" + strconv.Itoa(int(pp.Port))
		if pp.Net != "" {
			detail += " " + pp.Net
		}
		rules = append(rules, Rule{Match: m, Action: Accept{}, Origin: c.orig.get(Origin{Kind: OriginFailsafePort, Detail: detail})})
	}
	return rules
}

// natChains: masquerade traffic from natOutgoing pools to anywhere outside
// all pools, as felix's NATOutgoingChain: with natPortRange, TCP and UDP
// get source ports from the range (and return before the catch-all rule),
// other protocols the plain action; iptablesNATOutgoingInterfaceFilter
// limits every rule to that outgoing interface.
func (c *famCompiler) natChains(active bool) []Chain {
	var rules []Rule
	if active {
		var snat Action = Masquerade{RandomFully: c.cfg.NATRandomFully}
		addr, err := netip.ParseAddr(c.cfg.NATOutgoingAddress)
		hasAddr := err == nil && addr.Is6() == (c.version == 6)
		if hasAddr {
			snat = SNAT{To: addr.String(), RandomFully: c.cfg.NATRandomFully}
		}
		rule := func(proto string, a Action) Rule {
			m := Match{
				MatchSet{Dir: Src, Set: setName(c.version, setIDMasqPools)},
				MatchSet{Not: true, Dir: Dst, Set: setName(c.version, setIDAllPools)},
			}
			if c.cfg.NATExcludeHosts {
				m = append(m, MatchSet{Not: true, Dir: Dst, Set: setName(c.version, setIDAllHosts)})
			}
			if proto != "" {
				m = append(m, MatchProtocol{Name: proto})
			}
			if c.cfg.NATOutgoingInterface != "" {
				m = append(m, MatchIface{Out: true, Name: c.cfg.NATOutgoingInterface})
			}
			return Rule{Match: m, Action: a, Origin: c.orig.get(Origin{Kind: OriginNATOutgoing})}
		}
		if pr := c.cfg.NATPortRange; pr.Last > 0 {
			ports := fmt.Sprintf("%d-%d", pr.First, pr.Last)
			var ranged Action = Masquerade{ToPorts: ports, RandomFully: c.cfg.NATRandomFully}
			if hasAddr {
				to := addr.String() + ":" + ports
				if addr.Is6() {
					to = "[" + addr.String() + "]:" + ports
				}
				ranged = SNAT{To: to, RandomFully: c.cfg.NATRandomFully}
			}
			rules = append(rules,
				rule("tcp", ranged), rule("tcp", Return{}),
				rule("udp", ranged), rule("udp", Return{}))
		}
		rules = append(rules, rule("", snat))
	}
	return []Chain{
		{Name: chainNATPostrouting, Rules: []Rule{{Action: Jump{chainNATOutgoing}}}},
		{Name: chainNATOutgoing, Rules: rules},
	}
}
