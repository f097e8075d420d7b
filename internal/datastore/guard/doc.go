// Package guard is the layer of checks that Calico's clientv3 makes across
// resources before a write, over any datastore.Store. A resource's own
// Validate sees one object; these rules need the datastore:
//
//   - IPPool create: the CIDR must not overlap another pool's ("IPPool(x)
//     CIDR overlaps with IPPool(y) CIDR ..."), and no existing block under
//     it may have another block size.
//   - IPPool update: the CIDR and blockSize cannot change (blocks carved
//     with the old values would be orphaned), nor can a LoadBalancer pool
//     become a Workload/Tunnel one.
//   - IPPool delete: as libcalico-go, the pool is disabled first (no new
//     addresses from it), then, after a short pause for allocations in
//     flight, every node's claim on its blocks is released (empty blocks
//     are deleted; blocks still holding addresses keep them), then the pool
//     is deleted. DeletePool also reports the addresses still in use.
//   - NetworkPolicy / GlobalNetworkPolicy create: the policy's tier must
//     exist (a missing default tier is tolerated: Calico's calicoctl
//     creates it before any write, and every calico-node start-up does).
//   - Tier delete: the default and adminnetworkpolicy tiers cannot be
//     deleted, nor can a tier that still holds policies.
//
// # Design
//
// connect.New returns every Store wrapped in a guard.Store, so every
// writer that opens a datastore (calicoctl, calico-node's start-up and its
// default pools, the controllers, the CNI plugin, datastore migration)
// passes the same checks on both backends. Writes made behind calico-node's
// back (etcdctl, kubectl on the CRDs) do not, as with Calico.
//
// # Concurrent pool creation
//
// Calico reads the pools, checks, and creates: two creators that both read
// before either writes each see no overlap, and both pools are stored.
// Neither datastore can make a create conditional on "no other pool was
// written since I read" across both backends (the Kubernetes API has no
// multi-object transaction), so guard checks again after writing: a
// creator that then finds an overlapping pool created before its own (a
// lower resourceVersion: both backends count revisions of one etcd)
// deletes its pool again and fails with the overlap error; the older pool
// stays. Among any number of racing creators of overlapping pools the
// oldest always survives and every other one rolls back, because each
// re-reads after its own write and so sees every older pool. What is left
// open: a racing pool exists for the few milliseconds between its write
// and its rollback, so an allocation in that window could claim a block
// from it (its addresses are then inside the surviving pool too, and the
// block stays until released); and if the older pool is updated in that
// same window its resourceVersion no longer tells its age, and both may
// stay. The overlap check of the next create, and `calicoctl ipam check`,
// still report such a state.
//
// # Thread safety
//
// A Store is safe for concurrent use as the Store it wraps is.
package guard
