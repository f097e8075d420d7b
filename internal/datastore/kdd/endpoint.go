package kdd

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// A WorkloadEndpoint on the Kubernetes datastore is computed from its Pod
// (libcalico-go conversion/workload_endpoint_default.go): one endpoint,
// "eth0", per scheduled pod that does not use the host's network. The
// only things Calico stores for it are three annotations its CNI plugin
// patches onto the pod: the container ID and the addresses.
const (
	podAnnContainerID        = "cni.projectcalico.org/containerID"
	podAnnPodIP              = "cni.projectcalico.org/podIP"
	podAnnPodIPs             = "cni.projectcalico.org/podIPs"
	podAnnAWSPodIPs          = "vpc.amazonaws.com/pod-ips"
	podAnnFloatingIPs        = "cni.projectcalico.org/floatingIPs"
	podAnnAllowedSrcPrefixes = "cni.projectcalico.org/allowedSourcePrefixes"
	podAnnNetworkStatus      = "k8s.v1.cni.cncf.io/network-status"

	// podEndpoint is the only endpoint name Calico gives a pod.
	podEndpoint = "eth0"

	profileNamespacePrefix      = "kns."
	profileServiceAccountPrefix = "ksa."
)

// k8sPod is the part of a core/v1 Pod Calico reads.
type k8sPod struct {
	Metadata coreMeta `json:"metadata"`
	Spec     struct {
		NodeName           string         `json:"nodeName,omitempty"`
		HostNetwork        bool           `json:"hostNetwork,omitempty"`
		ServiceAccountName string         `json:"serviceAccountName,omitempty"`
		Containers         []k8sContainer `json:"containers,omitempty"`
		InitContainers     []k8sContainer `json:"initContainers,omitempty"`
	} `json:"spec"`
	Status struct {
		Phase  string `json:"phase,omitempty"`
		PodIP  string `json:"podIP,omitempty"`
		PodIPs []struct {
			IP string `json:"ip"`
		} `json:"podIPs,omitempty"`
	} `json:"status"`
}

type k8sContainer struct {
	Ports []struct {
		Name          string `json:"name,omitempty"`
		HostPort      int32  `json:"hostPort,omitempty"`
		ContainerPort int32  `json:"containerPort"`
		Protocol      string `json:"protocol,omitempty"`
		HostIP        string `json:"hostIP,omitempty"`
	} `json:"ports,omitempty"`
}

type endpointMapper struct {
	s *Store
	i api.KindInfo
	// vethPrefix starts host interface names: the first entry of
	// FELIX_INTERFACEPREFIX, else "cali", as Calico's converter reads it.
	vethPrefix string
}

func newEndpointMapper(s *Store, info api.KindInfo) mapper {
	prefix, _, _ := strings.Cut(os.Getenv("FELIX_INTERFACEPREFIX"), ",")
	if prefix == "" {
		prefix = "cali"
	}
	return &endpointMapper{s: s, i: info, vethPrefix: prefix}
}

func (m *endpointMapper) info() api.KindInfo { return m.i }
func (m *endpointMapper) sources() []source  { return []source{podsSource} }

func (m *endpointMapper) convert(_ int, raw json.RawMessage) ([]api.Object, error) {
	var pod k8sPod
	if err := decodeCore(raw, &pod, "pod"); err != nil {
		return nil, err
	}
	if !podHasEndpoint(&pod) {
		return nil, nil
	}
	ep, err := podToEndpoint(&pod, m.vethPrefix)
	if err != nil {
		return nil, err
	}
	return []api.Object{ep}, nil
}

func (m *endpointMapper) get(ctx context.Context, ns, name string) (api.Object, error) {
	podName, ok := endpointPod(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a Kubernetes pod's endpoint name (<node>-k8s-<pod>-<interface>)", datastore.ErrNotFound, name)
	}
	var pod k8sPod
	if err := m.s.c.do(ctx, http.MethodGet, podsSource.objPath(ns, podName), nil, "", nil, &pod); err != nil {
		return nil, err
	}
	if !podHasEndpoint(&pod) {
		return nil, datastore.ErrNotFound
	}
	ep, err := podToEndpoint(&pod, m.vethPrefix)
	if err != nil {
		return nil, err
	}
	if ep.Name != name {
		return nil, datastore.ErrNotFound
	}
	return ep, nil
}

