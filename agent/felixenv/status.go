package felixenv

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// Status says what calico-node does with one FelixConfiguration field.
type Status string

const (
	// Honoured: the field takes effect as in Felix (Note says where it
	// differs in detail).
	Honoured Status = "honoured"
	// EnvOnly: read at start from the FELIX_* environment, as Felix
	// reads it; a value from a FelixConfiguration resource is reported.
	EnvOnly Status = "environment only"
	// Partly: the values in Supported take effect; any other value set
	// is reported. Unset keeps calico-node's behaviour (Note).
	Partly Status = "some values"
	// Ignored: the field has no effect; any value set is reported.
	Ignored Status = "ignored"
	// NotApplicable: the field configures a part calico-node does not
	// have and whose own switch is reported when turned on (eBPF,
	// WireGuard, nftables, flow logs), or another platform (Windows,
	// OpenStack): Felix itself ignores it in calico-node's configuration,
	// so setting it is not reported.
	NotApplicable Status = "not applicable"
)

// FieldStatus is calico-node's treatment of one FelixConfiguration field.
type FieldStatus struct {
	// Field is the field's JSON name.
	Field  string
	Status Status
	// Supported are the values honoured of a Partly field, as they are
	// spelled in YAML (compared without regard to case).
	Supported []string
	// Note says what calico-node does, for the documentation and the
	// report.
	Note string
}

