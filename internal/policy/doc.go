// Package policy compiles Calico's policy model into the iptables chains
// and IP sets that enforce it, the way felix does, without touching the
// kernel.
//
// # API model
//
// Compile takes a Snapshot (the cluster's workload and host endpoints,
// policies, profiles, network sets, tiers, pools and nodes, this node's
// name and the dataplane Config derived from FelixConfiguration by
// ConfigFromFelix) and returns a Result: per IP family, the complete
// desired contents of our part of the raw, mangle, nat and filter tables
// and the desired IP sets, plus a list of the problems (bad selectors,
// unsupported fields) that made it leave something out or enforce it
// differently.
//
//   - A Table lists every cali-* chain we want, in name order. Each Chain
//     holds Rules made of typed criteria (MatchProtocol, MatchNet,
//     MatchSet, MatchPorts, MatchICMP, MatchMark, MatchConntrack,
//     MatchIface, MatchRPFilter, MatchAddrType) and an Action (Accept, Drop, Reject, Return, Jump, Goto,
//     SetMark, Log, Masquerade, SNAT, NoTrack), so other code can interpret
//     them (see package sim) as well as render them. Family.Tables lists
//     all four tables, always named, even when one holds no chain, so that
//     a programmer visits it and removes stale chains.
//   - Hooks are the one rule per built-in chain (raw PREROUTING and OUTPUT,
//     mangle PREROUTING and POSTROUTING, filter INPUT, FORWARD and OUTPUT,
//     nat POSTROUTING) that sends packets into our chains.
//   - Chain.Hashes gives each rule a hash, 16 characters of base64 of a
//     SHA-224 over the chain name, the rule and the count of equal rules
//     before it (not felix's chain over the rules up to it: a rule
//     inserted leaves the others' hashes as they were). Render
//     writes it as a comment ("-m comment --comment "cali:<hash>"") before
//     each rule, so a programmer can compare the kernel's rules with the
//     desired ones by reading those comments back, without parsing rules.
//   - Each Rule's Origin says what it enforces in the policy model (the
//     start or end of a tier, the jump into a policy, rule 3 of a policy,
//     a failsafe port...) and each endpoint chain's Endpoint whose policy
//     it applies; neither is rendered. Package explain reads them to turn
//     a packet's path through the rules back into tiers, policies and
//     rules.
//   - Render(table, chains, hooks...) is the iptables-restore --noflush
//     payload that replaces exactly the given chains; RenderIPSets is the
//     ipset restore payload that fills each set through a scratch set and
//     swaps it in, so a set is never seen empty.
//
// Programming the kernel is the caller's job: create and swap the sets
// before restoring rules that use them, restore the tables, insert missing
// hooks, then delete cali-* chains that are no longer desired and, last,
// IP sets that no rule uses any more.
//
// # Semantics
//
// They are Calico's (felix v3.31: rules/, calc/ and libcalico-go's
// update processors), including its quirks:
//
//   - An endpoint's labels are its own plus its profiles' labelsToApply
//     (own labels win, then earlier profiles); kns.<namespace> and
//     ksa.<namespace>.<account> profiles carry the namespace's labels as
//     pcns.* and the service account's as pcsa.*, which namespaceSelector,
//     serviceAccountSelector and serviceAccounts match against. Selectors
//     are combined as text exactly as libcalico-go combines them, so their
//     IDs, and the IP set and chain names derived from them, are Calico's.
//   - Policies are ordered by tier (order, unset last, then name), then
//     order (unset last), then name ("namespace/name" for NetworkPolicy).
//     For each direction, the tiers with a policy that selects the endpoint
//     and governs that direction apply in turn: Allow accepts, Deny drops,
//     Pass skips to the next tier, Log logs and continues; a packet no
//     policy of a tier decided meets the tier's defaultAction (Deny unless
//     the Tier says Pass). Profiles apply after the last tier, which is
//     only reached when no policy selects the endpoint in that direction or
//     every tier passed; what no profile allows is dropped. Established and
//     related traffic is accepted first; conntrack-invalid traffic dropped.
//     As in felix, the mark a Pass sets is cleared at the start of each
//     tier but not before the profiles: after a Pass in the last tier, a
//     profile's first Pass rule returns whether or not it matches,
//     skipping the rest of that profile.
//   - Rule peers given by selectors are IP set matches: one set per
//     distinct selector (holding the addresses of every matching workload
//     and host endpoint and the nets of every matching network set, on any
//     node) and one hash:ip,port set per named port, so rules grow with
//     policies, not with endpoints or peers.
//   - Traffic from a workload to the host gets the workload's egress policy
//     and then Config.EndpointToHostAction; traffic from the host to its
//     workloads is not policed. Host endpoints police traffic into (ingress)
//     and out of (egress) the host on their interface; the failsafe ports
//     are accepted before their policy. natOutgoing pools are masqueraded
//     when leaving all pools.
//   - When the pools use VXLAN or IP-in-IP, the host's encapsulated
//     packets to and from the other nodes (the Nodes' addresses, in the
//     all-vxlan-net and all-hosts-net IP sets) are accepted before host
//     endpoint policy, so that no policy can split the pod network, and
//     encapsulated packets to the host from anyone else are dropped (see
//     encap.go).
//   - Host endpoint policy comes in four kinds, as felix splits it. Normal
//     policy (filter INPUT and OUTPUT) polices traffic to and from the host
//     itself. Normal policy with applyOnForward also polices traffic routed
//     through the endpoint (filter FORWARD: ingress as it comes in, egress
//     as it leaves); an endpoint no such policy selects lets routed traffic
//     through. Traffic the host sends that the nat table DNAT-ed (to a
//     Service's backend, say) gets normal egress policy in mangle
//     POSTROUTING instead of filter OUTPUT, which runs before the kernel
//     reroutes the packet for its new destination: the same tiers and
//     profiles, allow as RETURN, deny as DROP, after the failsafe ports;
//     packets already accepted on their way (routed ones, which
//     filter FORWARD judged) and traffic to local workloads are left
//     alone. That chain is hooked only on nodes with a host endpoint.
//     doNotTrack policy (raw PREROUTING and OUTPUT, before
//     conntrack) exempts what it allows from conntrack; preDNAT policy
//     (mangle PREROUTING, ingress only) sees the destination before the nat
//     table rewrites it. What those two allow sets the accept mark bit, so
//     the filter table accepts it without applying normal policy
//     again (for untracked packets, which have no conntrack entry, that is
//     what keeps them from being dropped); what they deny is dropped there
//     and then (DROP: the kernel only allows REJECT in filter); what they
//     do not decide goes on to normal policy. Their tiers have no default
//     action and they use no profiles. They never apply to workloads;
//     doNotTrack policy does not apply to the "*" host endpoint (reported,
//     as felix warns), while its preDNAT policy applies to every interface
//     whose own endpoint has none. Failsafe ports are accepted in all three
//     tables; in raw, so are the replies of the other direction's.
//   - Packets from workload interfaces must pass a strict reverse-path
//     check in raw PREROUTING (the source must route back out of the
//     interface they came in on), so a pod cannot send with another pod's
//     address; a workload endpoint's allowSpoofedSourcePrefixes exempt
//     those sources (cali-rpf-skip) when FelixConfiguration's
//     workloadSourceSpoofing is "Any". Otherwise they are reported and
//     ignored, where felix would treat the whole endpoint as missing.
//   - A rule with a match this dataplane cannot enforce (services, which
//     need Kubernetes Service endpoints; http, which needs an L7 proxy) is
//     reported and compiled so that the policy never allows more than
//     written: an Allow or Log rule is left out, a Deny rule denies without
//     the match, a Pass rule becomes such a Deny.
//
// # Not modelled
//
// felix's raw NOTRACK of VXLAN and its masquerade port range that avoids
// the VXLAN port, WireGuard host rules, IPVS support, DSCP and Istio
// marking in mangle POSTROUTING, service CIDR loop blocking, Log rate
// limits and log prefix expansion are not generated. felix accepts
// policy-allowed forwarded packets at the end of the built-in FORWARD
// chain; here the ACCEPT is the last rule of cali-FORWARD, so that FORWARD
// keeps a single hook rule.
//
// # Design
//
// The compiler first resolves the snapshot into a model (labelled
// entities, ordered tiers, local endpoints with the tiers that apply to
// them for each kind of policy and direction), parses every used policy's
// and profile's rules once, then renders each family, table by table.
// Only chains reachable from a table's top-level chains are kept, and only
// the IP sets their rules use. Everything is
// sorted so the same snapshot always gives byte-identical output.
//
// Compiler is the incremental form the agent uses: Compiler.Compile(s)
// equals Compile(s) exactly (TestCompilerMatchesCompile checks it after
// every step of long random change sequences), but it keeps endpoint
// chains by a key of what they are built from (interface, kind,
// direction, the tiers and policies selecting the endpoint, profiles) and
// each policy selector's verdict per interned label set, so a change
// re-renders only the endpoint chains it touches and re-evaluates only new
// selectors and label sets. An unchanged endpoint chain comes back as the
// very Rules slice of the previous result (Chain.Identity), which lets the
// programmer skip re-hashing it. Workloads with equal labels share one
// evaluation of the policies in either form.
//
// # Thread safety
//
// Compile and the rendering functions are pure: they only read their
// arguments, so they may run concurrently. A Result is not modified after
// Compile returns and may be shared read-only; a Compiler's results share
// Rules with earlier ones, so they must never be modified. A Compiler is
// used by one goroutine.
package policy
