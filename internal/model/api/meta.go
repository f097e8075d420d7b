package api

import (
	"encoding/json"
	"fmt"
	"strings"
)

// API group and versions accepted on input. Objects are always written with
// GroupVersion.
const (
	Group        = "projectcalico.org"
	GroupVersion = "projectcalico.org/v3"
	CRDVersion   = "crd.projectcalico.org/v1"
)

// TypeMeta is the kind/apiVersion header of every document.
type TypeMeta struct {
	Kind       string `json:"kind,omitempty"`
	APIVersion string `json:"apiVersion,omitempty"`
}

// ObjectMeta is the subset of Kubernetes object metadata Calico resources use.
// CreationTimestamp is kept as the RFC 3339 string Calico writes.
//
// The fields after Namespace follow Kubernetes' ObjectMeta in name and order
// so that documents exported from a cluster (kubectl get -o yaml) decode
// strictly; Calico itself only ever writes name, namespace, uid,
// resourceVersion, creationTimestamp, labels and annotations.
type ObjectMeta struct {
	Name                       string            `json:"name,omitempty"`
	GenerateName               string            `json:"generateName,omitempty"`
	Namespace                  string            `json:"namespace,omitempty"`
	SelfLink                   string            `json:"selfLink,omitempty"`
	UID                        string            `json:"uid,omitempty"`
	ResourceVersion            string            `json:"resourceVersion,omitempty"`
	Generation                 int64             `json:"generation,omitempty"`
	CreationTimestamp          string            `json:"creationTimestamp,omitempty"`
	DeletionTimestamp          string            `json:"deletionTimestamp,omitempty"`
	DeletionGracePeriodSeconds *int64            `json:"deletionGracePeriodSeconds,omitempty"`
	Labels                     map[string]string `json:"labels,omitempty"`
	Annotations                map[string]string `json:"annotations,omitempty"`
	OwnerReferences            []OwnerReference  `json:"ownerReferences,omitempty"`
	Finalizers                 []string          `json:"finalizers,omitempty"`
	// ManagedFields is server-side-apply bookkeeping; kept opaque.
	ManagedFields []json.RawMessage `json:"managedFields,omitempty"`
}

// OwnerReference names an object that owns this one (Kubernetes shape).
type OwnerReference struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         *bool  `json:"controller,omitempty"`
	BlockOwnerDeletion *bool  `json:"blockOwnerDeletion,omitempty"`
}

// Meta returns m itself; embedding ObjectMeta gives every kind its Meta
// method.
func (m *ObjectMeta) Meta() *ObjectMeta { return m }

// Type returns t itself; embedding TypeMeta gives every kind its Type
// method.
func (t *TypeMeta) Type() *TypeMeta { return t }

// Object is implemented by every resource kind.
type Object interface {
	// Meta and Type give mutable access to the headers.
	Meta() *ObjectMeta
	Type() *TypeMeta
	// Default fills unset fields with Calico's defaults. Idempotent.
	Default()
	// Validate returns nil or a ValidationError listing every bad field.
	Validate() error
}

// FieldError is one invalid field: Path is the JSON path ("spec.cidr"),
// Value the offending value, Msg what is wrong with it.
type FieldError struct {
	Path  string
	Value any
	Msg   string
}

func (e FieldError) Error() string {
	if e.Value == nil {
		return fmt.Sprintf("%s: %s", e.Path, e.Msg)
	}
	if s, ok := e.Value.(string); ok {
		return fmt.Sprintf("%s: %q %s", e.Path, s, e.Msg)
	}
	return fmt.Sprintf("%s: %v %s", e.Path, e.Value, e.Msg)
}

// ValidationError collects every FieldError of one object.
type ValidationError []FieldError

func (v ValidationError) Error() string {
	parts := make([]string, len(v))
	for i, e := range v {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}
