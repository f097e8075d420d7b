package kdd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// crdWriteAttempts bounds the retries of an unconditional Update, Apply or
// Delete that keeps losing the race against other writers of the object
// (the etcd backend's bound).
const crdWriteAttempts = 16

// crdMapper stores a kind as the crd.projectcalico.org/v1 custom resource
// of the same kind, as libcalico-go's customK8sResourceClient does:
//
//   - the spec (and status) are the v3 ones, unchanged;
//   - the v3 metadata is in the projectcalico.org/metadata annotation (see
//     encodeMetadata); the object's own labels and annotations are only
//     the Calico-owned keys (crdMetadata);
//   - a v3 uid is the object's uid converted (convertUID);
//     resourceVersion is the object's;
//   - policies are stored under their tier-prefixed name
//     (datastore.PolicyNames), which the annotation's name undoes, and
//     outside the default tier carry the projectcalico.org/tier label.
type crdMapper struct {
	s      *Store
	i      api.KindInfo
	src    source
	policy bool
}

func newCRDMapper(s *Store, info api.KindInfo) mapper {
	return newCRD(s, info)
}

func newCRD(s *Store, info api.KindInfo) *crdMapper {
	return &crdMapper{
		s: s,
		i: info,
		src: source{
			path:       "/apis/" + CRDGroupVersion + "/" + info.Plural,
			resource:   info.Plural + ".crd.projectcalico.org",
			namespaced: info.Namespaced,
		},
		policy: datastore.IsTieredPolicyKind(info.Kind),
	}
}

func (m *crdMapper) info() api.KindInfo { return m.i }
func (m *crdMapper) sources() []source  { return []source{m.src} }

// crdObject is a Calico custom resource on the wire.
type crdObject struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   k8sMeta         `json:"metadata"`
	Spec       json.RawMessage `json:"spec,omitempty"`
	Status     json.RawMessage `json:"status,omitempty"`
}

func (m *crdMapper) convert(_ int, raw json.RawMessage) ([]api.Object, error) {
	obj, err := m.decode(raw)
	if err != nil {
		return nil, err
	}
	return []api.Object{obj}, nil
}

// decode turns a stored custom resource into the v3 object.
func (m *crdMapper) decode(raw []byte) (api.Object, error) {
	var o crdObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, fmt.Errorf("decode %s: %w", m.src.resource, err)
	}
	fail := func(err error) (api.Object, error) {
		return nil, fmt.Errorf("%s %s: %w", m.src.resource, objectRef(o.Metadata.Namespace, o.Metadata.Name), err)
	}
	meta, name, err := decodeMetadata(&o.Metadata)
	if err != nil {
		return fail(err)
	}
	body := map[string]json.RawMessage{}
	if len(o.Spec) > 0 {
		body["spec"] = o.Spec
	}
	if len(o.Status) > 0 {
		body["status"] = o.Status
	}
	data, err := json.Marshal(body)
	if err != nil {
		return fail(err)
	}
	obj := m.i.New()
	if err := json.Unmarshal(data, obj); err != nil {
		return fail(err)
	}
	if name == "" {
		name = o.Metadata.Name
		if m.policy {
			name = datastore.PolicyNameFromStored(name, policyTier(obj))
		}
	}
	meta.Name = name
	*obj.Meta() = meta
	*obj.Type() = api.TypeMeta{Kind: m.i.Kind, APIVersion: api.GroupVersion}
	return obj, nil
}

