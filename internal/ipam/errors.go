package ipam

import "errors"

// Sentinel errors, matched with errors.Is. The errors returned wrap them
// with the pools, addresses or handles concerned.
var (
	// ErrNoFreeAddresses: every usable pool is exhausted (or, with strict
	// affinity, every block the node may use).
	ErrNoFreeAddresses = errors.New("no free addresses")
	// ErrAddressInUse: AssignIP asked for an address someone holds.
	ErrAddressInUse = errors.New("address already in use")
	// ErrNotInPool: the address is in no IP pool.
	ErrNotInPool = errors.New("address is not in any IP pool")
	// ErrPoolDisabled: the address or requested pool belongs to a disabled
	// pool.
	ErrPoolDisabled = errors.New("IP pool is disabled")
	// ErrPoolNotFound: a requested pool (CIDR or name) does not exist.
	ErrPoolNotFound = errors.New("IP pool does not exist")
	// ErrNoPools: no enabled pool of the IP version may be used by the node
	// for the request (node selector, allowed uses, assignment mode).
	ErrNoPools = errors.New("no usable IP pool")
	// ErrBlockLimit: the node holds the maximum number of blocks and they
	// are full.
	ErrBlockLimit = errors.New("cannot claim a new block: per-node block limit reached")
	// ErrNotAllocated: Lookup asked about a free address.
	ErrNotAllocated = errors.New("address is not allocated")
	// ErrConflict: too many concurrent writers kept winning the race for the
	// same keys; the caller may try again.
	ErrConflict = errors.New("IPAM update conflict")
)
