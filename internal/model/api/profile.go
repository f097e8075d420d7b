package api

// Profile holds rules and labels shared by the endpoints that list it
// (Kubernetes namespaces and service accounts become kns.* and ksa.*
// profiles).
type Profile struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       ProfileSpec `json:"spec,omitempty"`
}

// ProfileSpec is the desired state of a Profile.
type ProfileSpec struct {
	Ingress       []Rule            `json:"ingress,omitempty"`
	Egress        []Rule            `json:"egress,omitempty"`
	LabelsToApply map[string]string `json:"labelsToApply,omitempty"`
}
