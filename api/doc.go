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
// Thread safety: values are not safe for concurrent mutation; the registry is
// immutable after package initialisation.
package api
