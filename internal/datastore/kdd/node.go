package kdd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// A Calico Node on the Kubernetes datastore is the Kubernetes Node of the
// same name: its Calico fields are projectcalico.org/* annotations, its
// Calico-only labels the JSON annotation projectcalico.org/labels
// (libcalico-go resources/node.go). Nothing else of the Kubernetes Node is
// ever written.
const (
	nodeAnnIPv4Address          = "projectcalico.org/IPv4Address"
	nodeAnnIPv4IPIPTunnelAddr   = "projectcalico.org/IPv4IPIPTunnelAddr"
	nodeAnnIPv4VXLANTunnelAddr  = "projectcalico.org/IPv4VXLANTunnelAddr"
	nodeAnnVXLANTunnelMACAddr   = "projectcalico.org/VXLANTunnelMACAddr"
	nodeAnnIPv6VXLANTunnelAddr  = "projectcalico.org/IPv6VXLANTunnelAddr"
	nodeAnnVXLANTunnelMACAddrV6 = "projectcalico.org/VXLANTunnelMACAddrV6"
	nodeAnnIPv6Address          = "projectcalico.org/IPv6Address"
	nodeAnnASNumber             = "projectcalico.org/ASNumber"
	nodeAnnRouteReflectorCID    = "projectcalico.org/RouteReflectorClusterID"
	nodeAnnWireguardIPv4        = "projectcalico.org/IPv4WireguardInterfaceAddr"
	nodeAnnWireguardIPv6        = "projectcalico.org/IPv6WireguardInterfaceAddr"
	nodeAnnWireguardPublicKey   = "projectcalico.org/WireguardPublicKey"
	nodeAnnWireguardPublicKeyV6 = "projectcalico.org/WireguardPublicKeyV6"
	nodeAnnInterfaces           = "projectcalico.org/Interfaces"
	nodeAnnLabels               = "projectcalico.org/labels"
	nodeAnnAnnotations          = "projectcalico.org/annotations"
	nodeAnnKubeLabels           = "projectcalico.org/kube-labels" // computed, never stored
)

const (
	// nodeWriteAttempts bounds the retries of an unconditional write that
	// meets kubelet's writes.
	nodeWriteAttempts = 5
	// nodeIsK8sNode explains why Nodes cannot be created or deleted.
	nodeIsK8sNode = "a Calico Node on the Kubernetes datastore is its Kubernetes Node's annotations"
)

// nodeOwnedAnnotations are every annotation a Calico Node write sets or
// removes; the Kubernetes Node's other annotations are never touched.
var nodeOwnedAnnotations = []string{
	nodeAnnIPv4Address, nodeAnnIPv4IPIPTunnelAddr, nodeAnnIPv4VXLANTunnelAddr, nodeAnnVXLANTunnelMACAddr,
	nodeAnnIPv6VXLANTunnelAddr, nodeAnnVXLANTunnelMACAddrV6, nodeAnnIPv6Address, nodeAnnASNumber,
	nodeAnnRouteReflectorCID, nodeAnnWireguardIPv4, nodeAnnWireguardIPv6, nodeAnnWireguardPublicKey,
	nodeAnnWireguardPublicKeyV6, nodeAnnInterfaces, nodeAnnLabels, nodeAnnAnnotations,
}

// k8sNode is the part of a core/v1 Node Calico reads.
type k8sNode struct {
	Metadata coreMeta `json:"metadata"`
	Spec     struct {
		PodCIDR  string   `json:"podCIDR,omitempty"`
		PodCIDRs []string `json:"podCIDRs,omitempty"`
	} `json:"spec"`
	Status struct {
		Addresses []struct {
			Type    string `json:"type"`
			Address string `json:"address"`
		} `json:"addresses,omitempty"`
	} `json:"status"`
}

type nodeMapper struct {
	s *Store
	i api.KindInfo
}

func newNodeMapper(s *Store, info api.KindInfo) mapper { return &nodeMapper{s: s, i: info} }

func (m *nodeMapper) info() api.KindInfo { return m.i }
func (m *nodeMapper) sources() []source  { return []source{nodesSource} }

func (m *nodeMapper) convert(_ int, raw json.RawMessage) ([]api.Object, error) {
	var n k8sNode
	if err := decodeCore(raw, &n, "node"); err != nil {
		return nil, err
	}
	node, err := nodeFromK8s(&n)
	if err != nil {
		return nil, err
	}
	return []api.Object{node}, nil
}

