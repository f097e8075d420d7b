package etcd

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

const (
	// Prefix is the etcd key prefix of all v3 resources.
	Prefix = "/calico/resources/v3/projectcalico.org/"

	// metadataAnnotation records the name a policy was written with; Calico
	// v3.30+ writes it so reads can undo the tier prefix exactly.
	metadataAnnotation = datastore.MetadataAnnotation
	// tierLabel is the label Calico puts on policies outside the default tier.
	tierLabel       = "projectcalico.org/tier"
	defaultTierName = "default"
)

// kindEntry is the store's view of one registered kind.
type kindEntry struct {
	info      api.KindInfo
	prefix    string // Prefix + plural + "/"
	goType    reflect.Type
	tierIndex []int // index path of Spec.Tier; nil for non-policy kinds
}

func newKindEntry(info api.KindInfo) *kindEntry {
	e := &kindEntry{info: info, prefix: Prefix + info.Plural + "/"}
	e.goType = reflect.TypeOf(info.New())
	if datastore.IsTieredPolicyKind(info.Kind) {
		// Found by name rather than by a Go interface so that any policy
		// type with a Spec.Tier string qualifies.
		if t := e.goType; t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
			if spec, ok := t.Elem().FieldByName("Spec"); ok && spec.Type.Kind() == reflect.Struct {
				if tier, ok := spec.Type.FieldByName("Tier"); ok && tier.Type.Kind() == reflect.String {
					e.tierIndex = append(append([]int(nil), spec.Index...), tier.Index...)
				}
			}
		}
	}
	return e
}

func (k *kindEntry) isPolicy() bool { return k.tierIndex != nil }

// key is the etcd key of an object given its etcd name.
func (k *kindEntry) key(namespace, etcdName string) string {
	if k.info.Namespaced {
		return k.prefix + namespace + "/" + etcdName
	}
	return k.prefix + etcdName
}

// keyForName is the etcd key for a name as a caller gives it to Get or
// Delete. For policies this is Calico's lookup rule: a bare name is in the
// default tier, a dotted one carries its tier already.
func (k *kindEntry) keyForName(namespace, name string) string {
	if k.isPolicy() {
		name = datastore.PolicyStoredName(name)
	}
	return k.key(namespace, name)
}

// tier returns the policy's tier, "default" when unset.
func (k *kindEntry) tier(obj api.Object) string {
	v := reflect.ValueOf(obj)
	if v.Type() != k.goType {
		return defaultTierName
	}
	if t := v.Elem().FieldByIndex(k.tierIndex).String(); t != "" {
		return t
	}
	return defaultTierName
}

// toStorage rewrites a private copy into its stored form: headers set,
// resourceVersion dropped, and for policies the tier-prefixed name, the
// name annotation and the tier label. It returns the etcd key.
func (k *kindEntry) toStorage(obj api.Object) (string, error) {
	tm := obj.Type()
	tm.Kind = k.info.Kind
	tm.APIVersion = api.GroupVersion
	m := obj.Meta()
	m.ResourceVersion = ""
	if !k.isPolicy() {
		return k.key(m.Namespace, m.Name), nil
	}
	tier := k.tier(obj)
	// The name it is stored under and the one recorded for the user (see
	// the package doc); the Kubernetes datastore shares the rule.
	etcdName, userName := datastore.PolicyNames(m.Name, tier)
	recorded, err := json.Marshal(map[string]string{"name": userName})
	if err != nil {
		return "", fmt.Errorf("encode policy name annotation: %w", err)
	}
	m.Annotations = maps.Clone(m.Annotations)
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[metadataAnnotation] = string(recorded)
	if tier != defaultTierName {
		m.Labels = maps.Clone(m.Labels)
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		m.Labels[tierLabel] = tier
	}
	m.Name = etcdName
	return k.key(m.Namespace, etcdName), nil
}

// decode turns a stored value into the object a caller sees.
func (k *kindEntry) decode(value []byte, modRevision int64) (api.Object, error) {
	obj := k.info.New()
	if err := json.Unmarshal(value, obj); err != nil {
		return nil, err
	}
	tm := obj.Type()
	tm.Kind = k.info.Kind
	tm.APIVersion = api.GroupVersion
	m := obj.Meta()
	m.ResourceVersion = strconv.FormatInt(modRevision, 10)
	if k.isPolicy() {
		if err := k.restorePolicyName(obj); err != nil {
			return nil, err
		}
	}
	return obj, nil
}

