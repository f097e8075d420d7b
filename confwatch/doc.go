// Package confwatch is the confd replacement: it keeps a typed in-memory
// cache of every Calico resource in the datastore and fans changes out to
// the other actors.
//
// API model:
//
//	datastore ──List(kind)…──┐
//	                         ├─► Watcher (one goroutine owns the cache)
//	datastore ──Watch(all)───┘        │
//	                                  ├─► Subscription.Next(): Snapshot, then Set/Delete batches
//	                                  └─► Synced(): closed once the cache is complete
//
// Design: Run lists every kind (a failed list is retried, not the ones
// before it), then watches all kinds from the lowest list revision. Lists of different kinds happen at different revisions, so an
// event is applied only when its revision is newer than what the cache holds
// for that key; replaying the gap is then harmless. A datastore Reset (the
// watch revision was compacted) is diffed against the cache and delivered as
// ordinary Set/Delete updates: subscribers never see a reset. Nothing is
// delivered to subscribers before the first complete list (in-sync).
//
// An unreachable datastore (an error event matching
// datastore.ErrUnavailable) changes nothing in the cache, so nothing
// downstream changes either: the watcher reports itself not ready (still
// live) with the error, logs the outage once, and is ready again when the
// stream says it is current (InSync, or a Reset).
//
// Subscribers never block the watcher: each has a pending queue that the
// watcher appends to and the subscriber drains, so a slow consumer receives
// its updates batched rather than stalling everyone.
//
// Fan-out: Server serves one Watcher's cache (and one KV prefix: IPAM's
// blocks and affinities) to many agents over stream connections (TCP, or
// TLS: it takes any net.Listener), and Remote is the Source an agent's
// Watcher reads from such a server instead of the datastore, Remote.KV the
// KV whose watches do — Calico's Typha, in the Watcher's own terms:
//
//	datastore ──► Watcher ──► Server ══ TCP/TLS ══► Remote ──► Watcher (agent 1)
//	                                 ══════════════► Remote ──► Watcher (agent N)
//
// The datastore then carries one set of watches and one stream of events
// however many nodes there are; each change is encoded once and written to
// every connection; a new connection's snapshot is the concatenation of the
// current encodings. A client that falls behind is disconnected rather than
// buffered without bound, and its Remote reconnects and delivers the new
// snapshot as a Reset, so the agent's subscribers see ordinary updates. On
// the Kubernetes datastore, the API server's per-node costs are why this
// exists: docs/benchmarks.md ("Kubernetes API as the datastore at scale")
// has the measurements and the wire protocol is described in serve.go.
//
// Thread safety: Watcher state is owned by the Run goroutine; Subscribe,
// Synced and Subscription methods are safe from any goroutine. Server state
// is shared by its broadcaster and connection goroutines under one lock;
// Remote's List and Watch may be called from any goroutine.
package confwatch
