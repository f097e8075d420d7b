package api

// Rule is one policy rule: if a packet matches every given criterion,
// Action is taken.
type Rule struct {
	Action      Action      `json:"action"`
	IPVersion   *int        `json:"ipVersion,omitempty"`
	Protocol    *Protocol   `json:"protocol,omitempty"`
	ICMP        *ICMPFields `json:"icmp,omitempty"`
	NotProtocol *Protocol   `json:"notProtocol,omitempty"`
	NotICMP     *ICMPFields `json:"notICMP,omitempty"`
	// Source and Destination are structs, so they are always written, as
	// "{}" when empty, matching Calico's stored rules.
	Source      EntityRule    `json:"source,omitempty"`
	Destination EntityRule    `json:"destination,omitempty"`
	HTTP        *HTTPMatch    `json:"http,omitempty"`
	Metadata    *RuleMetadata `json:"metadata,omitempty"`
}

// Action is what a rule does with a matching packet.
type Action string

const (
	Allow Action = "Allow"
	Deny  Action = "Deny"
	Log   Action = "Log"
	Pass  Action = "Pass"
)

// ICMPFields matches an ICMP type and optionally code.
type ICMPFields struct {
	Type *int `json:"type,omitempty"`
	Code *int `json:"code,omitempty"`
}

// EntityRule matches one end of a connection.
type EntityRule struct {
	Nets              []string             `json:"nets,omitempty"`
	Selector          string               `json:"selector,omitempty"`
	NamespaceSelector string               `json:"namespaceSelector,omitempty"`
	Services          *ServiceMatch        `json:"services,omitempty"`
	Ports             []Port               `json:"ports,omitempty"`
	NotNets           []string             `json:"notNets,omitempty"`
	NotSelector       string               `json:"notSelector,omitempty"`
	NotPorts          []Port               `json:"notPorts,omitempty"`
	ServiceAccounts   *ServiceAccountMatch `json:"serviceAccounts,omitempty"`
}

// ServiceMatch matches the endpoints of a Kubernetes service.
type ServiceMatch struct {
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// ServiceAccountMatch matches endpoints by service account.
type ServiceAccountMatch struct {
	Names    []string `json:"names,omitempty"`
	Selector string   `json:"selector,omitempty"`
}

// HTTPMatch matches HTTP requests (application layer policy).
type HTTPMatch struct {
	Methods []string   `json:"methods,omitempty"`
	Paths   []HTTPPath `json:"paths,omitempty"`
}

// HTTPPath matches a request path exactly or by prefix.
type HTTPPath struct {
	Exact  string `json:"exact,omitempty"`
	Prefix string `json:"prefix,omitempty"`
}

// RuleMetadata carries annotations on a rule.
type RuleMetadata struct {
	Annotations map[string]string `json:"annotations,omitempty"`
}
