package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
)

// Client reaches the Kubernetes API groups calico-node uses: core/v1,
// networking.k8s.io/v1, coordination.k8s.io/v1 and discovery.k8s.io/v1.
type Client struct {
	core, networking, coordination, discovery *rest.RESTClient
	params                                    runtime.ParameterCodec
}

// New builds a Client on cfg, as client-go's clientset would (same user
// agent default, one HTTP transport for all groups, one rate limiter when
// cfg sets QPS), but knowing only the three groups above.
func New(cfg *rest.Config) (*Client, error) {
	// A private scheme, built here rather than at package init: a process
	// that never talks to Kubernetes (the CNI plugin) pays nothing for it.
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme, coordinationv1.AddToScheme, discoveryv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("register kubernetes API types: %w", err)
		}
	}
	// Status, WatchEvent and the option types, as the API server's
	// unversioned "v1" spells them.
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()

	base := rest.CopyConfig(cfg)
	if base.UserAgent == "" {
		base.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if base.RateLimiter == nil && base.QPS > 0 {
		if base.Burst <= 0 {
			return nil, errors.New("kubernetes client: burst must be positive when QPS is set")
		}
		base.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(base.QPS, base.Burst)
	}
	httpClient, err := rest.HTTPClientFor(base)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	group := func(apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
		c := *base
		c.APIPath, c.GroupVersion, c.NegotiatedSerializer = apiPath, &gv, codecs
		rc, err := rest.RESTClientForConfigAndClient(&c, httpClient)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client for %s: %w", gv, err)
		}
		return rc, nil
	}
	c := &Client{params: runtime.NewParameterCodec(scheme)}
	if c.core, err = group("/api", corev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if c.networking, err = group("/apis", networkingv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if c.coordination, err = group("/apis", coordinationv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if c.discovery, err = group("/apis", discoveryv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	return c, nil
}

// Object is what Resource handles: an API object with object metadata.
type Object interface {
	runtime.Object
	metav1.Object
}

// Resource is a typed client for one resource, bound to one namespace
// ("" = all namespaces, or a cluster-scoped resource). T is the object
// type, L its list type. Errors from the API server are
// *apierrors.StatusError, so apierrors.IsNotFound and IsConflict apply.
type Resource[T Object, L runtime.Object] struct {
	client    *rest.RESTClient
	params    runtime.ParameterCodec
	resource  string
	namespace string
	newObject func() T
	newList   func() L
}

func newResource[T Object, L runtime.Object](rc *rest.RESTClient, params runtime.ParameterCodec, resource, namespace string, newObject func() T, newList func() L) Resource[T, L] {
	return Resource[T, L]{client: rc, params: params, resource: resource, namespace: namespace, newObject: newObject, newList: newList}
}

// Pods in namespace ("" = all).
func (c *Client) Pods(namespace string) Resource[*corev1.Pod, *corev1.PodList] {
	return newResource(c.core, c.params, "pods", namespace,
		func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} })
}

// Nodes.
func (c *Client) Nodes() Resource[*corev1.Node, *corev1.NodeList] {
	return newResource(c.core, c.params, "nodes", "",
		func() *corev1.Node { return &corev1.Node{} }, func() *corev1.NodeList { return &corev1.NodeList{} })
}

// Namespaces.
func (c *Client) Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList] {
	return newResource(c.core, c.params, "namespaces", "",
		func() *corev1.Namespace { return &corev1.Namespace{} }, func() *corev1.NamespaceList { return &corev1.NamespaceList{} })
}

// ServiceAccounts in namespace ("" = all).
func (c *Client) ServiceAccounts(namespace string) Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList] {
	return newResource(c.core, c.params, "serviceaccounts", namespace,
		func() *corev1.ServiceAccount { return &corev1.ServiceAccount{} },
		func() *corev1.ServiceAccountList { return &corev1.ServiceAccountList{} })
}

// NetworkPolicies (networking.k8s.io/v1) in namespace ("" = all).
func (c *Client) NetworkPolicies(namespace string) Resource[*networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList] {
	return newResource(c.networking, c.params, "networkpolicies", namespace,
		func() *networkingv1.NetworkPolicy { return &networkingv1.NetworkPolicy{} },
		func() *networkingv1.NetworkPolicyList { return &networkingv1.NetworkPolicyList{} })
}

// Services in namespace ("" = all).
func (c *Client) Services(namespace string) Resource[*corev1.Service, *corev1.ServiceList] {
	return newResource(c.core, c.params, "services", namespace,
		func() *corev1.Service { return &corev1.Service{} }, func() *corev1.ServiceList { return &corev1.ServiceList{} })
}

// EndpointSlices (discovery.k8s.io/v1) in namespace ("" = all).
func (c *Client) EndpointSlices(namespace string) Resource[*discoveryv1.EndpointSlice, *discoveryv1.EndpointSliceList] {
	return newResource(c.discovery, c.params, "endpointslices", namespace,
		func() *discoveryv1.EndpointSlice { return &discoveryv1.EndpointSlice{} },
		func() *discoveryv1.EndpointSliceList { return &discoveryv1.EndpointSliceList{} })
}

// Leases (coordination.k8s.io/v1) in namespace.
func (c *Client) Leases(namespace string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return newResource(c.coordination, c.params, "leases", namespace,
		func() *coordinationv1.Lease { return &coordinationv1.Lease{} },
		func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} })
}

// request starts a request on the resource. Protobuf is asked for first,
// JSON accepted, as client-go's typed clients do for built-in types
// (unless the rest.Config names content types itself).
func (r Resource[T, L]) request(verb string) *rest.Request {
	return r.client.Verb(verb).UseProtobufAsDefault().
		NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.resource)
}

func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// Get reads one object.
func (r Resource[T, L]) Get(ctx context.Context, name string) (T, error) {
	out := r.newObject()
	if err := r.request("GET").Name(name).Do(ctx).Into(out); err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// List reads the objects opts selects.
func (r Resource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := r.newList()
	err := r.request("GET").VersionedParams(&opts, r.params).Timeout(timeoutOf(opts)).Do(ctx).Into(out)
	if err != nil {
		var zero L
		return zero, err
	}
	return out, nil
}

// Watch streams changes to the objects opts selects.
func (r Resource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.request("GET").VersionedParams(&opts, r.params).Timeout(timeoutOf(opts)).Watch(ctx)
}

// Create creates obj and returns it as stored.
func (r Resource[T, L]) Create(ctx context.Context, obj T) (T, error) {
	out := r.newObject()
	if err := r.request("POST").Body(obj).Do(ctx).Into(out); err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// Update replaces obj, conditional on its resourceVersion when it has
// one (a Conflict error means someone else wrote it first).
func (r Resource[T, L]) Update(ctx context.Context, obj T) (T, error) {
	out := r.newObject()
	if err := r.request("PUT").Name(obj.GetName()).Body(obj).Do(ctx).Into(out); err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// UpdateStatus replaces obj's status subresource (the rest of obj is
// ignored by the API server), conditional on its resourceVersion like
// Update.
func (r Resource[T, L]) UpdateStatus(ctx context.Context, obj T) (T, error) {
	out := r.newObject()
	if err := r.request("PUT").Name(obj.GetName()).SubResource("status").Body(obj).Do(ctx).Into(out); err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// ListWatch is the resource as an informer's source
// (cache.NewSharedIndexInformer).
func (r Resource[T, L]) ListWatch() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return r.List(ctx, opts)
		},
		WatchFuncWithContext: r.Watch,
	}
}
