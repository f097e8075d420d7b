// Package model groups the data model every part of calico-node shares:
//
//	api/       Calico's projectcalico.org/v3 kinds: types, defaults,
//	           validation, YAML/JSON decoding, and the parsed views
//	           (IPPool) the consumers build their state from
//	selector/  Calico's selector language: parser, evaluator, canonical form
//	ipamkv/    Calico's IPAM data as etcd stores it: key layout, value JSON
//	           (the allocator and the Kubernetes backend both speak it)
//
// All are pure: no I/O, no datastore, no kernel.
package model
