// Package explain answers "what does Calico do with this packet, and
// why?" from the rules the agent programs, never from a second model of
// Calico's semantics.
//
// # API model
//
// Resolve turns what a user names ("namespace/pod", "hostendpoint/NAME",
// "node/NAME" or an IP address) into an End: the endpoint, its node, its
// interface and addresses. Explain takes a Request (two Ends and the
// packet's protocol and ports) and a function returning the compiler
// input of the agent on a given node (agent.PolicySnapshot builds it the
// way the agent does), and returns an Explanation: the verdict and, per
// node the packet crosses (the source's, then the destination's), the
// path through the policy model — the source's egress, then the
// destination's ingress: host endpoint and failsafe rules, each tier in
// order, each policy that selects the endpoint with the rule that matched
// (or that none did, and the tier's default action), Log, Pass, the
// profiles, the final drop — each step with the exact iptables rules it
// corresponds to on that node: table, chain, rule number and felix-style
// hash ("cali:<hash>", the comment the agent writes on the rule), which
// is what `iptables-save -c` counters are read back by.
//
// ExplainHop is the same for one node and one way through it (package
// sim's Hop), for callers that already know the interfaces.
//
// # Design
//
// Each node's snapshot is compiled with policy.Compile, exactly as the
// agent does; the packet is walked through the compiled tables with
// package sim (raw, mangle, filter, nat, in netfilter's order); and the
// rules the packet matched (sim.Hit) are read back through the Origin the
// compiler put on each rule and the ChainEndpoint on each endpoint chain:
// a hit in an endpoint's chain starts that endpoint's Section, hits deeper
// down (its policy, profile, group and failsafe chains) belong to it, and
// a hit at its depth or above in another chain ends it. The verdict is
// the simulator's; the steps only say how it came about.
//
// Impact compares two states of the cluster (before and after a change)
// the same way: for every local endpoint of every node, every peer (the
// other endpoints, the network sets, the nets rules name and an address
// nothing names) and every port the policies name, it explains the
// endpoint's own ingress and egress in both states and reports where the
// verdict differs.
//
// # Thread safety
//
// Everything here is pure: it only reads its arguments.
package explain
