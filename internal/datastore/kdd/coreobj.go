package kdd

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/projectcalico/calico-node/internal/datastore"
)

// The Kubernetes core objects Calico computes Nodes, WorkloadEndpoints and
// Profiles from, reduced to the fields it reads. Plain structs instead of
// k8s.io/api/core/v1: the CNI plugin links this package, and decoding a
// Pod needs a dozen fields, not the scheme. Writes never send these back:
// they are merge patches of annotations, so fields unknown here survive.

// coreMeta is the part of ObjectMeta Calico reads.
type coreMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace,omitempty"`
	GenerateName      string            `json:"generateName,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	CreationTimestamp string            `json:"creationTimestamp,omitempty"`
	DeletionTimestamp *string           `json:"deletionTimestamp,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
}

// coreObject is any core object whose metadata is all that matters
// (Namespace, ServiceAccount).
type coreObject struct {
	Metadata coreMeta `json:"metadata"`
}

// Core collections, as sources.
var (
	nodesSource           = source{path: "/api/v1/nodes", resource: "nodes"}
	podsSource            = source{path: "/api/v1/pods", resource: "pods", namespaced: true}
	namespacesSource      = source{path: "/api/v1/namespaces", resource: "namespaces"}
	serviceAccountsSource = source{path: "/api/v1/serviceaccounts", resource: "serviceaccounts", namespaced: true}
)

// Content types of the two patch flavours the mappers send.
const (
	mergePatch          = "application/merge-patch+json"
	strategicMergePatch = "application/strategic-merge-patch+json"
)

func decodeCore(raw json.RawMessage, out any, what string) error {
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decode %s: %w", what, err)
	}
	return nil
}

// errNotSupported builds the error of a write Calico refuses on the
// Kubernetes datastore (its ErrorOperationNotSupported), saying why.
func errNotSupported(why string) error {
	return fmt.Errorf("%w on the Kubernetes datastore: %s", datastore.ErrNotSupported, why)
}

// isNotFound reports an API 404.
func isNotFound(err error) bool { return errors.Is(err, datastore.ErrNotFound) }
