// Package etcdtest starts throwaway etcd servers for tests: the real etcd
// binary from Debian's etcd-server package (Start) or an in-process server
// built from go.etcd.io/etcd/server/v3/embed (StartEmbedded).
//
// API model: Start and StartEmbedded return a running, healthy single-member
// server listening on free 127.0.0.1 ports with its data in t.TempDir(). The
// Server's exported fields are what a client needs: Endpoints and, with
// WithTLS, the CA and client certificate files. Stop, Restart and Compact
// exist for failure and relist tests. StartCluster runs a multi-member
// cluster of the binary (a Cluster of Members, each on its own client and
// peer ports: Endpoints lists every member, as a real node's
// etcd_endpoints does); a Member is killed with SIGKILL (Kill: a crash, no
// leadership transfer) or stopped, and Restart brings it back on its data
// directory, waiting until it has rejoined. Everything is torn down in
// t.Cleanup, also when the test fails.
//
// Design: ports are picked by binding 127.0.0.1:0 and closing the listener;
// another process can grab the port before etcd binds it, so a bind failure
// is retried with fresh ports. The binary runs as a child process (package
// proctest: it dies with the test process) that is signalled by its PID only
// (SIGTERM, then SIGKILL after a grace period); its log goes to a file next to the data directory and is quoted in the failure
// message when the server does not come up. Restart reuses the same ports and
// data directory so clients and watchers can reconnect to "the same" etcd.
// Only loopback addresses are ever used.
//
// Thread safety: a Server's methods may be called from any goroutine, but
// Restart and Compact take a testing.TB and must follow its rules (Fatal only
// from the test goroutine).
package etcdtest
