package kdd

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/bits"
	"strings"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Shared by every mapper that stores v3 metadata the way libcalico-go's
// lib/backend/k8s/resources (ConvertCalicoResourceToK8sResource and back)
// and lib/backend/k8s/conversion (ConvertUID) do.

// convertUID turns a Kubernetes uid into the v3 uid Calico shows for the
// object, and back (the mapping is its own inverse): the bits of every
// byte reversed, except bytes 6 and 8, which hold the UUID's version and
// variant. Calico does this so that a v3 object never shares a uid with
// the Kubernetes object it is stored as or computed from.
func convertUID(uid string) (string, error) {
	var b [16]byte
	hexDigits := strings.ReplaceAll(uid, "-", "")
	if len(hexDigits) != 32 || len(uid) != 36 || uid[8] != '-' || uid[13] != '-' || uid[18] != '-' || uid[23] != '-' {
		return "", fmt.Errorf("uid %q is not a UUID", uid)
	}
	if _, err := hex.Decode(b[:], []byte(hexDigits)); err != nil {
		return "", fmt.Errorf("uid %q is not a UUID: %w", uid, err)
	}
	for i := range b {
		if i != 6 && i != 8 {
			b[i] = bits.Reverse8(b[i])
		}
	}
	s := hex.EncodeToString(b[:])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:], nil
}

// annotationMeta is the JSON of Kubernetes' metav1.ObjectMeta, field for
// field and in its order, as Calico marshals it into the metadata
// annotation: namespace, uid and resourceVersion are never recorded, and
// creationTimestamp is null (not absent) when unset, as metav1.Time
// encodes its zero value.
type annotationMeta struct {
	Name                       string               `json:"name,omitempty"`
	GenerateName               string               `json:"generateName,omitempty"`
	SelfLink                   string               `json:"selfLink,omitempty"`
	Generation                 int64                `json:"generation,omitempty"`
	CreationTimestamp          *string              `json:"creationTimestamp"`
	DeletionTimestamp          string               `json:"deletionTimestamp,omitempty"`
	DeletionGracePeriodSeconds *int64               `json:"deletionGracePeriodSeconds,omitempty"`
	Labels                     map[string]string    `json:"labels,omitempty"`
	Annotations                map[string]string    `json:"annotations,omitempty"`
	OwnerReferences            []api.OwnerReference `json:"ownerReferences,omitempty"`
	Finalizers                 []string             `json:"finalizers,omitempty"`
	ManagedFields              []json.RawMessage    `json:"managedFields,omitempty"`
}

// encodeMetadata is the projectcalico.org/metadata annotation for m.
// recordName keeps the name (policies, whose stored name carries the tier);
// other kinds are stored under their own name and record none.
func encodeMetadata(m *api.ObjectMeta, recordName bool) (string, error) {
	am := annotationMeta{
		GenerateName:               m.GenerateName,
		SelfLink:                   m.SelfLink,
		Generation:                 m.Generation,
		DeletionTimestamp:          m.DeletionTimestamp,
		DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds,
		Labels:                     m.Labels,
		Annotations:                m.Annotations,
		Finalizers:                 m.Finalizers,
		ManagedFields:              m.ManagedFields,
	}
	if recordName {
		am.Name = m.Name
	}
	if m.CreationTimestamp != "" {
		ts := m.CreationTimestamp
		am.CreationTimestamp = &ts
	}
	for _, ref := range m.OwnerReferences {
		// A Calico owner is recorded as its custom resource, by that uid.
		if ref.APIVersion == api.GroupVersion {
			uid, err := convertUID(ref.UID)
			if err != nil {
				return "", fmt.Errorf("owner %s %s: %w", ref.Kind, ref.Name, err)
			}
			ref.APIVersion, ref.UID = api.CRDVersion, uid
		}
		am.OwnerReferences = append(am.OwnerReferences, ref)
	}
	data, err := json.Marshal(am)
	if err != nil {
		return "", fmt.Errorf("encode annotation %s: %w", datastore.MetadataAnnotation, err)
	}
	return string(data), nil
}

