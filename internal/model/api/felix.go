package api

// FelixConfiguration configures the dataplane agent: cluster-wide (name
// "default") or per node (name "node.<nodename>"). Every field of Calico
// v3.31 is here so that any real configuration decodes strictly; optional
// values are pointers exactly where Calico has them, so unset and zero stay
// distinct.
type FelixConfiguration struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       FelixConfigurationSpec `json:"spec,omitempty"`
}

// FelixConfigurationSpec is the desired Felix configuration. Field meanings
// are Calico's (see its FelixConfiguration reference).
type FelixConfigurationSpec struct {
	UseInternalDataplaneDriver         *bool                      `json:"useInternalDataplaneDriver,omitempty"`
	DataplaneDriver                    string                     `json:"dataplaneDriver,omitempty"`
	DataplaneWatchdogTimeout           *Duration                  `json:"dataplaneWatchdogTimeout,omitempty"`
	IPv6Support                        *bool                      `json:"ipv6Support,omitempty"`
	RouteRefreshInterval               *Duration                  `json:"routeRefreshInterval,omitempty"`
	InterfaceRefreshInterval           *Duration                  `json:"interfaceRefreshInterval,omitempty"`
	IptablesRefreshInterval            *Duration                  `json:"iptablesRefreshInterval,omitempty"`
	IptablesPostWriteCheckInterval     *Duration                  `json:"iptablesPostWriteCheckInterval,omitempty"`
	IptablesLockFilePath               string                     `json:"iptablesLockFilePath,omitempty"`
	IptablesLockTimeout                *Duration                  `json:"iptablesLockTimeout,omitempty"`
	IptablesLockProbeInterval          *Duration                  `json:"iptablesLockProbeInterval,omitempty"`
	FeatureDetectOverride              string                     `json:"featureDetectOverride,omitempty"`
	FeatureGates                       string                     `json:"featureGates,omitempty"`
	IpsetsRefreshInterval              *Duration                  `json:"ipsetsRefreshInterval,omitempty"`
	MaxIpsetSize                       *int                       `json:"maxIpsetSize,omitempty"`
	IptablesBackend                    *IptablesBackend           `json:"iptablesBackend,omitempty"`
	XDPRefreshInterval                 *Duration                  `json:"xdpRefreshInterval,omitempty"`
	NetlinkTimeout                     *Duration                  `json:"netlinkTimeout,omitempty"`
	MetadataAddr                       string                     `json:"metadataAddr,omitempty"`
	MetadataPort                       *int                       `json:"metadataPort,omitempty"`
	OpenstackRegion                    string                     `json:"openstackRegion,omitempty"`
	InterfacePrefix                    string                     `json:"interfacePrefix,omitempty"`
	InterfaceExclude                   string                     `json:"interfaceExclude,omitempty"`
	ChainInsertMode                    string                     `json:"chainInsertMode,omitempty"`
	DefaultEndpointToHostAction        string                     `json:"defaultEndpointToHostAction,omitempty"`
	IptablesFilterAllowAction          string                     `json:"iptablesFilterAllowAction,omitempty"`
	IptablesMangleAllowAction          string                     `json:"iptablesMangleAllowAction,omitempty"`
	IptablesFilterDenyAction           string                     `json:"iptablesFilterDenyAction,omitempty"`
	LogPrefix                          string                     `json:"logPrefix,omitempty"`
	LogFilePath                        string                     `json:"logFilePath,omitempty"`
	LogSeverityFile                    string                     `json:"logSeverityFile,omitempty"`
	LogSeverityScreen                  string                     `json:"logSeverityScreen,omitempty"`
	LogSeveritySys                     string                     `json:"logSeveritySys,omitempty"`
	LogDebugFilenameRegex              string                     `json:"logDebugFilenameRegex,omitempty"`
	IPIPEnabled                        *bool                      `json:"ipipEnabled,omitempty"`
	IPIPMTU                            *int                       `json:"ipipMTU,omitempty"`
	VXLANEnabled                       *bool                      `json:"vxlanEnabled,omitempty"`
	VXLANMTU                           *int                       `json:"vxlanMTU,omitempty"`
	VXLANMTUV6                         *int                       `json:"vxlanMTUV6,omitempty"`
	VXLANPort                          *int                       `json:"vxlanPort,omitempty"`
	VXLANVNI                           *int                       `json:"vxlanVNI,omitempty"`
	AllowVXLANPacketsFromWorkloads     *bool                      `json:"allowVXLANPacketsFromWorkloads,omitempty"`
	AllowIPIPPacketsFromWorkloads      *bool                      `json:"allowIPIPPacketsFromWorkloads,omitempty"`
	ReportingInterval                  *Duration                  `json:"reportingInterval,omitempty"`
	ReportingTTL                       *Duration                  `json:"reportingTTL,omitempty"`
	EndpointReportingEnabled           *bool                      `json:"endpointReportingEnabled,omitempty"`
	EndpointReportingDelay             *Duration                  `json:"endpointReportingDelay,omitempty"`
	EndpointStatusPathPrefix           string                     `json:"endpointStatusPathPrefix,omitempty"`
	IptablesMarkMask                   *uint32                    `json:"iptablesMarkMask,omitempty"`
	DisableConntrackInvalidCheck       *bool                      `json:"disableConntrackInvalidCheck,omitempty"`
	HealthEnabled                      *bool                      `json:"healthEnabled,omitempty"`
	HealthHost                         *string                    `json:"healthHost,omitempty"`
	HealthPort                         *int                       `json:"healthPort,omitempty"`
	HealthTimeoutOverrides             []HealthTimeoutOverride    `json:"healthTimeoutOverrides,omitempty"`
	PrometheusMetricsEnabled           *bool                      `json:"prometheusMetricsEnabled,omitempty"`
	PrometheusMetricsHost              string                     `json:"prometheusMetricsHost,omitempty"`
	PrometheusMetricsPort              *int                       `json:"prometheusMetricsPort,omitempty"`
	PrometheusGoMetricsEnabled         *bool                      `json:"prometheusGoMetricsEnabled,omitempty"`
	PrometheusProcessMetricsEnabled    *bool                      `json:"prometheusProcessMetricsEnabled,omitempty"`
	PrometheusWireGuardMetricsEnabled  *bool                      `json:"prometheusWireGuardMetricsEnabled,omitempty"`
	FailsafeInboundHostPorts           *[]ProtoPort               `json:"failsafeInboundHostPorts,omitempty"`
	FailsafeOutboundHostPorts          *[]ProtoPort               `json:"failsafeOutboundHostPorts,omitempty"`
	KubeNodePortRanges                 *[]Port                    `json:"kubeNodePortRanges,omitempty"`
	PolicySyncPathPrefix               string                     `json:"policySyncPathPrefix,omitempty"`
	UsageReportingEnabled              *bool                      `json:"usageReportingEnabled,omitempty"`
	UsageReportingInitialDelay         *Duration                  `json:"usageReportingInitialDelay,omitempty"`
	UsageReportingInterval             *Duration                  `json:"usageReportingInterval,omitempty"`
	NATPortRange                       *Port                      `json:"natPortRange,omitempty"`
	NATOutgoingAddress                 string                     `json:"natOutgoingAddress,omitempty"`
	NATOutgoingExclusions              *NATOutgoingExclusionsType `json:"natOutgoingExclusions,omitempty"`
	DeviceRouteSourceAddress           string                     `json:"deviceRouteSourceAddress,omitempty"`
	DeviceRouteSourceAddressIPv6       string                     `json:"deviceRouteSourceAddressIPv6,omitempty"`
	DeviceRouteProtocol                *int                       `json:"deviceRouteProtocol,omitempty"`
	RemoveExternalRoutes               *bool                      `json:"removeExternalRoutes,omitempty"`
	ProgramClusterRoutes               *string                    `json:"programClusterRoutes,omitempty"`
	IPForwarding                       string                     `json:"ipForwarding,omitempty"`
	ExternalNodesCIDRList              *[]string                  `json:"externalNodesList,omitempty"`
	DebugMemoryProfilePath             string                     `json:"debugMemoryProfilePath,omitempty"`
	DebugDisableLogDropping            *bool                      `json:"debugDisableLogDropping,omitempty"`
	DebugSimulateCalcGraphHangAfter    *Duration                  `json:"debugSimulateCalcGraphHangAfter,omitempty"`
	DebugSimulateDataplaneHangAfter    *Duration                  `json:"debugSimulateDataplaneHangAfter,omitempty"`
	DebugSimulateDataplaneApplyDelay   *Duration                  `json:"debugSimulateDataplaneApplyDelay,omitempty"`
	DebugHost                          *string                    `json:"debugHost,omitempty"`
	DebugPort                          *int                       `json:"debugPort,omitempty"`
	IptablesNATOutgoingInterfaceFilter string                     `json:"iptablesNATOutgoingInterfaceFilter,omitempty"`
	SidecarAccelerationEnabled         *bool                      `json:"sidecarAccelerationEnabled,omitempty"`
	XDPEnabled                         *bool                      `json:"xdpEnabled,omitempty"`
	GenericXDPEnabled                  *bool                      `json:"genericXDPEnabled,omitempty"`
	NFTablesMode                       *NFTablesMode              `json:"nftablesMode,omitempty"`
	NftablesRefreshInterval            *Duration                  `json:"nftablesRefreshInterval,omitempty"`
	NftablesFilterAllowAction          string                     `json:"nftablesFilterAllowAction,omitempty"`
	NftablesMangleAllowAction          string                     `json:"nftablesMangleAllowAction,omitempty"`
	NftablesFilterDenyAction           string                     `json:"nftablesFilterDenyAction,omitempty"`
	NftablesMarkMask                   *uint32                    `json:"nftablesMarkMask,omitempty"`
	BPFEnabled                         *bool                      `json:"bpfEnabled,omitempty"`
	BPFDisableUnprivileged             *bool                      `json:"bpfDisableUnprivileged,omitempty"`
	BPFJITHardening                    *BPFJITHardeningType       `json:"bpfJITHardening,omitempty"`
	// BPFLogLevel has no omitempty in Calico: "bpfLogLevel":"" is always written.
	BPFLogLevel                        string                            `json:"bpfLogLevel"`
	BPFConntrackLogLevel               string                            `json:"bpfConntrackLogLevel,omitempty"`
	BPFConntrackCleanupMode            *BPFConntrackMode                 `json:"bpfConntrackMode,omitempty"`
	BPFConntrackTimeouts               *BPFConntrackTimeouts             `json:"bpfConntrackTimeouts,omitempty"`
	BPFLogFilters                      *map[string]string                `json:"bpfLogFilters,omitempty"`
	BPFCTLBLogFilter                   string                            `json:"bpfCTLBLogFilter,omitempty"`
	BPFDataIfacePattern                string                            `json:"bpfDataIfacePattern,omitempty"`
	BPFL3IfacePattern                  string                            `json:"bpfL3IfacePattern,omitempty"`
	BPFConnectTimeLoadBalancingEnabled *bool                             `json:"bpfConnectTimeLoadBalancingEnabled,omitempty"`
	BPFConnectTimeLoadBalancing        *BPFConnectTimeLBType             `json:"bpfConnectTimeLoadBalancing,omitempty"`
	BPFHostNetworkedNATWithoutCTLB     *BPFHostNetworkedNATType          `json:"bpfHostNetworkedNATWithoutCTLB,omitempty"`
	BPFExternalServiceMode             string                            `json:"bpfExternalServiceMode,omitempty"`
	BPFDSROptoutCIDRs                  *[]string                         `json:"bpfDSROptoutCIDRs,omitempty"`
	BPFExtToServiceConnmark            *int                              `json:"bpfExtToServiceConnmark,omitempty"`
	BPFKubeProxyIptablesCleanupEnabled *bool                             `json:"bpfKubeProxyIptablesCleanupEnabled,omitempty"`
	BPFKubeProxyMinSyncPeriod          *Duration                         `json:"bpfKubeProxyMinSyncPeriod,omitempty"`
	BPFKubeProxyHealthzPort            *int                              `json:"bpfKubeProxyHealthzPort,omitempty"`
	BPFKubeProxyEndpointSlicesEnabled  *bool                             `json:"bpfKubeProxyEndpointSlicesEnabled,omitempty"`
	BPFPSNATPorts                      *Port                             `json:"bpfPSNATPorts,omitempty"`
	BPFMapSizeNATFrontend              *int                              `json:"bpfMapSizeNATFrontend,omitempty"`
	BPFMapSizeNATBackend               *int                              `json:"bpfMapSizeNATBackend,omitempty"`
	BPFMapSizeNATAffinity              *int                              `json:"bpfMapSizeNATAffinity,omitempty"`
	BPFMapSizeRoute                    *int                              `json:"bpfMapSizeRoute,omitempty"`
	BPFMapSizeConntrack                *int                              `json:"bpfMapSizeConntrack,omitempty"`
	BPFMapSizePerCPUConntrack          *int                              `json:"bpfMapSizePerCpuConntrack,omitempty"`
	BPFMapSizeConntrackScaling         string                            `json:"bpfMapSizeConntrackScaling,omitempty"`
	BPFMapSizeConntrackCleanupQueue    *int                              `json:"bpfMapSizeConntrackCleanupQueue,omitempty" `
	BPFMapSizeIPSets                   *int                              `json:"bpfMapSizeIPSets,omitempty"`
	BPFMapSizeIfState                  *int                              `json:"bpfMapSizeIfState,omitempty"`
	BPFHostConntrackBypass             *bool                             `json:"bpfHostConntrackBypass,omitempty"`
	BPFEnforceRPF                      string                            `json:"bpfEnforceRPF,omitempty"`
	BPFPolicyDebugEnabled              *bool                             `json:"bpfPolicyDebugEnabled,omitempty"`
	BPFForceTrackPacketsFromIfaces     *[]string                         `json:"bpfForceTrackPacketsFromIfaces,omitempty"`
	BPFDisableGROForIfaces             string                            `json:"bpfDisableGROForIfaces,omitempty"`
	BPFExcludeCIDRsFromNAT             *[]string                         `json:"bpfExcludeCIDRsFromNAT,omitempty"`
	BPFExportBufferSizeMB              *int                              `json:"bpfExportBufferSizeMB,omitempty"`
	CgroupV2Path                       string                            `json:"cgroupV2Path,omitempty"`
	FlowLogsPolicyEvaluationMode       *FlowLogsPolicyEvaluationModeType `json:"flowLogsPolicyEvaluationMode,omitempty"`
	BPFRedirectToPeer                  string                            `json:"bpfRedirectToPeer,omitempty"`
	BPFAttachType                      *BPFAttachOption                  `json:"bpfAttachType,omitempty"`
	FlowLogsFlushInterval              *Duration                         `json:"flowLogsFlushInterval,omitempty"`
	FlowLogsCollectorDebugTrace        *bool                             `json:"flowLogsCollectorDebugTrace,omitempty"`
	FlowLogsGoldmaneServer             *string                           `json:"flowLogsGoldmaneServer,omitempty"`
	FlowLogsLocalReporter              *string                           `json:"flowLogsLocalReporter,omitempty"`
	BPFProfiling                       string                            `json:"bpfProfiling,omitempty"`
	RouteSource                        string                            `json:"routeSource,omitempty"`
	RouteTableRanges                   *RouteTableRanges                 `json:"routeTableRanges,omitempty"`
	RouteTableRange                    *RouteTableRange                  `json:"routeTableRange,omitempty"`
	RouteSyncDisabled                  *bool                             `json:"routeSyncDisabled,omitempty"`
	WireguardEnabled                   *bool                             `json:"wireguardEnabled,omitempty"`
	WireguardEnabledV6                 *bool                             `json:"wireguardEnabledV6,omitempty"`
	WireguardThreadingEnabled          *bool                             `json:"wireguardThreadingEnabled,omitempty"`
	WireguardListeningPort             *int                              `json:"wireguardListeningPort,omitempty"`
	WireguardListeningPortV6           *int                              `json:"wireguardListeningPortV6,omitempty"`
	WireguardRoutingRulePriority       *int                              `json:"wireguardRoutingRulePriority,omitempty"`
	WireguardInterfaceName             string                            `json:"wireguardInterfaceName,omitempty"`
	WireguardInterfaceNameV6           string                            `json:"wireguardInterfaceNameV6,omitempty"`
	WireguardMTU                       *int                              `json:"wireguardMTU,omitempty"`
	WireguardMTUV6                     *int                              `json:"wireguardMTUV6,omitempty"`
	WireguardHostEncryptionEnabled     *bool                             `json:"wireguardHostEncryptionEnabled,omitempty"`
	WireguardPersistentKeepAlive       *Duration                         `json:"wireguardKeepAlive,omitempty"`
	AWSSrcDstCheck                     *AWSSrcDstCheckOption             `json:"awsSrcDstCheck,omitempty"`
	ServiceLoopPrevention              string                            `json:"serviceLoopPrevention,omitempty"`
	WorkloadSourceSpoofing             string                            `json:"workloadSourceSpoofing,omitempty"`
	MTUIfacePattern                    string                            `json:"mtuIfacePattern,omitempty"`
	FloatingIPs                        *FloatingIPType                   `json:"floatingIPs,omitempty"`
	WindowsManageFirewallRules         *WindowsManageFirewallRulesMode   `json:"windowsManageFirewallRules,omitempty"`
	GoGCThreshold                      *int                              `json:"goGCThreshold,omitempty"`
	GoMemoryLimitMB                    *int                              `json:"goMemoryLimitMB,omitempty"`
	GoMaxProcs                         *int                              `json:"goMaxProcs,omitempty"`
	RequireMTUFile                     *bool                             `json:"requireMTUFile,omitempty"`
}

