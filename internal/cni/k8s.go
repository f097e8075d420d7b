package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// Pod and namespace annotations Calico's CNI plugin honours.
const (
	annotationIPv4Pools  = "cni.projectcalico.org/ipv4pools"
	annotationIPv6Pools  = "cni.projectcalico.org/ipv6pools"
	annotationIPFamilies = "cni.projectcalico.org/ipFamilies"
	annotationIPAddrs    = "cni.projectcalico.org/ipAddrs"
	// annotationAllowedSourcePrefixes lists the source prefixes the pod
	// may send from besides its own addresses (the endpoint's
	// allowSpoofedSourcePrefixes; FelixConfiguration must allow it too).
	annotationAllowedSourcePrefixes = "cni.projectcalico.org/allowedSourcePrefixes"

	// Profile name prefixes of Kubernetes namespaces and service accounts.
	profileNamespacePrefix      = "kns."
	profileServiceAccountPrefix = "ksa."

	k8sRequestTimeout = 10 * time.Second
)

// podInfo is what ADD needs from the Kubernetes API about a pod.
type podInfo struct {
	Labels         map[string]string
	Annotations    map[string]string
	NSAnnotations  map[string]string
	NSLabels       map[string]string
	ServiceAccount string
	GenerateName   string
	Ports          []api.WorkloadEndpointPort
}

// profiles are the pod's Calico profiles: its namespace's and, when it has
// one, its service account's.
func (p *podInfo) profiles(namespace string) []string {
	out := []string{profileNamespacePrefix + namespace}
	if p.ServiceAccount != "" {
		out = append(out, profileServiceAccountPrefix+namespace+"."+p.ServiceAccount)
	}
	return out
}

// endpointLabels are the labels Calico puts on a pod's endpoint: the pod's
// own, plus namespace, orchestrator and (when short enough to be a label
// value) service account.
func (p *podInfo) endpointLabels(namespace string) map[string]string {
	labels := make(map[string]string, len(p.Labels)+3)
	maps.Copy(labels, p.Labels)
	labels[api.LabelNamespace] = namespace
	labels[api.LabelOrchestrator] = api.OrchestratorKubernetes
	if sa := p.ServiceAccount; sa != "" && len(sa) < 63 {
		labels[api.LabelServiceAccount] = sa
	}
	return labels
}

// allowedSourcePrefixes parses the pod's (not the namespace's)
// allowedSourcePrefixes annotation, as Calico does: a JSON list of CIDRs,
// normalised.
func (p *podInfo) allowedSourcePrefixes() ([]string, error) {
	v := p.Annotations[annotationAllowedSourcePrefixes]
	if v == "" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal([]byte(v), &list); err != nil {
		return nil, configError("annotation "+annotationAllowedSourcePrefixes, "%q is not a JSON list of CIDRs", v)
	}
	var out []string
	for _, s := range list {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			a, aerr := netip.ParseAddr(strings.TrimSpace(s))
			if aerr != nil {
				return nil, configError("annotation "+annotationAllowedSourcePrefixes, "%q is not a CIDR", s)
			}
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, pfx.Masked().String())
	}
	return out, nil
}

// annotation returns a pod annotation, falling back to the namespace's.
func (p *podInfo) annotation(key string) string {
	if v := p.Annotations[key]; v != "" {
		return v
	}
	return p.NSAnnotations[key]
}

// k8sAPI reads core/v1 objects with plain GETs. The plugin needs three
// reads and nothing else; client-go's typed clients would link its whole
// scheme, whose package init every CNI invocation would pay for.
type k8sAPI struct {
	host   string
	client *http.Client
}

