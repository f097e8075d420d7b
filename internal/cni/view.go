package cni

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"

	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// On the Kubernetes datastore every read of an ADD is an API round trip
// (~2 ms on a quiet machine, far more under load), and the agent already
// watches most of what an ADD reads. An AgentView hands the agent's
// watches to its CNI server; a command whose datastore is the agent's
// own (the same API server) then reads them instead:
//
//   - ClusterInformation (the datastore's lock flag), IP pools, IP
//     reservations and this node's Node (its labels, for pools' node
//     selectors) from confwatch, instead of a GET and three reads under
//     the node's IPAM lock. IPAM reads these from the API server's watch
//     cache already (datastore.WithCachedReads): the agent's copy is as
//     current as that cache, give or take the watch's delivery.
//   - The pod, its endpoint and its namespace from a watch of this
//     node's pods and of the namespaces (PodSource), instead of two GETs
//     of the pod and one of the namespace. Only a pod the watch holds,
//     with the uid the runtime names (K8S_POD_UID), is taken from it;
//     any other is read as before.
//
// A pod changed just before its ADD may reach the watch after the ADD
// read it. The ADD's write of the pod's annotations hands back the pod's
// new resourceVersion; once the watch has delivered that version (or,
// when it is slow, from a GET) the ADD compares what it allocated from
// with the pod as it is, while the dataplane programs the endpoint. If
// the pod's IPAM annotations changed, the ADD is undone and run again
// from fresh reads (errStalePod). Labels, service account and ports need
// no check: on this datastore the endpoint is computed from the pod
// itself, as the write returns it. docs/decisions.md (CNI on the
// Kubernetes datastore) says what staleness remains and why it is safe.

// AgentView is what the agent watches, for its CNI server (Server.View).
type AgentView struct {
	// Server is the API server of the agent's datastore (kdd.ServerURL):
	// only commands whose datastore is on it read the view.
	Server string
	// Node is the agent's Calico node name: its Node is the one kept.
	Node string
	// Resources is a confwatch subscription to viewKinds.
	Resources *confwatch.Subscription
	// Pods, if set, watches this node's pods and the namespaces.
	Pods PodSource
}

// PodSource is a watch of the node's pods and of every namespace
// (kube.NodePods). Each returns false when it does not hold the object.
// What it returns is shared and must not be changed.
type PodSource interface {
	Pod(namespace, name string) (*corev1.Pod, bool)
	Namespace(name string) (*corev1.Namespace, bool)
}

// ViewKinds are the kinds AgentView.Resources subscribes to.
var ViewKinds = []string{"ClusterInformation", "IPPool", "IPReservation", "Node"}

// errStalePod: the pod's IPAM annotations changed between the read of
// the agent's watch and the ADD's write; the ADD is undone and the agent
// runs it again without the watch.
var errStalePod = types.NewError(types.ErrTryAgainLater, "the pod changed during ADD", "its IPAM annotations differ from what the agent's watch held when the ADD began")

// view is the server's copy of AgentView.Resources, kept by run.
type view struct {
	AgentView
	log *slog.Logger

	mu     sync.Mutex
	synced bool
	ci     api.Object // nil: none
	node   api.Object
	pools  map[string]api.Object
	res    map[string]api.Object
}

func newView(v AgentView, logger *slog.Logger) *view {
	return &view{AgentView: v, log: logger, pools: map[string]api.Object{}, res: map[string]api.Object{}}
}

// run applies the subscription's updates until ctx ends.
func (v *view) run(ctx context.Context) {
	for {
		ups, err := v.Resources.Next(ctx)
		if err != nil {
			return
		}
		v.mu.Lock()
		for _, u := range ups {
			obj := u.Object
			if u.Type == confwatch.Delete {
				obj = nil
			}
			switch u.Key.Kind {
			case "ClusterInformation":
				if u.Key.Name == "default" {
					v.ci = obj
				}
			case "Node":
				if u.Key.Name == v.Node {
					v.node = obj
				}
			case "IPPool":
				setOrDelete(v.pools, u.Key.Name, obj)
			case "IPReservation":
				setOrDelete(v.res, u.Key.Name, obj)
			}
		}
		v.synced = true
		v.mu.Unlock()
	}
}

func setOrDelete(m map[string]api.Object, name string, obj api.Object) {
	if obj == nil {
		delete(m, name)
	} else {
		m[name] = obj
	}
}

// viewStore is the agent's store for its own Kubernetes datastore: the
// reads the view holds come from it (see the comment at the top).
type viewStore struct {
	datastore.Store
	kdd *kdd.Store // the Store's backend
	v   *view
}

// Get answers ClusterInformation always, and this node's Node for reads
// that may be cached (datastore.WithCachedReads), from the view once it
// is in sync.
func (s viewStore) Get(ctx context.Context, kind, namespace, name string) (api.Object, error) {
	s.v.mu.Lock()
	var obj api.Object
	ok := s.v.synced
	switch {
	case ok && kind == "ClusterInformation" && name == "default":
		obj = s.v.ci
	case ok && kind == "Node" && name == s.v.Node && datastore.CachedReads(ctx):
		obj = s.v.node
	default:
		ok = false
	}
	s.v.mu.Unlock()
	if !ok {
		return s.Store.Get(ctx, kind, namespace, name)
	}
	if obj == nil {
		return nil, datastore.ErrNotFound
	}
	return obj, nil
}

