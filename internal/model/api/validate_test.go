package api

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// mustDecodeOne decodes a single-resource document and fails the test on
// any decode problem (validation is the subject of these tests).
func mustDecodeOne(t *testing.T, doc string) Object {
	t.Helper()
	docs, err := Decode([]byte(doc))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if len(docs) != 1 {
		t.Fatalf("Decode returned %d documents, want 1", len(docs))
	}
	if docs[0].Err != nil {
		t.Fatalf("Decode: %v", docs[0].Err)
	}
	return docs[0].Object
}

// fieldErrorStrings returns each FieldError of err as text; it fails the
// test if err is not a ValidationError.
func fieldErrorStrings(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var ve ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v (%T) is not a ValidationError", err, err)
	}
	out := make([]string, len(ve))
	for i, fe := range ve {
		out[i] = fe.Error()
	}
	return out
}

type validateCase struct {
	name string
	doc  string
	want []string // every error, in order; nil means valid
}

func runValidateCases(t *testing.T, cases []validateCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := mustDecodeOne(t, tc.doc)
			obj.Default()
			got := fieldErrorStrings(t, obj.Validate())
			if !slices.Equal(got, tc.want) {
				t.Errorf("Validate errors:\n got: %q\nwant: %q", got, tc.want)
			}
		})
	}
}

// doc builds a v3 document: header lines for kind and metadata, then spec.
func doc(kind, meta, spec string) string {
	s := "apiVersion: projectcalico.org/v3\nkind: " + kind + "\nmetadata:\n" + indent(meta)
	if spec != "" {
		s += "spec:\n" + indent(spec)
	}
	return s
}

func indent(s string) string {
	var b strings.Builder
	for l := range strings.Lines(strings.TrimLeft(s, "\n")) {
		b.WriteString("  " + l)
	}
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteString("\n")
	}
	return b.String()
}

