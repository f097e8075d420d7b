package api

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/selector"
)

// The checks below follow libcalico-go's v3 validator (and the checks its
// clientv3 makes before writing) constraint by constraint; the messages are
// this project's own. Each check appends to a fieldErrors so that one
// Validate call reports every problem of an object.

// fieldErrors accumulates the FieldErrors of one object.
type fieldErrors struct {
	list ValidationError
}

func (f *fieldErrors) add(path string, value any, msg string) {
	f.list = append(f.list, FieldError{Path: path, Value: value, Msg: msg})
}

// err returns the collected errors, or nil (an untyped nil, so callers can
// compare the error with nil).
func (f *fieldErrors) err() error {
	if len(f.list) == 0 {
		return nil
	}
	return f.list
}

// Path builders: field, index and map key.
func field(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func key(path, k string) string { return path + "[" + k + "]" }

const (
	maxSubdomainLen = 253
	maxLabelLen     = 63
	// maxAnnotationBytes caps the summed size of an object's annotations.
	maxAnnotationBytes = 256 * 1024
)

const (
	msgRequired  = "is required"
	msgName      = "is not a valid name: use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
	msgLabelName = "is not a valid name: use lower-case letters, digits and '-', starting and ending with a letter or digit"
)

// checkSubdomain checks a DNS-1123 subdomain such as most resource names.
func checkSubdomain(f *fieldErrors, path, s string) {
	switch {
	case s == "":
		f.add(path, nil, msgRequired)
	case len(s) > maxSubdomainLen:
		f.add(path, s, fmt.Sprintf("is too long: at most %d characters", maxSubdomainLen))
	case !isSubdomainChars(s):
		f.add(path, s, msgName)
	}
}

// checkOptName checks an optional reference to another resource by name.
func checkOptName(f *fieldErrors, path, s string) {
	if s != "" {
		checkSubdomain(f, path, s)
	}
}

// checkDNSLabel checks a DNS-1123 label (namespaces, tiers).
func checkDNSLabel(f *fieldErrors, path, s string) {
	switch {
	case s == "":
		f.add(path, nil, msgRequired)
	case len(s) > maxLabelLen:
		f.add(path, s, fmt.Sprintf("is too long: at most %d characters", maxLabelLen))
	case !isDNSLabelChars(s):
		f.add(path, s, msgLabelName)
	}
}

// qualifiedNameProblem returns why k is not a Kubernetes qualified name
// ("[prefix/]name"), or "".
func qualifiedNameProblem(k string) string {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name = prefix
	} else {
		if prefix == "" {
			return "has an empty prefix before '/'"
		}
		if len(prefix) > maxSubdomainLen || !isSubdomainChars(prefix) {
			return "has a prefix that is not a DNS subdomain"
		}
		if strings.Contains(name, "/") {
			return "has more than one '/'"
		}
	}
	switch {
	case name == "":
		return "has an empty name"
	case len(name) > maxLabelLen:
		return fmt.Sprintf("has a name longer than %d characters", maxLabelLen)
	case !isQualifiedNamePart(name):
		return "is not a valid key: use letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
	}
	return ""
}

// labelValueProblem returns why v is not a Kubernetes label value, or "".
func labelValueProblem(v string) string {
	switch {
	case v == "":
		return ""
	case len(v) > maxLabelLen:
		return fmt.Sprintf("is too long: at most %d characters", maxLabelLen)
	case !isQualifiedNamePart(v):
		return "is not a valid label value: use letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
	}
	return ""
}

func checkLabels(f *fieldErrors, path string, labels map[string]string) {
	for _, k := range sortedKeys(labels) {
		if msg := qualifiedNameProblem(k); msg != "" {
			f.add(path, k, msg)
		}
		if msg := labelValueProblem(labels[k]); msg != "" {
			f.add(key(path, k), labels[k], msg)
		}
	}
}

func checkAnnotations(f *fieldErrors, path string, ann map[string]string) {
	total := 0
	for _, k := range sortedKeys(ann) {
		if msg := qualifiedNameProblem(strings.ToLower(k)); msg != "" {
			f.add(path, k, msg)
		}
		total += len(k) + len(ann[k])
	}
	if total > maxAnnotationBytes {
		f.add(path, nil, fmt.Sprintf("are too large: %d bytes, at most %d", total, maxAnnotationBytes))
	}
}

// metaRules says how an object's metadata is checked.
type metaRules struct {
	namespaced bool
	// name checks metadata.name; nil means a DNS subdomain.
	name func(f *fieldErrors, path, s string)
}

func checkMeta(f *fieldErrors, m *ObjectMeta, kind string, r metaRules) {
	if r.name == nil {
		checkSubdomain(f, "metadata.name", m.Name)
	} else {
		r.name(f, "metadata.name", m.Name)
	}
	if r.namespaced {
		checkDNSLabel(f, "metadata.namespace", m.Namespace)
	} else if m.Namespace != "" {
		f.add("metadata.namespace", m.Namespace, "must not be set: "+kind+" is not namespaced")
	}
	checkLabels(f, "metadata.labels", m.Labels)
	checkAnnotations(f, "metadata.annotations", m.Annotations)
}

// checkSelector checks selector syntax; the empty selector is valid.
func checkSelector(f *fieldErrors, path, s string) {
	if s == "" {
		return
	}
	if err := selector.Validate(s); err != nil {
		// The parser's message repeats the selector, which the path and value
		// already show.
		msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("selector %q: ", s))
		f.add(path, s, "is not a valid selector: "+msg)
	}
}

// checkEnum checks that s (if set) is one of allowed.
func checkEnum[T ~string](f *fieldErrors, path string, s T, allowed ...T) {
	if s == "" {
		return
	}
	for _, a := range allowed {
		if s == a {
			return
		}
	}
	f.add(path, string(s), "must be one of "+joinStrings(allowed))
}