// restorePolicyName undoes the tier prefix the way Calico v3.31 does: the
// annotation wins; without it (data written by Calico <= 3.28) only the
// "default." prefix of a default-tier policy is dropped.
func (k *kindEntry) restorePolicyName(obj api.Object) error {
	m := obj.Meta()
	if raw := m.Annotations[metadataAnnotation]; raw != "" {
		var recorded struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal([]byte(raw), &recorded); err != nil {
			return fmt.Errorf("annotation %s: %w", metadataAnnotation, err)
		}
		delete(m.Annotations, metadataAnnotation)
		if len(m.Annotations) == 0 {
			m.Annotations = nil
		}
		if recorded.Name != "" {
			m.Name = recorded.Name
		}
		return nil
	}
	m.Name = datastore.PolicyNameFromStored(m.Name, k.tier(obj))
	return nil
}

// storedIdentity reads uid and creationTimestamp from a stored value
// without decoding the rest.
func storedIdentity(value []byte) (uid, created string) {
	var v struct {
		Metadata struct {
			UID               string `json:"uid"`
			CreationTimestamp string `json:"creationTimestamp"`
		} `json:"metadata"`
	}
	if json.Unmarshal(value, &v) != nil {
		return "", ""
	}
	return v.Metadata.UID, v.Metadata.CreationTimestamp
}

// registry maps kind names, plurals and Go types to kinds.
type registry struct {
	lookupFn func(string) (api.KindInfo, bool)
	byPlural map[string]*kindEntry
	byType   map[reflect.Type]*kindEntry
}

func newRegistry(infos []api.KindInfo, lookup func(string) (api.KindInfo, bool)) *registry {
	r := &registry{
		lookupFn: lookup,
		byPlural: make(map[string]*kindEntry, len(infos)),
		byType:   make(map[reflect.Type]*kindEntry, len(infos)),
	}
	for _, info := range infos {
		e := newKindEntry(info)
		r.byPlural[info.Plural] = e
		r.byType[e.goType] = e
	}
	return r
}

func (r *registry) lookup(name string) (*kindEntry, bool) {
	info, ok := r.lookupFn(name)
	if !ok {
		return nil, false
	}
	e, ok := r.byPlural[info.Plural]
	return e, ok
}

// forObject finds an object's kind by its Go type, falling back to its
// TypeMeta kind.
func (r *registry) forObject(obj api.Object) (*kindEntry, bool) {
	if e, ok := r.byType[reflect.TypeOf(obj)]; ok {
		return e, true
	}
	if kind := obj.Type().Kind; kind != "" {
		return r.lookup(kind)
	}
	return nil, false
}

// parseKey splits a resource key into its kind, namespace and etcd name.
func (r *registry) parseKey(key string) (k *kindEntry, namespace, name string, known bool, err error) {
	rest, ok := strings.CutPrefix(key, Prefix)
	if !ok {
		return nil, "", "", false, fmt.Errorf("key %s is outside %s", key, Prefix)
	}
	plural, rest, _ := strings.Cut(rest, "/")
	k, ok = r.byPlural[plural]
	if !ok {
		return nil, "", "", false, nil
	}
	if k.info.Namespaced {
		namespace, name, ok = strings.Cut(rest, "/")
	} else {
		name, ok = rest, true
	}
	if !ok || namespace == "" && k.info.Namespaced || name == "" || strings.Contains(name, "/") {
		return k, "", "", true, fmt.Errorf("malformed %s key %s", k.info.Kind, key)
	}
	return k, namespace, name, true, nil
}

// stub is the best object that can be built from a key alone, for deletions
// whose previous value is gone or unreadable.
func (k *kindEntry) stub(namespace, etcdName string, modRevision int64) api.Object {
	obj := k.info.New()
	tm := obj.Type()
	tm.Kind = k.info.Kind
	tm.APIVersion = api.GroupVersion
	m := obj.Meta()
	m.Namespace = namespace
	m.Name = etcdName
	if k.isPolicy() {
		m.Name = strings.TrimPrefix(etcdName, defaultTierName+".")
	}
	m.ResourceVersion = strconv.FormatInt(modRevision, 10)
	return obj
}
