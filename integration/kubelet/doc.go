// Package kubelet is the end-to-end test of calico-node on a real
// Kubernetes node: kube-apiserver, kubelet and containerd (kubetest) on
// this machine, with `calico-node run` started the way the DaemonSet
// starts it (install-cni, the kube-controllers, the policy dataplane).
// Pods are created with kubectl; kubelet asks containerd for a sandbox and
// containerd runs the installed calico plugin with calico-ipam.
//
// # Design
//
// The test binary re-executes itself in a private network namespace (see
// TestMain) that plays the node's host namespace: kube-apiserver, kubelet,
// containerd, the agent and the pods' host ends all live there, with an
// uplink (a veth into nowhere) carrying the node's address. On a real node the agent
// programs the host's namespace and, like felix, owns everything named
// cali* in it: it deletes cali-* chains and cali ipsets it did not ask for.
// Run in the machine's namespace, it would take over (and the test's
// cleanup would then delete) whatever Calico state the machine already
// has, say from `make run`; so the node gets a namespace of its own, and
// "own only what it creates" holds by construction. The test still
// removes, at the end, exactly the chains, ipsets and routes that appeared
// after the agent started, and asserts that the node's namespace is as it
// was before (kubetest undoes kubelet's KUBE-* chains and its sysctls). A
// chain and an ipset named like Calico's, made in the machine's namespace
// before the node starts, must come out of the run untouched, and the
// pods' veths must appear in the node's namespace only.
//
// The same run first starts pods with the reference ptp plugin, so the
// pod create→Running figure of the calico plugin has a baseline measured
// on the same machine in the same conditions.
//
// The package has only tests; they need root.
package kubelet
