package ipam_test

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// memStore keeps v3 resources in memory as a Store does: Create and
// Update default and validate (datastore.Prepare), reads return copies
// with a ResourceVersion, missing objects are datastore.ErrNotFound.
type memStore struct {
	mu   sync.Mutex
	rev  int64
	objs map[memKey]api.Object
}

type memKey struct{ kind, ns, name string }

func newMemStore() *memStore { return &memStore{objs: map[memKey]api.Object{}} }

func (m *memStore) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.objs)
}

func keyOf(o api.Object) memKey {
	return memKey{o.Type().Kind, o.Meta().Namespace, o.Meta().Name}
}

// clone copies o through its JSON, as a datastore round trip would.
func clone(info api.KindInfo, o api.Object) api.Object {
	data, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	out := info.New()
	if err := json.Unmarshal(data, out); err != nil {
		panic(err)
	}
	return out
}

func (m *memStore) write(op string, in api.Object, mustExist bool) (api.Object, error) {
	info, ok := api.LookupKind(in.Type().Kind)
	if !ok {
		return nil, &datastore.Error{Op: op, Kind: in.Type().Kind, Err: datastore.ErrUnknownKind}
	}
	obj, err := datastore.Prepare(op, info, in)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := keyOf(obj)
	if _, exists := m.objs[k]; exists != mustExist {
		cause := datastore.ErrAlreadyExists
		if mustExist {
			cause = datastore.ErrNotFound
		}
		return nil, &datastore.Error{Op: op, Kind: info.Kind, Namespace: k.ns, Name: k.name, Err: cause}
	}
	m.rev++
	obj.Meta().ResourceVersion = strconv.FormatInt(m.rev, 10)
	m.objs[k] = obj
	return clone(info, obj), nil
}

func (m *memStore) Create(_ context.Context, obj api.Object) (api.Object, error) {
	return m.write("create", obj, false)
}

func (m *memStore) Update(_ context.Context, obj api.Object) (api.Object, error) {
	return m.write("update", obj, true)
}

// putRaw stores the resource in value (v3 JSON) as it is, without
// defaults or validation: what an old writer may have left.
func (m *memStore) putRaw(t testing.TB, value string) {
	t.Helper()
	docs, err := api.Decode([]byte(value))
	if err != nil || len(docs) != 1 || docs[0].Err != nil {
		t.Fatalf("decode resource %s: %v %+v", value, err, docs)
	}
	obj := docs[0].Object
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rev++
	obj.Meta().ResourceVersion = strconv.FormatInt(m.rev, 10)
	m.objs[keyOf(obj)] = obj
}

func (m *memStore) List(_ context.Context, kind, ns string) ([]api.Object, int64, error) {
	info, ok := api.LookupKind(kind)
	if !ok {
		return nil, 0, &datastore.Error{Op: "list", Kind: kind, Err: datastore.ErrUnknownKind}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []api.Object
	for k, o := range m.objs {
		if k.kind == info.Kind && (ns == "" || k.ns == ns) {
			out = append(out, clone(info, o))
		}
	}
	slices.SortFunc(out, func(a, b api.Object) int {
		return cmp.Or(cmp.Compare(a.Meta().Namespace, b.Meta().Namespace), cmp.Compare(a.Meta().Name, b.Meta().Name))
	})
	return out, m.rev, nil
}

func (m *memStore) Get(_ context.Context, kind, ns, name string) (api.Object, error) {
	info, ok := api.LookupKind(kind)
	if !ok {
		return nil, &datastore.Error{Op: "get", Kind: kind, Err: datastore.ErrUnknownKind}
	}
	if !info.Namespaced {
		ns = ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[memKey{info.Kind, ns, name}]
	if !ok {
		return nil, &datastore.Error{Op: "get", Kind: info.Kind, Namespace: ns, Name: name, Err: datastore.ErrNotFound}
	}
	return clone(info, o), nil
}