// fieldStatuses is every field of api.FelixConfigurationSpec, in the
// spec's order. A field added to the API without an entry here fails
// TestEveryFieldHasAStatus.
var fieldStatuses = []FieldStatus{
	{"useInternalDataplaneDriver", Partly, []string{"true"}, "the built-in iptables dataplane is the only one"},
	{"dataplaneDriver", NotApplicable, nil, "only used with useInternalDataplaneDriver: false"},
	{"dataplaneWatchdogTimeout", Ignored, nil, "deprecated in Felix; liveness comes from each actor's health report"},
	{"ipv6Support", Honoured, nil, "false: no ip6tables rules or IPv6 IP sets are programmed (IPv6 routes and the IPv6 VXLAN device still follow the IPv6 pools)"},
	{"routeRefreshInterval", Honoured, nil, "route and host-veth resync; 0 turns it off"},
	{"interfaceRefreshInterval", Ignored, nil, "interfaces are not polled; routes to a missing interface are retried with backoff"},
	{"iptablesRefreshInterval", Honoured, nil, "iptables and IP set resync; 0 or less keeps 90s (Felix: never)"},
	{"iptablesPostWriteCheckInterval", Ignored, nil, "no post-write read-back; drift is found by the iptablesRefreshInterval resync"},
	{"iptablesLockFilePath", Partly, []string{"/run/xtables.lock"}, "iptables-restore --wait takes the iptables lock itself"},
	{"iptablesLockTimeout", Partly, []string{"0s"}, "no lock of its own: iptables-restore --wait waits for the iptables lock"},
	{"iptablesLockProbeInterval", NotApplicable, nil, "only used with iptablesLockTimeout"},
	{"featureDetectOverride", Ignored, nil, "features are detected (--random-fully)"},
	{"featureGates", Ignored, nil, ""},
	{"ipsetsRefreshInterval", Ignored, nil, "IP sets are re-read with iptables on iptablesRefreshInterval"},
	{"maxIpsetSize", Honoured, nil, "maxelem of each IP set (a set of another maxelem is rewritten at the next apply)"},
	{"iptablesBackend", EnvOnly, nil, "FELIX_IPTABLESBACKEND at start: Auto, NFT or Legacy"},
	{"xdpRefreshInterval", NotApplicable, nil, "XDP is not used"},
	{"netlinkTimeout", Ignored, nil, ""},
	{"metadataAddr", NotApplicable, nil, "OpenStack only"},
	{"metadataPort", NotApplicable, nil, "OpenStack only"},
	{"openstackRegion", NotApplicable, nil, "OpenStack only"},
	{"interfacePrefix", Honoured, nil, "workload interface prefixes of the policy rules"},
	{"interfaceExclude", Honoured, nil, "host endpoints are never resolved to these interfaces (names or /regexp/; default kube-ipvs0); one naming such an interface gets no chains. There is no interface monitoring to exclude them from otherwise"},
	{"chainInsertMode", Honoured, nil, "Insert puts the cali-* hooks first in the built-in chains, Append last (nat POSTROUTING always appends, as in Felix)"},
	{"defaultEndpointToHostAction", Honoured, nil, "the final rule of cali-wl-to-host: Drop, Return or Accept"},
	{"iptablesFilterAllowAction", Honoured, nil, "Return hands what policy allowed back to the built-in filter chains instead of accepting it (failsafe ports are still accepted, as in Felix)"},
	{"iptablesMangleAllowAction", Honoured, nil, ""},
	{"iptablesFilterDenyAction", Honoured, nil, "Drop or Reject"},
	{"logPrefix", Honoured, nil, "prefix of Log rules, with Felix's %t, %k, %n and %p"},
	{"logFilePath", Partly, []string{"none", ""}, "calico-node logs to stderr only"},
	{"logSeverityFile", NotApplicable, nil, "no log file (logFilePath)"},
	{"logSeverityScreen", Honoured, nil, "the log level, unless set by flag or environment"},
	{"logSeveritySys", Partly, []string{"none", ""}, "no syslog; calico-node logs to stderr only"},
	{"logDebugFilenameRegex", Ignored, nil, ""},
	{"ipipEnabled", Honoured, nil, "false removes tunl0 and its routes and rules even where pools ask for IP-in-IP"},
	{"ipipMTU", Honoured, nil, ""},
	{"vxlanEnabled", Honoured, nil, "false removes vxlan.calico and its routes and rules even where pools ask for VXLAN"},
	{"vxlanMTU", Honoured, nil, ""},
	{"vxlanMTUV6", Honoured, nil, ""},
	{"vxlanPort", Honoured, nil, ""},
	{"vxlanVNI", Honoured, nil, ""},
	{"allowVXLANPacketsFromWorkloads", Honoured, nil, ""},
	{"allowIPIPPacketsFromWorkloads", Honoured, nil, ""},
	{"reportingInterval", Partly, []string{"0s"}, "no FelixStatus reports are written"},
	{"reportingTTL", NotApplicable, nil, "only used with reportingInterval"},
	{"endpointReportingEnabled", Partly, []string{"false"}, "endpoint status is not written to the datastore"},
	{"endpointReportingDelay", NotApplicable, nil, "only used with endpointReportingEnabled"},
	{"endpointStatusPathPrefix", Honoured, nil, "endpoint status files in endpoint-status/ under the prefix, named as Felix names them (ours hold the revision programmed); none turns them off (Felix: empty)"},
	{"iptablesMarkMask", Honoured, nil, "the accept, pass, drop and scratch mark bits are allocated from it in Felix's order"},
	{"disableConntrackInvalidCheck", Honoured, nil, ""},
	{"healthEnabled", Partly, []string{"true"}, "the health endpoints are always served"},
	{"healthHost", EnvOnly, nil, "FELIX_HEALTHHOST at start (or --health-addr)"},
	{"healthPort", EnvOnly, nil, "FELIX_HEALTHPORT at start (or --health-addr)"},
	{"healthTimeoutOverrides", Ignored, nil, ""},
	{"prometheusMetricsEnabled", Honoured, nil, "serves felix_* and calico-node's metrics on prometheusMetricsHost:prometheusMetricsPort"},
	{"prometheusMetricsHost", Honoured, nil, ""},
	{"prometheusMetricsPort", Honoured, nil, "default 9091"},
	{"prometheusGoMetricsEnabled", Honoured, nil, "go_* metrics on the Felix metrics port"},
	{"prometheusProcessMetricsEnabled", Honoured, nil, "process_* metrics on the Felix metrics port"},
	{"prometheusWireGuardMetricsEnabled", NotApplicable, nil, "no WireGuard"},
	{"failsafeInboundHostPorts", Honoured, nil, ""},
	{"failsafeOutboundHostPorts", Honoured, nil, ""},
	{"kubeNodePortRanges", Ignored, nil, "Felix's iptables dataplane only uses it with kube-proxy in IPVS mode, whose special cases calico-node lacks"},
	{"policySyncPathPrefix", Partly, []string{""}, "no policy sync API (Dikastes)"},
	{"usageReportingEnabled", Partly, []string{"false"}, "calico-node never reports usage"},
	{"usageReportingInitialDelay", NotApplicable, nil, "only used with usageReportingEnabled"},
	{"usageReportingInterval", NotApplicable, nil, "only used with usageReportingEnabled"},
	{"natPortRange", Honoured, nil, "--to-ports on natOutgoing TCP and UDP"},
	{"natOutgoingAddress", Honoured, nil, "SNAT to this address instead of MASQUERADE"},
	{"natOutgoingExclusions", Honoured, nil, "IPPoolsAndHostIPs also exempts traffic to the cluster's hosts (the all-hosts-net IP set of each family)"},
	{"deviceRouteSourceAddress", Honoured, nil, "the src of the IPv4 routes to workloads"},
	{"deviceRouteSourceAddressIPv6", Honoured, nil, "the src of the IPv6 routes to workloads"},
	{"deviceRouteProtocol", Partly, []string{"80"}, "calico-node's routes use protocol 80"},
	{"removeExternalRoutes", Honoured, nil, "true (unset): the full route resync also removes other protocols' unwanted routes to workload interfaces (interfacePrefix), not the kernel's own; false: only protocol 80 routes are removed"},
	{"programClusterRoutes", Partly, []string{"Disabled"}, "routes to other nodes' blocks come from BGP or the VXLAN overlay"},
	{"ipForwarding", Partly, []string{"Enabled"}, "forwarding is switched on for each workload interface"},
	{"externalNodesList", Honoured, nil, "may send and receive VXLAN and IP-in-IP like nodes"},
	{"debugMemoryProfilePath", Ignored, nil, ""},
	{"debugDisableLogDropping", Ignored, nil, "log lines are never dropped"},
	{"debugSimulateCalcGraphHangAfter", Ignored, nil, ""},
	{"debugSimulateDataplaneHangAfter", Ignored, nil, ""},
	{"debugSimulateDataplaneApplyDelay", Honoured, nil, "a delay before every iptables apply"},
	{"debugHost", EnvOnly, nil, "FELIX_DEBUGHOST at start: where the debug port listens (default localhost)"},
	{"debugPort", EnvOnly, nil, "FELIX_DEBUGPORT at start: the agent serves Go's pprof (/debug/pprof/) there; unset or 0: none"},
	{"iptablesNATOutgoingInterfaceFilter", Honoured, nil, "natOutgoing only out of this interface"},
	{"sidecarAccelerationEnabled", Partly, []string{"false"}, ""},
	{"xdpEnabled", Partly, []string{"false"}, "untracked policy is enforced in the raw table only, without XDP"},
	{"genericXDPEnabled", NotApplicable, nil, "XDP is not used"},
	{"nftablesMode", Partly, []string{"Disabled"}, "policy is programmed with iptables (the nft or legacy flavour, iptablesBackend)"},
	{"nftablesRefreshInterval", NotApplicable, nil, "no nftables dataplane"},
	{"nftablesFilterAllowAction", NotApplicable, nil, "no nftables dataplane"},
	{"nftablesMangleAllowAction", NotApplicable, nil, "no nftables dataplane"},
	{"nftablesFilterDenyAction", NotApplicable, nil, "no nftables dataplane"},
	{"nftablesMarkMask", NotApplicable, nil, "no nftables dataplane"},
	{"bpfEnabled", Partly, []string{"false"}, "no eBPF dataplane"},
	{"bpfDisableUnprivileged", NotApplicable, nil, "eBPF only"},
	{"bpfJITHardening", NotApplicable, nil, "eBPF only"},
	{"bpfLogLevel", NotApplicable, nil, "eBPF only"},
	{"bpfConntrackLogLevel", NotApplicable, nil, "eBPF only"},
	{"bpfConntrackMode", NotApplicable, nil, "eBPF only"},
	{"bpfConntrackTimeouts", NotApplicable, nil, "eBPF only"},
	{"bpfLogFilters", NotApplicable, nil, "eBPF only"},
	{"bpfCTLBLogFilter", NotApplicable, nil, "eBPF only"},
	{"bpfDataIfacePattern", NotApplicable, nil, "eBPF only"},
	{"bpfL3IfacePattern", NotApplicable, nil, "eBPF only"},
	{"bpfConnectTimeLoadBalancingEnabled", NotApplicable, nil, "eBPF only"},
	{"bpfConnectTimeLoadBalancing", NotApplicable, nil, "eBPF only"},
	{"bpfHostNetworkedNATWithoutCTLB", NotApplicable, nil, "eBPF only"},
	{"bpfExternalServiceMode", NotApplicable, nil, "eBPF only"},
	{"bpfDSROptoutCIDRs", NotApplicable, nil, "eBPF only"},
	{"bpfExtToServiceConnmark", NotApplicable, nil, "eBPF only"},
	{"bpfKubeProxyIptablesCleanupEnabled", NotApplicable, nil, "eBPF only"},
	{"bpfKubeProxyMinSyncPeriod", NotApplicable, nil, "eBPF only"},
	{"bpfKubeProxyHealthzPort", NotApplicable, nil, "eBPF only"},
	{"bpfKubeProxyEndpointSlicesEnabled", NotApplicable, nil, "eBPF only"},
	{"bpfPSNATPorts", NotApplicable, nil, "eBPF only"},
	{"bpfMapSizeNATFrontend", NotApplicable, nil, "eBPF only"},
	{"bpfMapSizeNATBackend", NotApplicable, nil, "eBPF only"},
	{"bpfMapSizeNATAffinity", NotApplicable, nil, "eBPF only"},
	{"bpfMapSizeRoute", NotApplicable, nil, "eBPF only"},
	{"bpfMapSizeConntrack", NotApplicable, nil, "eBPF only"},
	{"bpfMapSizePerCpuConntrack", NotApplicable, nil, "eBPF only"},
	{"bpfMapSizeConntrackScaling", NotApplicable, nil, "eBPF only"},
	{"bpfMapSizeConntrackCleanupQueue", NotApplicable, nil, "eBPF only"},
	{"bpfMapSizeIPSets", NotApplicable, nil, "eBPF only"},
	{"bpfMapSizeIfState", NotApplicable, nil, "eBPF only"},
	{"bpfHostConntrackBypass", NotApplicable, nil, "eBPF only"},
	{"bpfEnforceRPF", NotApplicable, nil, "eBPF only"},
	{"bpfPolicyDebugEnabled", NotApplicable, nil, "eBPF only"},
	{"bpfForceTrackPacketsFromIfaces", NotApplicable, nil, "eBPF only"},
	{"bpfDisableGROForIfaces", NotApplicable, nil, "eBPF only"},
	{"bpfExcludeCIDRsFromNAT", NotApplicable, nil, "eBPF only"},
	{"bpfExportBufferSizeMB", NotApplicable, nil, "eBPF only"},
	{"cgroupV2Path", NotApplicable, nil, "eBPF only"},
	{"flowLogsPolicyEvaluationMode", NotApplicable, nil, "no flow logs"},
	{"bpfRedirectToPeer", NotApplicable, nil, "eBPF only"},
	{"bpfAttachType", NotApplicable, nil, "eBPF only"},
	{"flowLogsFlushInterval", NotApplicable, nil, "no flow logs"},
	{"flowLogsCollectorDebugTrace", NotApplicable, nil, "no flow logs"},
	{"flowLogsGoldmaneServer", Partly, []string{""}, "no flow logs are sent"},
	{"flowLogsLocalReporter", Partly, []string{"", "Disabled"}, "no flow logs"},
	{"bpfProfiling", NotApplicable, nil, "eBPF only"},
	{"routeSource", Partly, []string{"CalicoIPAM"}, "this node's IPAM blocks are blackholed and exported; workload routes come from workload endpoints"},
	{"routeTableRanges", NotApplicable, nil, "calico-node uses only the main routing table"},
	{"routeTableRange", NotApplicable, nil, "calico-node uses only the main routing table"},
	{"routeSyncDisabled", Partly, []string{"false"}, "routes are always programmed"},
	{"wireguardEnabled", Partly, []string{"false"}, "no WireGuard"},
	{"wireguardEnabledV6", Partly, []string{"false"}, "no WireGuard"},
	{"wireguardThreadingEnabled", NotApplicable, nil, "WireGuard only"},
	{"wireguardListeningPort", NotApplicable, nil, "WireGuard only"},
	{"wireguardListeningPortV6", NotApplicable, nil, "WireGuard only"},
	{"wireguardRoutingRulePriority", NotApplicable, nil, "WireGuard only"},
	{"wireguardInterfaceName", NotApplicable, nil, "WireGuard only"},
	{"wireguardInterfaceNameV6", NotApplicable, nil, "WireGuard only"},
	{"wireguardMTU", NotApplicable, nil, "WireGuard only"},
	{"wireguardMTUV6", NotApplicable, nil, "WireGuard only"},
	{"wireguardHostEncryptionEnabled", NotApplicable, nil, "WireGuard only"},
	{"wireguardKeepAlive", NotApplicable, nil, "WireGuard only"},
	{"awsSrcDstCheck", Partly, []string{"DoNothing"}, "the EC2 source/destination check is left alone"},
	{"serviceLoopPrevention", Honoured, nil, "Drop (unset) or Reject: routed traffic to the default BGPConfiguration's advertised service ranges that was not DNAT-ed is stopped in cali-cidr-block, as in Felix; Disabled lets it loop"},
	{"workloadSourceSpoofing", Honoured, nil, "Any lets allowSpoofedSourcePrefixes exempt sources from the reverse-path check"},
	{"mtuIfacePattern", Ignored, nil, "MTUs come from configuration, not detection"},
	{"floatingIPs", Partly, []string{"Disabled"}, "no floating IPs (OpenStack)"},
	{"windowsManageFirewallRules", NotApplicable, nil, "Windows only"},
	{"goGCThreshold", Honoured, nil, "the agent's GC percentage; unset keeps Go's (GOGC), not Felix's 40"},
	{"goMemoryLimitMB", Honoured, nil, "the agent's soft memory limit"},
	{"goMaxProcs", Honoured, nil, "the agent's GOMAXPROCS"},
	{"requireMTUFile", Ignored, nil, "the CNI plugin's REQUIRE_MTU_FILE (install-cni) applies instead"},
}

