// Package xtables programs the kernel's iptables and ipset state from the
// policy compiler's output, touching only what calico-node owns.
//
// API model: Programmer.Apply takes the desired tables and IP sets of one
// IP family (policy.Family) and makes the kernel match them. It owns every
// chain named cali-*, every IP set named cali4*/cali6*, and exactly one hook
// rule per built-in chain it hooks; other software's chains, rules and sets
// are never touched.
//
// Design (after felix's iptables/table.go):
//   - Read back cheaply: `iptables-save -t TABLE` is parsed only for chain
//     names and the "cali:<hash>" comments of rules; a chain whose list of
//     hashes equals the desired list is left alone. A rule's hash covers
//     its chain, its text and how many equal rules precede it, not the
//     rules before it (policy.Chain.Hashes), so a changed, missing, moved
//     or foreign rule shows up as a differing list, and an inserted rule
//     changes no other rule's hash.
//   - Hash only what changed: the hashes of the last Apply are kept with
//     the identity of the rules they hash (policy.Chain.Identity); with
//     policy.Compiler, an unchanged chain's rules are the same slice, so
//     a small change hashes a few chains instead of all 31k rules.
//   - Write once: all changed chains of all tables go into ONE
//     `iptables-restore --noflush --wait` call. A chain whose rules in the
//     kernel are an in-order part of the desired ones gets the missing
//     rules inserted in place ("-I chain N"); any other changed chain is
//     rewritten whole (its ":chain" header flushes it). On nf_tables a
//     commit that only adds costs a few milliseconds and one that removes
//     or replaces anything ~12 ms more, so a new pod (its chains, a rule
//     in each dispatch chain) costs little. Stale cali-* chains are
//     flushed and deleted in the same transaction, and hook rules are
//     re-inserted only when missing or out of place.
//   - IP sets are updated before the rules that reference them: created,
//     or refilled through a scratch set and swapped (never empty in
//     between) when new or of another maxelem; an existing set gets only
//     its added and removed members. Stale sets are destroyed after the
//     rules that used them are gone.
//   - Unchanged desired state means no write at all: an agent restart
//     changes nothing in the kernel and drops no packet.
//   - iptables-nft and iptables-legacy are both supported; DetectMode
//     picks the one the host's other users (kubelet, kube-proxy) program,
//     also from inside a container whose own `iptables` defaults to the
//     other; Detect reads `iptables --version` only. `--wait` makes every call respect the
//     xtables lock other tools hold.
//
// Metrics: calico-node's own (calico_iptables_*, by family) and Felix's
// (felix_iptables_*, felix_ipset*), with Felix's names, labels and help,
// shared by the programmers of both families (NewMetrics).
//
// Thread safety: a Programmer is used by one goroutine (the policy actor).
package xtables
