package api

import (
	"net/netip"
	"strings"
)

// Validate implements Object.
func (h *HostEndpoint) Validate() error {
	var f fieldErrors
	checkMeta(&f, &h.ObjectMeta, "HostEndpoint", metaRules{})
	s := &h.Spec
	if s.Node == "" {
		f.add("spec.node", nil, msgRequired)
	} else {
		checkSubdomain(&f, "spec.node", s.Node)
	}
	if s.InterfaceName == "" && len(s.ExpectedIPs) == 0 {
		f.add("spec", nil, "must set interfaceName or expectedIPs")
	}
	if s.InterfaceName != "" {
		checkInterfaceName(&f, "spec.interfaceName", s.InterfaceName)
	}
	for i, ip := range s.ExpectedIPs {
		if ip == "" {
			f.add(index("spec.expectedIPs", i), "", "is not a valid IP address")
		}
		checkIP(&f, index("spec.expectedIPs", i), ip, 0)
	}
	for i, name := range s.Profiles {
		checkSubdomain(&f, index("spec.profiles", i), name)
	}
	for i, port := range s.Ports {
		p := index("spec.ports", i)
		checkPortName(&f, field(p, "name"), port.Name)
		checkEndpointPort(&f, p, port.Protocol, port.Port)
	}
	return f.err()
}

// checkEndpointPort checks the protocol and number of a named endpoint port.
func checkEndpointPort(f *fieldErrors, path string, proto Protocol, port uint16) {
	if msg := proto.validate(); msg != "" {
		f.add(field(path, "protocol"), proto.String(), msg)
	} else if !proto.SupportsPorts() {
		f.add(field(path, "protocol"), proto.String(), "does not have ports: use TCP, UDP or SCTP")
	}
	if port == 0 {
		f.add(field(path, "port"), nil, "is required: 1-65535")
	}
}

// WorkloadEndpointName returns the name Calico derives for a workload
// endpoint from its spec: node, orchestrator, then the pod (k8s), container
// ID (cni), orchestrator again (libnetwork) or workload (others), then the
// endpoint, joined by '-' with each part's own dashes doubled. It fails when
// a part is missing or starts or ends with '-'.
func WorkloadEndpointName(s *WorkloadEndpointSpec) (string, error) {
	name, fe := workloadEndpointName(s)
	if fe != nil {
		return "", fe
	}
	return name, nil
}

func workloadEndpointName(s *WorkloadEndpointSpec) (string, *FieldError) {
	type part struct{ name, value string }
	third := part{"workload", s.Workload}
	switch s.Orchestrator {
	case OrchestratorKubernetes:
		third = part{"pod", s.Pod}
	case OrchestratorCNI:
		third = part{"containerID", s.ContainerID}
	case OrchestratorDocker:
		third = part{"orchestrator", s.Orchestrator}
	}
	parts := []part{{"node", s.Node}, {"orchestrator", s.Orchestrator}, third, {"endpoint", s.Endpoint}}
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		switch {
		case p.value == "":
			return "", &FieldError{Path: "spec." + p.name, Msg: "is required: the endpoint name is derived from it"}
		case strings.HasPrefix(p.value, "-") || strings.HasSuffix(p.value, "-"):
			return "", &FieldError{Path: "spec." + p.name, Value: p.value, Msg: "must not start or end with '-'"}
		}
		out = append(out, strings.ReplaceAll(p.value, "-", "--"))
	}
	return strings.Join(out, "-"), nil
}