// List answers pools and reservations for reads that may be cached from
// the view once it is in sync (at revision 0: IPAM ignores it).
func (s viewStore) List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error) {
	var m map[string]api.Object
	switch kind {
	case "IPPool":
		m = s.v.pools
	case "IPReservation":
		m = s.v.res
	}
	s.v.mu.Lock()
	if m == nil || !s.v.synced || !datastore.CachedReads(ctx) {
		s.v.mu.Unlock()
		return s.Store.List(ctx, kind, namespace)
	}
	out := slices.SortedFunc(maps.Values(m), func(a, b api.Object) int { return cmp.Compare(a.Meta().Name, b.Meta().Name) })
	s.v.mu.Unlock()
	return out, 0, nil
}

// viewPod is a pod as the agent's watch holds it.
type viewPod struct {
	info *podInfo
	ep   *api.WorkloadEndpoint // nil: the pod has none
}

// pod is the pod from the watch, or false when the watch does not hold
// it, or holds another pod of that name than uid (when set).
func (s viewStore) pod(namespace, name, uid string) (*viewPod, bool) {
	if s.v.Pods == nil {
		return nil, false
	}
	pod, ok := s.v.Pods.Pod(namespace, name)
	if !ok || (uid != "" && string(pod.UID) != uid) {
		return nil, false
	}
	ns, ok := s.v.Pods.Namespace(namespace)
	if !ok {
		return nil, false
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, false
	}
	ep, err := s.kdd.PodEndpoint(raw)
	if err != nil {
		return nil, false
	}
	return &viewPod{info: podInfoOf(pod, ns), ep: ep}, true
}

// podSeen is the pod once the watch has delivered resourceVersion rv of
// it or a later one, waiting up to wait; false when it has not by then.
func (s viewStore) podSeen(ctx context.Context, namespace, name, rv string, wait time.Duration) (*corev1.Pod, bool) {
	want, err := strconv.ParseUint(rv, 10, 64)
	if err != nil || s.v.Pods == nil {
		return nil, false
	}
	deadline := time.Now().Add(wait)
	for {
		if pod, ok := s.v.Pods.Pod(namespace, name); ok {
			if got, err := strconv.ParseUint(pod.ResourceVersion, 10, 64); err == nil && got >= want {
				return pod, true
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// agentPod is the pod from the agent's watch, when the agent serves the
// command on its own Kubernetes datastore and its watch holds the pod
// the runtime names; nil otherwise (the pod is then read).
func (inv *invocation) agentPod(ctx context.Context) (*viewPod, viewStore) {
	if inv.host.stores == nil || inv.host.noPodView || inv.k8s == nil || !inv.conf.k8sAPIConfigured() {
		return nil, viewStore{}
	}
	store, err := inv.datastore(ctx)
	if err != nil {
		return nil, viewStore{}
	}
	vs, ok := store.(viewStore)
	if !ok {
		return nil, viewStore{}
	}
	p, ok := vs.pod(inv.k8s.namespace, inv.k8s.pod, inv.k8s.uid)
	if !ok {
		inv.logger.Debug("pod not in the agent's watch: reading it")
		return nil, viewStore{}
	}
	return p, vs
}

// podWatchWait bounds how long an ADD from the agent's watch waits for
// the watch to deliver the pod as the ADD wrote it, before it reads the
// pod instead.
const podWatchWait = 250 * time.Millisecond

// checkAgentPod reports errStalePod when the pod, as it is once the ADD
// wrote it (at resourceVersion rv), asks IPAM for something else than
// what the ADD allocated from (used, from the watch's copy).
func (inv *invocation) checkAgentPod(ctx context.Context, vs viewStore, used *podInfo, rv string) error {
	info := &podInfo{}
	if pod, ok := vs.podSeen(ctx, inv.k8s.namespace, inv.k8s.pod, rv, podWatchWait); ok {
		info = podInfoOf(pod, nil)
	} else {
		inv.logger.Debug("the agent's watch is behind the pod's write: reading the pod to check it")
		fresh, err := fetchPodInfo(ctx, inv.conf, inv.k8s.namespace, inv.k8s.pod)
		if err != nil {
			return err
		}
		info = fresh
	}
	info.NSAnnotations, info.NSLabels = used.NSAnnotations, used.NSLabels
	was, is := ipamRequestFromConf(inv.conf), ipamRequestFromConf(inv.conf)
	if err := was.applyAnnotations(used); err != nil {
		return err
	}
	if err := is.applyAnnotations(info); err != nil || !reflect.DeepEqual(was, is) {
		inv.logger.Info("the pod's IPAM annotations changed during ADD: running it again from fresh reads")
		return errStalePod
	}
	return nil
}

// isStalePod reports errStalePod.
func isStalePod(err error) bool { return errors.Is(err, errStalePod) }
