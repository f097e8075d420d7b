package api

// ClusterInformation (name "default") describes the cluster: its GUID,
// Calico version and whether the datastore is ready for use.
type ClusterInformation struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       ClusterInformationSpec `json:"spec,omitempty"`
}

// ClusterInformationSpec is the cluster's identity and state.
type ClusterInformationSpec struct {
	ClusterGUID    string `json:"clusterGUID,omitempty"`
	ClusterType    string `json:"clusterType,omitempty"`
	CalicoVersion  string `json:"calicoVersion,omitempty"`
	DatastoreReady *bool  `json:"datastoreReady,omitempty"`
	Variant        string `json:"variant,omitempty"`
}

// KubeControllersConfiguration (name "default") configures the Kubernetes
// controllers.
type KubeControllersConfiguration struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       KubeControllersConfigurationSpec `json:"spec,omitempty"`
	// Status is a struct, so it is always written, as Calico does.
	Status KubeControllersConfigurationStatus `json:"status,omitempty"`
}

// KubeControllersConfigurationSpec is the desired controllers configuration.
type KubeControllersConfigurationSpec struct {
	LogSeverityScreen      string    `json:"logSeverityScreen,omitempty"`
	HealthChecks           string    `json:"healthChecks,omitempty"`
	EtcdV3CompactionPeriod *Duration `json:"etcdV3CompactionPeriod,omitempty"`
	PrometheusMetricsPort  *int      `json:"prometheusMetricsPort,omitempty"`
	// Controllers has no omitempty in Calico: "controllers":{} is always
	// written.
	Controllers      ControllersConfig `json:"controllers"`
	DebugProfilePort *int32            `json:"debugProfilePort,omitempty"`
}

// ControllersConfig enables and configures each controller; a nil entry
// disables it.
type ControllersConfig struct {
	Node             *NodeControllerConfig             `json:"node,omitempty"`
	Policy           *PolicyControllerConfig           `json:"policy,omitempty"`
	WorkloadEndpoint *WorkloadEndpointControllerConfig `json:"workloadEndpoint,omitempty"`
	ServiceAccount   *ServiceAccountControllerConfig   `json:"serviceAccount,omitempty"`
	Namespace        *NamespaceControllerConfig        `json:"namespace,omitempty"`
	LoadBalancer     *LoadBalancerControllerConfig     `json:"loadBalancer,omitempty"`
}

// NodeControllerConfig configures the node controller.
type NodeControllerConfig struct {
	ReconcilerPeriod *Duration               `json:"reconcilerPeriod,omitempty"`
	SyncLabels       string                  `json:"syncLabels,omitempty"`
	HostEndpoint     *AutoHostEndpointConfig `json:"hostEndpoint,omitempty"`
	LeakGracePeriod  *Duration               `json:"leakGracePeriod,omitempty"`
}

// AutoHostEndpointConfig configures automatic host endpoints.
type AutoHostEndpointConfig struct {
	AutoCreate                string                  `json:"autoCreate,omitempty"`
	CreateDefaultHostEndpoint DefaultHostEndpointMode `json:"createDefaultHostEndpoint,omitempty"`
	Templates                 []Template              `json:"templates,omitempty"`
}

// DefaultHostEndpointMode is whether the default "*" host endpoint is made.
type DefaultHostEndpointMode string

const (
	DefaultHostEndpointsEnabled  DefaultHostEndpointMode = "Enabled"
	DefaultHostEndpointsDisabled DefaultHostEndpointMode = "Disabled"
)

// Template describes host endpoints to create for matching nodes.
type Template struct {
	GenerateName     string            `json:"generateName,omitempty"`
	InterfaceCIDRs   []string          `json:"interfaceCIDRs,omitempty"`
	InterfacePattern string            `json:"interfacePattern,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`
	NodeSelector     string            `json:"nodeSelector,omitempty"`
}

// PolicyControllerConfig configures the policy controller.
type PolicyControllerConfig struct {
	ReconcilerPeriod *Duration `json:"reconcilerPeriod,omitempty"`
}

// WorkloadEndpointControllerConfig configures the workload endpoint
// controller.
type WorkloadEndpointControllerConfig struct {
	ReconcilerPeriod *Duration `json:"reconcilerPeriod,omitempty"`
}

// ServiceAccountControllerConfig configures the service account controller.
type ServiceAccountControllerConfig struct {
	ReconcilerPeriod *Duration `json:"reconcilerPeriod,omitempty"`
}

// NamespaceControllerConfig configures the namespace controller.
type NamespaceControllerConfig struct {
	ReconcilerPeriod *Duration `json:"reconcilerPeriod,omitempty"`
}

// LoadBalancerControllerConfig configures LoadBalancer IP assignment.
type LoadBalancerControllerConfig struct {
	AssignIPs AssignIPs `json:"assignIPs,omitempty"`
}

// AssignIPs is which services get LoadBalancer addresses.
type AssignIPs string

const (
	AllServices           AssignIPs = "AllServices"
	RequestedServicesOnly AssignIPs = "RequestedServicesOnly"
)

// KubeControllersConfigurationStatus is the configuration in effect.
type KubeControllersConfigurationStatus struct {
	RunningConfig   KubeControllersConfigurationSpec `json:"runningConfig,omitempty"`
	EnvironmentVars map[string]string                `json:"environmentVars,omitempty"`
}
