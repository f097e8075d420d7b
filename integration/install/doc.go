// Package install is the install path a user takes, run for real: the
// calico-node image built from the binary and Debian's packages (package
// ociimage, `make image`) and imported into a real node's containerd, then
// the files of deploy/ applied with kubectl exactly as docs/kubernetes.md
// says, for each datastore. The DaemonSet's privileged, host-network pod
// runs calico-node from that image; its install-cni puts the plugin and the
// conflist in the node's CNI directories, the node turns Ready, and pods
// get addresses from the pool, reach each other, are cut off by a
// NetworkPolicy and give their addresses back when deleted.
//
// # Design
//
// As in package kubelet, the test binary re-executes itself in a private
// network namespace that plays the node's host (kube-apiserver, kubelet,
// containerd, the calico-node pod, the pods' host ends), and here also in
// a private mount namespace: the hostPath volumes of the DaemonSet
// (/etc/cni/net.d, /opt/cni/bin, /var/lib/calico, /var/run/calico,
// /run/xtables.lock; /lib/modules only made to exist) are the test's own
// empty directories there (kubetest.PrivateHostPaths), read off the
// manifest itself. The node's containerd takes its CNI configuration from
// the standard /etc/cni/net.d and /opt/cni/bin, so the manifest runs as it
// is: the test changes only what docs/kubernetes.md tells a user to set
// (the pool CIDR, the etcd endpoints, the kubernetes-services-endpoint
// ConfigMap of a cluster without kube-proxy). The machine's own paths are
// checked untouched at the end.
//
// The package has only tests; they need root.
package install