// write is what Calico's CNI plugin stores at ADD: the endpoint's
// addresses and container ID as pod annotations, patched onto
// pods/<pod>/status (the only write Calico's CNI RBAC allows). Nothing
// else of the endpoint is stored: everything else is computed from the pod
// (interface name, profiles, labels, ports), and the container-side MAC
// is not kept at all, as in Calico.
//
// Like Calico's, the patch is conditional on the pod's UID (the same pod,
// not a namesake created since) but not on its resourceVersion: kubelet
// rewrites the pod's status while the sandbox is built, and a conflict
// with that would fail the ADD for nothing; kubelet runs one ADD per pod
// at a time.
func (m *endpointMapper) write(ctx context.Context, _ writeMode, obj api.Object) (api.Object, error) {
	ep := obj.(*api.WorkloadEndpoint)
	anns := map[string]any{}
	if ips := ep.Spec.IPNetworks; len(ips) > 0 {
		anns[podAnnPodIP] = ips[0]
		anns[podAnnPodIPs] = strings.Join(ips, ",")
		if ep.Spec.ContainerID != "" {
			anns[podAnnContainerID] = ep.Spec.ContainerID
		}
	}
	return m.patch(ctx, ep.Namespace, ep.Name, "", ep.UID, anns)
}

// remove is what Calico's CNI plugin does at DEL: the address annotations
// are set to "" (not removed: "" tells Calico's watchers that the pod has
// let its addresses go while it terminates), and the container ID stays,
// so a repeated DEL can tell which sandbox the pod has. The endpoint
// itself lives on, without addresses, as long as its pod; what is
// returned is that endpoint (Calico's answer too), not the one before.
func (m *endpointMapper) remove(ctx context.Context, ns, name, rv string) (api.Object, error) {
	return m.patch(ctx, ns, name, rv, "", map[string]any{podAnnPodIP: "", podAnnPodIPs: ""})
}

// patch sets annotations on the pod of endpoint name, conditional on rv
// and uid when set, and returns the endpoint of the patched pod.
func (m *endpointMapper) patch(ctx context.Context, ns, name, rv, uid string, anns map[string]any) (api.Object, error) {
	podName, ok := endpointPod(name)
	if !ok {
		return nil, fmt.Errorf("%q is not a Kubernetes pod's endpoint name (<node>-k8s-<pod>-<interface>): the endpoints of the Kubernetes datastore are computed from pods", name)
	}
	meta := map[string]any{}
	if len(anns) > 0 {
		meta["annotations"] = anns
	}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	if uid != "" {
		meta["uid"] = uid
	}
	var pod k8sPod
	err := m.s.c.do(ctx, http.MethodPatch, podsSource.objPath(ns, podName)+"/status", nil, strategicMergePatch, map[string]any{"metadata": meta}, &pod)
	if err != nil {
		if uid != "" && uidMismatch(err) {
			return nil, fmt.Errorf("%w: pod %s/%s is no longer the pod with uid %s: %w", datastore.ErrConflict, ns, podName, uid, err)
		}
		return nil, err
	}
	ep, err := podToEndpoint(&pod, m.vethPrefix)
	if err != nil {
		return nil, err
	}
	return ep, nil
}

// uidMismatch reports the API server's refusal of a patch naming another
// uid than the pod's (an immutable field: 422 Invalid).
func uidMismatch(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.Code == http.StatusUnprocessableEntity && strings.Contains(se.Message, "uid")
}

