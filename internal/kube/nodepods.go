package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// NodePods is a watch of the pods bound to one node (kubelet's own field
// selector, spec.nodeName) and of every namespace: what the agent's CNI
// server reads for each ADD on the Kubernetes datastore instead of a GET
// of the pod and of its namespace (cni.PodSource).
//
// Thread safety: Run runs the informers; Pod and Namespace may be called
// from any goroutine. The objects returned are the informers' own and
// must not be changed.
type NodePods struct {
	pods, namespaces cache.SharedIndexInformer
}

// NewNodePods watches through c the pods of node (its Kubernetes name).
func NewNodePods(c *Client, node string) *NodePods {
	lw := c.Pods("").ListWatch()
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	onNode := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return lw.ListWithContextFunc(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return lw.WatchFuncWithContext(ctx, opts)
		},
	}
	return &NodePods{
		pods:       cache.NewSharedIndexInformer(onNode, &corev1.Pod{}, 0, cache.Indexers{}),
		namespaces: cache.NewSharedIndexInformer(c.Namespaces().ListWatch(), &corev1.Namespace{}, 0, cache.Indexers{}),
	}
}

// Run runs both watches until ctx ends.
func (p *NodePods) Run(ctx context.Context) error {
	done := make(chan struct{}, 2)
	for _, inf := range []cache.SharedIndexInformer{p.pods, p.namespaces} {
		go func() {
			inf.RunWithContext(ctx)
			done <- struct{}{}
		}()
	}
	<-done
	<-done
	return nil
}

// Pod is the pod as last seen, and false when it is not known (absent,
// or the watch has not listed yet).
func (p *NodePods) Pod(namespace, name string) (*corev1.Pod, bool) {
	return get[*corev1.Pod](p.pods, namespace+"/"+name)
}

// Namespace is the namespace as last seen, as Pod.
func (p *NodePods) Namespace(name string) (*corev1.Namespace, bool) {
	return get[*corev1.Namespace](p.namespaces, name)
}

func get[T any](inf cache.SharedIndexInformer, key string) (T, bool) {
	var zero T
	if !inf.HasSynced() {
		return zero, false
	}
	obj, ok, err := inf.GetStore().GetByKey(key)
	if err != nil || !ok {
		return zero, false
	}
	t, ok := obj.(T)
	return t, ok
}