// FieldStatuses returns the status of every FelixConfiguration field, in
// the API's order.
func FieldStatuses() []FieldStatus { return slices.Clone(fieldStatuses) }

// Finding is a field set to a value calico-node does not honour.
type Finding struct {
	Field  string
	Value  string // as YAML would spell it
	Status Status
	Note   string
}

func (f Finding) String() string {
	s := fmt.Sprintf("%s=%s", f.Field, f.Value)
	if f.Note != "" {
		s += " (" + f.Note + ")"
	}
	return s
}

// Unhonoured lists the fields of spec (the merged configuration of a
// node, ForNode) that are set to values calico-node does not honour, in
// the API's order. env is the FELIX_* environment's layer (nil for none):
// an EnvOnly field is only reported when its value came from a
// FelixConfiguration resource. Unhonoured is pure.
func Unhonoured(spec api.FelixConfigurationSpec, env *api.FelixConfigurationSpec) []Finding {
	v := reflect.ValueOf(spec)
	idx := jsonIndex()
	var envV reflect.Value
	if env != nil {
		envV = reflect.ValueOf(*env)
	}
	var out []Finding
	for _, fs := range fieldStatuses {
		i, ok := idx[fs.Field]
		if !ok {
			continue // TestEveryFieldHasAStatus catches this
		}
		f := v.Field(i)
		if f.IsZero() {
			continue
		}
		val := yamlValue(f)
		switch fs.Status {
		case Honoured, NotApplicable:
			continue
		case EnvOnly:
			if envV.IsValid() && reflect.DeepEqual(f.Interface(), envV.Field(i).Interface()) {
				continue
			}
		case Partly:
			if slices.ContainsFunc(fs.Supported, func(s string) bool { return strings.EqualFold(s, val) }) {
				continue
			}
		}
		out = append(out, Finding{Field: fs.Field, Value: val, Status: fs.Status, Note: fs.Note})
	}
	return out
}