// listPrefix answers the CNI plugin's lookup of a pod's endpoints,
// "<node>-k8s-<pod>-", with one GET of the pod: the doubled dashes in
// each part make the pod name unambiguous, and Calico's CNI RBAC grants
// get on pods, not list. (So, as in Calico, a pod "web-x" is not among the
// endpoints of prefix "node1-k8s-web-".) Any other prefix lists the pods.
func (m *endpointMapper) listPrefix(ctx context.Context, ns, prefix string) ([]api.Object, error) {
	if ns != "" {
		if podName, ok := endpointPrefixPod(prefix); ok {
			var pod k8sPod
			err := m.s.c.do(ctx, http.MethodGet, podsSource.objPath(ns, podName), nil, "", nil, &pod)
			switch {
			case isNotFound(err):
				return nil, nil
			case err != nil:
				return nil, err
			}
			if !podHasEndpoint(&pod) {
				return nil, nil
			}
			ep, err := podToEndpoint(&pod, m.vethPrefix)
			if err != nil {
				return nil, err
			}
			if !strings.HasPrefix(ep.Name, prefix) {
				return nil, nil
			}
			return []api.Object{ep}, nil
		}
	}
	objs, _, err := m.s.listSource(ctx, m, 0, podsSource, ns, "")
	if err != nil {
		return nil, err
	}
	objs = slices.DeleteFunc(objs, func(o api.Object) bool { return !strings.HasPrefix(o.Meta().Name, prefix) })
	sortObjects(objs)
	return objs, nil
}

// splitEndpointName is libcalico-go's extractParts: the name's parts at
// single dashes, each with its doubled dashes undone.
func splitEndpointName(name string) []string {
	var parts []string
	last := -1
	for i := 1; i < len(name); i++ {
		if name[i] != '-' {
			continue
		}
		if i < len(name)-1 && name[i+1] == '-' {
			i++ // an escaped dash
			continue
		}
		parts = append(parts, strings.ReplaceAll(name[last+1:i], "--", "-"))
		last = i
	}
	return append(parts, strings.ReplaceAll(name[last+1:], "--", "-"))
}

// endpointPod is the pod of a Kubernetes endpoint name
// "<node>-k8s-<pod>-<endpoint>".
func endpointPod(name string) (string, bool) {
	parts := splitEndpointName(name)
	if len(parts) != 4 || parts[1] != api.OrchestratorKubernetes || parts[2] == "" {
		return "", false
	}
	return parts[2], true
}

// endpointPrefixPod is the pod of a prefix "<node>-k8s-<pod>-". The
// prefix must end at a separator: a single dash, as a part never ends
// with one and its own dashes are doubled.
func endpointPrefixPod(prefix string) (string, bool) {
	if !strings.HasSuffix(prefix, "-") || strings.HasSuffix(prefix, "--") {
		return "", false
	}
	parts := splitEndpointName(prefix[:len(prefix)-1])
	if len(parts) != 3 || parts[0] == "" || parts[1] != api.OrchestratorKubernetes || parts[2] == "" {
		return "", false
	}
	return parts[2], true
}

// podHasEndpoint is Calico's IsValidCalicoWorkloadEndpoint: a pod has an
// endpoint once it is scheduled, unless it uses the host's network. (One
// without addresses yet, or any more, still has one; Calico's consumers
// ignore endpoints without addresses.)
func podHasEndpoint(p *k8sPod) bool {
	return !p.Spec.HostNetwork && p.Spec.NodeName != ""
}

// podFinished is Calico's IsFinished: the pod no longer owns its
// addresses (it ended, or it is terminating and the CNI plugin has
// released them).
func podFinished(p *k8sPod) bool {
	if p.Metadata.DeletionTimestamp != nil {
		if ip, ok := p.Metadata.Annotations[podAnnPodIP]; ok && ip == "" {
			return true
		}
		if ips, ok := p.Metadata.Annotations[podAnnAWSPodIPs]; ok && ips == "" {
			return true
		}
	}
	switch p.Status.Phase {
	case "Failed", "Succeeded", "Completed":
		return true
	}
	return false
}

