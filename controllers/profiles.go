package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	listersv1 "k8s.io/client-go/listers/core/v1"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Profile naming and labels, as Calico's Kubernetes conversion has them.
const (
	NamespaceProfilePrefix      = "kns."
	NamespaceLabelPrefix        = "pcns."
	ServiceAccountProfilePrefix = "ksa."
	ServiceAccountLabelPrefix   = "pcsa."
	// NameLabel, prefixed, carries the namespace's or service account's
	// own name so that selectors can match it exactly.
	NameLabel = "projectcalico.org/name"
)

// NamespaceProfile is the Profile Calico keeps for a namespace.
func NamespaceProfile(ns *corev1.Namespace) *api.Profile {
	p := newProfile(NamespaceProfilePrefix + ns.Name)
	p.Spec.Ingress = []api.Rule{{Action: api.Allow}}
	p.Spec.Egress = []api.Rule{{Action: api.Allow}}
	p.Spec.LabelsToApply = prefixed(NamespaceLabelPrefix, ns.Labels, ns.Name)
	return p
}

// ServiceAccountProfile is the Profile Calico keeps for a service account.
func ServiceAccountProfile(sa *corev1.ServiceAccount) *api.Profile {
	p := newProfile(ServiceAccountProfilePrefix + sa.Namespace + "." + sa.Name)
	p.Spec.LabelsToApply = prefixed(ServiceAccountLabelPrefix, sa.Labels, sa.Name)
	return p
}

func newProfile(name string) *api.Profile {
	p := &api.Profile{}
	p.Kind, p.APIVersion, p.Name = "Profile", api.GroupVersion, name
	return p
}

func prefixed(prefix string, in map[string]string, name string) map[string]string {
	out := make(map[string]string, len(in)+1)
	for k, v := range in {
		out[prefix+k] = v
	}
	out[prefix+NameLabel] = name
	return out
}

// upsertProfile makes the stored profile's spec equal to want's.
func upsertProfile(ctx context.Context, store Store, want *api.Profile, log *slog.Logger) error {
	obj, err := store.Get(ctx, "Profile", "", want.Name)
	if errors.Is(err, datastore.ErrNotFound) {
		if _, err := store.Create(ctx, want); err != nil {
			return fmt.Errorf("create profile %s: %w", want.Name, err)
		}
		log.Info("created profile", "profile", want.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("read profile %s: %w", want.Name, err)
	}
	have := obj.(*api.Profile)
	// Compare with want as the datastore would store it.
	defaulted := &api.Profile{Spec: want.Spec}
	defaulted.Default()
	if jsonEqual(have.Spec, defaulted.Spec) {
		return nil
	}
	have.Spec = want.Spec
	if _, err := store.Update(ctx, have); err != nil {
		return fmt.Errorf("update profile %s: %w", want.Name, err)
	}
	log.Info("updated profile", "profile", want.Name)
	return nil
}

// deleteResource deletes a resource; one that is already gone is fine.
func deleteResource(ctx context.Context, store Store, kind, namespace, name string, log *slog.Logger) error {
	_, err := store.Delete(ctx, kind, namespace, name, "")
	if errors.Is(err, datastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, qualified(namespace, name), err)
	}
	log.Info("deleted "+strings.ToLower(kind), "name", qualified(namespace, name))
	return nil
}

func qualified(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// jsonEqual compares two values by their JSON, the form that is stored:
// nil and empty maps or lists that marshal alike are equal.
func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// listProfiles returns the names of stored profiles with prefix.
func listProfiles(ctx context.Context, store Store, prefix string) ([]string, error) {
	objs, _, err := store.List(ctx, "Profile", "")
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	var out []string
	for _, o := range objs {
		if n := o.Meta().Name; strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out, nil
}

// namespaceController keeps a kns.<ns> profile per namespace.
type namespaceController struct {
	*queue
	c      *Controllers
	lister listersv1.NamespaceLister
}

func newNamespaceController(c *Controllers, f *informers, src *kccSource, log *slog.Logger) (runner, error) {
	inf := f.namespaces()
	nc := &namespaceController{c: c, lister: listersv1.NewNamespaceLister(inf.GetIndexer())}
	nc.queue = c.newQueue(Namespace, log, src, nc.sync, nc.keys)
	if _, err := inf.AddEventHandler(nc.handler()); err != nil {
		return nil, err
	}
	return nc, nil
}

func (nc *namespaceController) keys(ctx context.Context) ([]string, error) {
	nss, err := nc.lister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, ns := range nss {
		keys = append(keys, ns.Name)
	}
	names, err := listProfiles(ctx, nc.c.store, NamespaceProfilePrefix)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		keys = append(keys, strings.TrimPrefix(n, NamespaceProfilePrefix))
	}
	return keys, nil
}

func (nc *namespaceController) sync(ctx context.Context, name string) error {
	ns, err := nc.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return deleteResource(ctx, nc.c.store, "Profile", "", NamespaceProfilePrefix+name, nc.log)
	}
	if err != nil {
		return err
	}
	return upsertProfile(ctx, nc.c.store, NamespaceProfile(ns), nc.log)
}

// serviceAccountController keeps a ksa.<ns>.<sa> profile per service
// account.
type serviceAccountController struct {
	*queue
	c      *Controllers
	lister listersv1.ServiceAccountLister
}

func newServiceAccountController(c *Controllers, f *informers, src *kccSource, log *slog.Logger) (runner, error) {
	inf := f.serviceAccounts()
	sc := &serviceAccountController{c: c, lister: listersv1.NewServiceAccountLister(inf.GetIndexer())}
	sc.queue = c.newQueue(ServiceAccount, log, src, sc.sync, sc.keys)
	if _, err := inf.AddEventHandler(sc.handler()); err != nil {
		return nil, err
	}
	return sc, nil
}

func (sc *serviceAccountController) keys(ctx context.Context) ([]string, error) {
	sas, err := sc.lister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, sa := range sas {
		keys = append(keys, sa.Namespace+"/"+sa.Name)
	}
	names, err := listProfiles(ctx, sc.c.store, ServiceAccountProfilePrefix)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		// ksa.<namespace>.<name>: namespaces have no dots, names may.
		ns, sa, ok := strings.Cut(strings.TrimPrefix(n, ServiceAccountProfilePrefix), ".")
		if ok {
			keys = append(keys, ns+"/"+sa)
		}
	}
	return keys, nil
}

func (sc *serviceAccountController) sync(ctx context.Context, key string) error {
	ns, name := splitKey(key)
	sa, err := sc.lister.ServiceAccounts(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return deleteResource(ctx, sc.c.store, "Profile", "", ServiceAccountProfilePrefix+ns+"."+name, sc.log)
	}
	if err != nil {
		return err
	}
	return upsertProfile(ctx, sc.c.store, ServiceAccountProfile(sa), sc.log)
}
