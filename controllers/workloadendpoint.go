package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// EndpointLabels are the labels Calico gives a pod's workload endpoints:
// the pod's own plus its namespace, orchestrator and service account.
func EndpointLabels(pod *corev1.Pod) map[string]string {
	out := make(map[string]string, len(pod.Labels)+3)
	maps.Copy(out, pod.Labels)
	out[api.LabelNamespace] = pod.Namespace
	out[api.LabelOrchestrator] = api.OrchestratorKubernetes
	if sa := pod.Spec.ServiceAccountName; sa != "" {
		out[api.LabelServiceAccount] = sa
	}
	return out
}

// workloadEndpointController copies pod labels onto workload endpoints.
type workloadEndpointController struct {
	*queue
	c      *Controllers
	lister listersv1.PodLister
}

func newWorkloadEndpointController(c *Controllers, f *informers, src *kccSource, log *slog.Logger) (runner, error) {
	inf := f.pods()
	wc := &workloadEndpointController{c: c, lister: listersv1.NewPodLister(inf.GetIndexer())}
	wc.queue = c.newQueue(WorkloadEndpoint, log, src, wc.sync, wc.keys)
	// Only label and service-account changes matter; the initial list and
	// periodic resyncs are covered by the full reconcile, which compares
	// all endpoints in one datastore list instead of one list per pod.
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if pod, ok := obj.(*corev1.Pod); ok && !initial && relevant(pod) {
				wc.add(pod.Namespace + "/" + pod.Name)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Pod)
			pod, ok2 := newObj.(*corev1.Pod)
			if !ok1 || !ok2 || !relevant(pod) {
				return
			}
			if !maps.Equal(old.Labels, pod.Labels) || old.Spec.ServiceAccountName != pod.Spec.ServiceAccountName {
				wc.add(pod.Namespace + "/" + pod.Name)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return wc, nil
}

// relevant: host-networked pods have no endpoint, finished pods are being
// torn down by the CNI plugin.
func relevant(pod *corev1.Pod) bool {
	return !pod.Spec.HostNetwork && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// podEndpoints returns the Kubernetes endpoints of pod among weps.
func podEndpoints(weps []api.Object, namespace, pod string) []*api.WorkloadEndpoint {
	var out []*api.WorkloadEndpoint
	for _, o := range weps {
		w, ok := o.(*api.WorkloadEndpoint)
		if ok && w.Namespace == namespace && w.Spec.Pod == pod && w.Spec.Orchestrator == api.OrchestratorKubernetes {
			out = append(out, w)
		}
	}
	return out
}

func endpointCurrent(w *api.WorkloadEndpoint, pod *corev1.Pod) bool {
	return maps.Equal(w.Labels, EndpointLabels(pod)) && w.Spec.ServiceAccountName == pod.Spec.ServiceAccountName
}

// keys compares every pod with its endpoints in one list of the datastore
// and returns the pods whose endpoints are out of date.
func (wc *workloadEndpointController) keys(ctx context.Context) ([]string, error) {
	weps, _, err := wc.c.store.List(ctx, "WorkloadEndpoint", "")
	if err != nil {
		return nil, fmt.Errorf("list workload endpoints: %w", err)
	}
	byPod := map[string][]*api.WorkloadEndpoint{}
	for _, o := range weps {
		if w, ok := o.(*api.WorkloadEndpoint); ok && w.Spec.Orchestrator == api.OrchestratorKubernetes {
			k := w.Namespace + "/" + w.Spec.Pod
			byPod[k] = append(byPod[k], w)
		}
	}
	pods, err := wc.lister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, pod := range pods {
		k := pod.Namespace + "/" + pod.Name
		if !relevant(pod) {
			continue
		}
		for _, w := range byPod[k] {
			if !endpointCurrent(w, pod) {
				keys = append(keys, k)
				break
			}
		}
	}
	return keys, nil
}

func (wc *workloadEndpointController) sync(ctx context.Context, key string) error {
	ns, name := splitKey(key)
	pod, err := wc.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil // the CNI plugin deletes endpoints
	}
	if err != nil {
		return err
	}
	if !relevant(pod) {
		return nil
	}
	weps, _, err := wc.c.store.List(ctx, "WorkloadEndpoint", ns)
	if err != nil {
		return fmt.Errorf("list workload endpoints in %s: %w", ns, err)
	}
	// No endpoint yet is normal: the CNI plugin has not run for the pod.
	for _, w := range podEndpoints(weps, ns, name) {
		if endpointCurrent(w, pod) {
			continue
		}
		w.Labels = EndpointLabels(pod)
		w.Spec.ServiceAccountName = pod.Spec.ServiceAccountName
		// The update is conditional on the endpoint as listed; on a
		// conflict (the plugin rewrote it) the retry reads it again.
		if _, err := wc.c.store.Update(ctx, w); err != nil {
			if errors.Is(err, datastore.ErrNotFound) {
				continue
			}
			return fmt.Errorf("update workload endpoint %s/%s: %w", ns, w.Name, err)
		}
		wc.log.Info("updated workload endpoint labels", "endpoint", ns+"/"+w.Name, "pod", key)
	}
	return nil
}