// podIPNetworks is Calico's getPodIPs: the status addresses, else the
// Calico (or AWS VPC) annotations, as networks.
func podIPNetworks(p *k8sPod) ([]string, error) {
	anns := p.Metadata.Annotations
	var ips []string
	switch {
	case len(p.Status.PodIPs) > 0:
		for _, ip := range p.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
	case p.Status.PodIP != "":
		ips = []string{p.Status.PodIP}
	case anns[podAnnPodIPs] != "":
		ips = strings.Split(anns[podAnnPodIPs], ",")
	case anns[podAnnPodIP] != "":
		ips = []string{anns[podAnnPodIP]}
	case anns[podAnnAWSPodIPs] != "":
		ips = strings.Split(anns[podAnnAWSPodIPs], ",")
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		_, n, ok := parseCIDROrIP(ip)
		if !ok {
			return nil, fmt.Errorf("pod %s/%s: address %q is not an IP address or CIDR", p.Metadata.Namespace, p.Metadata.Name, ip)
		}
		out = append(out, n.String())
	}
	return out, nil
}

// vethName is the host-side interface Calico's CNI plugin creates for a
// pod: prefix + the first 11 hex digits of sha1("<namespace>.<pod>").
func vethName(prefix, namespace, pod string) string {
	sum := sha1.Sum([]byte(namespace + "." + pod))
	return prefix + hex.EncodeToString(sum[:])[:11]
}

// podToEndpoint is Calico's podToDefaultWorkloadEndpoint.
func podToEndpoint(p *k8sPod, vethPrefix string) (*api.WorkloadEndpoint, error) {
	meta := &p.Metadata
	sa := p.Spec.ServiceAccountName
	profiles := []string{profileNamespacePrefix + meta.Namespace}
	if sa != "" {
		profiles = append(profiles, profileServiceAccountPrefix+meta.Namespace+"."+sa)
	}
	ipNets, err := podIPNetworks(p)
	if err != nil {
		return nil, err
	}
	if podFinished(p) {
		ipNets = nil // the addresses are back in the pool
	}
	labels := make(map[string]string, len(meta.Labels)+3)
	maps.Copy(labels, meta.Labels)
	labels[api.LabelNamespace] = meta.Namespace
	labels[api.LabelOrchestrator] = api.OrchestratorKubernetes
	if sa != "" && len(sa) < 63 { // a label value's limit
		labels[api.LabelServiceAccount] = sa
	}
	nats, err := podFloatingIPs(meta.Annotations, ipNets)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", meta.Namespace, meta.Name, err)
	}
	spoof, err := podAllowedSourcePrefixes(meta.Annotations)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", meta.Namespace, meta.Name, err)
	}
	// Bad QoS annotations are clamped or dropped, as Calico does (it logs
	// them and keeps the endpoint).
	qos, _ := podQoSControls(meta.Annotations)

	ep := &api.WorkloadEndpoint{TypeMeta: api.TypeMeta{Kind: "WorkloadEndpoint", APIVersion: api.GroupVersion}}
	ep.Spec = api.WorkloadEndpointSpec{
		Orchestrator:               api.OrchestratorKubernetes,
		Node:                       p.Spec.NodeName,
		Pod:                        meta.Name,
		ContainerID:                meta.Annotations[podAnnContainerID],
		Endpoint:                   podEndpoint,
		InterfaceName:              vethName(vethPrefix, meta.Namespace, meta.Name),
		Profiles:                   profiles,
		IPNetworks:                 ipNets,
		Ports:                      podPorts(p),
		IPNATs:                     nats,
		ServiceAccountName:         sa,
		AllowSpoofedSourcePrefixes: spoof,
		QoSControls:                qos,
	}
	if len(ep.Spec.IPNetworks) == 0 {
		ep.Spec.IPNetworks = nil
	}
	name, err := api.WorkloadEndpointName(&ep.Spec)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", meta.Namespace, meta.Name, err)
	}
	ep.ObjectMeta = api.ObjectMeta{
		Name:              name,
		Namespace:         meta.Namespace,
		GenerateName:      meta.GenerateName,
		UID:               meta.UID, // the pod's, unchanged
		ResourceVersion:   meta.ResourceVersion,
		CreationTimestamp: meta.CreationTimestamp,
		Labels:            labels,
	}
	if v, ok := meta.Annotations[podAnnNetworkStatus]; ok {
		ep.Annotations = map[string]string{podAnnNetworkStatus: v}
	}
	return ep, nil
}