// crdMetadata is what a stored object's own metadata carries besides its
// name: the metadata annotation, and the labels and annotations Calico
// owns (keys containing projectcalico.org/ or operator.tigera.io/), which
// it keeps on the object too so that they can be selected on — the tier
// label of a policy outside the default tier is the one that matters.
func crdMetadata(m *api.ObjectMeta, recordName bool) (labels, annotations map[string]string, err error) {
	meta, err := encodeMetadata(m, recordName)
	if err != nil {
		return nil, nil, err
	}
	annotations = map[string]string{}
	for k, v := range m.Annotations {
		if calicoOwned(k) {
			annotations[k] = v
		}
	}
	annotations[datastore.MetadataAnnotation] = meta
	for k, v := range m.Labels {
		if calicoOwned(k) {
			if labels == nil {
				labels = map[string]string{}
			}
			labels[k] = v
		}
	}
	return labels, annotations, nil
}

func calicoOwned(key string) bool {
	return strings.Contains(key, "projectcalico.org/") || strings.Contains(key, "operator.tigera.io/")
}

// k8sMeta is the part of a Kubernetes object's metadata the mappers read.
type k8sMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	CreationTimestamp string            `json:"creationTimestamp,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
}

// decodeMetadata is the v3 metadata of a stored object, as Calico reads
// it: the object's own labels and annotations with the annotation's
// recorded ones merged over them (older Calico kept them on the object),
// the recorded name or else the object's, the object's namespace and
// resourceVersion, and the converted uid. The name is "" when the
// annotation records none; the caller decides (policies strip a tier).
func decodeMetadata(k *k8sMeta) (api.ObjectMeta, string, error) {
	var m api.ObjectMeta
	m.Namespace, m.ResourceVersion = k.Namespace, k.ResourceVersion
	if k.UID != "" {
		uid, err := convertUID(k.UID)
		if err != nil {
			return m, "", err
		}
		m.UID = uid
	}
	labels := maps.Clone(k.Labels)
	annotations := maps.Clone(k.Annotations)
	raw, ok := annotations[datastore.MetadataAnnotation]
	if !ok {
		m.Labels, m.Annotations, m.CreationTimestamp = labels, annotations, k.CreationTimestamp
		return m, "", nil
	}
	delete(annotations, datastore.MetadataAnnotation)
	var am annotationMeta
	if err := json.Unmarshal([]byte(raw), &am); err != nil {
		return m, "", fmt.Errorf("annotation %s: %w", datastore.MetadataAnnotation, err)
	}
	for k, v := range am.Labels {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[k] = v
	}
	for k, v := range am.Annotations {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[k] = v
	}
	if len(annotations) == 0 {
		annotations = nil
	}
	m.Labels, m.Annotations = labels, annotations
	m.GenerateName, m.SelfLink, m.Generation = am.GenerateName, am.SelfLink, am.Generation
	m.DeletionTimestamp, m.DeletionGracePeriodSeconds = am.DeletionTimestamp, am.DeletionGracePeriodSeconds
	m.Finalizers, m.ManagedFields = am.Finalizers, am.ManagedFields
	m.CreationTimestamp = k.CreationTimestamp
	if am.CreationTimestamp != nil && *am.CreationTimestamp != "" {
		m.CreationTimestamp = *am.CreationTimestamp
	}
	for _, ref := range am.OwnerReferences {
		// Owners recorded by Calico before it converted their uids are
		// v3 ones; Calico converts both.
		if ref.APIVersion == api.CRDVersion || ref.APIVersion == api.GroupVersion {
			uid, err := convertUID(ref.UID)
			if err != nil {
				return m, "", fmt.Errorf("owner %s %s: %w", ref.Kind, ref.Name, err)
			}
			ref.APIVersion, ref.UID = api.GroupVersion, uid
		}
		m.OwnerReferences = append(m.OwnerReferences, ref)
	}
	return m, am.Name, nil
}
