// Package autodetect finds the node's IP address the way calico-node does,
// from the IP_AUTODETECTION_METHOD / IP6_AUTODETECTION_METHOD settings, and
// validates an address given explicitly in the IP / IP6 settings.
//
// # Model
//
// ParseMethod turns a setting into a Method. Detect applies a Method to the
// host's interfaces, as listed by a Source, and returns the chosen address
// with its prefix length (10.0.0.5/24) and the interface it is on. Validate
// and Resolve handle explicitly configured addresses.
//
// The methods behave as in Calico:
//
//   - first-found: the first global unicast address on any interface whose
//     name is not on Calico's list of internal interfaces (DefaultExcludes).
//   - interface=REGEX[,REGEX...]: the first address on an interface whose
//     name matches one of the regexes. The regexes are not anchored
//     ("eth0" also matches "veth0"), as in Calico; write "^eth0$" to match
//     one name.
//   - skip-interface=REGEX[,REGEX...]: like first-found, also skipping
//     interfaces whose name matches one of the regexes.
//   - cidr=CIDR[,CIDR...]: the first address, on any interface, inside one of
//     the CIDRs.
//   - can-reach=IP: the source address the kernel would use to send to IP
//     (a route lookup; no packet is sent). Calico also accepts a host name
//     here; this implementation does not resolve names.
//   - kubernetes-internal-ip: the Kubernetes Node's InternalIP. Parsed, but
//     Detect refuses it (ErrNeedsKubernetes) until the Kubernetes datastore
//     is available to the caller.
//
// "First" follows Calico's order: interfaces from the highest interface
// index down (the most recently created first), and on each interface its
// addresses in the order the kernel lists them. Loopback, link-local,
// multicast and unspecified addresses are never chosen.
//
// # Design
//
// All the logic is pure; the kernel is reached only through Source, whose
// Linux implementation NetlinkSource works on a netlink handle for a given
// network namespace, so the caller never switches its thread's namespace.
//
// # Thread safety
//
// Methods are immutable once parsed; the functions keep no state. A
// NetlinkSource is as safe as its netlink handle (one goroutine at a time).
package autodetect

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// Values of the IP / IP6 settings that are not addresses; the caller handles
// them before calling Validate.
const (
	// IPAutodetect asks for autodetection with the configured Method.
	IPAutodetect = "autodetect"
	// IPNone disables the address family (only valid for IP6, or for IP on
	// an IPv6-only node).
	IPNone = "none"
)

// Kind is the kind of an autodetection method.
type Kind int

// The autodetection methods.
const (
	FirstFound Kind = iota
	InterfaceMatch
	SkipInterface
	CIDRMatch
	CanReach
	KubernetesInternalIP
)

// Setting names and prefixes, as operators write them.
const (
	firstFoundName    = "first-found"
	interfacePrefix   = "interface="
	skipPrefix        = "skip-interface="
	cidrPrefix        = "cidr="
	canReachPrefix    = "can-reach="
	k8sInternalIPName = "kubernetes-internal-ip"
)

// ErrNeedsKubernetes is returned by Detect for kubernetes-internal-ip.
var ErrNeedsKubernetes = errors.New("kubernetes-internal-ip requires the Kubernetes datastore and this node's Kubernetes Node object")

// Method is a parsed autodetection method. The zero Method is first-found.
type Method struct {
	Kind Kind
	// Interfaces holds the name regexes of interface= and skip-interface=.
	Interfaces []*regexp.Regexp
	// CIDRs holds the networks of cidr=.
	CIDRs []netip.Prefix
	// Dest is the can-reach= destination.
	Dest netip.Addr
}

