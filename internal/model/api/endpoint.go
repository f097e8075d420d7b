package api

// Labels Calico maintains on workload endpoints.
const (
	LabelNamespace      = "projectcalico.org/namespace"
	LabelOrchestrator   = "projectcalico.org/orchestrator"
	LabelServiceAccount = "projectcalico.org/serviceaccount"
	LabelTier           = "projectcalico.org/tier"
)

// Orchestrator names used in workload endpoint names.
const (
	OrchestratorKubernetes = "k8s"
	OrchestratorCNI        = "cni"
	OrchestratorDocker     = "libnetwork"
	OrchestratorOpenStack  = "openstack"
)

// HostEndpoint is a host interface (or the host's addresses) that policy
// applies to.
type HostEndpoint struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       HostEndpointSpec `json:"spec,omitempty"`
}

// HostEndpointSpec is the desired state of a HostEndpoint.
type HostEndpointSpec struct {
	Node string `json:"node,omitempty"`
	// InterfaceName is the interface, or "*" for all of the host's.
	InterfaceName string         `json:"interfaceName,omitempty"`
	ExpectedIPs   []string       `json:"expectedIPs,omitempty"`
	Profiles      []string       `json:"profiles,omitempty"`
	Ports         []EndpointPort `json:"ports,omitempty"`
}

// EndpointPort is a named port of a host endpoint.
type EndpointPort struct {
	Name     string   `json:"name"`
	Protocol Protocol `json:"protocol"`
	Port     uint16   `json:"port"`
}

// WorkloadEndpoint is one network interface of a workload (pod). Its name
// is derived from node, orchestrator, workload and endpoint (see
// WorkloadEndpointName).
type WorkloadEndpoint struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       WorkloadEndpointSpec `json:"spec,omitempty"`
}

// WorkloadEndpointSpec is the desired state of a WorkloadEndpoint.
type WorkloadEndpointSpec struct {
	Orchestrator               string                 `json:"orchestrator,omitempty"`
	Workload                   string                 `json:"workload,omitempty"`
	Node                       string                 `json:"node,omitempty"`
	ContainerID                string                 `json:"containerID,omitempty"`
	Pod                        string                 `json:"pod,omitempty"`
	Endpoint                   string                 `json:"endpoint,omitempty"`
	ServiceAccountName         string                 `json:"serviceAccountName,omitempty"`
	IPNetworks                 []string               `json:"ipNetworks,omitempty"`
	IPNATs                     []IPNAT                `json:"ipNATs,omitempty"`
	IPv4Gateway                string                 `json:"ipv4Gateway,omitempty"`
	IPv6Gateway                string                 `json:"ipv6Gateway,omitempty"`
	Profiles                   []string               `json:"profiles,omitempty"`
	InterfaceName              string                 `json:"interfaceName,omitempty"`
	MAC                        string                 `json:"mac,omitempty"`
	Ports                      []WorkloadEndpointPort `json:"ports,omitempty"`
	AllowSpoofedSourcePrefixes []string               `json:"allowSpoofedSourcePrefixes,omitempty"`
	QoSControls                *QoSControls           `json:"qosControls,omitempty"`
}

// WorkloadEndpointPort is a named and/or host-mapped port of a workload.
type WorkloadEndpointPort struct {
	Name     string   `json:"name"`
	Protocol Protocol `json:"protocol"`
	Port     uint16   `json:"port"`
	HostPort uint16   `json:"hostPort"`
	HostIP   string   `json:"hostIP"`
}

// IPNAT is a 1:1 NAT from an external address to one of the workload's.
type IPNAT struct {
	InternalIP string `json:"internalIP"`
	ExternalIP string `json:"externalIP"`
}

// QoSControls limits a workload's bandwidth, packet rate and connections.
type QoSControls struct {
	IngressBandwidth      int64 `json:"ingressBandwidth,omitempty"`
	IngressBurst          int64 `json:"ingressBurst,omitempty"`
	IngressPeakrate       int64 `json:"ingressPeakrate,omitempty"`
	IngressMinburst       int64 `json:"ingressMinburst,omitempty"`
	EgressBandwidth       int64 `json:"egressBandwidth,omitempty"`
	EgressBurst           int64 `json:"egressBurst,omitempty"`
	EgressPeakrate        int64 `json:"egressPeakrate,omitempty"`
	EgressMinburst        int64 `json:"egressMinburst,omitempty"`
	IngressPacketRate     int64 `json:"ingressPacketRate,omitempty"`
	IngressPacketBurst    int64 `json:"ingressPacketBurst,omitempty"`
	EgressPacketRate      int64 `json:"egressPacketRate,omitempty"`
	EgressPacketBurst     int64 `json:"egressPacketBurst,omitempty"`
	IngressMaxConnections int64 `json:"ingressMaxConnections,omitempty"`
	EgressMaxConnections  int64 `json:"egressMaxConnections,omitempty"`
	DSCP                  *DSCP `json:"dscp,omitempty"`
}
