// Package deploy holds the Kubernetes manifests of calico-node and their
// tests; it has no code of its own.
//
//   - calico-node.yaml: the calico-config ConfigMap (etcd endpoints,
//     backend, the CNI config template), the calico-etcd-secrets Secret,
//     the calico-node ServiceAccount with least-privilege RBAC (the CNI
//     plugin's reads, the kube-controllers' watches, the controllers' Lease
//     in kube-system), and the single-container DaemonSet that runs
//     `calico-node run` on every node: agent, BGP, install-cni and the
//     leader-elected kube-controllers.
//   - vagrant/: a three-VM cluster (kubeadm, containerd, an etcd on the
//     control-plane VM) built with these manifests; see its README.md.
//
// The tests apply every object with `kubectl apply --dry-run=server`
// against a real kube-apiserver (kubetest), run the kube-controllers and
// the CNI plugin's API reads with nothing but the manifest's RBAC, and
// check that the DaemonSet's configuration is accepted as the agent reads
// it. Installing on a cluster is described in docs/kubernetes.md.
package deploy
