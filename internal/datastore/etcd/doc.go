// Package etcd stores projectcalico.org/v3 resources in etcd v3 in the
// layout real Calico (libcalico-go's etcdv3 backend, v3.31) uses, so that a
// Calico etcd datastore is read and written as-is.
//
// # API model
//
// A Store wraps one etcd client. Create, Update, Apply, Get, List and Delete
// take and return api.Object values; Watch streams Events. Kinds are named as
// api.LookupKind accepts them ("IPPool", "ippools", "pool", ...).
//
//   - Key: /calico/resources/v3/projectcalico.org/<plural>/<name>, or
//     .../<plural>/<namespace>/<name> for namespaced kinds.
//   - Value: the resource JSON with kind, apiVersion projectcalico.org/v3 and
//     metadata, but without resourceVersion: the ResourceVersion a caller
//     sees is the key's etcd mod revision in decimal.
//   - Create fills metadata.uid (random UUID) and creationTimestamp (UTC,
//     RFC 3339, seconds) when empty; Update and Apply keep the stored ones.
//   - NetworkPolicy and GlobalNetworkPolicy are stored under "<tier>.<name>"
//     with the name the user gave recorded in the annotation
//     projectcalico.org/metadata ({"name":"allow-web"}), exactly as Calico
//     v3.31 does; reads turn them back into what the user wrote. A name that
//     already carries its tier prefix ("default.allow-web"), or one of the
//     generated prefixes ("knp.default.", "ossg.", ...), is stored as given.
//     Calico v3.31 refuses a policy outside the default tier whose name lacks
//     the "<tier>." prefix, and a dotted name in the default tier; this store
//     accepts both by storing "<tier>.<name>" and recording that full name as
//     the user-visible one, so Get and Delete find the policy by the name the
//     store returns. Policies outside the default tier get the label
//     projectcalico.org/tier, as Calico writes it.
//   - Errors are *Error values naming the operation and the resource; the
//     sentinels ErrNotFound, ErrAlreadyExists, ErrConflict and ErrUnknownKind
//     match with errors.Is, and validation failures unwrap to
//     api.ValidationError. New reports configuration mistakes as
//     *ConfigError (retrying cannot help) and an unreachable cluster as a
//     plain error naming the endpoints and, where a direct dial can tell,
//     why (connection refused, certificate not trusted).
//
// # Design
//
// Every write is optimistic. Create is a transaction conditional on the key
// not existing. Update and Apply read the current value (for its uid and
// creationTimestamp, and its mod revision) and write with a transaction
// conditional on that mod revision; when the caller gave a ResourceVersion it
// must equal the stored one or the write fails with ErrConflict, which
// callers answer by re-reading and retrying. Without a ResourceVersion the
// store itself retries a lost race a bounded number of times ("last writer
// wins"). Delete with a ResourceVersion is conditional the same way.
//
// Objects passed in are never modified: a write works on a copy, applies
// Default and Validate to it, and returns what a Get would return.
//
// A call whose context has no deadline gets Config.RequestTimeout, so that an
// unreachable etcd turns into an error naming the endpoints instead of a hang
// (the etcd client otherwise waits for a connection forever). New probes the
// cluster with a read within DialTimeout, so "etcd is down" surfaces at
// start-up.
//
// Watch runs one goroutine per call. It watches the key prefix of one kind
// (or of all resources) from a revision, with previous values so that a
// Deleted event carries the object as it was. When etcd reports the revision
// compacted, or the watch fails in any other way, the watcher lists the
// kind(s) afresh and emits a single Reset event with the complete current set
// and the list revision, then watches on from the revision after it; so a
// consumer that replaces its cache on Reset never misses a change. Failures
// are retried with capped exponential backoff and reported as Event{Err};
// values that do not decode are reported as Event{Err} naming the key and
// skipped. Keys of kinds this package does not know (Calico has a few more)
// are ignored. List skips undecodable values, logging them, as Calico does.
//
// # Thread safety
//
// A Store is safe for concurrent use by multiple goroutines. Close ends all
// watches (their channels are closed) and makes later calls fail.
package etcd
