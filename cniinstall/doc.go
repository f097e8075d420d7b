// Package cniinstall is the install-cni actor of `calico-node run`: it
// makes this node's container runtime use Calico, as Calico's install-cni
// container does, and keeps what it wrote up to date.
//
// # What it writes
//
//   - <conf dir>/10-calico.conflist (CNI_CONF_NAME), mode 0600, from the
//     CNI_NETWORK_CONFIG template (or CNI_NETWORK_CONFIG_FILE, or a
//     built-in etcd conflist) with Calico's placeholders replaced:
//     __KUBERNETES_SERVICE_HOST__, __KUBERNETES_SERVICE_PORT__,
//     __SERVICEACCOUNT_TOKEN__, __KUBECONFIG_FILEPATH__, __ETCD_ENDPOINTS__,
//     __ETCD_KEY_FILE__, __ETCD_CERT_FILE__, __ETCD_CA_CERT_FILE__,
//     __CNI_MTU__, __KUBERNETES_NODE_NAME__, and also __LOG_LEVEL__,
//     __LOG_FILE_PATH__, __LOG_FILE_MAX_SIZE__, __LOG_FILE_MAX_AGE__,
//     __LOG_FILE_MAX_COUNT__, __DATASTORE_TYPE__, __ETCD_DISCOVERY_SRV__,
//     __REQUIRE_MTU_FILE__ and __CALICO_API_GROUP__. Values are inserted
//     JSON-escaped. A template that is a single plugin configuration (no
//     "plugins", as in Calico 2.x manifests) written to a .conflist name is
//     wrapped into a one-plugin list exactly as libcni wraps a .conf file
//     (name and cniVersion lifted to the list, the plugin unchanged), so the
//     runtime sees the same network either way.
//   - <conf dir>/calico-kubeconfig, mode 0600: the API server
//     (KUBERNETES_SERVICE_HOST/PORT), the cluster CA and the bearer token
//     of the pod's service account (ca.crt and token in
//     /var/run/secrets/kubernetes.io/serviceaccount). Without a token
//     (not running in a pod) no kubeconfig is written.
//   - <conf dir>/calico-tls/etcd-ca, etcd-cert, etcd-key: copies of the
//     etcd TLS files the agent itself uses (ETCD_*_FILE), since those
//     live in the container (a mounted Secret) and the plugin runs on the
//     host; __ETCD_*_FILE__ name the copies as the host sees them.
//   - <bin dir>/calico: a copy of this binary (a symlink would point into
//     the container's filesystem), and <bin dir>/calico-ipam: a relative
//     symlink to it (the binary dispatches on argv[0]).
//   - <bin dir>/portmap and <bin dir>/bandwidth (ChainedPlugins): copies of
//     the containernetworking/plugins binaries found beside this one (the
//     image's /usr/bin, `make build`'s bin/), which the default template
//     and deploy/'s chain after calico for hostPort and the
//     kubernetes.io/ingress- and egress-bandwidth annotations, as Calico's
//     manifests do. A config that chains one the installer has not got and
//     the bin dir lacks is refused: every pod's ADD would fail on it.
//
// Paths inside the files are host paths: the conf dir as the host sees it
// (CNI_NET_DIR) may differ from where it is mounted in the container
// (--cni-conf-dir); by default they are the same, as in deploy/.
//
// # Design
//
// New renders the template with sample values and refuses one that is not
// a JSON CNI configuration, so a broken ConfigMap stops the agent at start
// with the reason instead of breaking every pod on the node. Sync computes
// every file's desired content, compares it with what is on disk, and
// replaces only files that differ, each atomically (temporary file in the
// same directory, then rename), so a runtime never reads a half-written
// file and an unchanged state writes nothing. Run syncs at start (a
// failure there stops the agent: the node cannot run pods without its
// plugin) and then every Interval, which picks up a rotated service
// account token (kubelet replaces the projected token about hourly) and
// rotated etcd certificates; later failures are logged and retried. The
// installed binary is compared by content only when its size, mode or
// modification time differ from what the last install left.
//
// # Thread safety
//
// An Installer is used by one goroutine: Run, or Sync in tests.
package cniinstall
