// Package deploy holds the Kubernetes manifests of calico-node and their
// tests; it has no code of its own. Each datastore has a pair of files: the
// RBAC (the calico-node ServiceAccount and least-privilege roles) and the
// manifest (the calico-config ConfigMap and the single-container DaemonSet
// that runs `calico-node run` on every node: agent, BGP, install-cni and the
// leader-elected kube-controllers).
//
//   - etcd: rbac-etcd.yaml and calico-node.yaml (which also holds the
//     calico-etcd-secrets Secret). The ServiceAccount reads Kubernetes and
//     holds the controllers' Lease; Calico's data is in etcd.
//   - Kubernetes datastore (KDD): crds.yaml (Calico's 22 custom resources,
//     generated: see below), rbac-kdd.yaml and calico-node-kdd.yaml
//     (DATASTORE_TYPE=kubernetes, no etcd anywhere).
//   - vagrant/: a three-VM cluster (kubeadm, containerd, an etcd on the
//     control-plane VM) built with the etcd files; see its README.md.
//
// crds.yaml is generated from the Go types by
// internal/datastore/kdd/crdgen, whose test fails when it is stale.
//
// The tests apply every object with `kubectl apply --dry-run=server`
// against a real kube-apiserver (kubetest); check that RBAC is only in the
// RBAC files, binds the DaemonSet's ServiceAccount and has no wildcard;
// check that each DaemonSet's configuration is accepted as the agent and
// install-cni read it; run the kube-controllers and the CNI plugin's API
// reads with nothing but rbac-etcd.yaml; and install the KDD files in
// order on a real API server, then prove with the ServiceAccount's token
// that it may do exactly what calico-node does on KDD (access and rules
// reviews against the list derived from the kind registry, plus the real
// node- and pod-annotation patches and IPAM writes). Installing on a
// cluster is described in docs/kubernetes.md.
package deploy

//go:generate go run ../internal/datastore/kdd/crdgen -o crds.yaml
