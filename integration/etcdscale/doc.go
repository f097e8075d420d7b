// Package etcdscale is the etcd scale harness: Calico at hundreds and
// thousands of nodes, simulated on one machine against a real 3-member
// etcd cluster, with the figures written for docs/benchmarks.md and
// plotted by its plot command.
//
// # Model
//
// The datastore is Debian's etcd, three processes on loopback
// (etcdtest.StartCluster). The cluster is seeded as Calico recommends
// above 100 nodes (no node-to-node mesh; a few route reflector nodes every
// node peers with), with a VXLAN pool, per-namespace profiles and
// label-selecting policies. Each simulated node is the agent's control
// plane on the product's code, with no kernel behind it: its own
// datastore connection, confwatch over every kind, BGP's IPAM watch
// (bgp.WatchIPAM) with the speaker's session and route computations
// (bgp.Compute, bgp.Adverts), and the overlay's block watch with its route
// computation (overlay.Compute). Nodes run as goroutine sets, many to a
// child process (the test binary re-executed at a lower priority than
// etcd), the first few alone in a process each to calibrate the per-node
// cost; those also run the policy actor (agent.Policy), which compiles
// every change — every node doing so is more CPU than the machine has.
// In fanout mode the nodes read one fan-out (what `calico-node fanout`
// runs) instead of watching etcd.
//
// The parent plays the CNI plugin of every node: pods are started at a
// steady rate (capped so that pods/s × nodes, which the events etcd sends
// and the nodes decode grow with, stays within what one machine carries)
// on random nodes (Calico IPAM allocation, WorkloadEndpoint
// write) and torn down after a lifetime (endpoint delete, release), and a
// probe GlobalNetworkPolicy is changed at intervals. Mid-churn the etcd
// leader is killed with SIGKILL and restarted. Measured: etcd's CPU, RSS,
// database size and watch events, the agents' CPU and memory, the time
// from a policy write until every node has it in its cache (and the
// calibration nodes have compiled it) and from a pod's endpoint write
// until every node routes it, and the BGP sessions with
// reflectors against the full mesh. Checked at the end: no address
// allocated twice (IPAM's own check, calicoctl ipam check's), no
// acknowledged write lost, every node's cache and block view equal to
// etcd's, the reflector topology as documented.
//
// # Design
//
// The harness is test code (`make bench-etcd-scale` runs
// BenchmarkEtcdScale; TestEtcdScaleHarness runs it small under `make
// test`). This file's package exports only the results (Results, Run,
// WriteResults, ReadResults), which the plot command
// (integration/etcdscale/plot) turns into PNGs under docs/img.
//
// # Thread safety
//
// WriteResults and ReadResults are safe from any goroutine.
package etcdscale