func TestValidateIPPool(t *testing.T) {
	runValidateCases(t, []validateCase{
		{"minimal", doc("IPPool", "name: p", "cidr: 10.0.0.0/16"), nil},
		{"ipv6", doc("IPPool", "name: p", "cidr: fd00::/48\nvxlanMode: Always"), nil},
		{"load balancer", doc("IPPool", "name: p", "cidr: 10.9.0.0/24\nallowedUses: [LoadBalancer]"), nil},
		{"missing cidr", doc("IPPool", "name: p", "natOutgoing: true"), []string{
			"spec.cidr: is required",
		}},
		{"bad prefix length", doc("IPPool", "name: p", "cidr: 10.0.0.0/33"), []string{
			`spec.cidr: "10.0.0.0/33" is not a valid CIDR`,
		}},
		{"not a CIDR", doc("IPPool", "name: p", "cidr: 10.0.0.1"), []string{
			`spec.cidr: "10.0.0.1" is not a valid CIDR`,
		}},
		{"host bits set", doc("IPPool", "name: p", "cidr: 10.1.2.3/16"), []string{
			`spec.cidr: "10.1.2.3/16" is not strictly masked: host bits are set (did you mean 10.1.0.0/16?)`,
		}},
		{"block size out of range v4", doc("IPPool", "name: p", "cidr: 10.0.0.0/16\nblockSize: 19"), []string{
			"spec.blockSize: 19 is out of range: IPv4 block sizes are 20-32",
		}},
		{"block size out of range v6", doc("IPPool", "name: p", "cidr: fd00::/64\nblockSize: 26"), []string{
			"spec.blockSize: 26 is out of range: IPv6 block sizes are 116-128",
		}},
		{"block larger than pool", doc("IPPool", "name: p", "cidr: 10.0.0.0/28"), []string{
			"spec.blockSize: 26 is smaller than the pool prefix /28: a block cannot be larger than its pool",
		}},
		{"disabled small pool is fine", doc("IPPool", "name: p", "cidr: 10.0.0.0/28\ndisabled: true"), nil},
		{"bad modes", doc("IPPool", "name: p", "cidr: 10.0.0.0/16\nipipMode: always\nvxlanMode: Sometimes"), []string{
			`spec.vxlanMode: "Sometimes" must be one of Never, Always, CrossSubnet`,
			`spec.ipipMode: "always" must be one of Never, Always, CrossSubnet`,
		}},
		{"both encapsulations", doc("IPPool", "name: p", "cidr: 10.0.0.0/16\nipipMode: Always\nvxlanMode: CrossSubnet"), []string{
			`spec.vxlanMode: "CrossSubnet" cannot be enabled together with ipipMode Always on one pool`,
		}},
		{"ipip on ipv6", doc("IPPool", "name: p", "cidr: fd00::/64\nipipMode: CrossSubnet"), []string{
			`spec.ipipMode: "CrossSubnet" is not supported on an IPv6 pool`,
		}},
		{"link local", doc("IPPool", "name: p", "cidr: 169.254.0.0/16"), []string{
			`spec.cidr: "169.254.0.0/16" overlaps the link-local range`,
		}},
		{"bad selector", doc("IPPool", "name: p", "cidr: 10.0.0.0/16\nnodeSelector: 'a =='"), []string{
			`spec.nodeSelector: "a ==" is not a valid selector: unexpected end of input at position 4, expected a quoted value`,
		}},
		{"uses", doc("IPPool", "name: p", "cidr: 10.0.0.0/16\nallowedUses: [Workload, LoadBalancer, Pods]"), []string{
			`spec.allowedUses[0]: "Workload" cannot be combined with LoadBalancer`,
			`spec.allowedUses[2]: "Pods" must be one of Workload, Tunnel, LoadBalancer`,
		}},
		{"assignment mode", doc("IPPool", "name: p", "cidr: 10.0.0.0/16\nassignmentMode: Sometimes"), []string{
			`spec.assignmentMode: "Sometimes" must be one of Automatic, Manual`,
		}},
		{"v1 fields in v3", doc("IPPool", "name: p", "cidr: 10.0.0.0/16\nipip: {enabled: true}\nnat-outgoing: true"), []string{
			"spec.ipip: is the calicoctl v1 form: use ipipMode (Always, CrossSubnet or Never)",
			"spec.nat-outgoing: is the calicoctl v1 form: use natOutgoing",
		}},
		{"bad name and namespace", doc("IPPool", "name: Pool_1\nnamespace: default", "cidr: 10.0.0.0/16"), []string{
			`metadata.name: "Pool_1" is not a valid name: use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit`,
			`metadata.namespace: "default" must not be set: IPPool is not namespaced`,
		}},
		{"missing name", doc("IPPool", "labels: {a: b}", "cidr: 10.0.0.0/16"), []string{
			"metadata.name: is required",
		}},
		{"bad labels", doc("IPPool", "name: p\nlabels: {'a b': x, ok: 'bad value!'}", "cidr: 10.0.0.0/16"), []string{
			`metadata.labels: "a b" is not a valid key: use letters, digits, '-', '_' and '.', starting and ending with a letter or digit`,
			`metadata.labels[ok]: "bad value!" is not a valid label value: use letters, digits, '-', '_' and '.', starting and ending with a letter or digit`,
		}},
	})
}

func TestValidateIPReservation(t *testing.T) {
	runValidateCases(t, []validateCase{
		{"good", doc("IPReservation", "name: r", "reservedCIDRs: [10.0.0.0/24, 10.1.0.1, 'fd00::1']"), nil},
		{"bad", doc("IPReservation", "name: r", "reservedCIDRs: [10.0.0.0/24, nope]"), []string{
			`spec.reservedCIDRs[1]: "nope" is not a valid CIDR or IP address`,
		}},
	})
}