// jsonIndex maps the spec's JSON names to field indices.
func jsonIndex() map[string]int {
	t := reflect.TypeFor[api.FelixConfigurationSpec]()
	out := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out[name] = i
	}
	return out
}

// yamlValue spells a field's value as a user writes it: scalars bare,
// anything structured as JSON.
func yamlValue(f reflect.Value) string {
	for f.Kind() == reflect.Pointer {
		f = f.Elem()
	}
	b, err := json.Marshal(f.Interface())
	if err != nil {
		return fmt.Sprint(f.Interface())
	}
	s := string(b)
	if len(s) >= 2 && s[0] == '"' {
		var str string
		if json.Unmarshal(b, &str) == nil {
			return str
		}
	}
	return s
}

// StatusMarkdown is the table of every field and its status that
// docs/configuration.md carries.
func StatusMarkdown() string {
	var b strings.Builder
	b.WriteString("| field | status | what calico-node does |\n| --- | --- | --- |\n")
	for _, fs := range fieldStatuses {
		status := string(fs.Status)
		if fs.Status == Partly {
			var vs []string
			for _, v := range fs.Supported {
				if v == "" {
					v = "unset"
				} else {
					v = "`" + v + "`"
				}
				vs = append(vs, v)
			}
			status = "only " + strings.Join(vs, ", ")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", fs.Field, status, strings.ReplaceAll(fs.Note, "|", "\\|"))
	}
	return b.String()
}
