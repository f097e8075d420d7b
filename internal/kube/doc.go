// Package kube is calico-node's Kubernetes API client: typed access to the
// few resources the kube-controllers read (Pods, Nodes, Namespaces,
// ServiceAccounts, NetworkPolicies) and write (Leases), informer sources
// for them, and Lease-based leader election.
//
// # Why not client-go's clientset
//
// The calico-node binary is also the CNI plugin, executed for every pod,
// and every execution pays the package init of everything linked in.
// client-go's typed clientset, its informer factory and its leaderelection
// package all import k8s.io/client-go/kubernetes/scheme, which registers
// every built-in API group (about 60 k8s.io/api packages) at init: a few
// milliseconds and a burst of garbage on a process start of about 20 ms,
// for types calico-node never uses. This package builds the same kind of
// client from client-go's generic pieces (rest.RESTClient,
// tools/cache.ListWatch), with a private runtime.Scheme that holds only
// core/v1, networking.k8s.io/v1 and coordination.k8s.io/v1 and is built
// in New, not at init.
//
// # API model
//
// New(restConfig) returns a *Client. Its accessors (Pods(ns), Nodes(),
// Leases(ns), ...) return a Resource bound to one namespace ("" = all),
// with Get, List, Watch, Create and Update, and ListWatch for
// cache.NewSharedIndexInformer; the listers in k8s.io/client-go/listers
// work on the resulting indexers. Requests go out as client-go's typed
// clients send them: protobuf preferred, JSON accepted, the rest.Config's
// rate limit and transport. API errors are *apierrors.StatusError.
//
// NewNodePods(client, node) watches the pods bound to one node and every
// namespace, for the agent's CNI server on the Kubernetes datastore.
//
// NewElector(cfg, client.Leases(ns)) returns an *Elector; Lead(ctx, fn)
// campaigns for the Lease and runs fn while it is held.
//
// # Leader election
//
// The protocol, the timings and the Lease it writes are client-go's
// (tools/leaderelection with a LeaseLock and ReleaseOnCancel), so that
// this elector and client-go's can compete for the same Lease:
//
//   - The Lease's spec carries holderIdentity, leaseDurationSeconds,
//     acquireTime, renewTime (MicroTime) and leaseTransitions.
//   - A candidate takes the Lease when it does not exist (create), when
//     its holder is empty (released), or when it has not changed for
//     leaseDurationSeconds as measured on the candidate's own clock since
//     it first saw the current content. The holder's renewTime is not
//     compared with the local clock, so clock skew between nodes does not
//     shorten a lease. Taking it from another holder sets acquireTime and
//     increments leaseTransitions.
//   - Every write is an Update conditional on the resourceVersion last
//     read or written; a Conflict means another candidate wrote first,
//     and the attempt fails.
//   - Candidates retry every RetryPeriod plus up to 1.2 x RetryPeriod of
//     jitter. The leader renews every RetryPeriod; when a renewal has not
//     succeeded within RenewDeadline it stops leading: fn's context is
//     cancelled.
//   - When fn has returned, the Lease is released: if a fresh read still
//     names this candidate, it is written with an empty holder and
//     leaseDurationSeconds 1, so another candidate takes over at its next
//     attempt instead of after LeaseDuration. Unlike client-go, release
//     waits for fn to return, also when the Lease was lost, and never
//     overwrites a holder that took over meanwhile.
//
// # Thread safety
//
// A Client and its Resources are safe for concurrent use. An Elector's
// state belongs to the goroutine running Lead; Lead runs fn in a goroutine
// of its own and calls OnNewLeader from the campaigning goroutine.
package kube
