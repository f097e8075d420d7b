// Package controllers is calico-node's version of calico-kube-controllers:
// it keeps the Calico datastore in step with the Kubernetes API. It runs as
// one actor of `calico-node run` (enabled with --controllers or
// ENABLED_CONTROLLERS), on every node, and acts only while it holds a
// leader-election Lease, so exactly one instance works cluster-wide.
//
// # Controllers (Calico's, on its etcd datastore)
//
//   - namespace: each Namespace is the Profile kns.<ns>: allow-all ingress
//     and egress rules, labelsToApply pcns.<label> for every namespace
//     label plus pcns.projectcalico.org/name=<ns>. Deleted with it.
//   - serviceaccount: each ServiceAccount is the Profile ksa.<ns>.<sa> with
//     labelsToApply pcsa.<label> and pcsa.projectcalico.org/name=<sa>.
//   - workloadendpoint: a Pod's labels (plus projectcalico.org/namespace,
//     /orchestrator and /serviceaccount) and service account are copied
//     onto the WorkloadEndpoints the CNI plugin made for it. Endpoints are
//     created and deleted by the plugin, never here.
//   - policy: each networking.k8s.io/v1 NetworkPolicy is the Calico
//     NetworkPolicy knp.default.<name> in its namespace (k8spolicy.Convert).
//   - node: Kubernetes node labels are copied onto the Calico Node whose
//     spec.orchRefs names it (tracked in the annotation
//     projectcalico.org/kube-labels, so labels set with calicoctl stay); when
//     the Kubernetes Node is gone and no Pod bound to it remains, the Calico
//     Node is removed the way Calico removes one: its workload endpoints,
//     their addresses and its tunnel addresses are released, its block
//     affinities given up, its BGPPeers, HostEndpoints and node.<name>
//     Felix/BGP configurations deleted, then the Node itself. Calico Nodes
//     without a Kubernetes orchRef (CALICO_K8S_NODE_REF) are left alone.
//     With it runs the automatic host endpoint controller (autohep.go):
//     with node.hostEndpoint.autoCreate Enabled, "<node>-auto-hep" and the
//     templates' host endpoints for every Calico Node, as Calico makes
//     them, kept in step with the nodes; the ones it made (label
//     projectcalico.org/created-by: calico-kube-controllers) are deleted
//     when no longer wanted, others are never touched.
//   - ipamgc: an allocation is a leak candidate when it names a pod
//     (namespace and pod attributes) that no longer exists in the API (or
//     now runs on another node) and no WorkloadEndpoint or Node uses the
//     address; a tunnel address is one when its node is gone. A candidate
//     that stays one for the grace period (KubeControllersConfiguration
//     spec.controllers.node.leakGracePeriod, default 15m, 0 disables GC)
//     is re-checked against the API once more and released, conditional on
//     its handle and sequence number, and only if every address of its
//     handle is a confirmed leak. Allocations without pod attributes are
//     never released. Each release is logged with the pod it belonged to.
//     While the datastore is locked for a migration (ClusterInformation
//     datastoreReady false) nothing is collected and the grace period
//     starts again at the unlock, as Calico's IPAM controller waits.
//     Each pass also sets Calico's ipam_* gauges (per pool and node, and
//     per node; ipammetrics.go), computed purely from the IPAM report.
//   - loadbalancer (loadbalancer.go): Calico's LoadBalancer IP address
//     management. A Service of type LoadBalancer (no loadBalancerClass or
//     "calico"; with assignIPs RequestedServicesOnly only class "calico"
//     or annotated) gets one address per family of spec.ipFamilies from
//     the pools that allow the LoadBalancer use, or the addresses and
//     pools its projectcalico.org/loadBalancerIPs, ipv4pools and
//     ipv6pools annotations name, allocated to IPAM's virtual host
//     "load-balancer" under the handle lb-<hash of name, namespace, UID>
//     and written to status.loadBalancer.ingress. IPAM is the record: a
//     sync reads the Service's handle, a full pass (start, Resync, IP pool
//     or assignIPs changes) lists the LoadBalancer allocations and
//     releases those of Services that are gone or were created again.
//
// # KubeControllersConfiguration
//
// Each leadership term follows KubeControllersConfiguration "default"
// (kcc.go: list, then watch), merged as Calico's kube-controllers merges
// it with ENABLED_CONTROLLERS set: logSeverityScreen (the controllers'
// own level, through levelHandler), node.syncLabels, node.hostEndpoint,
// node.leakGracePeriod, the four reconcilerPeriods (queue.period),
// loadBalancer.assignIPs, debugProfilePort (profiler.go: pprof on
// localhost while leading) and, on etcd, etcdV3CompactionPeriod
// (compactor.go, Kubernetes' compactor).
// Changes apply in place; settings calico-node does not honour are
// logged.
//
// # On the Kubernetes datastore
//
// There Calico computes Profiles from Namespaces and ServiceAccounts,
// WorkloadEndpoints (labels included) from Pods, and reads Kubernetes
// NetworkPolicies as knp.default.*; the store refuses writes of them. So
// with Config.Datastore "kubernetes" New leaves the namespace,
// serviceaccount, workloadendpoint and policy controllers out, with a
// warning each (ForDatastore), and runs node, ipamgc and loadbalancer,
// as Calico's KDD manifests do.
//
// The Calico Node is the Kubernetes Node (its orchRef names itself), so
// the node controller syncs no labels and deletes no Node. When a
// Kubernetes Node is deleted and no Pod bound to it remains, it removes
// what Calico keeps for the node elsewhere, the same cleanupNode as on
// etcd: pod and tunnel addresses, block affinities, BGPPeers,
// HostEndpoints, node.<name> configurations. Its full reconcile finds the
// nodes deleted while no controller ran by their IPAM, as Calico's IPAM
// controller does: block affinities or pod/tunnel addresses of a node
// Kubernetes does not have. Configuration alone is not evidence that a
// node existed (it may be written ahead of one), so it is left alone.
// ipamgc is unchanged: the endpoints it checks addresses against are the
// pods' (their cni.projectcalico.org annotations or status). RemoveNode
// (calicoctl delete node) cleans up and then returns the store's
// datastore.ErrNotSupported for the Node itself, as Calico's does on KDD.
//
// # Design
//
// Run loops over leadership terms (kube.Elector.Lead on the Lease). While
// leading, one term builds shared informers (with a resync period) for
// what the enabled controllers watch, one per resource however many
// controllers read it, waits for their caches, makes one full reconcile
// (every key known to Kubernetes or to Calico is compared), repeats it
// every Resync, and feeds informer events into one rate-limited work
// queue per controller (the node controller also watches Calico Nodes, so
// a node registering after its Kubernetes node gets its labels at once).
// A sync reads the Kubernetes object from the informer cache and the
// Calico resource from etcd, and creates, updates (compare-and-swap on the
// resource version) or deletes to make them agree; a failure is retried
// with exponential backoff and, after maxRetries, left to the next full
// reconcile. When the lease is lost the term's context ends, workers drain
// and stop, and the instance stands by for the lease again. On shutdown
// and on loss alike the controllers stop before the lease is released, so
// two leaders never write at once.
//
// # Why not client-go's clientset, informer factory or leaderelection
//
// All three import k8s.io/client-go/kubernetes/scheme, whose package init
// registers every built-in API group. This package is linked into the
// calico-node binary, which is also the CNI plugin that kubelet executes
// for every pod, so that init (a few milliseconds and about 60 API
// packages) would be paid on every pod start for nothing. The controllers
// use package kube instead: a client for the three API groups they need,
// informers from cache.NewSharedIndexInformer on its ListWatch with
// client-go's listers on top, and a Lease elector that speaks client-go's
// protocol. Tests may use the clientset; the linked code must not
// (`go list -deps` of the main package shows no client-go/kubernetes,
// informers or tools/leaderelection).
//
// # Thread safety
//
// Run is called once. Each controller's state is owned by its goroutines
// and guarded where a worker and the reconcile loop share it.
package controllers
