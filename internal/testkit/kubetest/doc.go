// Package kubetest runs a real Kubernetes control plane on loopback for
// tests: kube-apiserver (and a minimal kube-controller-manager) built from
// the Go module proxy, backed by an etcd from etcdtest, with certificates
// generated per run. Tests get a kubeconfig, a client-go clientset and the
// path of a matching kubectl.
//
// # API model
//
// Start(t) returns a ready *Cluster: /readyz answers, the "default"
// ServiceAccount of the "default" namespace exists (so Pods can be
// created), and everything is stopped, by PID, in t.Cleanup, also when the
// test fails. There is no kubelet and, unless WithScheduler, no scheduler:
// Pods created with spec.nodeName stay Pending, which is what controller
// and CNI tests need. WithControllers adds kube-controller-manager
// controllers (e.g. "daemonset-controller"; with WithScheduler and a node,
// a DaemonSet then runs there).
// The pod-GC and node-lifecycle controllers are deliberately not run (they
// would delete or evict pods bound to nodes that have no kubelet); the
// namespace controller is, so deleted namespaces really go away. Without a
// kubelet nobody confirms a graceful Pod deletion: delete Pods with
// ForceDelete() (also before deleting their namespace).
// StopAPIServer and RestartAPIServer take kube-apiserver away and bring it
// back on the same address, with the same certificates and the same etcd,
// so the data survive: what API-server outage tests need. RelayInto makes
// the API server reachable at its own address from inside another network
// namespace (agents started with `ip netns exec` use the kubeconfig as it
// is).
//
// StartNode(t, c) adds a real node to such a cluster: kubelet (built with
// the other binaries) and Debian's containerd with its CRI plugin and runc,
// named NodeName, in the caller's network namespace, which plays the
// node's host namespace: it must be a private one the test made (its test
// binary re-executed by netnstest.Reexec; StartNode refuses the machine's),
// so that kubelet's, the CNI plugin's and a node agent's chains, routes
// and links never mix with the machine's. Its
// images (pause, and TestImage: the host's static busybox) are built
// locally, no registry; the reference CNI plugins ptp, host-local and
// loopback are built from the project's go.mod. The cluster must be
// started WithAPIServerArgs(NodeAPIServerArgs()...) so that `kubectl exec`
// reaches kubelet on loopback. Its cleanup deletes every pod through the
// API (kubelet runs CNI DEL), stops kubelet and containerd by PID, kills
// leftover shims and pod processes, unmounts, removes its cgroups, and
// removes the KUBE-*/CNI-* iptables chains (and empty nftables tables) and
// restores the sysctls kubelet changed, compared with a snapshot taken
// before it started. Node.ImportImage loads an OCI archive (package
// ociimage) into its containerd. WithCNIDirs points containerd at other
// CNI directories, e.g. the standard /opt/cni/bin and /etc/cni/net.d a
// CNI DaemonSet writes; PrivateHostPaths makes such host paths the test's
// own in a private mount namespace (netnstest.Reexec with PrivateMounts),
// so the machine's are never written.
//
// EnsureBinaries builds kube-apiserver, kube-controller-manager, kubectl,
// kubelet and kube-scheduler (Kubernetes Version) into the cache directory BinDir() when they are
// missing. `make kube-bins` calls it once before the test packages run;
// a test process that finds the cache empty builds too, under a file lock,
// so parallel test binaries never build twice. A cold build takes several
// minutes on two cores; a warm cache costs nothing. kubelet adds under a
// minute to it (it shares most packages with kube-apiserver; alone, with an
// empty Go build cache, it takes about 6 minutes).
//
// # Design
//
// The build mirrors what `go install k8s.io/kubernetes/cmd/...` cannot do
// by itself: k8s.io/kubernetes maps its staging modules to ./staging in its
// go.mod, and those replace directives do not apply to a dependency, so a
// throwaway module under the cache directory requires k8s.io/kubernetes and
// replaces each staging module with its published v0.X.Y release. Version
// strings are stamped with -ldflags as the release build does, so kubectl
// and the server agree about their versions.
//
// The apiserver listens on 127.0.0.1 only, on a free port (a bind race is
// retried with a new port). Its etcd is the in-process etcd of
// etcdtest.StartEmbedded (the project's etcd v3.7 module): Debian's etcd
// 3.4 does answer kube-apiserver 1.36's basic requests, but it is below the
// etcd 3.5 Kubernetes supports, while the embedded server is current and
// needs no binary. Kubernetes data and Calico data never share an etcd:
// tests start their own (etcdtest) for Calico.
//
// Environment: CALICO_KUBE_BIN_DIR overrides the cache root (default
// ~/.cache/calico-node/kube-bin; binaries go to <root>/v<Version>/);
// CALICO_KUBE_TESTS=skip makes Start skip the test instead of building or
// failing, for machines without access to the module proxy.
//
// # Thread safety
//
// Start may be called from parallel tests; each call runs its own control
// plane. A Cluster's fields are read-only after Start; StopAPIServer and
// RestartAPIServer may be called from any goroutine.
package kubetest
