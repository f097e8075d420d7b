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
// Design: Run lists every kind, then watches all kinds from the lowest list
// revision. Lists of different kinds happen at different revisions, so an
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
// Thread safety: Watcher state is owned by the Run goroutine; Subscribe,
// Synced and Subscription methods are safe from any goroutine.
package confwatch