// Validate implements Object.
func (w *WorkloadEndpoint) Validate() error {
	var f fieldErrors
	checkMeta(&f, &w.ObjectMeta, "WorkloadEndpoint", metaRules{namespaced: true})
	s := &w.Spec
	checkOptName(&f, "spec.orchestrator", s.Orchestrator)
	checkOptName(&f, "spec.workload", s.Workload)
	checkOptName(&f, "spec.node", s.Node)
	checkOptName(&f, "spec.pod", s.Pod)
	checkOptName(&f, "spec.endpoint", s.Endpoint)
	checkOptName(&f, "spec.serviceAccountName", s.ServiceAccountName)
	if s.ContainerID != "" && !isContainerID(s.ContainerID) {
		f.add("spec.containerID", s.ContainerID, "is not a valid container ID: letters, digits and '-', starting and ending with a letter or digit")
	}
	if want, fe := workloadEndpointName(s); fe != nil {
		f.list = append(f.list, *fe)
	} else if w.Name != "" && w.Name != want {
		f.add("metadata.name", w.Name, "does not match the spec: expected "+want)
	}

	var nets []netip.Prefix
	for i, n := range s.IPNetworks {
		p := index("spec.ipNetworks", i)
		if pfx, ok := checkNetwork(&f, p, n); ok {
			if pfx.Bits() != pfx.Addr().BitLen() {
				f.add(p, n, "must be a single address (/32 or /128)")
			}
			nets = append(nets, pfx)
		}
	}
	for i, nat := range s.IPNATs {
		p := index("spec.ipNATs", i)
		in, okIn := parseCIDROrIP(nat.InternalIP)
		ex, okEx := parseCIDROrIP(nat.ExternalIP)
		if !okIn {
			f.add(field(p, "internalIP"), nat.InternalIP, "is not a valid IP address")
		}
		if !okEx {
			f.add(field(p, "externalIP"), nat.ExternalIP, "is not a valid IP address")
		}
		if okIn && okEx && in.Addr().Is4() != ex.Addr().Is4() {
			f.add(field(p, "externalIP"), nat.ExternalIP, "is not the same IP version as internalIP")
		}
		if okIn && !containsAddr(nets, in.Addr()) {
			f.add(field(p, "internalIP"), nat.InternalIP, "is not one of the endpoint's ipNetworks")
		}
	}
	checkIP(&f, "spec.ipv4Gateway", s.IPv4Gateway, 4)
	checkIP(&f, "spec.ipv6Gateway", s.IPv6Gateway, 6)
	for i, name := range s.Profiles {
		checkSubdomain(&f, index("spec.profiles", i), name)
	}
	if s.InterfaceName == "" {
		f.add("spec.interfaceName", nil, msgRequired)
	} else {
		checkInterfaceName(&f, "spec.interfaceName", s.InterfaceName)
	}
	checkMAC(&f, "spec.mac", s.MAC)
	for i, port := range s.Ports {
		p := index("spec.ports", i)
		if port.Name != "" {
			checkPortName(&f, field(p, "name"), port.Name)
		} else if port.HostPort == 0 {
			f.add(field(p, "name"), nil, "is required when hostPort is not set")
		}
		checkEndpointPort(&f, p, port.Protocol, port.Port)
		if port.HostIP != "" {
			checkNetwork(&f, field(p, "hostIP"), port.HostIP)
		}
	}
	for i, c := range s.AllowSpoofedSourcePrefixes {
		checkCIDROrIP(&f, index("spec.allowSpoofedSourcePrefixes", i), c)
	}
	if q := s.QoSControls; q != nil && q.DSCP != nil {
		if msg := q.DSCP.validate(); msg != "" {
			f.add("spec.qosControls.dscp", q.DSCP.String(), msg)
		}
	}
	return f.err()
}