func TestValidateNode(t *testing.T) {
	runValidateCases(t, []validateCase{
		{"reference", doc("Node", "name: node1", "bgp:\n  ipv4Address: 127.0.0.1/8"), nil},
		{"full", doc("Node", "name: node1.example.com", `
bgp: {asNumber: "1.10", ipv4Address: 10.0.0.5/24, ipv6Address: "fd00::5/64", ipv4IPIPTunnelAddr: 10.244.0.1, routeReflectorClusterID: 224.0.0.1}
ipv4VXLANTunnelAddr: 10.244.0.2
vxlanTunnelMACAddr: "66:0a:7c:5d:11:22"
addresses: [{address: 10.0.0.5, type: InternalIP}]
orchRefs: [{orchestrator: k8s, nodeName: node1}]`), nil},
		{"empty bgp", doc("Node", "name: n1", "bgp: {}"), []string{
			"spec.bgp: must not be empty: set ipv4Address or ipv6Address, or omit bgp",
		}},
		{"bad addresses", doc("Node", "name: n1", `
bgp: {ipv4Address: "fd00::1/64", ipv6Address: 10.0.0.1/24}
ipv6VXLANTunnelAddr: 10.0.0.1
vxlanTunnelMACAddr: zz
addresses: [{address: 10.0.0.5/24, type: CalicoNodeIP}, {address: 10.0.0.5/33, type: Public}]`), []string{
			`spec.bgp.ipv4Address: "fd00::1/64" is not a valid IPv4 address or CIDR`,
			`spec.bgp.ipv6Address: "10.0.0.1/24" is not a valid IPv6 address or CIDR`,
			`spec.ipv6VXLANTunnelAddr: "10.0.0.1" is not a valid IPv6 address`,
			`spec.vxlanTunnelMACAddr: "zz" is not a valid MAC address`,
			`spec.addresses[1].address: "10.0.0.5/33" is not a valid CIDR or IP address`,
			`spec.addresses[1].type: "Public" must be one of CalicoNodeIP, InternalIP, ExternalIP`,
		}},
		{"wireguard key", doc("Node", "name: n1", "") + "status:\n  wireguardPublicKey: nope\n", []string{
			`status.wireguardPublicKey: "nope" is not a valid WireGuard public key`,
		}},
	})
}

func TestValidateBGPConfiguration(t *testing.T) {
	runValidateCases(t, []validateCase{
		{"example", doc("BGPConfiguration", "name: default", "logSeverityScreen: Info\nnodeToNodeMeshEnabled: false\nasNumber: 63400"), nil},
		{"communities", doc("BGPConfiguration", "name: default", `
communities: [{name: c1, value: "100:200"}]
prefixAdvertisements: [{cidr: 10.0.0.0/16, communities: [c1, "300:400:500"]}]
serviceClusterIPs: [{cidr: 10.96.0.0/12}]`), nil},
		{"bad", doc("BGPConfiguration", "name: default", `
logSeverityScreen: info
communities: [{name: c1, value: "70000:1"}, {name: c2, value: "x"}]
prefixAdvertisements: [{cidr: 10.0.0.1/16, communities: [c3]}]
ignoredInterfaces: ["*", eth0]
nodeToNodeMeshEnabled: false
nodeMeshMaxRestartTime: 120s
listenPort: 179`), []string{
			`spec.logSeverityScreen: "info" must be one of Trace, Debug, Info, Warning, Error, Fatal`,
			`spec.communities[0].value: "70000:1" is not a valid community: each part must fit in 16 bits`,
			`spec.communities[1].value: "x" is not a valid community: use "aa:nn" or "aa:nn:mm"`,
			`spec.prefixAdvertisements[0].cidr: "10.0.0.1/16" is not a network address: host bits are set (did you mean 10.0.0.0/16?)`,
			`spec.prefixAdvertisements[0].communities[0]: "c3" is neither a community value nor the name of one in spec.communities`,
			"spec.nodeMeshMaxRestartTime: cannot be set when nodeToNodeMeshEnabled is false",
			`spec.ignoredInterfaces[0]: "*" is not a valid interface name or pattern: 1-15 letters, digits, '_', '.', '-' or '*' (not "*" alone)`,
		}},
		{"per-node", doc("BGPConfiguration", "name: node.node1", "asNumber: 64512\nlistenPort: 1790"), []string{
			`spec.asNumber: can only be set on the BGPConfiguration named "default"`,
		}},
	})
}

