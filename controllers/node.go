package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// KubeLabelsAnnotation records, on a Calico Node, the Kubernetes node
// labels last copied onto it, so that labels set by other means survive.
const KubeLabelsAnnotation = "projectcalico.org/kube-labels"

// K8sNodeName is the Kubernetes node a Calico Node belongs to: its "k8s"
// orchRef (CALICO_K8S_NODE_REF). "" for a node Kubernetes does not know.
func K8sNodeName(n *api.Node) string {
	for _, r := range n.Spec.OrchRefs {
		if r.Orchestrator == api.OrchestratorKubernetes {
			return r.NodeName
		}
	}
	return ""
}

// nodeController syncs node labels and removes the Calico side of
// deleted nodes. Keys are Kubernetes node names.
type nodeController struct {
	*queue
	c     *Controllers
	nodes listersv1.NodeLister
	src   *kccSource // nil in cleanupNode's

	mu sync.Mutex
	// calicoNames maps Kubernetes node names to Calico node names, from
	// the last list of Calico nodes.
	calicoNames map[string]string
}

func newNodeController(c *Controllers, f *informers, src *kccSource, log *slog.Logger) (runner, error) {
	nodeInf := f.nodes()
	nc := &nodeController{c: c, nodes: listersv1.NewNodeLister(nodeInf.GetIndexer()), src: src, calicoNames: map[string]string{}}
	nc.queue = c.newQueue(Node, log, src, nc.sync, nc.keys)
	if src != nil {
		// syncLabels turned on: copy the labels now.
		nc.queue.period = func() (time.Duration, <-chan struct{}) {
			_, changed := src.current()
			return c.cfg.Resync, changed
		}
		nc.queue.reconcileOnChange = true
	}
	if _, err := nodeInf.AddEventHandler(nc.handler()); err != nil {
		return nil, err
	}
	// The last pod of a deleted node going away lets its cleanup proceed.
	_, err := f.pods().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			pod, ok := obj.(*corev1.Pod)
			if !ok || pod.Spec.NodeName == "" {
				return
			}
			if _, err := nc.nodes.Get(pod.Spec.NodeName); apierrors.IsNotFound(err) {
				nc.add(pod.Spec.NodeName)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return nc, nil
}

// run processes the queue and, beside it, watches the Calico nodes: a
// node that registers after its Kubernetes node gets its labels at once,
// not at the next full reconcile.
func (nc *nodeController) run(ctx context.Context) {
	if nc.c.kdd {
		// The Calico Nodes are the Kubernetes Nodes the informer has.
		nc.queue.run(ctx)
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for ev := range nc.c.store.Watch(ctx, "Node", 0) {
			switch ev.Type {
			case datastore.Added, datastore.Modified:
				nc.noteCalicoNode(ev.Object)
			case datastore.Reset:
				for _, o := range ev.Objects {
					nc.noteCalicoNode(o)
				}
			}
		}
	})
	nc.queue.run(ctx)
	wg.Wait()
}

// noteCalicoNode records a Calico node's Kubernetes name and queues it if
// there is work: labels to copy, or a Kubernetes node that is gone. Our
// own label updates come back here and queue nothing.
func (nc *nodeController) noteCalicoNode(o api.Object) {
	n, ok := o.(*api.Node)
	if !ok {
		return
	}
	k := K8sNodeName(n)
	if k == "" {
		return
	}
	nc.mu.Lock()
	nc.calicoNames[k] = n.Name
	nc.mu.Unlock()
	if kn, err := nc.nodes.Get(k); err == nil && !(nc.syncLabels() && labelsToSync(n, kn)) {
		return
	}
	nc.add(k)
}

// syncLabels is KubeControllersConfiguration's node.syncLabels.
func (nc *nodeController) syncLabels() bool {
	if nc.src == nil {
		return true
	}
	rc, _ := nc.src.current()
	return rc.syncLabels
}

// calicoNodes lists the Calico nodes and refreshes the name mapping.
func (nc *nodeController) calicoNodes(ctx context.Context) (map[string]*api.Node, error) {
	objs, _, err := nc.c.store.List(ctx, "Node", "")
	if err != nil {
		return nil, fmt.Errorf("list calico nodes: %w", err)
	}
	byK8s := map[string]*api.Node{}
	names := map[string]string{}
	for _, o := range objs {
		n := o.(*api.Node)
		if k := K8sNodeName(n); k != "" {
			byK8s[k] = n
			names[k] = n.Name
		}
	}
	nc.mu.Lock()
	nc.calicoNames = names
	nc.mu.Unlock()
	return byK8s, nil
}

