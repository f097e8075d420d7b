// Package integration holds end-to-end tests of the whole node: the real
// `calico-node run` binary, the real CNI plugin driven by libcni as a
// container runtime drives it, real etcd, and real packets between pods.
//
// # Model
//
// Run as root, the test binary re-executes itself in a private network
// namespace that plays the node: etcd, the agent and the plugin all run
// there, so nothing is ever configured in the machine's own namespace and
// every iptables rule the agent writes dies with the test process. Pods are
// further namespaces created by the CNI plugin; an "outside" namespace
// joined to the node by a veth (uplink0) stands in for the rest of the
// network when host endpoints are tested.
//
// # Design
//
// policy_test.go walks a table of policy cases. Each case stores Calico
// resources (or a Kubernetes NetworkPolicy translated by k8spolicy), then
// polls a TCP/UDP/ICMP probe matrix between the pods (and from pods and
// the outside to the node) until every probe gives the expected verdict or
// a deadline passes, and deletes its resources again. The agent's own
// behaviour across restarts and resyncs is checked on the same node:
// established connections survive a restart, the cali-* chains are
// byte-identical before and after, a rule deleted by hand is restored by
// the next refresh (FELIX_IPTABLESREFRESHINTERVAL) and another program's
// rules are never touched.
//
// kdd_test.go runs the same node on the Kubernetes datastore: a real
// kube-apiserver (package kubetest) on the node namespace's loopback, the
// agent with DATASTORE_TYPE=kubernetes, pods created as Kubernetes Pods
// before their CNI ADD. TestKDDAPIServerOutage stops and restarts the API
// server under a running agent and under one restarted meanwhile.
// CALICO_INTEGRATION_LOGDIR=<dir> keeps every agent's whole log there;
// CALICO_INTEGRATION_LOGLEVEL sets the agents' --log-level.
//
// bench_test.go and throughput_test.go are `make bench-dataplane`: the
// compiler and xtables.Programmer at 1,000 endpoints and 500 policies, the
// change-to-kernel latency through etcd, confwatch and agent.Policy, and
// iperf3 between two pods with and without the policies
// (docs/benchmarks.md).
//
// # Thread safety
//
// Tests here are not parallel: they share the one node namespace.
package integration