// ParseMethod parses an IP_AUTODETECTION_METHOD or IP6_AUTODETECTION_METHOD
// value. An empty value means first-found. Lists are comma-separated with
// optional spaces around the commas, as in Calico.
func ParseMethod(s string) (Method, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "" || s == firstFoundName:
		return Method{Kind: FirstFound}, nil
	case s == k8sInternalIPName:
		return Method{Kind: KubernetesInternalIP}, nil
	case strings.HasPrefix(s, interfacePrefix):
		res, err := parseRegexes(s, strings.TrimPrefix(s, interfacePrefix))
		return Method{Kind: InterfaceMatch, Interfaces: res}, err
	case strings.HasPrefix(s, skipPrefix):
		res, err := parseRegexes(s, strings.TrimPrefix(s, skipPrefix))
		return Method{Kind: SkipInterface, Interfaces: res}, err
	case strings.HasPrefix(s, cidrPrefix):
		cidrs, err := parseCIDRs(s, strings.TrimPrefix(s, cidrPrefix))
		return Method{Kind: CIDRMatch, CIDRs: cidrs}, err
	case strings.HasPrefix(s, canReachPrefix):
		dest, err := parseDest(s, strings.TrimPrefix(s, canReachPrefix))
		return Method{Kind: CanReach, Dest: dest}, err
	}
	return Method{}, fmt.Errorf("parse IP autodetection method %q: unknown method (want first-found, interface=REGEX, skip-interface=REGEX, cidr=CIDR, can-reach=IP or kubernetes-internal-ip)", s)
}

// splitList splits a comma-separated list, trimming spaces around items and
// rejecting empty ones.
func splitList(method, list string) ([]string, error) {
	items := strings.Split(list, ",")
	for i, it := range items {
		items[i] = strings.TrimSpace(it)
		if items[i] == "" {
			return nil, fmt.Errorf("parse IP autodetection method %q: empty list item", method)
		}
	}
	return items, nil
}

func parseRegexes(method, list string) ([]*regexp.Regexp, error) {
	items, err := splitList(method, list)
	if err != nil {
		return nil, err
	}
	res := make([]*regexp.Regexp, 0, len(items))
	for _, it := range items {
		re, err := regexp.Compile(it)
		if err != nil {
			return nil, fmt.Errorf("parse IP autodetection method %q: interface regex %q: %w", method, it, err)
		}
		res = append(res, re)
	}
	return res, nil
}

func parseCIDRs(method, list string) ([]netip.Prefix, error) {
	items, err := splitList(method, list)
	if err != nil {
		return nil, err
	}
	cidrs := make([]netip.Prefix, 0, len(items))
	for _, it := range items {
		p, err := netip.ParsePrefix(it)
		if err != nil {
			return nil, fmt.Errorf("parse IP autodetection method %q: CIDR %q: %w", method, it, err)
		}
		cidrs = append(cidrs, p.Masked())
	}
	return cidrs, nil
}

func parseDest(method, dest string) (netip.Addr, error) {
	dest = strings.TrimSpace(dest)
	if dest == "" {
		return netip.Addr{}, fmt.Errorf("parse IP autodetection method %q: no destination", method)
	}
	// Tolerate the bracketed form people write for IPv6.
	if strings.HasPrefix(dest, "[") && strings.HasSuffix(dest, "]") {
		dest = dest[1 : len(dest)-1]
	}
	a, err := netip.ParseAddr(dest)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("parse IP autodetection method %q: destination must be an IP address (host names are not resolved here): %w", method, err)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("parse IP autodetection method %q: destination must not have a zone", method)
	}
	return a.Unmap(), nil
}

// String returns the method in the form ParseMethod accepts.
func (m Method) String() string {
	switch m.Kind {
	case FirstFound:
		return firstFoundName
	case KubernetesInternalIP:
		return k8sInternalIPName
	case InterfaceMatch, SkipInterface:
		pats := make([]string, len(m.Interfaces))
		for i, re := range m.Interfaces {
			pats[i] = re.String()
		}
		prefix := interfacePrefix
		if m.Kind == SkipInterface {
			prefix = skipPrefix
		}
		return prefix + strings.Join(pats, ",")
	case CIDRMatch:
		cidrs := make([]string, len(m.CIDRs))
		for i, c := range m.CIDRs {
			cidrs[i] = c.String()
		}
		return cidrPrefix + strings.Join(cidrs, ",")
	case CanReach:
		return canReachPrefix + m.Dest.String()
	}
	return fmt.Sprintf("unknown-method(%d)", int(m.Kind))
}
