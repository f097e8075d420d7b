package datastore

import "context"

type cachedReadsKey struct{}

// WithCachedReads marks reads made under ctx as allowed to come from a
// cache at most a moment behind the datastore. The Kubernetes datastore
// then reads lists (of every kind) and a Node's Get from the API server's
// watch cache (resourceVersion 0): a list that must be current waits there
// until that cache has caught up with etcd, which after a write to another
// resource takes up to 100 ms (the API server asks etcd for progress every
// 100 ms). etcd serves every read at its current revision in one round
// trip and ignores the mark.
//
// Only for reads whose staleness is as harmless as a concurrent writer's:
// IPAM's pools, reservations and node labels when allocating (a pool
// created or disabled a moment ago is then missed or still used, as it
// would be by an allocation that read it a moment earlier), never for a
// read-modify-write.
func WithCachedReads(ctx context.Context) context.Context {
	return context.WithValue(ctx, cachedReadsKey{}, true)
}

// CachedReads reports whether ctx allows cached reads (WithCachedReads).
func CachedReads(ctx context.Context) bool {
	v, _ := ctx.Value(cachedReadsKey{}).(bool)
	return v
}
