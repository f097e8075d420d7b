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
//     blockaffinities, ipamhandles and ipamconfigs (ipam*.go): a block is
//     named after its CIDR ("10-244-166-128-26"), an affinity
//     "<node>-<block name>" (hashed when too long) with Calico's
//     affinity-type, ip-version and hostname-hash labels, a handle by its
//     ID in lower case, the config "default"; the spec is the etcd value
//     in the CRD's spelling (an affinity's "deleted" is a string), the
//     annotation projectcalico.org/metadata is {"creationTimestamp":null}
//     (with the labels on affinities), and a key's revision is its
//     object's resourceVersion. A Txn is applied write by write and
//     undone when a later write loses (see datastore.KV).
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
// # Thread safety
//
// A Store is safe for concurrent use. Each Watch runs one goroutine per
// source, owning that source's state.
package kdd