func objectRef(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// policyTier is a policy's tier, "default" when it names none.
func policyTier(obj api.Object) string {
	switch p := obj.(type) {
	case *api.NetworkPolicy:
		return p.Spec.TierName()
	case *api.GlobalNetworkPolicy:
		return p.Spec.TierName()
	}
	return api.DefaultTierName
}

// storedName is the custom resource's name for a name a caller gives.
func (m *crdMapper) storedName(name string) string {
	if m.policy {
		return datastore.PolicyStoredName(name)
	}
	return name
}

// read gets the stored object.
func (m *crdMapper) read(ctx context.Context, ns, stored string) (json.RawMessage, error) {
	var raw json.RawMessage
	if err := m.s.c.do(ctx, http.MethodGet, m.src.objPath(ns, stored), nil, "", nil, &raw); err != nil {
		return nil, sentinel(err)
	}
	return raw, nil
}

// identity is what a write carries over from the stored object: its
// resourceVersion and v3 creationTimestamp. It reads no more than that, so
// that an object whose rest no longer decodes can still be overwritten.
func identity(raw json.RawMessage) (rv, created string) {
	var o struct {
		Metadata k8sMeta `json:"metadata"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return "", ""
	}
	created = o.Metadata.CreationTimestamp
	var am annotationMeta
	if json.Unmarshal([]byte(o.Metadata.Annotations[datastore.MetadataAnnotation]), &am) == nil &&
		am.CreationTimestamp != nil && *am.CreationTimestamp != "" {
		created = *am.CreationTimestamp
	}
	return o.Metadata.ResourceVersion, created
}

func (m *crdMapper) get(ctx context.Context, ns, name string) (api.Object, error) {
	raw, err := m.read(ctx, ns, m.storedName(name))
	if err != nil {
		return nil, err
	}
	return m.decode(raw)
}

// write stores obj (cloned, defaulted and validated by the Store). Create
// is a POST, which the API server refuses when the name exists. Update and
// Apply read the stored object first, for its identity (creationTimestamp
// lives in the annotation, so the stored one must be carried over) and its
// resourceVersion, and PUT at that version: the API server's
// compare-and-swap. With the caller's resourceVersion the write happens
// only at that version; without it a lost race is retried.
func (m *crdMapper) write(ctx context.Context, mode writeMode, obj api.Object) (api.Object, error) {
	if err := validateForKDD(obj); err != nil {
		return nil, err
	}
	meta := obj.Meta()
	ns, want := meta.Namespace, meta.ResourceVersion
	stored := meta.Name
	if m.policy {
		tier := policyTier(obj)
		stored, meta.Name = datastore.PolicyNames(meta.Name, tier)
		if tier != api.DefaultTierName {
			// As Calico's clientv3: the label lets tiers be listed by
			// label selector.
			meta.Labels = maps.Clone(meta.Labels)
			if meta.Labels == nil {
				meta.Labels = map[string]string{}
			}
			meta.Labels[api.LabelTier] = tier
		}
	}
	meta.UID, meta.ResourceVersion = "", ""
	if mode == modeCreate {
		return m.create(ctx, obj, stored)
	}
	for range crdWriteAttempts {
		raw, err := m.read(ctx, ns, stored)
		if errors.Is(err, datastore.ErrNotFound) && mode == modeApply && want == "" {
			out, err := m.create(ctx, obj, stored)
			if errors.Is(err, datastore.ErrAlreadyExists) {
				continue // created meanwhile: update it
			}
			return out, err
		}
		if err != nil {
			return nil, err
		}
		rv, created := identity(raw)
		if want != "" && rv != want {
			return nil, datastore.ErrConflict
		}
		// The stored identity wins over whatever the caller sent.
		meta.CreationTimestamp = created
		body, err := m.body(obj, stored, rv)
		if err != nil {
			return nil, err
		}
		err = m.s.c.do(ctx, http.MethodPut, m.src.objPath(ns, stored), nil, "", body, &raw)
		switch {
		case errors.Is(err, datastore.ErrConflict) && want == "":
			continue // another writer got in between: write on top of it
		case err != nil:
			return nil, sentinel(err)
		}
		return m.decode(raw)
	}
	return nil, fmt.Errorf("%w: gave up after %d attempts against concurrent writers", datastore.ErrConflict, crdWriteAttempts)
}

func (m *crdMapper) create(ctx context.Context, obj api.Object, stored string) (api.Object, error) {
	meta := obj.Meta()
	if meta.CreationTimestamp == "" {
		// clientv3 stamps the v3 object before the API server stamps the
		// custom resource; both are normally the same second.
		meta.CreationTimestamp = time.Now().UTC().Format(time.RFC3339)
	}
	body, err := m.body(obj, stored, "")
	if err != nil {
		return nil, err
	}
	var raw json.RawMessage
	if err := m.s.c.do(ctx, http.MethodPost, m.src.nsPath(meta.Namespace), nil, "", body, &raw); err != nil {
		return nil, sentinel(err)
	}
	return m.decode(raw)
}

// body is the custom resource that stores obj under the name stored, at
// resourceVersion rv ("" for a create).
func (m *crdMapper) body(obj api.Object, stored, rv string) (*crdObject, error) {
	meta := obj.Meta()
	labels, annotations, err := crdMetadata(meta, m.policy)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	var parts struct {
		Spec   json.RawMessage `json:"spec"`
		Status json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(data, &parts); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return &crdObject{
		APIVersion: CRDGroupVersion,
		Kind:       m.i.Kind,
		Metadata: k8sMeta{
			Name:            stored,
			Namespace:       meta.Namespace,
			ResourceVersion: rv,
			Labels:          labels,
			Annotations:     annotations,
		},
		Spec:   parts.Spec,
		Status: parts.Status,
	}, nil
}

// deleteOptions is the body of a conditional DELETE.
type deleteOptions struct {
	Preconditions struct {
		ResourceVersion string `json:"resourceVersion,omitempty"`
	} `json:"preconditions"`
}

// remove deletes the object at the version read just before (or at rv, the
// caller's), so that what it returns is exactly what was deleted.
func (m *crdMapper) remove(ctx context.Context, ns, name, rv string) (api.Object, error) {
	stored := m.storedName(name)
	for range crdWriteAttempts {
		raw, err := m.read(ctx, ns, stored)
		if err != nil {
			return nil, err
		}
		curRV, _ := identity(raw)
		if rv != "" && curRV != rv {
			return nil, datastore.ErrConflict
		}
		var opts deleteOptions
		opts.Preconditions.ResourceVersion = curRV
		err = m.s.c.do(ctx, http.MethodDelete, m.src.objPath(ns, stored), nil, "", opts, nil)
		switch {
		case errors.Is(err, datastore.ErrConflict) && rv == "":
			continue
		case err != nil:
			return nil, sentinel(err)
		}
		obj, err := m.decode(raw)
		if err != nil {
			// The delete happened; an unreadable old value should not
			// make it look as if it had not.
			m.s.logger.Warn("deleted object that does not convert", "resource", m.src.resource, "name", objectRef(ns, stored), "err", err)
			obj = m.i.New()
			obj.Meta().Namespace, obj.Meta().Name, obj.Meta().ResourceVersion = ns, name, curRV
		}
		return obj, nil
	}
	return nil, fmt.Errorf("%w: gave up after %d attempts against concurrent writers", datastore.ErrConflict, crdWriteAttempts)
}

// sentinel reduces the API's not-found, already-exists and conflict
// answers to the datastore's sentinels, so that errors read as calicoctl's
// ("resource does not exist: IPPool(pool1)") whichever backend is used.
func sentinel(err error) error {
	for _, s := range []error{datastore.ErrNotFound, datastore.ErrAlreadyExists, datastore.ErrConflict} {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

// validateForKDD refuses what Calico refuses only on the Kubernetes
// datastore (libcalico-go's kubeControllersConfigValidator): the node
// controller must sync labels, as Calico Nodes take theirs from the
// Kubernetes Nodes.
func validateForKDD(obj api.Object) error {
	kcc, ok := obj.(*api.KubeControllersConfiguration)
	if !ok {
		return nil
	}
	if n := kcc.Spec.Controllers.Node; n != nil && n.SyncLabels == "Disabled" {
		return api.ValidationError{{Path: "spec.controllers.node.syncLabels", Value: n.SyncLabels,
			Msg: "cannot be Disabled on the Kubernetes datastore"}}
	}
	return nil
}
