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

	mu sync.Mutex
	// calicoNames maps Kubernetes node names to Calico node names, from
	// the last list of Calico nodes.
	calicoNames map[string]string
}

func newNodeController(c *Controllers, f *informers, log *slog.Logger) (runner, error) {
	nodeInf := f.nodes()
	nc := &nodeController{c: c, nodes: listersv1.NewNodeLister(nodeInf.GetIndexer()), calicoNames: map[string]string{}}
	nc.queue = c.newQueue(Node, log, nc.sync, nc.keys)
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
	if kn, err := nc.nodes.Get(k); err == nil && !labelsToSync(n, kn) {
		return
	}
	nc.add(k)
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
		if err == nil && labelsToSync(cn, kn) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func (nc *nodeController) sync(ctx context.Context, knode string) error {
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
	case err == nil:
		return nc.syncLabels(ctx, cn, kn)
	case !apierrors.IsNotFound(err):
		return err
	}
	// The cache says the node is gone; the API server must agree.
	if _, err := nc.c.kube.Nodes().Get(ctx, knode); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("confirm kubernetes node %s is gone: %w", knode, err)
	}
	pods, err := nc.c.kube.Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", knode).String(),
	})
	if err != nil {
		return fmt.Errorf("list pods of node %s: %w", knode, err)
	}
	if n := len(pods.Items); n > 0 {
		nc.log.Info("kubernetes node deleted but pods remain; waiting before removing its calico node",
			"node", knode, "calicoNode", cn.Name, "pods", n)
		return retryAfter(nc.c.cfg.NodeCleanupRetry)
	}
	if err := nc.remove(ctx, cn); err != nil {
		return err
	}
	nc.c.metrics.nodesRemoved.Inc()
	return nil
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

func (nc *nodeController) syncLabels(ctx context.Context, cn *api.Node, kn *corev1.Node) error {
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
	return RemoveNode(ctx, nc.c.store, nc.c.ipam, cn.Name, log)
}

// RemoveNode deletes a Calico node and everything that belongs to it, as
// libcalico-go's node deletion does: its workload endpoints and their
// addresses (except one another node's endpoint uses), its tunnel
// addresses, its block affinities, its BGPPeers and HostEndpoints, its
// node-specific Felix and BGP configuration, and the Node itself. Used by
// the node controller and by `calicoctl delete node`. Missing pieces are
// not errors, so a half-finished removal can simply be run again.
func RemoveNode(ctx context.Context, store Store, ipamc IPAM, name string, log *slog.Logger) error {
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
	return deleteResource(ctx, nc.c.store, "Node", "", name, log)
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
	var opts []ipam.ReleaseOptions
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
		opts = append(opts, ipam.ReleaseOptions{Addr: addr, Handle: a.Handle, SequenceNumber: a.SequenceNumber})
		allocs = append(allocs, a)
	}
	if len(opts) == 0 {
		return nil
	}
	unallocated, err := nc.c.ipam.Release(ctx, opts...)
	if err != nil {
		return fmt.Errorf("release addresses of %s: %w", name, err)
	}
	for i, o := range opts {
		if slices.Contains(unallocated, o.Addr) {
			continue
		}
		a := allocs[i]
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
