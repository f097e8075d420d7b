package bgp

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/projectcalico/calico-node/internal/kube"
)

// Service is what per-service advertisement needs of a Kubernetes Service
// and its EndpointSlices (ServiceWatcher makes them).
type Service struct {
	Key                   string // namespace/name
	Type                  corev1.ServiceType
	ClusterIP             string   // spec.clusterIP ("None": headless)
	ClusterIPs            []string // spec.clusterIPs, every family
	ExternalIPs           []string
	LoadBalancerIP        string   // spec.loadBalancerIP (deprecated, still read by Calico)
	IngressIPs            []string // status.loadBalancer.ingress[].ip
	ExternalTrafficPolicy corev1.ServiceExternalTrafficPolicy
	// HasSlices: some EndpointSlice belongs to the service. Calico's route
	// generator decides nothing for a service without one.
	HasSlices bool
	// ReadyHere: a ready endpoint (no ready condition counts as ready)
	// runs on this node, in a slice of one of the service's IP families;
	// ReadyAnywhere: one runs on any node.
	ReadyHere, ReadyAnywhere bool
}

// serviceRoutes are the /32 (/128) routes this node advertises for
// individual services, as Calico v3.31's route generator (confd
// routes.go, advertiseThisService and getAllRoutesForService) decides
// them. A service of type ClusterIP, NodePort or LoadBalancer with a
// cluster IP and an EndpointSlice is advertised when
//
//   - externalTrafficPolicy is Cluster and it is a LoadBalancer whose
//     spec.loadBalancerIP or status address lies in a single-address
//     serviceLoadBalancerIPs entry, or it has an external IP in a
//     single-address serviceExternalIPs entry (every node then advertises
//     it);
//   - externalTrafficPolicy is Local and a ready endpoint runs on this node;
//   - externalTrafficPolicy is not Local (ClusterIP services have none),
//     serviceLoadBalancerAggregation is Disabled, and a ready endpoint runs
//     on any node.
//
// Its routes are then its cluster IPs (when serviceClusterIPs has an
// entry), its external IPs inside a serviceExternalIPs entry and its status
// LoadBalancer addresses inside a serviceLoadBalancerIPs entry. A node
// labelled node.kubernetes.io/exclude-from-external-load-balancers=true
// advertises none.
func (in RoutingInput) serviceRoutes() []netip.Prefix {
	if in.Global == nil || len(in.Services) == 0 || labelTrue(in.Identity.Labels, excludeLBLabel) {
		return nil
	}
	sc := in.serviceConf()
	set := map[netip.Prefix]bool{}
	for _, s := range in.Services {
		if !sc.advertise(s) {
			continue
		}
		var ips []string
		if len(sc.cluster) > 0 {
			ips = append(ips, s.ClusterIPs...)
		}
		for _, ip := range s.ExternalIPs {
			if within(sc.external, ip, false) {
				ips = append(ips, ip)
			}
		}
		for _, ip := range s.IngressIPs {
			if within(sc.lb, ip, false) {
				ips = append(ips, ip)
			}
		}
		for _, ip := range ips {
			if a, err := netip.ParseAddr(ip); err == nil {
				a = a.Unmap()
				set[netip.PrefixFrom(a, a.BitLen())] = true
			}
		}
	}
	out := make([]netip.Prefix, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.SortFunc(out, comparePrefix)
	return out
}

// within: ip lies in one of nets (in a single-address one if single).
func within(nets []netip.Prefix, ip string, single bool) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, n := range nets {
		if n.Contains(a) && (!single || n.IsSingleIP()) {
			return true
		}
	}
	return false
}

// advertise is confd's advertiseThisService for s.
func (sc serviceConf) advertise(s Service) bool {
	switch s.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	default:
		return false
	}
	if s.ClusterIP == "" || s.ClusterIP == corev1.ClusterIPNone || !s.HasSlices {
		return false
	}
	single := func(nets []netip.Prefix) func(string) bool {
		return func(ip string) bool { return within(nets, ip, true) }
	}
	if s.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyCluster {
		if s.Type == corev1.ServiceTypeLoadBalancer &&
			(within(sc.lb, s.LoadBalancerIP, true) || slices.ContainsFunc(s.IngressIPs, single(sc.lb))) {
			return true
		}
		if slices.ContainsFunc(s.ExternalIPs, single(sc.external)) {
			return true
		}
	}
	if s.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		return s.ReadyHere
	}
	return !sc.aggregate && s.ReadyAnywhere
}