func (m *nodeMapper) get(ctx context.Context, _, name string) (api.Object, error) {
	n, err := m.read(ctx, name)
	if err != nil {
		return nil, err
	}
	return nodeFromK8s(n)
}

// write updates the Node's annotations. Calico cannot create a Kubernetes
// Node (kubelet registers it), so Create is refused as Calico refuses it,
// and Apply updates a Node that exists and is refused otherwise.
//
// The write is a merge patch of nodes/<name>/status (the subresource
// Calico's RBAC grants calico-node; metadata changes through it) that
// names the resourceVersion: the caller's, or, for an unconditional
// write, the one just read, retried if kubelet wrote the Node meanwhile.
func (m *nodeMapper) write(ctx context.Context, mode writeMode, obj api.Object) (api.Object, error) {
	node := obj.(*api.Node)
	if mode == modeCreate {
		why := "Calico Nodes cannot be created: " + nodeIsK8sNode + "; apply or replace it to update it"
		if _, err := m.read(ctx, node.Name); isNotFound(err) {
			return nil, noK8sNode(node.Name)
		}
		return nil, errNotSupported(why)
	}
	want, err := nodeAnnotations(node)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		cur, err := m.read(ctx, node.Name)
		if err != nil {
			if isNotFound(err) && mode == modeApply {
				return nil, noK8sNode(node.Name)
			}
			return nil, err
		}
		rv := node.ResourceVersion
		if rv == "" {
			rv = cur.Metadata.ResourceVersion
		}
		patch := nodePatch(cur.Metadata.Annotations, want, rv)
		var out k8sNode
		err = m.s.c.do(ctx, http.MethodPatch, nodesSource.objPath("", node.Name)+"/status", nil, mergePatch, patch, &out)
		switch {
		case err == nil:
			return nodeFromK8s(&out)
		case node.ResourceVersion == "" && errors.Is(err, datastore.ErrConflict) && attempt < nodeWriteAttempts:
			continue // kubelet wrote the Node between our read and write
		default:
			return nil, err
		}
	}
}

// remove refuses, as Calico does: the Calico Node is the Kubernetes Node,
// which belongs to kubelet and the node lifecycle controller. (calicoctl
// delete node still releases the node's addresses and affinities first,
// as Calico's does, then reports this.)
func (m *nodeMapper) remove(context.Context, string, string, string) (api.Object, error) {
	return nil, errNotSupported("Calico Nodes cannot be deleted: " + nodeIsK8sNode + "; delete the Kubernetes Node")
}

func noK8sNode(name string) error {
	return errNotSupported(fmt.Sprintf("Kubernetes Node %s does not exist and Calico cannot create Kubernetes Nodes (%s)", name, nodeIsK8sNode))
}

