package kdd

import "context"

// SetIPAMWriteHook makes s's IPAM Txn call hook before each of its writes
// (number i of the Txn, to key); an error from hook fails that write.
func SetIPAMWriteHook(s *Store, hook func(ctx context.Context, i int, key string) error) {
	s.kv.beforeWrite = hook
}
