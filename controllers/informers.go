package controllers

import (
	"context"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/projectcalico/calico-node/internal/kube"
)

// informers are the shared informers of one leadership term, one per
// watched resource however many controllers read it (the pod informer
// serves three). It does for the few types the controllers watch what
// client-go's SharedInformerFactory does for all of them, without linking
// the clientset (see the package doc).
type informers struct {
	kube   *kube.Client
	resync time.Duration
	byName map[string]cache.SharedIndexInformer
	names  []string // in creation order, for stable start and logs
	wg     sync.WaitGroup
}

func newInformers(k *kube.Client, resync time.Duration) *informers {
	return &informers{kube: k, resync: resync, byName: map[string]cache.SharedIndexInformer{}}
}

func (f *informers) informer(resource string, lw cache.ListerWatcher, obj runtime.Object) cache.SharedIndexInformer {
	if inf, ok := f.byName[resource]; ok {
		return inf
	}
	// The namespace index is what the listers' Namespace(ns) lookups use.
	inf := cache.NewSharedIndexInformer(lw, obj, f.resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	f.byName[resource] = inf
	f.names = append(f.names, resource)
	return inf
}

func (f *informers) pods() cache.SharedIndexInformer {
	return f.informer("pods", f.kube.Pods("").ListWatch(), &corev1.Pod{})
}

func (f *informers) nodes() cache.SharedIndexInformer {
	return f.informer("nodes", f.kube.Nodes().ListWatch(), &corev1.Node{})
}

func (f *informers) namespaces() cache.SharedIndexInformer {
	return f.informer("namespaces", f.kube.Namespaces().ListWatch(), &corev1.Namespace{})
}

func (f *informers) serviceAccounts() cache.SharedIndexInformer {
	return f.informer("serviceaccounts", f.kube.ServiceAccounts("").ListWatch(), &corev1.ServiceAccount{})
}

func (f *informers) services() cache.SharedIndexInformer {
	return f.informer("services", f.kube.Services("").ListWatch(), &corev1.Service{})
}

func (f *informers) networkPolicies() cache.SharedIndexInformer {
	return f.informer("networkpolicies", f.kube.NetworkPolicies("").ListWatch(), &networkingv1.NetworkPolicy{})
}

// start runs every informer until ctx ends; wait waits for them to stop.
func (f *informers) start(ctx context.Context) {
	for _, name := range f.names {
		inf := f.byName[name]
		f.wg.Go(func() { inf.RunWithContext(ctx) })
	}
}

func (f *informers) wait() { f.wg.Wait() }

// synced waits for every cache to be filled; false if ctx ended first.
func (f *informers) synced(ctx context.Context, log *slog.Logger) bool {
	for _, name := range f.names {
		if !cache.WaitForCacheSync(ctx.Done(), f.byName[name].HasSynced) {
			if ctx.Err() == nil {
				log.Error("informer cache did not sync", "resource", name)
			}
			return false
		}
	}
	return true
}
