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
//   - A Node is the Kubernetes Node of its name: its Calico fields are
//     projectcalico.org/* annotations (projectcalico.org/labels holds the
//     Calico-only labels as JSON), merged on read with the Kubernetes
//     labels (echoed in the computed projectcalico.org/kube-labels
//     annotation, so that writing back what was read copies none of
//     them), spec.addresses, orchRefs and status.podCIDRs; its uid is the
//     Kubernetes Node's. A write is a merge patch of nodes/<name>/status
//     naming the resourceVersion; a field dropped loses its annotation.
//     Calico creates and deletes no Kubernetes Nodes: Create (and Apply
//     of a Node whose Kubernetes Node does not exist) and Delete fail with
//     datastore.ErrNotSupported, as in Calico.
//   - A WorkloadEndpoint is computed from each scheduled Pod not on the
//     host's network: <node>-k8s-<pod>-eth0, the pod's uid and
//     resourceVersion, its addresses from the pod status or the
//     cni.projectcalico.org/podIP(s) annotations (none once the pod has
//     finished). A write stores only what Calico's CNI plugin stores: the
//     containerID, podIP and podIPs annotations, patched onto pods/<pod>/
//     status, conditional on the pod's uid but not its resourceVersion
//     (kubelet rewrites the status during ADD); Delete sets podIP and
//     podIPs to "" and the endpoint lives on without addresses. The MAC,
//     and any field not computed from the pod, are not stored. ListPrefix
//     of "<node>-k8s-<pod>-" is one GET of the pod.
//   - Profiles are computed and read-only (writes fail with
//     ErrNotSupported): kns.<ns> from each Namespace, ksa.<ns>.<sa> from
//     each ServiceAccount (uid bit-reversed as for custom resources;
//     resourceVersion Calico's composite "<ns rv>/" or "/<sa rv>"), and
//     the static projectcalico-default-allow (resourceVersion "1").
//   - Kubernetes NetworkPolicies are read as knp.default.* NetworkPolicies.
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
// a failed or expired watch relists and sends the difference too (so does
// every source of a Watch that could not start for a failure, before its
// first watch); once every source that failed watches again, one InSync
// event says the stream is current. A request that gets no answer, or a 429/5xx, is an error
// matching datastore.ErrUnavailable that names the API server
// ("kubernetes API server https://... unreachable: ..."); a watch the
// server ends (EOF, or GOAWAY when it shuts down) is resumed at once
// without a report, and the next attempt finds out whether it is gone.
// Requests
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
