package api

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
)

// The calicoctl v1 document forms (Calico 2.x, "apiVersion: v1") are
// converted with the rules of calico-upgrade (libcalico-go/lib/upgrade/
// converters), so that a converted resource gets the name and spec a real
// upgrade would have given it. Kinds whose conversion depends on state
// outside the document (policies and profiles need their v1 selectors and
// tag semantics rewritten; workload endpoints their orchestrator's naming)
// are refused with a pointer to the v3 form instead of being guessed.

const legacyVersion = "v1"

// legacyKinds maps the v1 kind names to their converter (nil: refused).
var legacyKinds = map[string]func(m map[string]any, doc Document) Document{
	"ipPool":           legacyIPPool,
	"bgpPeer":          legacyBGPPeer,
	"hostEndpoint":     legacyHostEndpoint,
	"node":             legacyNode,
	"policy":           nil,
	"profile":          nil,
	"workloadEndpoint": nil,
	"tier":             nil,
}

func decodeLegacy(m map[string]any, kind string, doc Document) Document {
	conv, known := legacyKinds[kind]
	switch {
	case kind == "calicoApiConfig":
		doc.Err = fmt.Errorf("kind calicoApiConfig is a calicoctl client configuration, not a resource: pass it with --config")
	case !known:
		if _, ok := kindInfo(kind); ok {
			doc.Err = fmt.Errorf("apiVersion v1 is the calicoctl v1 format: write kind %s with apiVersion %s", kind, GroupVersion)
		} else {
			doc.Err = fmt.Errorf("unknown kind %q for apiVersion v1", kind)
		}
	case conv == nil:
		doc.Err = fmt.Errorf("calicoctl v1 kind %s cannot be converted automatically: convert it to %s", kind, GroupVersion)
	default:
		return conv(m, doc)
	}
	return doc
}

