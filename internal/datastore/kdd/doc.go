// Package kdd stores Calico's data in the Kubernetes API, as Calico v3.31
// does with DATASTORE_TYPE=kubernetes ("KDD"), so that a cluster moves
// between real Calico and calico-node with nothing to migrate.
//
// # Storage (libcalico-go's lib/backend/k8s rules)
//
//   - Most kinds are custom resources of crd.projectcalico.org/v1, plural =
//     lower-case kind + "s", with the v3 spec unchanged and the v3 metadata
//     (name when it differs, creationTimestamp, labels, annotations) in the
//     annotation projectcalico.org/metadata; a v3 uid is the CRD uid with
//     the bits of each byte reversed (bytes 6 and 8 kept).
//   - Node is the Kubernetes Node with projectcalico.org/* annotations;
//     WorkloadEndpoints are computed from Pods (the CNI plugin writes the
//     cni.projectcalico.org/* pod annotations); Profiles from Namespaces
//     and ServiceAccounts; Kubernetes NetworkPolicies are read as
//     knp.default.* NetworkPolicies.
//   - IPAM (Store.IPAM) maps Calico's etcd IPAM keys onto ipamblocks,
//     blockaffinities, ipamhandles and ipamconfigs.
//
// # Design
//
// A mapper per kind knows its sources (the Kubernetes collections it is
// computed from), how to convert one object of a source, and how to write.
// List and Watch are generic over sources: a watch converts each changed
// Kubernetes object again and sends the difference in what it yields, and
// a failed or expired watch relists and sends the difference too. Requests
// are plain JSON over client-go's transport (credentials, TLS, token
// rotation) without client-go's schemes, which the CNI plugin would pay
// for at every start. Every update carries the resourceVersion it read:
// the API server's compare-and-swap.
//
// # Custom resources and policies (crd.go, crdmeta.go, policy.go)
//
// Writes are those of libcalico-go's customK8sResourceClient: Create is a
// POST; Update and Apply read the stored object (its creationTimestamp
// lives in the metadata annotation and is kept) and PUT at the caller's
// resourceVersion or, without one, at the one read, retrying a lost race a
// bounded number of times; Delete sends a resourceVersion precondition and
// returns the object as it was. Policies are stored under their tier-
// prefixed name (datastore.PolicyNames, shared with the etcd backend: a
// name Calico refuses, "noprefix" in tier "security", is stored and shown
// as "security.noprefix"); a default-tier policy keeps its tier implicit
// (no tier label, no spec.tier), which Calico's clientv3 adds only when it
// presents one. NetworkPolicy also lists the Kubernetes NetworkPolicies as
// knp.default.<name> (k8spolicy's translation, Calico's metadata); real
// calicoctl on KDD lists only the custom resources, but everything reading
// policies here — the policy compiler above all — must see both, as in
// etcd mode where the policy controller copies them. Writes to them are
// refused: Kubernetes owns them. KubeControllersConfiguration's node
// controller cannot have syncLabels Disabled, as Calico refuses on KDD.
//
// # Thread safety
//
// A Store is safe for concurrent use. Each Watch runs one goroutine per
// source, owning that source's state.
package kdd