func TestValidateBGPPeer(t *testing.T) {
	runValidateCases(t, []validateCase{
		{"reference", doc("BGPPeer", "name: peer1", "peerIP: 127.0.0.2\nasNumber: 64513"), nil},
		{"selectors", doc("BGPPeer", "name: peer1", "nodeSelector: calico == '1'\npeerSelector: calico == '1'"), nil},
		{"ip and port", doc("BGPPeer", "name: p", "peerIP: '10.0.0.1:1790'\nasNumber: '1.10'\nnode: node1"), nil},
		{"v6 and port", doc("BGPPeer", "name: p", "peerIP: '[fd00::1]:1790'\nasNumber: 65000\nreachableBy: 'fd00::fe'"), nil},
		{"bad peer", doc("BGPPeer", "name: p", "peerIP: '10.0.0.1:0'\nnode: n1\nnodeSelector: all()\nsourceAddress: Any"), []string{
			`spec.peerIP: "10.0.0.1:0" is not a valid peer address: use "IP", "IPv4:port" or "[IPv6]:port"`,
			`spec.sourceAddress: "Any" must be one of UseNodeIP, None`,
			`spec.node: "n1" cannot be set together with nodeSelector`,
		}},
		{"peer selector exclusive", doc("BGPPeer", "name: p", "peerIP: 10.0.0.1\npeerSelector: all()\nasNumber: 65000"), []string{
			`spec.peerIP: "10.0.0.1" cannot be set together with peerSelector`,
			"spec.asNumber: 65000 cannot be set together with peerSelector: the peers' own AS numbers are used",
		}},
		{"reachable by", doc("BGPPeer", "name: p", "peerIP: 10.0.0.1\nasNumber: 65000\nreachableBy: 'fd00::1'"), []string{
			`spec.reachableBy: "fd00::1" is not the same IP version as peerIP`,
		}},
		{"local workload", doc("BGPPeer", "name: p", "localWorkloadSelector: app == 'x'"), []string{
			"spec.asNumber: is required with localWorkloadSelector",
		}},
	})
}

func TestValidateFelixConfiguration(t *testing.T) {
	runValidateCases(t, []validateCase{
		{"typical", doc("FelixConfiguration", "name: default", `
logSeverityScreen: Info
reportingInterval: 0s
ipipEnabled: true
bpfLogLevel: ""
iptablesRefreshInterval: 90s
failsafeInboundHostPorts: [{protocol: tcp, port: 22}, {protocol: UDP, port: 68, net: 0.0.0.0/0}]
kubeNodePortRanges: [30000:32767]
healthTimeoutOverrides: [{name: InternalDataplaneMainLoop, timeout: 5m}]
routeTableRanges: [{min: 1, max: 250}]
featureGates: "a=true,b=false,"
wireguardListeningPort: 51820`), nil},
		{"bad", doc("FelixConfiguration", "name: default", `
logSeverityScreen: verbose
defaultEndpointToHostAction: DROP
iptablesBackend: nft
kubeNodePortRanges: [http]
natOutgoingAddress: "fd00::1"
externalNodesList: ["fd00::/64"]
wireguardListeningPort: 70000
routeTableRange: {min: 0, max: 300}
routeTableRanges: [{min: 10, max: 1}]
featureDetectOverride: "not a list"
openstackRegion: Region_1
serviceLoopPrevention: drop
prometheusMetricsHost: "bad host"`), []string{
			`spec.featureDetectOverride: "not a list" is not a comma-separated list of key=value pairs`,
			`spec.iptablesBackend: "nft" must be one of Legacy, NFT, Auto`,
			`spec.defaultEndpointToHostAction: "DROP" must be one of Drop, Accept, Return`,
			`spec.logSeverityScreen: "verbose" must be one of Trace, Debug, Info, Warning, Error, Fatal`,
			`spec.prometheusMetricsHost: "bad host" is not a valid host: an IP address or a name of up to 64 characters`,
			`spec.kubeNodePortRanges[0]: "http" must be a port number or range, not a name`,
			`spec.natOutgoingAddress: "fd00::1" is not a valid IPv4 address`,
			`spec.externalNodesList[0]: "fd00::/64" must be an IPv4 CIDR`,
			"spec.routeTableRange: cannot be set together with routeTableRanges",
			`spec.routeTableRange: "0-300" must be a range within 1-250`,
			`spec.routeTableRanges[0]: "10-1" is reversed: min must not exceed max`,
			"spec.wireguardListeningPort: 70000 is out of range: must be 1-65535",
			`spec.serviceLoopPrevention: "drop" must be one of Drop, Reject, Disabled`,
			`spec.openstackRegion: "Region_1" is not a valid name: use lower-case letters, digits and '-', starting and ending with a letter or digit`,
		}},
	})
}