// Values of the enumerated FelixConfiguration fields.
type (
	IptablesBackend                  string
	NFTablesMode                     string
	AWSSrcDstCheckOption             string
	BPFAttachOption                  string
	FloatingIPType                   string
	BPFHostNetworkedNATType          string
	BPFConnectTimeLBType             string
	BPFConntrackMode                 string
	BPFJITHardeningType              string
	WindowsManageFirewallRulesMode   string
	FlowLogsPolicyEvaluationModeType string
	NATOutgoingExclusionsType        string
	BPFConntrackTimeout              string
)

const (
	IptablesBackendLegacy   IptablesBackend = "Legacy"
	IptablesBackendNFTables IptablesBackend = "NFT"
	IptablesBackendAuto     IptablesBackend = "Auto"

	NFTablesModeEnabled  NFTablesMode = "Enabled"
	NFTablesModeDisabled NFTablesMode = "Disabled"

	FloatingIPsEnabled  FloatingIPType = "Enabled"
	FloatingIPsDisabled FloatingIPType = "Disabled"

	BPFHostNetworkedNATEnabled  BPFHostNetworkedNATType = "Enabled"
	BPFHostNetworkedNATDisabled BPFHostNetworkedNATType = "Disabled"

	BPFConnectTimeLBTCP      BPFConnectTimeLBType = "TCP"
	BPFConnectTimeLBEnabled  BPFConnectTimeLBType = "Enabled"
	BPFConnectTimeLBDisabled BPFConnectTimeLBType = "Disabled"
)

