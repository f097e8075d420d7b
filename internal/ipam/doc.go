// Package ipam is Calico's block IP address management: the data model,
// keys and JSON of Calico v3.31 (libcalico-go), over a datastore.KV, so
// that a datastore real Calico wrote (etcd, or the Kubernetes API, whose
// KV maps the same keys onto Calico's IPAM custom resources) works here
// and the other way round.
//
// # Data model
//
// An IPPool is carved into blocks of 2^(32-blockSize) (IPv6: 128-)
// addresses. A node claims a block by writing the block with
// "affinity":"host:<node>" and an affinity key; addresses are then handed
// out from the node's blocks, and every allocation names a handle (the
// holder, "k8s-pod-network.<containerID>" for a pod) whose key counts the
// handle's addresses per block:
//
//	/calico/ipam/v2/assignment/ipv4/block/10.244.166.128-26
//	    {"cidr":"10.244.166.128/26","affinity":"host:node1",
//	     "allocations":[0,null,...],"unallocated":[1,2,...],
//	     "attributes":[{"handle_id":"k8s-pod-network.X","secondary":{"node":"node1","timestamp":"..."}}],
//	     "sequenceNumber":N,"sequenceNumberForAllocation":{"0":N-1},"deleted":false}
//	/calico/ipam/v2/host/node1/ipv4/block/10.244.166.128-26   {"state":"confirmed","deleted":false}
//	/calico/ipam/v2/handle/k8s-pod-network.X                  {"block":{"10.244.166.128/26":1},"deleted":false}
//	/calico/ipam/v2/config                                    {"auto_allocate_blocks":true}
//
// IPv6 blocks live under .../ipv6/block/ with the CIDR spelt as Go (and
// Calico) prints it, "/" replaced by "-": "fd00:10::-122".
//
// LoadBalancer addresses (Use LoadBalancer) belong to Calico's virtual
// host "load-balancer" instead of a node: their blocks have the affinity
// "virtual:load-balancer" and the affinity key
// /calico/ipam/v2/virtual/load-balancer/ipv4/block/<cidr>, their
// allocations no "node" attribute. Inside the package such an owner is
// spelt "virtual:load-balancer" where a node's name would be (no node name
// has a colon).
//
// # API
//
//	func New(kv datastore.KV, store PoolSource, logger *slog.Logger) *Client
//	func (c *Client) AutoAssign(ctx, AutoAssignArgs) (v4, v6 []netip.Prefix, err error) // /32 and /128
//	func (c *Client) AssignIP(ctx, AssignIPArgs) error           // ErrAddressInUse, ErrNotInPool, ErrPoolDisabled
//	func (c *Client) ReleaseByHandle(ctx, handleID string) error  // missing handle: nil
//	func (c *Client) ReleaseIPs(ctx, ips ...netip.Addr) (unallocated []netip.Addr, err error)
//	func (c *Client) Release(ctx, opts ...ReleaseOptions) (unallocated []netip.Addr, err error)
//	func (c *Client) IPsByHandle(ctx, handleID string) ([]netip.Addr, error)
//	func (c *Client) Lookup(ctx, ip netip.Addr) (Holder, error)  // ErrNotAllocated
//	func (c *Client) Usage(ctx) (Report, error)
//	func (c *Client) Check(ctx, liveNodes ...string) (*CheckReport, error)
//	func (c *Client) ReleaseLeaked(ctx, reports ...*CheckReport) (LeakRelease, error)
//	func (c *Client) AffineBlocks(ctx, node string) ([]netip.Prefix, error)
//	func (c *Client) LoadBalancerAllocations(ctx) ([]VirtualAllocation, error)
//	func (c *Client) Config(ctx) (Config, error)
//	func (c *Client) SetConfig(ctx, Config) error
//
//	func ReadExport(ctx, kv datastore.KV) (*Export, error)  // all keys, as calicoctl's migration file holds them
//	func (e *Export) RenameNodes(names map[string]string) error
//	func (e *Export) Import(ctx, kv datastore.KV) (int, error) // each key created only if absent
//
// Errors wrap the sentinels ErrNoFreeAddresses, ErrAddressInUse,
// ErrNotInPool, ErrPoolDisabled, ErrPoolNotFound, ErrNoPools, ErrBlockLimit,
// ErrNotAllocated and ErrConflict (match with errors.Is).
//
// # Behaviour (Calico's)
//
//   - Pool choice: the pools the caller names (CIDR, host bits ignored, or
//     pool name), used as given, Manual ones included; otherwise every
//     enabled pool in Automatic mode whose nodeSelector matches the Node's
//     labels (a Node not registered yet has no labels) and whose
//     namespaceSelector matches the namespace labels. Either way the pool
//     must allow the use (Workload by default). Pools are tried in the
//     order named, else by name. Pools are read through api.ParsePools; a
//     pool that does not parse is skipped with a warning naming it.
//   - Within a block, addresses go in the order of "unallocated": a fresh
//     block starts at its first address (.0 included, as Calico does); a
//     released address is appended, so it is not handed out again while
//     any other address of the block is free.
//   - Order of sources: the node's affine blocks; then a new block (the
//     search starts at a position hashed from the node name, so nodes
//     claiming together seldom collide); then, only if no pool has an
//     unclaimed block left and strictAffinity is off, other nodes' blocks
//     ("borrowing"). maxBlocksPerHost stops claims with ErrBlockLimit and,
//     as in Calico, no borrowing. IPReservations are skipped by automatic
//     assignment only.
//   - A block emptied by a release stays claimed; a block that is empty and
//     affine to no node is deleted. A release by handle leaves the freed
//     ordinals' sequenceNumberForAllocation entries, a release by address
//     removes them (both as Calico).
//   - The IPAM config key is written with Calico's defaults on first use.
//   - A request with Replace first releases what its handle already holds
//     (a CNI ADD retried after one that failed while etcd was away);
//     without it a handle accumulates addresses, as in Calico.
//
// # Design
//
// Every operation reads what it needs, computes the new values in memory
// (pure block code in block.go) and writes everything in ONE transaction
// (datastore.KV.Txn) conditional on the revision of each key it writes (or
// on its absence): on etcd, blocks, affinities and the handle change
// together or not at all, so concurrent allocators on any number of nodes
// never hand out one address twice, and a handle always matches its
// blocks. When the condition fails, the transaction returns the current
// values of those keys (and the node's affinities; in etcd's else branch,
// in the same round trip), and the operation recomputes from them after a
// short jittered backoff; it gives up with ErrConflict after maxAttempts.
// A retry that needs a new block lists the blocks again.
//
// Cost of AutoAssign in the common case (the node's block has room): one
// round of concurrent reads (pools, reservations, node, and one etcd
// transaction reading config, the node's affinity prefix and the handle),
// one read of the affine blocks, one write transaction (on the Kubernetes
// API: three GETs and a LIST, one GET, a POST of the handle and a PUT of
// the block, about 6 ms against a local API server).
//
// The Kubernetes API has no multi-key transaction: its KV applies the
// writes one by one, each conditional, and undoes the earlier ones when a
// later one loses. The transactions are therefore ordered so that every
// prefix of them is a state this package understands and the write that
// decides comes last (see txn in client.go): an allocation writes the
// handle's count, the affinities, the removal of stale affinities and
// the config, and the blocks last; a release writes the blocks, then the
// handle. A handle's count for a block written is what the block holds
// for it, so an allocation whose undo lost to another writer (who built
// on the block) is counted again by the retry that writes that block.
//
// Claiming a block on etcd writes the block with its affinity and a
// confirmed affinity key atomically. On the Kubernetes API the KV writes a
// pending affinity, then the block, then confirms, as Calico's Kubernetes
// backend does. Both leave the same data; the intermediate states (also
// Calico's) are understood: an affinity whose block is missing is
// completed, one whose block belongs to another node is stale and
// deleted, a pending one is confirmed when its block is used.
//
// # Thread safety
//
// A Client is safe for concurrent use; it holds no mutable state beyond
// its configuration. Concurrent operations on one Client race through the
// datastore exactly as separate processes do.
package ipam