// get reads /api/v1/<path> into out; an API error comes back as an
// *apierrors.StatusError so callers classify it with apierrors.Is*.
func (k *k8sAPI) get(ctx context.Context, resource, name, path string, out any) error {
	u, err := url.JoinPath(k.host, "/api/v1/", path)
	if err != nil {
		return fmt.Errorf("kubernetes API URL %q: %w", k.host, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read %s %s: %w", resource, name, err)
	}
	if resp.StatusCode != http.StatusOK {
		var st metav1.Status
		if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Code != 0 {
			return &apierrors.StatusError{ErrStatus: st}
		}
		return apierrors.NewGenericServerResponse(resp.StatusCode, http.MethodGet,
			schema.GroupResource{Resource: resource}, name, string(body), 0, true)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decode %s %s: %w", resource, name, err)
	}
	return nil
}

// k8sClient builds an API client the way Calico's plugin does: the
// kubeconfig file, overridden by the policy section's API root,
// credentials and CA, and by kubernetes.k8s_api_root.
func k8sClient(c *netConf) (*k8sAPI, error) {
	if c.kube != nil {
		return c.kube(c)
	}
	return newK8sClient(c)
}

// newK8sClient builds the client k8sClient describes.
func newK8sClient(c *netConf) (*k8sAPI, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: c.Kubernetes.Kubeconfig}
	overrides := &clientcmd.ConfigOverrides{}
	// Old configs carried the full ".../api/v1/" path.
	if root, _, _ := strings.Cut(c.Policy.K8sAPIRoot, "/api/"); root != "" {
		overrides.ClusterInfo.Server = root
	}
	if c.Kubernetes.K8sAPIRoot != "" {
		overrides.ClusterInfo.Server = c.Kubernetes.K8sAPIRoot
	}
	if c.Policy.K8sCertificateAuthority != "" {
		overrides.ClusterInfo.CertificateAuthority = c.Policy.K8sCertificateAuthority
	}
	if c.Policy.K8sClientCertificate != "" {
		overrides.AuthInfo.ClientCertificate = c.Policy.K8sClientCertificate
	}
	if c.Policy.K8sClientKey != "" {
		overrides.AuthInfo.ClientKey = c.Policy.K8sClientKey
	}
	if c.Policy.K8sAuthToken != "" {
		overrides.AuthInfo.Token = c.Policy.K8sAuthToken
	}
	if c.Kubernetes.Kubeconfig != "" {
		if _, err := os.Stat(c.Kubernetes.Kubeconfig); err != nil {
			return nil, configError("kubernetes.kubeconfig", "%v", err)
		}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		field := "kubernetes.kubeconfig"
		if c.Kubernetes.Kubeconfig == "" {
			field = "policy.k8s_api_root"
		}
		return nil, configError(field, "no usable Kubernetes API configuration: %v", err)
	}
	cfg.Timeout = k8sRequestTimeout
	// Two reads per ADD: the client-side rate limiter only adds latency.
	cfg.QPS, cfg.Burst = 1000, 1000
	cfg.UserAgent = "calico-cni"
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, configError("kubernetes", "%v", err)
	}
	hc.Timeout = k8sRequestTimeout
	// Resolves a scheme-less host as client-go does (https with TLS
	// settings, else http).
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, configError("kubernetes", "%v", err)
	}
	return &k8sAPI{host: base.String(), client: hc}, nil
}

// fetchPodInfo reads the pod and its namespace concurrently (two round
// trips would otherwise add up on the ADD path).
func fetchPodInfo(ctx context.Context, c *netConf, namespace, name string) (*podInfo, error) {
	client, err := k8sClient(c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, k8sRequestTimeout)
	defer cancel()
	nsDone := make(chan error, 1)
	var nsAnnotations, nsLabels map[string]string
	go func() {
		var ns corev1.Namespace
		err := client.get(ctx, "namespaces", namespace, "namespaces/"+url.PathEscape(namespace), &ns)
		if err == nil {
			nsAnnotations, nsLabels = ns.Annotations, ns.Labels
		}
		nsDone <- err
	}()
	pod := &corev1.Pod{}
	err = client.get(ctx, "pods", name, "namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name), pod)
	nsErr := <-nsDone
	if err != nil {
		return nil, k8sError("read pod "+namespace+"/"+name, err)
	}
	if nsErr != nil {
		return nil, k8sError("read namespace "+namespace, nsErr)
	}
	return podInfoOf(pod, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Annotations: nsAnnotations, Labels: nsLabels}}), nil
}

// podInfoOf is what ADD needs of pod and its namespace (nil: none).
func podInfoOf(pod *corev1.Pod, ns *corev1.Namespace) *podInfo {
	p := &podInfo{
		Labels:         pod.Labels,
		Annotations:    pod.Annotations,
		ServiceAccount: pod.Spec.ServiceAccountName,
		GenerateName:   pod.GenerateName,
		Ports:          endpointPorts(pod),
	}
	if ns != nil {
		p.NSAnnotations, p.NSLabels = ns.Annotations, ns.Labels
	}
	return p
}

// fetchPodCIDRs returns the node's pod CIDRs (for host-local's
// "usePodCidr").
func fetchPodCIDRs(ctx context.Context, c *netConf, node string) ([]string, error) {
	client, err := k8sClient(c)
	if err != nil {
		return nil, err
	}
	if c.Kubernetes.NodeName != "" {
		node = c.Kubernetes.NodeName
	}
	ctx, cancel := context.WithTimeout(ctx, k8sRequestTimeout)
	defer cancel()
	var n corev1.Node
	err = client.get(ctx, "nodes", node, "nodes/"+url.PathEscape(node), &n)
	if err != nil {
		return nil, k8sError("read node "+node, err)
	}
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	if len(cidrs) == 0 {
		return nil, fmt.Errorf("node %s has no pod CIDR for host-local's usePodCidr", node)
	}
	return cidrs, nil
}

