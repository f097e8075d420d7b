package datastore

import "context"

// KV is the storage IPAM runs on, spelt in Calico's etcd IPAM layout:
// keys under /calico/ipam/v2/ and values in Calico's etcd JSON, whatever
// the backend (see the package doc).
type KV interface {
	// Get reads keys and returns one KeyValue per key, in order; an absent
	// key has Rev 0 and no Value.
	Get(ctx context.Context, keys ...string) ([]KeyValue, error)
	// List returns every key under prefix, sorted, with the revision of
	// the read; keysOnly leaves the values out. The KDD backend serves a
	// list of one node's affinities from the API server's cache, which may
	// be a few milliseconds behind other clients' writes (never behind what
	// this Store read or wrote); writes are conditional, so that costs at
	// most a retry.
	List(ctx context.Context, prefix string, keysOnly bool) ([]KeyValue, int64, error)
	// Snapshot lists several prefixes at once. The etcd backend reads them
	// at one revision; the KDD backend lists them one after the other.
	Snapshot(ctx context.Context, prefixes ...string) ([][]KeyValue, error)
	// Txn applies t.Ops if every condition holds. When one does not it
	// writes nothing and returns the current value of every condition's
	// key and the contents of t.Refresh.
	//
	// The etcd backend commits a Txn atomically. The Kubernetes API has
	// no multi-object transaction, so the KDD backend first reads the
	// Conds that no Op checks, then writes t.Ops one by one, in order,
	// each conditional on its Cond (an Op without one is a
	// read-modify-write); when a write fails it undoes the earlier ones in
	// reverse, each conditional on what it wrote, so that a writer who
	// built on one keeps it. A failed condition then gives Succeeded
	// false with fresh Current and Refreshed; any other failure is the
	// error. Callers order Ops so that any prefix of them, left behind by
	// a crash or by an undo that lost to such a writer, is a state IPAM
	// understands, and put the write that decides (a block) last (see
	// package ipam). An affinity confirmed by a Txn that also writes a
	// block is written pending in its place and confirmed after the rest,
	// as Calico claims blocks on that datastore. Consecutive creates of
	// handles (Ops whose Cond says absent), or deletes of handles, are
	// written side by side: any subset of them is such a state.
	Txn(ctx context.Context, t Txn) (TxnResult, error)
	// Watch streams the keys under prefix: a Reset with everything first,
	// then every change, and a fresh Reset after any watch failure or
	// compaction. The channel closes when ctx ends. The KDD backend
	// watches blocks and affinities only (handles and the config change
	// with every pod and nobody follows them; Calico cannot watch handles
	// there either).
	Watch(ctx context.Context, prefix string) <-chan KVEvent
	// String names the backend for error messages ("etcd at URL").
	String() string
}

// KeyValue is one key as read. Rev is its revision (0: absent).
type KeyValue struct {
	Key   string
	Value []byte
	Rev   int64
}

// Cond holds when Key is at Rev (Rev 0: Key does not exist). Value is
// what the caller read at Rev; the KDD backend restores it to undo a
// partly applied Txn (and reads it first when it is missing).
type Cond struct {
	Key   string
	Rev   int64
	Value []byte
}

// OpType is what an Op does.
type OpType int

const (
	// OpPut writes Value at Key.
	OpPut OpType = iota
	// OpDelete removes Key.
	OpDelete
	// OpCreateIfAbsent writes Value at Key unless Key exists, in which
	// case it does nothing and does not fail the Txn.
	OpCreateIfAbsent
)

// Op is one write of a Txn. An Op whose key has no Cond is unconditional.
type Op struct {
	Type  OpType
	Key   string
	Value []byte
}

// Txn is one optimistic write.
type Txn struct {
	Conds []Cond
	Ops   []Op
	// Refresh are key prefixes whose contents are returned when a
	// condition fails, so a retry starts from current data.
	Refresh []string
}

// TxnResult says whether a Txn applied. When it did not, Current holds
// the present value of each Cond's key (in Conds' order) and Refreshed
// the contents of each Refresh prefix. When it did, Written holds the
// keys the Txn left as its Ops say, with their new revision (Rev 0:
// deleted): a caller that remembers what it wrote (the agent's IPAM
// cache) can make its next write conditional on that without reading
// it again. A key an Op wrote that Written does not list is in a state
// the caller cannot know (an OpCreateIfAbsent that found the key, or an
// affinity the KDD backend confirmed after the Txn's writes).
type TxnResult struct {
	Succeeded bool
	Current   []KeyValue
	Refreshed [][]KeyValue
	Written   []KeyValue
}

// KVEventType says what a KVEvent reports.
type KVEventType int

const (
	// KVReset: Snapshot is everything under the prefix.
	KVReset KVEventType = iota + 1
	// KVPut: KV was written.
	KVPut
	// KVDelete: KV.Key was removed (KV.Value is its last value when known).
	KVDelete
)

// KVEvent is one item of a KV watch. An event with Err set reports a
// problem the watcher is handling; the stream goes on.
type KVEvent struct {
	Type     KVEventType
	KV       KeyValue
	Snapshot []KeyValue
	Rev      int64
	Err      error
}