// HealthTimeoutOverride changes the health-report timeout of one Felix
// component.
type HealthTimeoutOverride struct {
	Name    string   `json:"name"`
	Timeout Duration `json:"timeout"`
}

// RouteTableRange is the deprecated single range of routing tables Felix may
// use (1-250).
type RouteTableRange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// RouteTableIDRange is one range of routing table indices.
type RouteTableIDRange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// RouteTableRanges are the routing tables Felix may use.
type RouteTableRanges []RouteTableIDRange

// NumDesignatedTables counts the tables in all ranges.
func (r RouteTableRanges) NumDesignatedTables() int {
	n := 0
	for _, rng := range r {
		n += rng.Max - rng.Min + 1
	}
	return n
}

// ProtoPort is a protocol, port and optional CIDR (failsafe ports).
type ProtoPort struct {
	Protocol string `json:"protocol,omitempty"`
	Port     uint16 `json:"port"`
	Net      string `json:"net,omitempty"`
}

// BPFConntrackTimeouts overrides the BPF conntrack timeouts.
type BPFConntrackTimeouts struct {
	CreationGracePeriod *BPFConntrackTimeout `json:"creationGracePeriod,omitempty"`
	TCPSynSent          *BPFConntrackTimeout `json:"tcpSynSent,omitempty"`
	TCPEstablished      *BPFConntrackTimeout `json:"tcpEstablished,omitempty"`
	TCPFinsSeen         *BPFConntrackTimeout `json:"tcpFinsSeen,omitempty"`
	TCPResetSeen        *BPFConntrackTimeout `json:"tcpResetSeen,omitempty"`
	UDPTimeout          *BPFConntrackTimeout `json:"udpTimeout,omitempty"`
	GenericTimeout      *BPFConntrackTimeout `json:"genericTimeout,omitempty"`
	ICMPTimeout         *BPFConntrackTimeout `json:"icmpTimeout,omitempty"`
}
