// Package api holds the projectcalico.org/v3 resource types: their Go
// shapes (JSON field names exactly as Calico's), defaults, validation and
// the decoding of user documents (YAML or JSON, multi-document, List kinds,
// the crd.projectcalico.org/v1 spelling and the calicoctl v1 legacy forms).
//
// Model: every kind is a struct embedding TypeMeta and ObjectMeta with a
// Spec (and for Node a Status). Each implements Object. The kind registry
// (Kinds, LookupKind) is the single table that maps kind names, plurals
// (the etcd key segment) and CLI short names to constructors.
//
// Design: the types are plain data; Default fills what Calico's API server
// fills, Validate reports every bad field as a FieldError naming its path
// and value. Nothing here does I/O.
//
// Pool is the one parsed view of an IPPool (masked CIDR, block size and
// modes with defaults, parsed selectors) that IPAM, the policy compiler,
// the overlay, BGP export and start-up all read; ParsePool and ParsePools
// are the only code that parses a pool's CIDR and selectors, and Validate
// and Default share their CIDR parse. A pool that does not parse is one
// Validate would have refused: every consumer skips it and logs (or
// reports) the *PoolError naming it, once per change of the pool.
//
// Deliberate choices: a policy's tier is stored as written (Spec.Tier
// empty or "default"; TierName() reports "default" for both), as Calico
// stores it; Default never repairs what Validate should reject (an
// IPPool CIDR with host bits set is refused, as Calico refuses it); an
// IPPool's "spec.disable", a misspelling found in circulating manifests, is
// read as "disabled"; calicoctl v1 ipPool, bgpPeer, node and hostEndpoint
// documents are converted with calico-upgrade's naming rules, other v1
// kinds are refused with a pointer to the v3 form.
//
// Thread safety: values are not safe for concurrent mutation; the registry is
// immutable after package initialisation.
package api