func containsAddr(nets []netip.Prefix, a netip.Addr) bool {
	for _, n := range nets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// checkNetworkSetMeta rejects the label Calico reserves for mapping
// namespaces into its data model.
func checkReservedLabel(f *fieldErrors, labels map[string]string) {
	if _, ok := labels[LabelNamespace]; ok {
		f.add("metadata.labels", LabelNamespace, "is reserved by Calico")
	}
}

// Validate implements Object.
func (n *NetworkSet) Validate() error {
	var f fieldErrors
	checkMeta(&f, &n.ObjectMeta, "NetworkSet", metaRules{namespaced: true})
	checkReservedLabel(&f, n.Labels)
	for i, c := range n.Spec.Nets {
		checkCIDROrIP(&f, index("spec.nets", i), c)
	}
	return f.err()
}

// Validate implements Object.
func (n *GlobalNetworkSet) Validate() error {
	var f fieldErrors
	checkMeta(&f, &n.ObjectMeta, "GlobalNetworkSet", metaRules{})
	checkReservedLabel(&f, n.Labels)
	for i, c := range n.Spec.Nets {
		checkCIDROrIP(&f, index("spec.nets", i), c)
	}
	return f.err()
}

// Validate implements Object.
func (c *ClusterInformation) Validate() error {
	var f fieldErrors
	checkMeta(&f, &c.ObjectMeta, "ClusterInformation", metaRules{name: onlyDefault})
	return f.err()
}

// onlyDefault is the name rule of singleton kinds.
func onlyDefault(f *fieldErrors, path, s string) {
	switch s {
	case "":
		f.add(path, nil, msgRequired)
	case "default":
	default:
		f.add(path, s, `must be "default"`)
	}
}

// Validate implements Object.
func (k *KubeControllersConfiguration) Validate() error {
	var f fieldErrors
	checkMeta(&f, &k.ObjectMeta, "KubeControllersConfiguration", metaRules{name: onlyDefault})
	k.Spec.validate(&f, "spec")
	k.Status.RunningConfig.validate(&f, "status.runningConfig")
	return f.err()
}

func (s *KubeControllersConfigurationSpec) validate(f *fieldErrors, path string) {
	checkLogLevel(f, field(path, "logSeverityScreen"), s.LogSeverityScreen)
	checkEnum(f, field(path, "healthChecks"), s.HealthChecks, "Enabled", "Disabled")
	checkRange(f, field(path, "prometheusMetricsPort"), s.PrometheusMetricsPort, 0, 65535)
	if s.DebugProfilePort != nil && (*s.DebugProfilePort < 0 || *s.DebugProfilePort > 65535) {
		f.add(field(path, "debugProfilePort"), *s.DebugProfilePort, "is out of range: must be 0-65535")
	}
	c := field(path, "controllers")
	if n := s.Controllers.Node; n != nil {
		np := field(c, "node")
		checkEnum(f, field(np, "syncLabels"), n.SyncLabels, "Enabled", "Disabled")
		if h := n.HostEndpoint; h != nil {
			hp := field(np, "hostEndpoint")
			checkEnum(f, field(hp, "autoCreate"), h.AutoCreate, "Enabled", "Disabled")
			checkEnum(f, field(hp, "createDefaultHostEndpoint"), h.CreateDefaultHostEndpoint,
				DefaultHostEndpointsEnabled, DefaultHostEndpointsDisabled)
			seen := map[string]bool{}
			for i, t := range h.Templates {
				tp := index(field(hp, "templates"), i)
				if t.GenerateName == "" {
					f.add(field(tp, "generateName"), nil, msgRequired)
				} else {
					checkSubdomain(f, field(tp, "generateName"), t.GenerateName)
					if seen[t.GenerateName] {
						f.add(field(tp, "generateName"), t.GenerateName, "is used by another template")
					}
					seen[t.GenerateName] = true
				}
				if len(t.InterfaceCIDRs) == 0 && t.InterfacePattern == "" {
					f.add(tp, nil, "must set interfaceCIDRs or interfacePattern")
				}
				for j, cidr := range t.InterfaceCIDRs {
					checkCIDROrIP(f, index(field(tp, "interfaceCIDRs"), j), cidr)
				}
				checkRegexp(f, field(tp, "interfacePattern"), t.InterfacePattern)
				checkLabels(f, field(tp, "labels"), t.Labels)
				checkSelector(f, field(tp, "nodeSelector"), t.NodeSelector)
			}
		}
	}
	if lb := s.Controllers.LoadBalancer; lb != nil {
		checkEnum(f, field(field(c, "loadBalancer"), "assignIPs"), lb.AssignIPs, AllServices, RequestedServicesOnly)
	}
}
