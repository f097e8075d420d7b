package api

import (
	"fmt"
	"strings"
)

// Limits on Felix routing-table ranges.
const (
	routeTableMaxIndex  = 0xffffffff
	routeTableMaxTables = 0xffff
)

// Validate implements Object.
func (c *FelixConfiguration) Validate() error {
	var f fieldErrors
	checkMeta(&f, &c.ObjectMeta, "FelixConfiguration", metaRules{})
	c.Spec.validate(&f)
	return f.err()
}

func (s *FelixConfigurationSpec) validate(f *fieldErrors) {
	checkKeyValueList(f, "spec.featureDetectOverride", s.FeatureDetectOverride)
	checkKeyValueList(f, "spec.featureGates", s.FeatureGates)
	checkOptEnum(f, "spec.iptablesBackend", s.IptablesBackend, IptablesBackendLegacy, IptablesBackendNFTables, IptablesBackendAuto)
	checkEnum(f, "spec.defaultEndpointToHostAction", s.DefaultEndpointToHostAction, "Drop", "Accept", "Return")
	checkEnum(f, "spec.iptablesFilterAllowAction", s.IptablesFilterAllowAction, "Accept", "Return")
	checkEnum(f, "spec.iptablesMangleAllowAction", s.IptablesMangleAllowAction, "Accept", "Return")
	checkEnum(f, "spec.iptablesFilterDenyAction", s.IptablesFilterDenyAction, "Drop", "Reject")
	checkEnum(f, "spec.nftablesFilterAllowAction", s.NftablesFilterAllowAction, "Accept", "Return")
	checkEnum(f, "spec.nftablesMangleAllowAction", s.NftablesMangleAllowAction, "Accept", "Return")
	checkEnum(f, "spec.nftablesFilterDenyAction", s.NftablesFilterDenyAction, "Drop", "Reject")
	checkOptEnum(f, "spec.nftablesMode", s.NFTablesMode, NFTablesModeEnabled, NFTablesModeDisabled, "Auto")
	checkLogLevel(f, "spec.logSeverityFile", s.LogSeverityFile)
	checkLogLevel(f, "spec.logSeverityScreen", s.LogSeverityScreen)
	checkLogLevel(f, "spec.logSeveritySys", s.LogSeveritySys)
	checkRegexp(f, "spec.logDebugFilenameRegex", s.LogDebugFilenameRegex)
	for i, h := range s.HealthTimeoutOverrides {
		p := index("spec.healthTimeoutOverrides", i)
		if !isHealthComponent(h.Name) {
			f.add(field(p, "name"), h.Name, "is not a valid component name: letters, digits, '_', '-' and spaces")
		}
		if h.Timeout.Duration < 0 {
			f.add(field(p, "timeout"), h.Timeout.String(), "must not be negative")
		}
	}
	if s.PrometheusMetricsHost != "" && !isHostName(s.PrometheusMetricsHost) {
		f.add("spec.prometheusMetricsHost", s.PrometheusMetricsHost, "is not a valid host: an IP address or a name of up to 64 characters")
	}
	for _, pp := range []struct {
		name  string
		ports *[]ProtoPort
	}{{"failsafeInboundHostPorts", s.FailsafeInboundHostPorts}, {"failsafeOutboundHostPorts", s.FailsafeOutboundHostPorts}} {
		if pp.ports == nil {
			continue
		}
		for i, p := range *pp.ports {
			path := index("spec."+pp.name, i)
			switch strings.ToUpper(p.Protocol) {
			case "", "TCP", "UDP", "SCTP":
			default:
				f.add(field(path, "protocol"), p.Protocol, "must be TCP, UDP or SCTP")
			}
			if p.Net != "" {
				checkCIDROrIP(f, field(path, "net"), p.Net)
			}
		}
	}
	if s.KubeNodePortRanges != nil {
		r := *s.KubeNodePortRanges
		// iptables' multiport match takes at most 15 ports, two per range.
		if len(r) > 7 {
			f.add("spec.kubeNodePortRanges", nil, "has too many ranges: at most 7")
		}
		for i, p := range r {
			if p.PortName != "" {
				f.add(index("spec.kubeNodePortRanges", i), p.PortName, "must be a port number or range, not a name")
			} else {
				checkPortValue(f, index("spec.kubeNodePortRanges", i), p)
			}
		}
	}
	if s.NATPortRange != nil {
		checkNumericPort(f, "spec.natPortRange", *s.NATPortRange)
	}
	if s.BPFPSNATPorts != nil {
		checkNumericPort(f, "spec.bpfPSNATPorts", *s.BPFPSNATPorts)
	}
	checkOptEnum(f, "spec.natOutgoingExclusions", s.NATOutgoingExclusions, "IPPoolsOnly", "IPPoolsAndHostIPs")
	checkIP(f, "spec.natOutgoingAddress", s.NATOutgoingAddress, 4)
	checkIP(f, "spec.deviceRouteSourceAddress", s.DeviceRouteSourceAddress, 4)
	checkIP(f, "spec.deviceRouteSourceAddressIPv6", s.DeviceRouteSourceAddressIPv6, 6)
	if s.ExternalNodesCIDRList != nil {
		for i, c := range *s.ExternalNodesCIDRList {
			p := index("spec.externalNodesList", i)
			if pfx, ok := checkCIDROrIP(f, p, c); ok && !pfx.Addr().Is4() {
				f.add(p, c, "must be an IPv4 CIDR")
			}
		}
	}
	checkRange(f, "spec.debugPort", s.DebugPort, 0, 65535)
	if s.IptablesNATOutgoingInterfaceFilter != "" && !isInterfaceFilter(s.IptablesNATOutgoingInterfaceFilter) {
		f.add("spec.iptablesNATOutgoingInterfaceFilter", s.IptablesNATOutgoingInterfaceFilter, "is not a valid interface filter: 1-15 letters, digits or ':._+-'")
	}
	checkOptEnum(f, "spec.bpfJITHardening", s.BPFJITHardening, "Auto", "Strict")
	checkEnum(f, "spec.bpfLogLevel", s.BPFLogLevel, "Debug", "Info", "Off")
	checkEnum(f, "spec.bpfConntrackLogLevel", s.BPFConntrackLogLevel, "Off", "Debug")
	checkOptEnum(f, "spec.bpfConntrackMode", s.BPFConntrackCleanupMode, "Auto", "Userspace", "BPFProgram")
	if s.BPFLogFilters != nil {
		for _, k := range sortedKeys(*s.BPFLogFilters) {
			if !isInterfaceName(k) {
				f.add("spec.bpfLogFilters", k, "is not a valid interface name")
			}
		}
	}
	checkRegexp(f, "spec.bpfDataIfacePattern", s.BPFDataIfacePattern)
	checkRegexp(f, "spec.bpfL3IfacePattern", s.BPFL3IfacePattern)
	checkOptEnum(f, "spec.bpfConnectTimeLoadBalancing", s.BPFConnectTimeLoadBalancing, BPFConnectTimeLBTCP, BPFConnectTimeLBEnabled, BPFConnectTimeLBDisabled)
	checkOptEnum(f, "spec.bpfHostNetworkedNATWithoutCTLB", s.BPFHostNetworkedNATWithoutCTLB, BPFHostNetworkedNATEnabled, BPFHostNetworkedNATDisabled)
	checkEnum(f, "spec.bpfExternalServiceMode", s.BPFExternalServiceMode, "Tunnel", "DSR")
	checkCIDRList(f, "spec.bpfDSROptoutCIDRs", s.BPFDSROptoutCIDRs)
	checkCIDRList(f, "spec.bpfExcludeCIDRsFromNAT", s.BPFExcludeCIDRsFromNAT)
	checkRange(f, "spec.bpfExtToServiceConnmark", s.BPFExtToServiceConnmark, 0, 0xffffffff)
	checkRange(f, "spec.bpfKubeProxyHealthzPort", s.BPFKubeProxyHealthzPort, 1, 65535)
	if v := s.BPFMapSizeConntrackCleanupQueue; v != nil && *v < 1 {
		f.add("spec.bpfMapSizeConntrackCleanupQueue", *v, "must be at least 1")
	}
	if s.BPFForceTrackPacketsFromIfaces != nil {
		for i, name := range *s.BPFForceTrackPacketsFromIfaces {
			if !isInterfaceFilter(name) {
				f.add(index("spec.bpfForceTrackPacketsFromIfaces", i), name, "is not a valid interface filter: 1-15 letters, digits or ':._+-'")
			}
		}
	}
	checkRegexp(f, "spec.bpfDisableGROForIfaces", s.BPFDisableGROForIfaces)
	checkOptEnum(f, "spec.bpfAttachType", s.BPFAttachType, "TC", "TCX")
	// Calico's own check of routeSource accepts anything; its CRD schema and
	// Felix accept these two names in any case.
	if s.RouteSource != "" && !strings.EqualFold(s.RouteSource, "WorkloadIPs") && !strings.EqualFold(s.RouteSource, "CalicoIPAM") {
		f.add("spec.routeSource", s.RouteSource, "must be WorkloadIPs or CalicoIPAM")
	}
	if s.RouteTableRange != nil && s.RouteTableRanges != nil {
		f.add("spec.routeTableRange", nil, "cannot be set together with routeTableRanges")
	}
	if r := s.RouteTableRange; r != nil && (r.Min < 1 || r.Max < r.Min || r.Max > 250) {
		f.add("spec.routeTableRange", fmt.Sprintf("%d-%d", r.Min, r.Max), "must be a range within 1-250")
	}
	if s.RouteTableRanges != nil {
		for i, r := range *s.RouteTableRanges {
			p := index("spec.routeTableRanges", i)
			switch {
			case r.Min > r.Max:
				f.add(p, fmt.Sprintf("%d-%d", r.Min, r.Max), "is reversed: min must not exceed max")
			case r.Min < 1:
				f.add(p, fmt.Sprintf("%d-%d", r.Min, r.Max), "cannot include tables below 1")
			case int64(r.Max) > routeTableMaxIndex:
				f.add(p, fmt.Sprintf("%d-%d", r.Min, r.Max), "includes tables above 4294967295")
			}
		}
		if s.RouteTableRanges.NumDesignatedTables() > routeTableMaxTables {
			f.add("spec.routeTableRanges", nil, fmt.Sprintf("cover too many tables: at most %d", routeTableMaxTables))
		}
	}
	checkRange(f, "spec.wireguardListeningPort", s.WireguardListeningPort, 1, 65535)
	checkRange(f, "spec.wireguardListeningPortV6", s.WireguardListeningPortV6, 1, 65535)
	checkRange(f, "spec.wireguardRoutingRulePriority", s.WireguardRoutingRulePriority, 1, 32765)
	if s.WireguardInterfaceName != "" {
		checkInterfaceName(f, "spec.wireguardInterfaceName", s.WireguardInterfaceName)
	}
	if s.WireguardInterfaceNameV6 != "" {
		checkInterfaceName(f, "spec.wireguardInterfaceNameV6", s.WireguardInterfaceNameV6)
	}
	checkOptEnum(f, "spec.awsSrcDstCheck", s.AWSSrcDstCheck, "DoNothing", "Enable", "Disable")
	checkEnum(f, "spec.serviceLoopPrevention", s.ServiceLoopPrevention, "Drop", "Reject", "Disabled")
	checkEnum(f, "spec.workloadSourceSpoofing", s.WorkloadSourceSpoofing, "Disabled", "Any")
	checkRegexp(f, "spec.mtuIfacePattern", s.MTUIfacePattern)
	checkOptEnum(f, "spec.floatingIPs", s.FloatingIPs, FloatingIPsEnabled, FloatingIPsDisabled)
	checkOptEnum(f, "spec.windowsManageFirewallRules", s.WindowsManageFirewallRules, "Enabled", "Disabled")
	checkRange(f, "spec.goGCThreshold", s.GoGCThreshold, -1, 1<<31-1)
	checkRange(f, "spec.goMemoryLimitMB", s.GoMemoryLimitMB, -1, 1<<31-1)
	checkRange(f, "spec.goMaxProcs", s.GoMaxProcs, -1, 1<<31-1)
	if len(s.OpenstackRegion) > 0 {
		// The region becomes part of a namespace name, "openstack-region-<region>".
		const maxRegion = maxLabelLen - len("openstack-region-")
		switch {
		case len(s.OpenstackRegion) > maxRegion:
			f.add("spec.openstackRegion", s.OpenstackRegion, fmt.Sprintf("is too long: at most %d characters", maxRegion))
		case !isDNSLabelChars(s.OpenstackRegion):
			f.add("spec.openstackRegion", s.OpenstackRegion, msgLabelName)
		}
	}
}

// checkKeyValueList checks a comma-separated list of key=value pairs.
func checkKeyValueList(f *fieldErrors, path, s string) {
	if strings.TrimSpace(s) == "" {
		return
	}
	for _, item := range strings.Split(s, ",") {
		if item != "" && !isKeyValue(item) {
			f.add(path, s, "is not a comma-separated list of key=value pairs")
			return
		}
	}
}

func checkCIDRList(f *fieldErrors, path string, l *[]string) {
	if l == nil {
		return
	}
	for i, c := range *l {
		checkCIDROrIP(f, index(path, i), c)
	}
}

// checkNumericPort checks a port or port range that must not be a name.
func checkNumericPort(f *fieldErrors, path string, p Port) {
	if p.PortName != "" {
		f.add(path, p.PortName, "must be a port number or range, not a name")
		return
	}
	checkPortValue(f, path, p)
}