func TestValidatePolicy(t *testing.T) {
	runValidateCases(t, []validateCase{
		{"reference np", doc("NetworkPolicy", "name: allow-web\nnamespace: default", `
order: 200
selector: app == "web"
ingress:
- action: Allow
  protocol: TCP
  source: {selector: role == "frontend", nets: [10.0.0.0/8]}
  destination: {ports: [80, "8080:8090"]}
- action: Deny`), nil},
		{"tiered name", doc("GlobalNetworkPolicy", "name: security.block", "tier: security\nselector: all()"), nil},
		{"derived name", doc("NetworkPolicy", "name: knp.default.allow.all\nnamespace: ns1", "selector: all()"), nil},
		{"icmp", doc("GlobalNetworkPolicy", "name: icmp", `
ingress:
- {action: Allow, protocol: ICMP, icmp: {type: 8, code: 0}, ipVersion: 4}
- {action: Allow, protocol: 1, notICMP: {type: 3}}
- {action: Allow, protocol: ICMPv6, icmp: {type: 128}}`), nil},
		{"namespace required", doc("NetworkPolicy", "name: p", "selector: all()"), []string{
			"metadata.namespace: is required",
		}},
		{"bad rules", doc("NetworkPolicy", "name: p\nnamespace: ns", `
selector: app ==
types: [Ingress, Ingress, Forward]
ingress:
- action: allow
  protocol: tcp
  destination: {ports: [80, 0]}
- action: Allow
  protocol: UDP
  destination: {ports: [dns, 53]}
- action: Allow
  icmp: {code: 3}
- action: Allow
  protocol: 0
  source: {nets: [10.0.0.1/8, "fd00::/64"], ports: [22]}
- {}`), []string{
			`spec.selector: "app ==" is not a valid selector: unexpected end of input at position 6, expected a quoted value`,
			`spec.types[1]: "Ingress" is listed more than once`,
			`spec.types[2]: "Forward" must be Ingress or Egress`,
			`spec.ingress[0].action: "allow" must be one of Allow, Deny, Log, Pass`,
			`spec.ingress[0].protocol: "tcp" is not a valid protocol: must be one of TCP, UDP, ICMP, ICMPv6, SCTP, UDPLite or a number 1-255`,
			`spec.ingress[0].destination.ports[1]: "0" is not a valid port: port numbers must be 1-65535`,
			"spec.ingress[0].destination.ports: require protocol TCP, UDP or SCTP",
			"spec.ingress[2].icmp.code: 3 requires a type",
			"spec.ingress[2].icmp: requires protocol ICMP or ICMPv6",
			"spec.ingress[3].protocol: 0 is not a valid protocol number: must be 1-255",
			"spec.ingress[3].source.ports: require protocol TCP, UDP or SCTP",
			`spec.ingress[3].source.nets[0]: "10.0.0.1/8" is not a network address: host bits are set (did you mean 10.0.0.0/8?)`,
			"spec.ingress[3].source.nets: mix IPv4 and IPv6 within one rule",
			"spec.ingress[4].action: is required",
		}},
		{"services", doc("GlobalNetworkPolicy", "name: p", `
ingress:
- {action: Allow, destination: {services: {name: kube-dns}}}
egress:
- {action: Allow, destination: {services: {name: kube-dns}, selector: a == 'b'}}
- {action: Deny, http: {methods: [GET]}}`), []string{
			"spec.ingress[0].destination.services: cannot be used in an ingress rule",
			"spec.egress[0].destination.services: cannot be combined with selector or notSelector",
			"spec.egress[0].destination.services.namespace: is required in a global policy",
			"spec.egress[1].http: can only be used in Allow rules",
			"spec.egress[1].http: cannot be used in an egress rule",
		}},
		{"gnp preDNAT", doc("GlobalNetworkPolicy", "name: p", `
preDNAT: true
doNotTrack: true
types: [Ingress, Egress]
egress: [{action: Allow}]`), []string{
			"spec.preDNAT: cannot be true together with doNotTrack",
			"spec.egress: must be empty in a preDNAT policy",
			`spec.types[1]: "Egress" cannot be used in a preDNAT policy`,
			"spec.applyOnForward: must be true when doNotTrack or preDNAT is true",
		}},
		{"gnp doNotTrack needs applyOnForward", doc("GlobalNetworkPolicy", "name: p", `
doNotTrack: true
ingress: [{action: Allow}]`), []string{
			"spec.applyOnForward: must be true when doNotTrack or preDNAT is true",
		}},
		{"gnp doNotTrack", doc("GlobalNetworkPolicy", "name: p", `
doNotTrack: true
applyOnForward: true
types: [Ingress, Egress]
ingress: [{action: Allow}]
egress: [{action: Deny}]`), nil},
		{"gnp preDNAT ingress", doc("GlobalNetworkPolicy", "name: p", `
preDNAT: true
applyOnForward: true
ingress: [{action: Deny, protocol: TCP, destination: {ports: ["30000:32767"]}}]`), nil},
		{"bad names", doc("GlobalNetworkPolicy", "name: a.b.c", "tier: Security"), []string{
			`metadata.name: "a.b.c" is not a valid policy name: use lower-case letters, digits and '-' (optionally prefixed by "<tier>.")`,
			`spec.tier: "Security" is not a valid name: use lower-case letters, digits and '-', starting and ending with a letter or digit`,
			`metadata.name: "a.b.c" must start with its tier "Security" followed by '.' when it contains a '.'`,
		}},
		{"tier prefix mismatch", doc("NetworkPolicy", "name: other.p\nnamespace: ns", ""), []string{
			`metadata.name: "other.p" must start with its tier "default" followed by '.' when it contains a '.'`,
		}},
		{"global selector misuse", doc("NetworkPolicy", "name: p\nnamespace: ns", `
selector: global()
ingress:
- {action: Allow, source: {namespaceSelector: global() && a == 'b'}}
- {action: Allow, source: {namespaceSelector: global()}}`), []string{
			`spec.selector: "global()" cannot use global(): it is only valid in a rule's namespaceSelector`,
			`spec.ingress[0].source.namespaceSelector: "global() && a == 'b'" cannot combine global() with other expressions`,
		}},
	})
}