// podPorts are the named or host-mapped container ports (init containers
// too), as Calico maps them.
func podPorts(p *k8sPod) []api.WorkloadEndpointPort {
	var out []api.WorkloadEndpointPort
	for _, cs := range [][]k8sContainer{p.Spec.Containers, p.Spec.InitContainers} {
		for _, c := range cs {
			for _, cp := range c.Ports {
				if cp.ContainerPort == 0 || (cp.HostPort == 0 && cp.Name == "") {
					continue
				}
				var proto api.Protocol
				switch cp.Protocol {
				case "UDP":
					proto = api.ProtocolFromString("udp")
				case "SCTP":
					proto = api.ProtocolFromString("sctp")
				case "TCP", "":
					proto = api.ProtocolFromString("tcp")
				default:
					continue // Calico ignores other protocols
				}
				out = append(out, api.WorkloadEndpointPort{
					Name:     cp.Name,
					Protocol: proto,
					Port:     uint16(cp.ContainerPort),
					HostPort: uint16(cp.HostPort),
					HostIP:   cp.HostIP,
				})
			}
		}
	}
	return out
}

// podFloatingIPs maps the floatingIPs annotation (a JSON list of
// addresses) onto the pod's address of the same family.
func podFloatingIPs(anns map[string]string, ipNets []string) ([]api.IPNAT, error) {
	v, ok := anns[podAnnFloatingIPs]
	if !ok || len(ipNets) == 0 {
		return nil, nil
	}
	var ips []string
	if err := json.Unmarshal([]byte(v), &ips); err != nil {
		return nil, fmt.Errorf("annotation %s: %q is not a JSON list: %w", podAnnFloatingIPs, v, err)
	}
	var v4, v6 string
	for _, n := range ipNets {
		_, p, _ := parseCIDROrIP(n)
		switch {
		case p.Addr().Is4() && p.Bits() != 32:
			return nil, fmt.Errorf("pod address %s is not a /32", n)
		case p.Addr().Is4():
			v4 = p.Addr().String()
		case p.Bits() != 128:
			return nil, fmt.Errorf("pod address %s is not a /128", n)
		default:
			v6 = p.Addr().String()
		}
	}
	var out []api.IPNAT
	for _, ip := range ips {
		internal := v4
		if strings.Contains(ip, ":") {
			internal = v6
		}
		if internal != "" {
			out = append(out, api.IPNAT{InternalIP: internal, ExternalIP: ip})
		}
	}
	return out, nil
}

// podAllowedSourcePrefixes parses the allowedSourcePrefixes annotation (a
// JSON list of CIDRs), normalised.
func podAllowedSourcePrefixes(anns map[string]string) ([]string, error) {
	v := anns[podAnnAllowedSrcPrefixes]
	if v == "" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal([]byte(v), &list); err != nil {
		return nil, fmt.Errorf("annotation %s: %q is not a JSON list: %w", podAnnAllowedSrcPrefixes, v, err)
	}
	var out []string
	for _, s := range list {
		_, n, ok := parseCIDROrIP(s)
		if !ok || !strings.Contains(s, "/") {
			return nil, fmt.Errorf("annotation %s: %q is not a CIDR", podAnnAllowedSrcPrefixes, s)
		}
		out = append(out, n.String())
	}
	return out, nil
}

// PodEndpoint is the WorkloadEndpoint the store computes from pod (a
// core/v1 Pod in JSON, as a watch of pods delivers it), nil when the pod
// has none: what Get of the endpoint would return had the store read the
// pod itself. The agent's CNI server turns the pods of its own watch into
// endpoints with it, instead of reading them again.
func (s *Store) PodEndpoint(pod []byte) (*api.WorkloadEndpoint, error) {
	var p k8sPod
	if err := decodeCore(pod, &p, "pod"); err != nil {
		return nil, err
	}
	if !podHasEndpoint(&p) {
		return nil, nil
	}
	return podToEndpoint(&p, s.mappers["WorkloadEndpoint"].(*endpointMapper).vethPrefix)
}
