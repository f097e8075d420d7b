// Package datastore is the seam between calico-node and where Calico's
// data lives. Two backends implement it, as in Calico: etcd v3 (package
// etcd, Calico's etcdv3 key layout) and the Kubernetes API (package kdd,
// Calico's "KDD": crd.projectcalico.org/v1 custom resources, Nodes, Pods,
// Namespaces, ServiceAccounts and NetworkPolicies). Package connect picks
// one from a Config and wraps it in package guard, which adds the checks
// Calico's clientv3 makes across resources (overlapping IP pools, policy
// tiers) to every write.
//
// # API model
//
// A Store holds projectcalico.org/v3 resources (api.Object values):
// Create, Update, Apply, Get, List and Delete, and Watch, a stream of
// Events that starts from a List's revision and turns every watch failure
// into one Reset event carrying the complete current set. Every write is
// optimistic: Update and Delete with a ResourceVersion succeed only if the
// stored object is still at that version (ErrConflict otherwise), which is
// the compare-and-swap callers retry on.
//
// IPAM is not a set of v3 resources in either backend; Store.IPAM returns
// a KV, IPAM's storage in the vocabulary of Calico's etcd layout (keys
// such as /calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26, values in
// Calico's etcd JSON). The etcd backend is that layout. The KDD backend
// maps each key to its custom resource (ipamblocks, blockaffinities,
// ipamhandles, ipamconfigs) and each value to the resource's spec, so the
// IPAM algorithm is written once, over KV, for both.
//
// # Revisions
//
// A ResourceVersion is an etcd revision in decimal in both backends (the
// Kubernetes API server's resourceVersion is the revision of its etcd),
// except for the Kubernetes datastore's computed Profiles, which carry
// Calico's composite "<namespace rv>/<service account rv>".
// List returns the revision it read at; Watch continues after it.
//
// # Errors
//
// Every Store method returns *Error (the operation, the resource, the
// cause); the causes ErrNotFound, ErrAlreadyExists, ErrConflict,
// ErrUnknownKind and ErrNotSupported (a write the backend refuses as
// Calico does, such as creating a Node on the Kubernetes datastore) match
// with errors.Is. A configuration that cannot work
// (no endpoints, unreadable TLS files, a missing CRD, a forbidden verb) is
// a *ConfigError: retrying cannot help.
package datastore