func TestValidateProfileTierSets(t *testing.T) {
	runValidateCases(t, []validateCase{
		{"profile", doc("Profile", "name: k8s-pod-network", `
ingress: [{action: Allow, source: {selector: has(k8s-pod-network)}}]
egress: [{action: Allow}]
labelsToApply: {k8s-pod-network: ""}`), nil},
		{"profile bad label", doc("Profile", "name: kns.default", "labelsToApply: {'x/y/z': a}"), []string{
			`spec.labelsToApply: "x/y/z" has more than one '/'`,
		}},
		{"tier", doc("Tier", "name: security", "order: 100\ndefaultAction: Pass"), nil},
		{"tier defaults", doc("Tier", "name: security", ""), nil},
		{"tier bad", doc("Tier", "name: sec.urity", "defaultAction: Allow"), []string{
			`metadata.name: "sec.urity" is not a valid name: use lower-case letters, digits and '-', starting and ending with a letter or digit`,
			`spec.defaultAction: "Allow" must be one of Deny, Pass`,
		}},
		{"reserved tier order", doc("Tier", "name: default", "order: 5"), []string{
			"spec.order: must be 1000000 for the default tier",
		}},
		{"network set", doc("NetworkSet", "name: ns1\nnamespace: a", "nets: [10.0.0.1, 11.0.0.0/8, 'dead:beef::/96']"), nil},
		{"network set bad", doc("NetworkSet", "name: ns1\nnamespace: a\nlabels: {projectcalico.org/namespace: a}", "nets: [garbage]"), []string{
			`metadata.labels: "projectcalico.org/namespace" is reserved by Calico`,
			`spec.nets[0]: "garbage" is not a valid CIDR or IP address`,
		}},
		{"global network set", doc("GlobalNetworkSet", "name: gns", "nets: [10.0.0.0/8]"), nil},
		{"global network set namespaced", doc("GlobalNetworkSet", "name: gns\nnamespace: x", ""), []string{
			`metadata.namespace: "x" must not be set: GlobalNetworkSet is not namespaced`,
		}},
	})
}

