// Package testkit groups the test harnesses. They start real parts for the
// tests (etcd, kube-apiserver, kubelet + containerd, network namespaces,
// child processes) and own only what they create. No shipped package
// imports them (make demo's program, integration/demo, which is not
// shipped, writes its control plane's PKI with kubetest's).
//
//	errtest/    a table test's expected error checked in one line
//	etcdtest/   real etcd servers: Debian's etcd-server, embedded, TLS
//	goldentest/ golden files under testdata/, rewritten with -update
//	kubetest/   a real kube-apiserver and kubelet node, built once from the
//	            Go module proxy and cached (kubebins/ prebuilds them)
//	netnstest/  private network namespaces, netlink handles in them, and
//	            Main, the TestMain of packages whose tests play a node
//	proctest/   child processes: logs, Pdeathsig, stop by PID, metrics
//	pkitest/    test certificate authorities and certificates
//	polltest/   waiting for what happens asynchronously: poll until it holds
//	scaletest/  what the scale harnesses share: fleets of agent processes
//	            reporting lines, /proc and Prometheus measurements
//	storetest/  the etcd and Kubernetes datastores opened on those servers,
//	            and the resources tests write to them
//	testbin/    the calico-node binary the tests share (CALICO_NODE_BIN)
//	testsum/    make test's report: go test -json in; failures, skips with
//	            their reasons and "N passed, N failed, N skipped" out
//	texttest/   what a command printed holds each phrase a user looks for
package testkit