// checkOptEnum checks an optional enumerated pointer field.
func checkOptEnum[T ~string](f *fieldErrors, path string, s *T, allowed ...T) {
	if s != nil {
		if *s == "" {
			f.add(path, "", "must be one of "+joinStrings(allowed))
			return
		}
		checkEnum(f, path, *s, allowed...)
	}
}

func joinStrings[T ~string](vals []T) string {
	s := make([]string, len(vals))
	for i, v := range vals {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

var logLevels = []string{"Trace", "Debug", "Info", "Warning", "Error", "Fatal"}

func checkLogLevel(f *fieldErrors, path, s string) { checkEnum(f, path, s, logLevels...) }

// parseCIDR parses a CIDR; single addresses are rejected.
func parseCIDR(s string) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	return p, true
}

// parseCIDROrIP parses a CIDR or a single address (as a full-length prefix).
func parseCIDROrIP(s string) (netip.Prefix, bool) {
	if p, ok := parseCIDR(s); ok {
		return p, true
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), true
}

// checkCIDROrIP checks a CIDR (host bits allowed) or an address.
func checkCIDROrIP(f *fieldErrors, path, s string) (netip.Prefix, bool) {
	p, ok := parseCIDROrIP(s)
	if !ok {
		f.add(path, s, "is not a valid CIDR or IP address")
	}
	return p, ok
}

// checkNetwork checks a strictly masked CIDR or an address (Calico's "net").
func checkNetwork(f *fieldErrors, path, s string) (netip.Prefix, bool) {
	p, ok := parseCIDROrIP(s)
	if !ok {
		f.add(path, s, "is not a valid CIDR or IP address")
		return p, false
	}
	if p.Masked() != p {
		f.add(path, s, "is not a network address: host bits are set (did you mean "+p.Masked().String()+"?)")
		return p, false
	}
	return p, true
}

// checkIP checks an address of the given version (0 for either).
func checkIP(f *fieldErrors, path, s string, version int) {
	if s == "" {
		return
	}
	ip := net.ParseIP(s)
	switch {
	case ip == nil:
		f.add(path, s, "is not a valid IP address")
	case version == 4 && ip.To4() == nil:
		f.add(path, s, "is not a valid IPv4 address")
	case version == 6 && ip.To4() != nil:
		f.add(path, s, "is not a valid IPv6 address")
	}
}

// checkCIDRVersion checks an address or CIDR (host bits allowed) of one IP
// version, as Calico's node address fields are.
func checkCIDRVersion(f *fieldErrors, path, s string, version int) {
	if s == "" {
		return
	}
	p, ok := parseCIDROrIP(s)
	if !ok || (version == 4) != p.Addr().Is4() {
		f.add(path, s, fmt.Sprintf("is not a valid IPv%d address or CIDR", version))
	}
}

func checkMAC(f *fieldErrors, path, s string) {
	if s == "" {
		return
	}
	if _, err := net.ParseMAC(s); err != nil {
		f.add(path, s, "is not a valid MAC address")
	}
}

func checkInterfaceName(f *fieldErrors, path, s string) {
	if s != "*" && !isInterfaceName(s) {
		f.add(path, s, "is not a valid interface name: 1-15 letters, digits, '_', '.' or '-' (or \"*\")")
	}
}

func checkRegexp(f *fieldErrors, path, s string) {
	if s == "" {
		return
	}
	if _, err := regexp.Compile(s); err != nil {
		f.add(path, s, "is not a valid regular expression")
	}
}

// checkPortName checks a Kubernetes (IANA service) port name.
func checkPortName(f *fieldErrors, path, s string) {
	chars := allBytes(s, 15, func(c byte) bool { return isLowerAlnum(c) || c == '-' })
	letter := strings.ContainsFunc(s, func(r rune) bool { return r >= 'a' && r <= 'z' })
	if !chars || !letter || strings.HasPrefix(s, "-") || strings.HasSuffix(s, "-") || strings.Contains(s, "--") {
		f.add(path, s, "is not a valid port name: 1-15 lower-case letters, digits and single '-', with at least one letter")
	}
}

func checkWireguardKey(f *fieldErrors, path, s string) {
	if s == "" {
		return
	}
	if b, err := base64.StdEncoding.DecodeString(s); err != nil || len(b) != 32 {
		f.add(path, s, "is not a valid WireGuard public key")
	}
}

func checkRange(f *fieldErrors, path string, v *int, lo, hi int) {
	if v != nil && (*v < lo || *v > hi) {
		f.add(path, *v, fmt.Sprintf("is out of range: must be %d-%d", lo, hi))
	}
}

// checkPortValue checks one Port (number, range or name).
func checkPortValue(f *fieldErrors, path string, p Port) {
	if msg := p.validate(); msg != "" {
		f.add(path, p.String(), msg)
	}
}

// checkPorts checks a list of ports.
func checkPorts(f *fieldErrors, path string, ports []Port) {
	for i, p := range ports {
		checkPortValue(f, index(path, i), p)
	}
}

// checkHTTPPath validates one HTTP path match.
func checkHTTPPath(f *fieldErrors, path string, p HTTPPath) {
	switch {
	case p.Exact != "" && p.Prefix != "":
		f.add(path, nil, "must set only one of exact and prefix")
		return
	case p.Exact == "" && p.Prefix == "":
		f.add(path, nil, "must set exact or prefix")
		return
	}
	v, name := p.Exact, "exact"
	if v == "" {
		v, name = p.Prefix, "prefix"
	}
	if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, "? #") {
		f.add(field(path, name), v, "is not a valid path: must start with '/' and contain no '?', '#' or space")
	}
}