func TestValidateEndpoints(t *testing.T) {
	runValidateCases(t, []validateCase{
		{"host endpoint", doc("HostEndpoint", "name: node1-eth0", `
node: node1
interfaceName: eth0
expectedIPs: [10.0.0.5, "fd00::5"]
profiles: [prof1]
ports: [{name: web, protocol: TCP, port: 80}]`), nil},
		{"host endpoint bad", doc("HostEndpoint", "name: h", `
expectedIPs: [10.0.0.300]
ports: [{name: Web, protocol: ICMP, port: 0}]`), []string{
			"spec.node: is required",
			`spec.expectedIPs[0]: "10.0.0.300" is not a valid IP address`,
			`spec.ports[0].name: "Web" is not a valid port name: 1-15 lower-case letters, digits and single '-', with at least one letter`,
			`spec.ports[0].protocol: "ICMP" does not have ports: use TCP, UDP or SCTP`,
			"spec.ports[0].port: is required: 1-65535",
		}},
		{"host endpoint needs interface or ips", doc("HostEndpoint", "name: h", "node: n1"), []string{
			"spec: must set interfaceName or expectedIPs",
		}},
		{"workload endpoint", doc("WorkloadEndpoint", "name: node1-cni-probecontainer000-eth0\nnamespace: default", `
orchestrator: cni
node: node1
containerID: probecontainer000
endpoint: eth0
ipNetworks: [10.244.166.128/32]
profiles: [k8s-pod-network]
interfaceName: caliprobecontai
mac: "f6:b0:f3:38:94:1f"`), nil},
		{"workload endpoint name derived", doc("WorkloadEndpoint", "namespace: ns1", `
orchestrator: k8s
node: my-node
pod: web-1
endpoint: eth0
interfaceName: cali0123456789a
ports: [{name: http, protocol: TCP, port: 8080}]`), nil},
		{"workload endpoint bad", doc("WorkloadEndpoint", "name: wrong\nnamespace: default", `
orchestrator: k8s
node: node1
pod: web
endpoint: eth0
ipNetworks: [10.0.0.0/24]
ipNATs: [{internalIP: 10.1.0.1, externalIP: 1.2.3.4}]
mac: nope
ports: [{protocol: TCP, port: 80}]`), []string{
			`metadata.name: "wrong" does not match the spec: expected node1-k8s-web-eth0`,
			`spec.ipNetworks[0]: "10.0.0.0/24" must be a single address (/32 or /128)`,
			`spec.ipNATs[0].internalIP: "10.1.0.1" is not one of the endpoint's ipNetworks`,
			"spec.interfaceName: is required",
			`spec.mac: "nope" is not a valid MAC address`,
			"spec.ports[0].name: is required when hostPort is not set",
		}},
		{"workload endpoint missing parts", doc("WorkloadEndpoint", "name: x\nnamespace: default", "orchestrator: cni\nnode: n1\ninterfaceName: cali1"), []string{
			"spec.containerID: is required: the endpoint name is derived from it",
		}},
	})
}