// ServiceWatcher keeps the cluster's Services and EndpointSlices (an
// informer each, as Calico's route generator) and hands the BGP actor
// their advertisement view. Like confd it starts watching only once a
// service range is configured (Enable), and then keeps watching.
//
// Thread safety: Run owns the informers; Enable, Services and Changed may
// be called from any goroutine.
type ServiceWatcher struct {
	node       string // this node's Kubernetes name
	log        *slog.Logger
	svcs       cache.SharedIndexInformer
	slices     cache.SharedIndexInformer
	changed    chan struct{}
	enableOnce sync.Once
	enabled    chan struct{}
	syncOnce   sync.Once
	synced     chan struct{}
}

// NewServiceWatcher watches through kc; node is this node's name in the
// Kubernetes API (CALICO_K8S_NODE_REF, else the Calico node name).
func NewServiceWatcher(kc *kube.Client, node string, logger *slog.Logger) *ServiceWatcher {
	w := &ServiceWatcher{node: node, log: logger.With("component", "bgp-services"),
		changed: make(chan struct{}, 1), enabled: make(chan struct{}), synced: make(chan struct{})}
	w.svcs = cache.NewSharedIndexInformer(kc.Services("").ListWatch(), &corev1.Service{}, 0, cache.Indexers{})
	w.slices = cache.NewSharedIndexInformer(kc.EndpointSlices("").ListWatch(), &discoveryv1.EndpointSlice{}, 0,
		cache.Indexers{"service": func(obj any) ([]string, error) {
			es, ok := obj.(*discoveryv1.EndpointSlice)
			if !ok || es.Labels[discoveryv1.LabelServiceName] == "" {
				return nil, nil
			}
			return []string{es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]}, nil
		}})
	kickAll := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.kick() },
		UpdateFunc: func(any, any) { w.kick() },
		DeleteFunc: func(any) { w.kick() },
	}
	w.svcs.AddEventHandler(kickAll)
	w.slices.AddEventHandler(kickAll)
	return w
}

func (w *ServiceWatcher) kick() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Enable starts the watch (once; later calls do nothing).
func (w *ServiceWatcher) Enable() {
	w.enableOnce.Do(func() {
		w.log.Info("service ranges configured: watching Services and EndpointSlices for per-service advertisement")
		close(w.enabled)
	})
}

// Run runs the informers, from Enable until ctx ends.
func (w *ServiceWatcher) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-w.enabled:
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.svcs.RunWithContext(ctx) })
	wg.Go(func() { w.slices.RunWithContext(ctx) })
	if cache.WaitForCacheSync(ctx.Done(), w.svcs.HasSynced, w.slices.HasSynced) {
		w.log.Info("services and endpoint slices in sync")
		w.syncOnce.Do(func() { close(w.synced) })
		w.kick()
	}
	wg.Wait()
	return nil
}

// Changed is signalled (coalesced) whenever a Service or EndpointSlice
// changes, and once the caches are in sync.
func (w *ServiceWatcher) Changed() <-chan struct{} { return w.changed }

// Services returns every Service as advertisement sees it; ok is false
// until the caches are in sync.
func (w *ServiceWatcher) Services() (out []Service, ok bool) {
	select {
	case <-w.synced:
	default:
		return nil, false
	}
	for _, obj := range w.svcs.GetStore().List() {
		svc, isSvc := obj.(*corev1.Service)
		if !isSvc {
			continue
		}
		s := Service{
			Key: svc.Namespace + "/" + svc.Name, Type: svc.Spec.Type,
			ClusterIP: svc.Spec.ClusterIP, ClusterIPs: svc.Spec.ClusterIPs,
			ExternalIPs: svc.Spec.ExternalIPs, LoadBalancerIP: svc.Spec.LoadBalancerIP,
			ExternalTrafficPolicy: svc.Spec.ExternalTrafficPolicy,
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				s.IngressIPs = append(s.IngressIPs, ing.IP)
			}
		}
		w.endpoints(svc, &s)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, true
}

// endpoints fills s's EndpointSlice facts from svc's slices, as confd
// reads them: only slices whose addressType is one of the service's IP
// families count, and an endpoint without a ready condition is ready.
func (w *ServiceWatcher) endpoints(svc *corev1.Service, s *Service) {
	objs, _ := w.slices.GetIndexer().ByIndex("service", s.Key)
	for _, obj := range objs {
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		s.HasSlices = true
		if !slices.Contains(svc.Spec.IPFamilies, corev1.IPFamily(es.AddressType)) {
			continue
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			s.ReadyAnywhere = true
			if ep.NodeName != nil && *ep.NodeName == w.node {
				s.ReadyHere = true
			}
		}
	}
}