// keys: every Kubernetes node whose Calico labels are stale, and every
// Calico node whose Kubernetes node is gone.
func (nc *nodeController) keys(ctx context.Context) ([]string, error) {
	if nc.c.kdd {
		return nc.goneNodesWithIPAM(ctx)
	}
	byK8s, err := nc.calicoNodes(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k, cn := range byK8s {
		kn, err := nc.nodes.Get(k)
		if apierrors.IsNotFound(err) {
			keys = append(keys, k)
			continue
		}
		if err == nil && nc.syncLabels() && labelsToSync(cn, kn) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func (nc *nodeController) sync(ctx context.Context, knode string) error {
	if nc.c.kdd {
		return nc.syncKDD(ctx, knode)
	}
	nc.mu.Lock()
	cname, ok := nc.calicoNames[knode]
	nc.mu.Unlock()
	var cn *api.Node
	if ok {
		obj, err := nc.c.store.Get(ctx, "Node", "", cname)
		switch {
		case err == nil:
			cn = obj.(*api.Node)
			if K8sNodeName(cn) != knode {
				cn = nil
			}
		case !errors.Is(err, datastore.ErrNotFound):
			return fmt.Errorf("read calico node %s: %w", cname, err)
		}
	}
	if cn == nil {
		// Not known yet (a node that just registered) or renamed.
		byK8s, err := nc.calicoNodes(ctx)
		if err != nil {
			return err
		}
		if cn = byK8s[knode]; cn == nil {
			return nil
		}
	}

	kn, err := nc.nodes.Get(knode)
	switch {
	case err == nil && !nc.syncLabels():
		return nil
	case err == nil:
		return nc.copyLabels(ctx, cn, kn)
	case !apierrors.IsNotFound(err):
		return err
	}
	if gone, err := nc.goneWithItsPods(ctx, knode, cn.Name); !gone {
		return err
	}
	if err := nc.remove(ctx, cn); err != nil {
		return err
	}
	nc.c.metrics.nodesRemoved.Inc()
	return nil
}

// goneWithItsPods reports whether the Kubernetes node the informer cache
// no longer has is gone from the API server too, with every Pod bound to
// it; while pods remain it asks for a retry (as err).
func (nc *nodeController) goneWithItsPods(ctx context.Context, knode, cname string) (bool, error) {
	if _, err := nc.c.kube.Nodes().Get(ctx, knode); err == nil {
		return false, nil
	} else if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("confirm kubernetes node %s is gone: %w", knode, err)
	}
	pods, err := nc.c.kube.Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", knode).String(),
	})
	if err != nil {
		return false, fmt.Errorf("list pods of node %s: %w", knode, err)
	}
	if n := len(pods.Items); n > 0 {
		nc.log.Info("kubernetes node deleted but pods remain; waiting before removing its calico node",
			"node", knode, "calicoNode", cname, "pods", n)
		return false, retryAfter(nc.c.cfg.NodeCleanupRetry)
	}
	return true, nil
}

// syncKDD is sync on the Kubernetes datastore, where the Calico Node is
// the Kubernetes Node (its orchRef names itself) and goes with it: what
// is left to remove is what belongs to the node elsewhere, its IPAM, its
// BGPPeers, HostEndpoints and node.<name> configurations. Node labels
// need no sync: the Calico Node shows the Kubernetes labels themselves.
func (nc *nodeController) syncKDD(ctx context.Context, name string) error {
	if _, err := nc.nodes.Get(name); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	if gone, err := nc.goneWithItsPods(ctx, name, name); !gone {
		return err
	}
	log := nc.log.With("node", name)
	log.Info("kubernetes node deleted and no pods remain; removing what calico kept for it")
	if err := cleanupNode(ctx, nc.c.store, nc.c.ipam, name, log); err != nil {
		return err
	}
	nc.c.metrics.nodesRemoved.Inc()
	return nil
}