func TestValidateSingletons(t *testing.T) {
	runValidateCases(t, []validateCase{
		{"cluster information", doc("ClusterInformation", "name: default", "clusterGUID: 39f8ab83d2004ab08350181a2e529524\ndatastoreReady: true"), nil},
		{"cluster information name", doc("ClusterInformation", "name: mine", ""), []string{
			`metadata.name: "mine" must be "default"`,
		}},
		{"kube controllers", doc("KubeControllersConfiguration", "name: default", `
logSeverityScreen: Info
healthChecks: Enabled
etcdV3CompactionPeriod: 10m
controllers:
  node: {reconcilerPeriod: 5m, syncLabels: Enabled, hostEndpoint: {autoCreate: Disabled}}
  policy: {reconcilerPeriod: 5m}
  loadBalancer: {}`), nil},
		{"kube controllers bad", doc("KubeControllersConfiguration", "name: default", `
healthChecks: enabled
controllers:
  node:
    hostEndpoint:
      autoCreate: Enabled
      templates: [{generateName: t, interfacePattern: "("}, {generateName: t, interfaceCIDRs: [x]}, {}]
  loadBalancer: {assignIPs: Some}`), []string{
			`spec.healthChecks: "enabled" must be one of Enabled, Disabled`,
			`spec.controllers.node.hostEndpoint.templates[0].interfacePattern: "(" is not a valid regular expression`,
			`spec.controllers.node.hostEndpoint.templates[1].generateName: "t" is used by another template`,
			`spec.controllers.node.hostEndpoint.templates[1].interfaceCIDRs[0]: "x" is not a valid CIDR or IP address`,
			"spec.controllers.node.hostEndpoint.templates[2].generateName: is required",
			"spec.controllers.node.hostEndpoint.templates[2]: must set interfaceCIDRs or interfacePattern",
			`spec.controllers.loadBalancer.assignIPs: "Some" must be one of AllServices, RequestedServicesOnly`,
		}},
	})
}

// TestValidateReportsAll checks that Validate reports every problem of an
// object at once, each as a FieldError with its own path.
func TestValidateReportsAll(t *testing.T) {
	p := &IPPool{ObjectMeta: ObjectMeta{Name: "Bad"}, Spec: IPPoolSpec{CIDR: "10.0.0.0/33", IPIPMode: "x", VXLANMode: "y"}}
	var ve ValidationError
	if !errors.As(p.Validate(), &ve) {
		t.Fatal("Validate did not return a ValidationError")
	}
	var paths []string
	for _, fe := range ve {
		paths = append(paths, fe.Path)
	}
	want := []string{"metadata.name", "spec.vxlanMode", "spec.ipipMode", "spec.cidr"}
	if !slices.Equal(paths, want) {
		t.Errorf("paths = %q, want %q", paths, want)
	}
	if got, want := ve.Error(), `metadata.name: "Bad" is not a valid name`; !strings.HasPrefix(got, want) {
		t.Errorf("Error() = %q, want prefix %q", got, want)
	}
}
