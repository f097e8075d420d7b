package kdd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Profiles on the Kubernetes datastore are computed, never stored
// (libcalico-go resources/profile.go, conversion.go): kns.<namespace> from
// each Namespace (allow everything; the namespace's labels to apply,
// prefixed pcns.), ksa.<namespace>.<name> from each ServiceAccount (no
// rules; its labels prefixed pcsa.), and the static
// projectcalico-default-allow. A Profile's resourceVersion is Calico's
// composite "<namespace rv>/<service account rv>" with one side empty.
const (
	profileNamespaceLabelPrefix      = "pcns."
	profileServiceAccountLabelPrefix = "pcsa."
	profileNameLabel                 = "projectcalico.org/name"
	// defaultAllowName is the profile Calico provides that allows
	// everything (host endpoints that must not be cut off list it).
	defaultAllowName = datastore.DefaultAllowProfileName
)

type profileMapper struct {
	s *Store
	i api.KindInfo
}

func newProfileMapper(s *Store, info api.KindInfo) mapper { return &profileMapper{s: s, i: info} }

func (m *profileMapper) info() api.KindInfo { return m.i }
func (m *profileMapper) sources() []source {
	return []source{namespacesSource, serviceAccountsSource}
}

// static is the default-allow profile, which exists without any
// Kubernetes object behind it and never changes.
func (m *profileMapper) static() []api.Object { return []api.Object{defaultAllowProfile()} }

func (m *profileMapper) convert(i int, raw json.RawMessage) ([]api.Object, error) {
	var o coreObject
	if err := decodeCore(raw, &o, m.sources()[i].resource); err != nil {
		return nil, err
	}
	var p *api.Profile
	var err error
	if i == 0 {
		p, err = namespaceProfile(&o.Metadata)
	} else {
		p, err = serviceAccountProfile(&o.Metadata)
	}
	if err != nil {
		return nil, err
	}
	return []api.Object{p}, nil
}

func (m *profileMapper) get(ctx context.Context, _, name string) (api.Object, error) {
	if name == defaultAllowName {
		return defaultAllowProfile(), nil
	}
	var o coreObject
	if ns, ok := strings.CutPrefix(name, profileNamespacePrefix); ok && ns != "" {
		if err := m.s.c.do(ctx, http.MethodGet, namespacesSource.objPath("", ns), nil, "", nil, &o); err != nil {
			return nil, err
		}
		return namespaceProfile(&o.Metadata)
	}
	if rest, ok := strings.CutPrefix(name, profileServiceAccountPrefix); ok {
		// A namespace name has no dots; a service account's may.
		if ns, sa, ok := strings.Cut(rest, "."); ok && ns != "" && sa != "" {
			if err := m.s.c.do(ctx, http.MethodGet, serviceAccountsSource.objPath(ns, sa), nil, "", nil, &o); err != nil {
				return nil, err
			}
			return serviceAccountProfile(&o.Metadata)
		}
	}
	return nil, datastore.ErrNotFound
}

// Profiles are read-only, as in Calico: they follow the Namespaces and
// ServiceAccounts they are computed from.
func (m *profileMapper) write(_ context.Context, mode writeMode, _ api.Object) (api.Object, error) {
	return nil, errNotSupported(fmt.Sprintf("profiles cannot be %s: they are computed from Kubernetes Namespaces (kns.*) and ServiceAccounts (ksa.*); label those instead", pastTense(mode)))
}

func (m *profileMapper) remove(context.Context, string, string, string) (api.Object, error) {
	return nil, errNotSupported("profiles cannot be deleted: they are computed from Kubernetes Namespaces (kns.*) and ServiceAccounts (ksa.*)")
}

func pastTense(mode writeMode) string {
	switch mode {
	case modeCreate:
		return "created"
	case modeUpdate:
		return "updated"
	}
	return "applied"
}

func defaultAllowProfile() *api.Profile { return datastore.DefaultAllowProfile() }

// namespaceProfile is Calico's NamespaceToProfile.
func namespaceProfile(ns *coreMeta) (*api.Profile, error) {
	uid, err := convertUID(ns.UID)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", ns.Name, err)
	}
	labels := make(map[string]string, len(ns.Labels)+1)
	for k, v := range ns.Labels {
		labels[profileNamespaceLabelPrefix+k] = v
	}
	labels[profileNamespaceLabelPrefix+profileNameLabel] = ns.Name
	p := &api.Profile{TypeMeta: api.TypeMeta{Kind: "Profile", APIVersion: api.GroupVersion}}
	p.ObjectMeta = api.ObjectMeta{
		Name:              profileNamespacePrefix + ns.Name,
		UID:               uid,
		ResourceVersion:   ns.ResourceVersion + "/",
		CreationTimestamp: ns.CreationTimestamp,
	}
	p.Spec = api.ProfileSpec{
		Ingress:       []api.Rule{{Action: api.Allow}},
		Egress:        []api.Rule{{Action: api.Allow}},
		LabelsToApply: labels,
	}
	return p, nil
}

// serviceAccountProfile is Calico's ServiceAccountToProfile.
func serviceAccountProfile(sa *coreMeta) (*api.Profile, error) {
	uid, err := convertUID(sa.UID)
	if err != nil {
		return nil, fmt.Errorf("service account %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	labels := make(map[string]string, len(sa.Labels)+1)
	for k, v := range sa.Labels {
		labels[profileServiceAccountLabelPrefix+k] = v
	}
	labels[profileServiceAccountLabelPrefix+profileNameLabel] = sa.Name
	ns := sa.Namespace
	if ns == "" {
		ns = "default"
	}
	p := &api.Profile{TypeMeta: api.TypeMeta{Kind: "Profile", APIVersion: api.GroupVersion}}
	p.ObjectMeta = api.ObjectMeta{
		Name:              profileServiceAccountPrefix + ns + "." + sa.Name,
		UID:               uid,
		ResourceVersion:   "/" + sa.ResourceVersion,
		CreationTimestamp: sa.CreationTimestamp,
	}
	p.Spec.LabelsToApply = labels
	return p, nil
}