// goneNodesWithIPAM are the nodes that Calico IPAM holds block affinities
// or releasable addresses (pods', tunnels') for but that Kubernetes does
// not have: on the Kubernetes datastore, nodes deleted while no
// controller watched, as Calico's IPAM controller finds them. IPAM is the
// evidence that the node existed: a BGPPeer, HostEndpoint or node.<name>
// configuration alone may be made ahead of a node that has yet to join,
// and is removed only with a node seen to go.
func (nc *nodeController) goneNodesWithIPAM(ctx context.Context) ([]string, error) {
	report, err := nc.c.ipam.Check(ctx)
	if err != nil {
		return nil, fmt.Errorf("read IPAM: %w", err)
	}
	names := map[string]bool{}
	for _, b := range report.Stats.BlockList {
		if b.Node != "" {
			names[b.Node] = true
		}
	}
	for _, a := range report.SortedAllocations() {
		if a.Node != "" && (isPodAllocation(a) || isTunnelAllocation(a)) {
			names[a.Node] = true
		}
	}
	var keys []string
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if _, err := nc.nodes.Get(name); apierrors.IsNotFound(err) {
			keys = append(keys, name)
		}
	}
	return keys, nil
}

// labelsToSync reports whether the Calico node lacks the Kubernetes
// node's labels or keeps ones Kubernetes dropped.
func labelsToSync(cn *api.Node, kn *corev1.Node) bool {
	want, _ := mergedLabels(cn, kn)
	return !maps.Equal(want, cn.Labels) || cn.Annotations[KubeLabelsAnnotation] != kubeLabelsJSON(kn)
}

func kubeLabelsJSON(kn *corev1.Node) string {
	l := kn.Labels
	if l == nil {
		l = map[string]string{}
	}
	b, _ := json.Marshal(l)
	return string(b)
}

// mergedLabels are the Calico node's labels with the Kubernetes labels
// applied and those Kubernetes removed since the last sync taken away.
func mergedLabels(cn *api.Node, kn *corev1.Node) (map[string]string, error) {
	out := maps.Clone(cn.Labels)
	if out == nil {
		out = map[string]string{}
	}
	var previous map[string]string
	if a := cn.Annotations[KubeLabelsAnnotation]; a != "" {
		if err := json.Unmarshal([]byte(a), &previous); err != nil {
			return nil, fmt.Errorf("annotation %s of node %s: %w", KubeLabelsAnnotation, cn.Name, err)
		}
	}
	for k := range previous {
		if _, still := kn.Labels[k]; !still {
			delete(out, k)
		}
	}
	maps.Copy(out, kn.Labels)
	return out, nil
}

func (nc *nodeController) copyLabels(ctx context.Context, cn *api.Node, kn *corev1.Node) error {
	if !labelsToSync(cn, kn) {
		return nil
	}
	want, err := mergedLabels(cn, kn)
	if err != nil {
		return err
	}
	cn.Labels = want
	if cn.Annotations == nil {
		cn.Annotations = map[string]string{}
	}
	cn.Annotations[KubeLabelsAnnotation] = kubeLabelsJSON(kn)
	if _, err := nc.c.store.Update(ctx, cn); err != nil {
		return fmt.Errorf("update labels of calico node %s: %w", cn.Name, err)
	}
	nc.log.Info("synced node labels", "node", kn.Name, "calicoNode", cn.Name)
	return nil
}

// remove deletes a Calico node and everything that is only its, in the
// order Calico's node deletion uses, each step idempotent so that a
// failure part way is finished by the retry.
func (nc *nodeController) remove(ctx context.Context, cn *api.Node) error {
	log := nc.log.With("calicoNode", cn.Name, "node", K8sNodeName(cn))
	log.Info("kubernetes node deleted and no pods remain; removing calico node")
	if err := cleanupNode(ctx, nc.c.store, nc.c.ipam, cn.Name, log); err != nil {
		return err
	}
	return deleteResource(ctx, nc.c.store, "Node", "", cn.Name, log)
}

// RemoveNode deletes a Calico node and everything that belongs to it, as
// libcalico-go's node deletion does: its workload endpoints and their
// addresses (except one another node's endpoint uses), its tunnel
// addresses, its block affinities, its BGPPeers and HostEndpoints, its
// node-specific Felix and BGP configuration, and then the Node itself.
// It is `calicoctl delete node`. The cleanup runs whether or not the Node
// exists (missing pieces are not errors, so a half-finished removal can be
// run again); the Node's own deletion then reports what the datastore
// says: datastore.ErrNotFound for a Node that is not there, and, on the
// Kubernetes datastore, where the Calico Node is the Kubernetes Node,
// datastore.ErrNotSupported, as Calico's calicoctl reports there after
// the same cleanup.
func RemoveNode(ctx context.Context, store Store, ipamc IPAM, name string, log *slog.Logger) error {
	if err := cleanupNode(ctx, store, ipamc, name, log); err != nil {
		return fmt.Errorf("clean up node %s: %w", name, err)
	}
	if _, err := store.Delete(ctx, "Node", "", name, ""); err != nil {
		return err // the store's error names the Node
	}
	log.Info("deleted node", "name", name)
	return nil
}

