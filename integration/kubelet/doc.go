// Package kubelet is the end-to-end test of calico-node on a real
// Kubernetes node: kube-apiserver, kubelet and containerd (kubetest) on
// this machine, with `calico-node run` started the way the DaemonSet
// starts it (install-cni, the kube-controllers, the policy dataplane).
// Pods are created with kubectl; kubelet asks containerd for a sandbox and
// containerd runs the installed calico plugin with calico-ipam.
//
// # Design
//
// The node's network namespace is the host's, as on a real node, so the
// test changes the host: routes and cali* links for pods, cali-* iptables
// chains and ipsets from the dataplane, KUBE-* chains and sysctls from
// kubelet. kubetest undoes kubelet's changes; the test removes what the
// agent leaves behind on exit (felix, too, leaves its chains for the next
// start) and then asserts that the host is as it was before.
//
// The same run first starts pods with the reference ptp plugin, so the
// pod create→Running figure of the calico plugin has a baseline measured
// on the same machine in the same conditions.
//
// The package has only tests; they need root.
package kubelet