func (m *nodeMapper) read(ctx context.Context, name string) (*k8sNode, error) {
	var q url.Values
	if datastore.CachedReads(ctx) {
		q = url.Values{"resourceVersion": {"0"}}
	}
	var n k8sNode
	if err := m.s.c.do(ctx, http.MethodGet, nodesSource.objPath("", name), q, "", nil, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// nodePatch is the merge patch that turns the Calico annotations of cur
// into want, conditional on resourceVersion rv.
func nodePatch(cur, want map[string]string, rv string) map[string]any {
	anns := map[string]any{}
	for _, k := range nodeOwnedAnnotations {
		v, ok := want[k]
		switch {
		case ok:
			anns[k] = v
		case hasKey(cur, k):
			anns[k] = nil // merge patch: remove
		}
	}
	return map[string]any{"metadata": map[string]any{"resourceVersion": rv, "annotations": anns}}
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// nodeFromK8s is libcalico-go's K8sNodeToCalico (without host-local
// IPAM's usePodCIDR tunnel addresses, which calico-node does not offer):
// annotations that do not parse are ignored, as Calico ignores them.
func nodeFromK8s(k *k8sNode) (*api.Node, error) {
	meta := &k.Metadata
	n := &api.Node{TypeMeta: api.TypeMeta{Kind: "Node", APIVersion: api.GroupVersion}}
	n.Name = meta.Name
	n.UID = meta.UID // the Kubernetes Node's, unchanged
	n.ResourceVersion = meta.ResourceVersion
	n.CreationTimestamp = meta.CreationTimestamp
	anns := meta.Annotations
	if v, ok := anns[nodeAnnLabels]; ok {
		var labels map[string]string
		if json.Unmarshal([]byte(v), &labels) == nil {
			n.Labels = labels
		}
	}
	if v, ok := anns[nodeAnnAnnotations]; ok {
		var a map[string]string
		if json.Unmarshal([]byte(v), &a) == nil {
			n.Annotations = a
		}
	}
	// Kubernetes labels win over Calico labels of the same name; the
	// Kubernetes set is echoed in an annotation so that a write of what
	// was read can tell the two apart again.
	for k, v := range meta.Labels {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[k] = v
	}
	kube, err := json.Marshal(meta.Labels)
	if err != nil {
		return nil, fmt.Errorf("node %s labels: %w", meta.Name, err)
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[nodeAnnKubeLabels] = string(kube)

	bgp := api.NodeBGPSpec{
		IPv4Address:             annotation(anns, nodeAnnIPv4Address, validCIDR(4)),
		IPv6Address:             annotation(anns, nodeAnnIPv6Address, validCIDR(6)),
		RouteReflectorClusterID: annotation(anns, nodeAnnRouteReflectorCID, validNetwork(4)),
		IPv4IPIPTunnelAddr:      annotation(anns, nodeAnnIPv4IPIPTunnelAddr, validNetwork(4)),
	}
	if v, ok := anns[nodeAnnASNumber]; ok {
		if asn, err := api.ASNumberFromString(v); err == nil {
			bgp.ASNumber = &asn
		}
	}
	if bgp != (api.NodeBGPSpec{}) {
		n.Spec.BGP = &bgp
	}
	wg := api.NodeWireguardSpec{
		InterfaceIPv4Address: annotation(anns, nodeAnnWireguardIPv4, validNetwork(4)),
		InterfaceIPv6Address: annotation(anns, nodeAnnWireguardIPv6, validNetwork(6)),
	}
	if wg != (api.NodeWireguardSpec{}) {
		n.Spec.Wireguard = &wg
	}
	n.Spec.IPv4VXLANTunnelAddr = annotation(anns, nodeAnnIPv4VXLANTunnelAddr, validNetwork(4))
	n.Spec.VXLANTunnelMACAddr = annotation(anns, nodeAnnVXLANTunnelMACAddr, validMAC)
	n.Spec.IPv6VXLANTunnelAddr = annotation(anns, nodeAnnIPv6VXLANTunnelAddr, validNetwork(6))
	n.Spec.VXLANTunnelMACAddrV6 = annotation(anns, nodeAnnVXLANTunnelMACAddrV6, validMAC)
	n.Spec.OrchRefs = []api.OrchRef{{NodeName: meta.Name, Orchestrator: api.OrchestratorKubernetes}}
	n.Status.WireguardPublicKey = anns[nodeAnnWireguardPublicKey]
	n.Status.WireguardPublicKeyV6 = anns[nodeAnnWireguardPublicKeyV6]
	if len(k.Spec.PodCIDRs) > 0 {
		n.Status.PodCIDRs = append([]string(nil), k.Spec.PodCIDRs...)
	}

	// spec.addresses: the Calico addresses, then Kubernetes' internal and
	// external ones.
	if n.Spec.BGP != nil {
		for _, a := range []string{n.Spec.BGP.IPv4Address, n.Spec.BGP.IPv6Address} {
			if a != "" {
				n.Spec.Addresses = append(n.Spec.Addresses, api.NodeAddress{Address: a, Type: api.NodeAddressCalicoNodeIP})
			}
		}
	}
	for _, a := range k.Status.Addresses {
		switch a.Type {
		case "InternalIP":
			n.Spec.Addresses = append(n.Spec.Addresses, api.NodeAddress{Address: a.Address, Type: api.NodeAddressInternalIP})
		case "ExternalIP":
			n.Spec.Addresses = append(n.Spec.Addresses, api.NodeAddress{Address: a.Address, Type: api.NodeAddressExternalIP})
		}
	}

	if v, ok := anns[nodeAnnInterfaces]; ok {
		var ifaces []api.NodeInterface
		if json.Unmarshal([]byte(v), &ifaces) == nil {
			for i := range ifaces {
				ifaces[i].Addresses = validIPs(ifaces[i].Addresses)
			}
			n.Spec.Interfaces = ifaces
		}
	}
	return n, nil
}

// validIPs keeps the entries of addrs that are IP addresses.
func validIPs(addrs []string) []string {
	out := addrs[:0]
	for _, a := range addrs {
		if net.ParseIP(a) != nil {
			out = append(out, a)
		}
	}
	return out
}

// nodeAnnotations is libcalico-go's mergeCalicoNodeIntoK8sNode: the
// Calico-owned annotations n is stored as. Labels echoed from the
// Kubernetes Node (the kube-labels annotation of a Node that was read) are
// dropped: they belong to Kubernetes, and a Calico write never changes
// them.
func nodeAnnotations(n *api.Node) (map[string]string, error) {
	out := map[string]string{}
	labels, annotations := n.Labels, n.Annotations
	if raw := annotations[nodeAnnKubeLabels]; raw != "" {
		var kube map[string]string
		if err := json.Unmarshal([]byte(raw), &kube); err != nil {
			return nil, fmt.Errorf("annotation %s: %w", nodeAnnKubeLabels, err)
		}
		labels = map[string]string{}
		for k, v := range n.Labels {
			if _, inherited := kube[k]; !inherited {
				labels[k] = v
			}
		}
		annotations = map[string]string{}
		for k, v := range n.Annotations {
			if k != nodeAnnKubeLabels {
				annotations[k] = v
			}
		}
	}
	if len(labels) > 0 {
		b, err := json.Marshal(labels)
		if err != nil {
			return nil, err
		}
		out[nodeAnnLabels] = string(b)
	}
	if len(annotations) > 0 {
		b, err := json.Marshal(annotations)
		if err != nil {
			return nil, err
		}
		out[nodeAnnAnnotations] = string(b)
	}
	set := func(k, v string) {
		if v != "" {
			out[k] = v
		}
	}
	s := &n.Spec
	set(nodeAnnIPv4VXLANTunnelAddr, s.IPv4VXLANTunnelAddr)
	set(nodeAnnVXLANTunnelMACAddr, s.VXLANTunnelMACAddr)
	set(nodeAnnIPv6VXLANTunnelAddr, s.IPv6VXLANTunnelAddr)
	set(nodeAnnVXLANTunnelMACAddrV6, s.VXLANTunnelMACAddrV6)
	if b := s.BGP; b != nil {
		set(nodeAnnIPv4Address, b.IPv4Address)
		set(nodeAnnIPv4IPIPTunnelAddr, b.IPv4IPIPTunnelAddr)
		set(nodeAnnIPv6Address, b.IPv6Address)
		set(nodeAnnRouteReflectorCID, b.RouteReflectorClusterID)
		if b.ASNumber != nil {
			out[nodeAnnASNumber] = b.ASNumber.String()
		}
	}
	if w := s.Wireguard; w != nil {
		set(nodeAnnWireguardIPv4, w.InterfaceIPv4Address)
		set(nodeAnnWireguardIPv6, w.InterfaceIPv6Address)
	}
	set(nodeAnnWireguardPublicKey, n.Status.WireguardPublicKey)
	set(nodeAnnWireguardPublicKeyV6, n.Status.WireguardPublicKeyV6)
	if s.Interfaces != nil {
		b, err := json.Marshal(s.Interfaces)
		if err != nil {
			return nil, err
		}
		out[nodeAnnInterfaces] = string(b)
	}
	return out, nil
}

// annotation returns anns[key] when valid accepts it, else "" (Calico
// logs and ignores a bad value).
func annotation(anns map[string]string, key string, valid func(string) bool) string {
	v := anns[key]
	if v == "" || !valid(v) {
		return ""
	}
	return v
}

// parseCIDROrIP is libcalico-go's ParseCIDROrIP: the address and the
// network (an address alone is a /32 or /128).
func parseCIDROrIP(s string) (netip.Addr, netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), p.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, netip.Prefix{}, false
	}
	a = a.Unmap()
	return a, netip.PrefixFrom(a, a.BitLen()), true
}

// validCIDR accepts an address of the family, with or without a prefix
// length (validator ValidateCIDRv4/v6: "192.0.2.1/24").
func validCIDR(family int) func(string) bool {
	return func(s string) bool {
		a, _, ok := parseCIDROrIP(s)
		return ok && (a.Is4() == (family == 4))
	}
}

// validNetwork accepts a strictly masked network of the family, or an
// address (ValidateIPv4Network/IPv6Network).
func validNetwork(family int) func(string) bool {
	return func(s string) bool {
		a, p, ok := parseCIDROrIP(s)
		return ok && a.Is4() == (family == 4) && p.Addr() == a
	}
}

func validMAC(s string) bool {
	_, err := net.ParseMAC(s)
	return err == nil
}