// cleanupNode is RemoveNode without the Node itself: everything else that
// is the node's. Missing pieces are not errors.
func cleanupNode(ctx context.Context, store Store, ipamc IPAM, name string, log *slog.Logger) error {
	nc := &nodeController{c: &Controllers{store: store, ipam: ipamc, log: log}}

	// Its workload endpoints and their addresses.
	weps, _, err := nc.c.store.List(ctx, "WorkloadEndpoint", "")
	if err != nil {
		return fmt.Errorf("list workload endpoints: %w", err)
	}
	var mine []*api.WorkloadEndpoint
	inUseElsewhere := map[netip.Addr]bool{}
	for _, o := range weps {
		w := o.(*api.WorkloadEndpoint)
		for _, n := range w.Spec.IPNetworks {
			if a, ok := parseAddr(n); ok && w.Spec.Node != name {
				inUseElsewhere[a] = true
			}
		}
		if w.Spec.Node == name {
			mine = append(mine, w)
		}
	}
	if err := nc.releaseNodeAddresses(ctx, name, inUseElsewhere, log); err != nil {
		return err
	}
	for _, w := range mine {
		if err := deleteResource(ctx, nc.c.store, "WorkloadEndpoint", w.Namespace, w.Name, log); err != nil {
			return err
		}
	}
	released, err := nc.c.ipam.ReleaseHostAffinities(ctx, name, false)
	if err != nil {
		return fmt.Errorf("release block affinities of %s: %w", name, err)
	}
	if len(released) > 0 {
		log.Info("released block affinities", "blocks", released)
	}

	// Node-specific configuration.
	for _, kind := range []string{"BGPPeer", "HostEndpoint"} {
		objs, _, err := nc.c.store.List(ctx, kind, "")
		if err != nil {
			return fmt.Errorf("list %s: %w", kind, err)
		}
		for _, o := range objs {
			if nodeOf(o) == name {
				if err := deleteResource(ctx, nc.c.store, kind, "", o.Meta().Name, log); err != nil {
					return err
				}
			}
		}
	}
	for _, kind := range []string{"FelixConfiguration", "BGPConfiguration"} {
		if err := deleteResource(ctx, nc.c.store, kind, "", "node."+name, log); err != nil {
			return err
		}
	}
	return nil
}

func nodeOf(o api.Object) string {
	switch v := o.(type) {
	case *api.BGPPeer:
		return v.Spec.Node
	case *api.HostEndpoint:
		return v.Spec.Node
	}
	return ""
}

// releaseNodeAddresses releases every allocation made by the node (its
// pods' and its tunnel addresses) except one that an endpoint of another
// node uses.
func (nc *nodeController) releaseNodeAddresses(ctx context.Context, name string, inUseElsewhere map[netip.Addr]bool, log *slog.Logger) error {
	report, err := nc.c.ipam.Check(ctx)
	if err != nil {
		return fmt.Errorf("read IPAM: %w", err)
	}
	var allocs []*ipam.Allocation
	for _, a := range report.SortedAllocations() {
		if a.Node != name {
			continue
		}
		addr, err := netip.ParseAddr(a.IP)
		if err != nil || inUseElsewhere[addr] {
			continue
		}
		if !isPodAllocation(a) && !isTunnelAllocation(a) {
			// Not a pod's nor the node's own: whoever allocated it must
			// release it, as with Calico.
			log.Info("keeping an address of unknown use on the removed node", "ip", a.IP, "handle", a.Handle)
			continue
		}
		allocs = append(allocs, a)
	}
	released, err := nc.c.releaseAllocations(ctx, allocs)
	if err != nil {
		return fmt.Errorf("release addresses of %s: %w", name, err)
	}
	for i, a := range allocs {
		if !released[i] {
			continue
		}
		log.Info("released address of removed node", "ip", a.IP, "handle", a.Handle, "pod", podOf(a), "type", a.Type)
	}
	return nil
}

func parseAddr(s string) (netip.Addr, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), true
	}
	a, err := netip.ParseAddr(s)
	return a, err == nil
}
