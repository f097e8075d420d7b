// Package ctl is calicoctl: the verbs that manage Calico resources in the
// datastore (create, apply, replace, delete, get, patch, label, convert,
// version, ipam, node) and the client configuration they connect with,
// and `policy explain` and `apply --dry-run`, which answer what policy does
// to a packet from the datastore with the agent's own compiler (package
// explain; policy.go, dryrun.go).
// Output follows calicoctl v3.31: its per-kind table templates, its
// go-template data, and what its clientv3 adds to policies on read.
//
// Model: every verb reads documents (files, directories or stdin) or a
// kind/name from the command line, then talks to the datastore through
// datastore.Store. Writes validate every document first: a file with any
// invalid document writes nothing and reports each bad one by index, kind
// and name.
//
// Design: the urfave/cli commands are thin; each verb is a function taking
// a *session (resolved config, open store, output writers) so the same code
// serves `calicoctl ...` and `calico-node ctl ...`.
//
// `datastore migrate lock|export|import|unlock` move a cluster between
// etcd and the Kubernetes datastore in either direction, with calicoctl's
// file format (migratefile.go): the v3 resources as one <Kind>List per
// kind, "===", the ClusterInformation as JSON, "===", IPAM's keys and
// values as JSON (ipam.Export).
//
// Connection settings, lowest to highest precedence: the built-in default
// (http://127.0.0.1:2379), the client config file (/etc/calico/calicoctl.cfg
// or --config; v3 CalicoAPIConfig or the v1 calicoApiConfig form), the
// ETCD_* / DATASTORE_TYPE environment variables, then command-line flags.
//
// Thread safety: one command per process; nothing is shared.
package ctl
