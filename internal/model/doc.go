// Package model groups the data model every part of calico-node shares:
//
//	api/       Calico's projectcalico.org/v3 kinds: types, defaults,
//	           validation, YAML/JSON decoding, and the parsed views
//	           (IPPool) the consumers build their state from
//	selector/  Calico's selector language: parser, evaluator, canonical form
//
// Both are pure: no I/O, no datastore, no kernel.
package model