// k8sError classifies an API error: an unreachable or overloaded API
// server is worth retrying (code 11), a missing pod is not.
func k8sError(what string, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return types.NewError(types.ErrUnknownContainer, what+": "+err.Error(), "")
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
		return types.NewError(types.ErrInvalidNetworkConfig, what+": the configured Kubernetes credentials were refused: "+err.Error(), "")
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), errors.Is(err, context.DeadlineExceeded):
		return types.NewError(types.ErrTryAgainLater, what+": "+err.Error(), "")
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		// No answer at all: connection refused, DNS, TLS.
		return types.NewError(types.ErrTryAgainLater, what+": kubernetes API server unreachable: "+err.Error(), "")
	}
	return fmt.Errorf("%s: %w", what, err)
}

// endpointPorts maps the pod's named and host ports onto endpoint ports,
// as Calico's pod conversion does.
func endpointPorts(pod *corev1.Pod) []api.WorkloadEndpointPort {
	var out []api.WorkloadEndpointPort
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, ctr := range list {
			for _, p := range ctr.Ports {
				if p.ContainerPort == 0 || (p.HostPort == 0 && p.Name == "") {
					continue
				}
				proto := string(p.Protocol)
				switch p.Protocol {
				case "", corev1.ProtocolTCP:
					proto = "TCP"
				case corev1.ProtocolUDP, corev1.ProtocolSCTP:
				default:
					continue
				}
				out = append(out, api.WorkloadEndpointPort{
					Name:     p.Name,
					Protocol: api.ProtocolFromString(proto),
					Port:     uint16(p.ContainerPort),
					HostPort: uint16(p.HostPort),
					HostIP:   p.HostIP,
				})
			}
		}
	}
	return out
}

// ipamRequest is what the pod's (or namespace's) annotations ask of Calico
// IPAM.
type ipamRequest struct {
	v4Pools, v6Pools []string
	num4, num6       int
	ips              []netip.Addr // ipAddrs: exact addresses
}

// applyAnnotations overrides the config's IPAM request with the pod's
// annotations: pools and families from the pod or its namespace, exact
// addresses from the pod only (as Calico does).
func (r *ipamRequest) applyAnnotations(p *podInfo) error {
	parseList := func(key string) ([]string, error) {
		v := p.annotation(key)
		if v == "" {
			return nil, nil
		}
		var list []string
		if err := json.Unmarshal([]byte(v), &list); err != nil {
			return nil, configError("annotation "+key, "%q is not a JSON list of strings", v)
		}
		return list, nil
	}
	// pools sets *dst from the pool annotation key, when there is one.
	pools := func(key string, v4 bool, dst *[]string) error {
		list, err := parseList(key)
		if err != nil || list == nil {
			return err
		}
		if *dst, err = normalizePools(list, v4); err != nil {
			return configError("annotation "+key, "%v", err)
		}
		return nil
	}
	if err := pools(annotationIPv4Pools, true, &r.v4Pools); err != nil {
		return err
	}
	if err := pools(annotationIPv6Pools, false, &r.v6Pools); err != nil {
		return err
	}
	fams, err := parseList(annotationIPFamilies)
	if err != nil {
		return err
	}
	if fams != nil {
		r.num4, r.num6 = 0, 0
		for _, f := range fams {
			switch f {
			case "IPv4":
				r.num4 = 1
			case "IPv6":
				r.num6 = 1
			default:
				return configError("annotation "+annotationIPFamilies, "%q is not IPv4 or IPv6", f)
			}
		}
	}
	if v := p.Annotations[annotationIPAddrs]; v != "" {
		var list []string
		if err := json.Unmarshal([]byte(v), &list); err != nil {
			return configError("annotation "+annotationIPAddrs, "%q is not a JSON list of addresses", v)
		}
		ips, err := parseIPAddrs(list)
		if err != nil {
			return configError("annotation "+annotationIPAddrs, "%v", err)
		}
		r.ips = ips
	}
	return nil
}

// parseIPAddrs accepts at most one IPv4 and one IPv6 address.
func parseIPAddrs(list []string) ([]netip.Addr, error) {
	if len(list) == 0 {
		return nil, errors.New("is empty")
	}
	var have4, have6 bool
	var out []netip.Addr
	for _, s := range list {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address", s)
		}
		a = a.Unmap()
		if a.Is4() {
			if have4 {
				return nil, errors.New("has more than one IPv4 address")
			}
			have4 = true
		} else {
			if have6 {
				return nil, errors.New("has more than one IPv6 address")
			}
			have6 = true
		}
		out = append(out, a)
	}
	return out, nil
}