// v1 document shapes; only these fields existed.
type (
	v1TypeMeta struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
	}
	v1IPPool struct {
		v1TypeMeta
		Metadata struct {
			CIDR string `json:"cidr"`
		} `json:"metadata"`
		Spec struct {
			IPIP *struct {
				Enabled bool   `json:"enabled"`
				Mode    string `json:"mode"`
			} `json:"ipip"`
			NATOutgoing bool `json:"nat-outgoing"`
			Disabled    bool `json:"disabled"`
		} `json:"spec"`
	}
	v1BGPPeer struct {
		v1TypeMeta
		Metadata struct {
			Scope  string `json:"scope"`
			Node   string `json:"node"`
			PeerIP string `json:"peerIP"`
		} `json:"metadata"`
		Spec struct {
			ASNumber ASNumber `json:"asNumber"`
		} `json:"spec"`
	}
	v1Node struct {
		v1TypeMeta
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			BGP *struct {
				ASNumber    *ASNumber `json:"asNumber"`
				IPv4Address string    `json:"ipv4Address"`
				IPv6Address string    `json:"ipv6Address"`
			} `json:"bgp"`
			OrchRefs []OrchRef `json:"orchRefs"`
		} `json:"spec"`
	}
	v1HostEndpoint struct {
		v1TypeMeta
		Metadata struct {
			Name   string            `json:"name"`
			Node   string            `json:"node"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			InterfaceName string   `json:"interfaceName"`
			ExpectedIPs   []string `json:"expectedIPs"`
			Profiles      []string `json:"profiles"`
			Ports         []struct {
				Name     string   `json:"name"`
				Protocol Protocol `json:"protocol"`
				Port     uint16   `json:"port"`
			} `json:"ports"`
		} `json:"spec"`
	}
)

func legacyIPPool(m map[string]any, doc Document) Document {
	var v1 v1IPPool
	doc.Kind = "IPPool"
	if doc.Err = decodeStrict(m, &v1); doc.Err != nil {
		return doc
	}
	_, cidr, err := net.ParseCIDR(v1.Metadata.CIDR)
	if err != nil {
		doc.Err = ValidationError{{Path: "metadata.cidr", Value: v1.Metadata.CIDR, Msg: "is not a valid CIDR"}}
		return doc
	}
	mode := IPIPModeNever
	if ipip := v1.Spec.IPIP; ipip != nil && ipip.Enabled {
		switch strings.ToLower(ipip.Mode) {
		case "", string(EncapModeAlways):
			mode = IPIPModeAlways
		case string(EncapModeCrossSubnet):
			mode = IPIPModeCrossSubnet
		default:
			doc.Err = ValidationError{{Path: "spec.ipip.mode", Value: ipip.Mode, Msg: "must be always or cross-subnet"}}
			return doc
		}
	}
	p := &IPPool{TypeMeta: typeMeta("IPPool")}
	p.Name = cidrToName(cidr)
	p.Spec = IPPoolSpec{
		CIDR:         cidr.String(),
		IPIPMode:     mode,
		VXLANMode:    VXLANModeNever,
		NATOutgoing:  v1.Spec.NATOutgoing,
		Disabled:     v1.Spec.Disabled,
		NodeSelector: "all()",
		AllowedUses:  []IPPoolAllowedUse{IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel},
		BlockSize:    defaultBlockSize(cidr.IP.To4() == nil),
	}
	auto := AssignmentModeAutomatic
	p.Spec.AssignmentMode = &auto
	doc.Object, doc.Name = p, p.Name
	return doc
}

// cidrToName is calico-upgrade's pool name: the CIDR with '.', ':' and '/'
// replaced by '-' ("192.168.0.0/16" -> "192-168-0-0-16").
func cidrToName(n *net.IPNet) string {
	name := strings.Replace(n.String(), ".", "-", 3)
	name = strings.Replace(name, ":", "-", 7)
	return strings.Replace(name, "/", "-", 1)
}

// ipToName is calico-upgrade's name for an address: dotted quads with '-',
// IPv6 as eight '-'-separated groups of four hex digits.
func ipToName(ip net.IP) string {
	if ip4 := ip.To4(); ip4 != nil {
		return strings.ReplaceAll(ip4.String(), ".", "-")
	}
	ip16 := ip.To16()
	groups := make([]string, 0, 8)
	for i := 0; i < len(ip16); i += 2 {
		groups = append(groups, fmt.Sprintf("%02x%02x", ip16[i], ip16[i+1]))
	}
	return strings.Join(groups, "-")
}

// Compiled on first use (only v1 documents need them).
var (
	nonNameCharRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^-.a-z0-9]+`) })
	dotDashSeqRe  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[.-]*[.][.-]*`) })
)

// normalizeName turns a v1 name into a v3 one as calico-upgrade does:
// lower case, '/' to '.', runs of other characters to '-', runs of dots and
// dashes around a dot to one dot, no leading or trailing dots or dashes.
func normalizeName(name string) string {
	name = strings.ToLower(name)
	name = strings.ReplaceAll(name, "/", ".")
	name = nonNameCharRe().ReplaceAllString(name, "-")
	name = dotDashSeqRe().ReplaceAllString(name, ".")
	return strings.Trim(name, ".-")
}

// convertName normalizes a name and, when that changed it, appends the
// first 8 hex digits of the original's SHA-1 so distinct names stay
// distinct.
func convertName(v1 string) string {
	name := normalizeName(v1)
	if name == v1 {
		return name
	}
	sum := sha1.Sum([]byte(v1))
	return name + "-" + hex.EncodeToString(sum[:])[:8]
}

// convertProfileName maps a v1 profile name, including the Kubernetes
// namespace profiles ("k8s_ns.x" -> "kns.x").
func convertProfileName(p string) string {
	if ns, ok := strings.CutPrefix(p, "k8s_ns."); ok {
		return convertName("kns." + ns)
	}
	return convertName(p)
}

func legacyBGPPeer(m map[string]any, doc Document) Document {
	var v1 v1BGPPeer
	doc.Kind = "BGPPeer"
	if doc.Err = decodeStrict(m, &v1); doc.Err != nil {
		return doc
	}
	ip := net.ParseIP(v1.Metadata.PeerIP)
	if ip == nil {
		doc.Err = ValidationError{{Path: "metadata.peerIP", Value: v1.Metadata.PeerIP, Msg: "is not a valid IP address"}}
		return doc
	}
	p := &BGPPeer{TypeMeta: typeMeta("BGPPeer")}
	p.Spec = BGPPeerSpec{PeerIP: ip.String(), ASNumber: v1.Spec.ASNumber}
	switch v1.Metadata.Scope {
	case "global":
		if v1.Metadata.Node != "" {
			doc.Err = ValidationError{{Path: "metadata.node", Value: v1.Metadata.Node, Msg: "must not be set with scope global"}}
			return doc
		}
		p.Name = ipToName(ip)
	case "node":
		if v1.Metadata.Node == "" {
			doc.Err = ValidationError{{Path: "metadata.node", Msg: "is required with scope node"}}
			return doc
		}
		node := normalizeName(v1.Metadata.Node)
		p.Spec.Node = node
		p.Name = node + "." + ipToName(ip)
	default:
		doc.Err = ValidationError{{Path: "metadata.scope", Value: v1.Metadata.Scope, Msg: "must be global or node"}}
		return doc
	}
	doc.Object, doc.Name = p, p.Name
	return doc
}

func legacyNode(m map[string]any, doc Document) Document {
	var v1 v1Node
	doc.Kind = "Node"
	if doc.Err = decodeStrict(m, &v1); doc.Err != nil {
		return doc
	}
	n := &Node{TypeMeta: typeMeta("Node")}
	n.Name = normalizeName(v1.Metadata.Name)
	if b := v1.Spec.BGP; b != nil {
		if b.IPv4Address == "" && b.IPv6Address == "" {
			doc.Err = ValidationError{{Path: "spec.bgp", Msg: "must have ipv4Address or ipv6Address"}}
			return doc
		}
		n.Spec.BGP = &NodeBGPSpec{ASNumber: b.ASNumber}
		for _, a := range []struct {
			path, in string
			out      *string
		}{{"spec.bgp.ipv4Address", b.IPv4Address, &n.Spec.BGP.IPv4Address}, {"spec.bgp.ipv6Address", b.IPv6Address, &n.Spec.BGP.IPv6Address}} {
			if a.in == "" {
				continue
			}
			ip, ipn, err := net.ParseCIDR(a.in)
			if err != nil {
				doc.Err = ValidationError{{Path: a.path, Value: a.in, Msg: "is not a valid address/prefix"}}
				return doc
			}
			*a.out = (&net.IPNet{IP: ip, Mask: ipn.Mask}).String()
		}
	}
	n.Spec.OrchRefs = v1.Spec.OrchRefs
	doc.Object, doc.Name = n, n.Name
	return doc
}

func legacyHostEndpoint(m map[string]any, doc Document) Document {
	var v1 v1HostEndpoint
	doc.Kind = "HostEndpoint"
	if doc.Err = decodeStrict(m, &v1); doc.Err != nil {
		return doc
	}
	node := normalizeName(v1.Metadata.Node)
	h := &HostEndpoint{TypeMeta: typeMeta("HostEndpoint")}
	h.Name = convertName(node + "." + v1.Metadata.Name)
	h.Labels = v1.Metadata.Labels
	h.Spec.Node = node
	h.Spec.InterfaceName = v1.Spec.InterfaceName
	// calico-upgrade lists IPv4 addresses before IPv6 ones.
	var v4, v6 []string
	for i, s := range v1.Spec.ExpectedIPs {
		ip := net.ParseIP(s)
		switch {
		case ip == nil:
			doc.Err = ValidationError{{Path: index("spec.expectedIPs", i), Value: s, Msg: "is not a valid IP address"}}
			return doc
		case ip.To4() != nil:
			v4 = append(v4, ip.String())
		default:
			v6 = append(v6, ip.String())
		}
	}
	h.Spec.ExpectedIPs = append(v4, v6...)
	for _, p := range v1.Spec.Profiles {
		h.Spec.Profiles = append(h.Spec.Profiles, convertProfileName(p))
	}
	for _, p := range v1.Spec.Ports {
		proto := p.Protocol
		if proto.Type == NumOrStringString {
			proto = ProtocolFromString(proto.StrVal)
		}
		h.Spec.Ports = append(h.Spec.Ports, EndpointPort{Name: p.Name, Protocol: proto, Port: p.Port})
	}
	doc.Object, doc.Name = h, h.Name
	return doc
}
