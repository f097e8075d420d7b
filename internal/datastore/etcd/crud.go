package etcd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// maxWriteAttempts bounds the retries of an unconditional Update or Apply
// that keeps losing the race against other writers of the same key.
const maxWriteAttempts = 16

type writeMode int

const (
	modeCreate writeMode = iota
	modeUpdate
	modeApply
)

// Create stores a new resource. It fails with ErrAlreadyExists if one with
// the same kind, namespace and name exists. A ResourceVersion on obj is
// ignored.
func (s *Store) Create(ctx context.Context, obj api.Object) (api.Object, error) {
	return s.write(ctx, "create", modeCreate, obj)
}

// Update replaces an existing resource. With obj's ResourceVersion set the
// write succeeds only if the stored resource is still at that version
// (ErrConflict otherwise); without it the stored resource is overwritten.
// It fails with ErrNotFound if the resource does not exist.
func (s *Store) Update(ctx context.Context, obj api.Object) (api.Object, error) {
	return s.write(ctx, "update", modeUpdate, obj)
}

// Apply creates the resource or, if it exists, updates it as Update does.
func (s *Store) Apply(ctx context.Context, obj api.Object) (api.Object, error) {
	return s.write(ctx, "apply", modeApply, obj)
}

func (s *Store) write(ctx context.Context, op string, mode writeMode, in api.Object) (api.Object, error) {
	k, ok := s.kinds.forObject(in)
	if !ok {
		return nil, &datastore.Error{Op: op, Kind: in.Type().Kind, Namespace: in.Meta().Namespace, Name: in.Meta().Name,
			Err: fmt.Errorf("%w for Go type %T", datastore.ErrUnknownKind, in)}
	}
	obj, err := k.clone(in)
	if err != nil {
		return nil, &datastore.Error{Op: op, Kind: k.info.Kind, Namespace: in.Meta().Namespace, Name: in.Meta().Name, Err: err}
	}
	m := obj.Meta()
	if !k.info.Namespaced {
		// The key has no place for it and Calico ignores it for global kinds.
		m.Namespace = ""
	}
	obj.Default()
	// The identity errors report: what the caller wrote, before toStorage
	// gives policies their stored name.
	namespace, name := m.Namespace, m.Name
	fail := func(err error) (api.Object, error) {
		return nil, &datastore.Error{Op: op, Kind: k.info.Kind, Namespace: namespace, Name: name, Err: err}
	}
	if err := obj.Validate(); err != nil {
		return fail(err)
	}
	if name == "" {
		return fail(errors.New("metadata.name must be set"))
	}
	if k.info.Namespaced && namespace == "" {
		return fail(errors.New("metadata.namespace must be set"))
	}
	if k.isDefaultAllow(name) {
		if mode == modeCreate {
			return fail(fmt.Errorf("%w: the profile %q is provided by Calico", datastore.ErrAlreadyExists, name))
		}
		return fail(fmt.Errorf("%w: the profile %q is provided by Calico and cannot be changed", datastore.ErrNotSupported, name))
	}
	var wantRev int64
	if rv := m.ResourceVersion; rv != "" && mode != modeCreate {
		if wantRev, err = parseRevision(rv); err != nil {
			return fail(err)
		}
	}
	uid, created := m.UID, m.CreationTimestamp
	key, err := k.toStorage(obj)
	if err != nil {
		return fail(err)
	}

	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	for range maxWriteAttempts {
		var cur *mvccpb.KeyValue
		if mode != modeCreate {
			resp, err := s.client.Get(ctx, key)
			if err != nil {
				return fail(s.etcdErr(err))
			}
			if len(resp.Kvs) > 0 {
				cur = resp.Kvs[0]
			}
		}
		switch {
		case cur == nil && (mode == modeUpdate || wantRev != 0):
			return fail(datastore.ErrNotFound)
		case cur != nil && wantRev != 0 && cur.ModRevision != wantRev:
			return fail(datastore.ErrConflict)
		}

		cond := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		m.UID, m.CreationTimestamp = uid, created
		if cur != nil {
			cond = clientv3.Compare(clientv3.ModRevision(key), "=", cur.ModRevision)
			// The stored identity wins over whatever the caller sent.
			if su, sc := storedIdentity(cur.Value); su != "" {
				m.UID, m.CreationTimestamp = su, sc
			}
		}
		if m.UID == "" {
			m.UID = s.newUID()
		}
		if m.CreationTimestamp == "" {
			m.CreationTimestamp = s.now().UTC().Format(time.RFC3339)
		}
		value, err := json.Marshal(obj)
		if err != nil {
			return fail(fmt.Errorf("encode: %w", err))
		}
		resp, err := s.client.Txn(ctx).If(cond).Then(clientv3.OpPut(key, string(value))).Commit()
		if err != nil {
			return fail(s.etcdErr(err))
		}
		if resp.Succeeded {
			out, err := k.decode(value, resp.Header.Revision)
			if err != nil {
				return fail(fmt.Errorf("decode stored value: %w", err))
			}
			return out, nil
		}
		if mode == modeCreate {
			return fail(datastore.ErrAlreadyExists)
		}
		// Another writer got in between our read and our write. The next
		// read tells a conditional write whether that is a conflict; an
		// unconditional one simply tries again on top of it.
	}
	return fail(fmt.Errorf("%w: gave up after %d attempts against concurrent writers", datastore.ErrConflict, maxWriteAttempts))
}

// clone makes the private copy a write works on, converting it to the
// kind's own Go type if the caller used a different one.
func (k *kindEntry) clone(in api.Object) (api.Object, error) {
	data, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	out := k.info.New()
	if err := json.Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return out, nil
}

func parseRevision(rv string) (int64, error) {
	rev, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || rev <= 0 {
		return 0, fmt.Errorf("invalid metadata.resourceVersion %q: want an etcd revision", rv)
	}
	return rev, nil
}

// Get returns one resource. The namespace is ignored for global kinds.
func (s *Store) Get(ctx context.Context, kind, namespace, name string) (api.Object, error) {
	k, key, err := s.locate("get", kind, namespace, name)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (api.Object, error) {
		return nil, &datastore.Error{Op: "get", Kind: k.info.Kind, Namespace: namespace, Name: name, Err: err}
	}
	if k.isDefaultAllow(name) {
		return datastore.DefaultAllowProfile(), nil
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return fail(s.etcdErr(err))
	}
	if len(resp.Kvs) == 0 {
		return fail(datastore.ErrNotFound)
	}
	obj, err := k.decode(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
	if err != nil {
		return fail(fmt.Errorf("decode %s: %w", key, err))
	}
	return obj, nil
}

// List returns all resources of a kind, in one namespace or, with namespace
// "", in all (global kinds ignore namespace), sorted by namespace and name,
// together with the etcd revision the list was read at, from which a Watch
// can continue.
func (s *Store) List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error) {
	k, ok := s.kinds.lookup(kind)
	if !ok {
		return nil, 0, &datastore.Error{Op: "list", Kind: kind, Namespace: namespace, Err: datastore.ErrUnknownKind}
	}
	prefix := k.prefix
	if !k.info.Namespaced {
		namespace = ""
	} else if namespace != "" {
		prefix += namespace + "/"
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	objs, rev, err := s.list(ctx, prefix, func(key string, err error) {
		s.logger.Warn("skipping resource that does not decode", "key", key, "err", err)
	})
	if err != nil {
		return nil, 0, &datastore.Error{Op: "list", Kind: k.info.Kind, Namespace: namespace, Err: s.etcdErr(err)}
	}
	return withStatic(k.prefix, objs), rev, nil
}

// isDefaultAllow reports Calico's projectcalico-default-allow Profile,
// which exists on every datastore without being stored.
func (k *kindEntry) isDefaultAllow(name string) bool {
	return k.info.Kind == "Profile" && name == datastore.DefaultAllowProfileName
}

// withStatic adds projectcalico-default-allow to the objects listed under
// prefix when the prefix covers profiles, in List's order, as Calico's
// etcd backend lists it (and as the Kubernetes datastore does).
func withStatic(prefix string, objs []api.Object) []api.Object {
	if !strings.HasPrefix(Prefix+"profiles/", prefix) {
		return objs
	}
	objs = append(objs, datastore.DefaultAllowProfile())
	slices.SortStableFunc(objs, func(a, b api.Object) int {
		return cmp.Or(cmp.Compare(a.Type().Kind, b.Type().Kind), cmp.Compare(a.Meta().Namespace, b.Meta().Namespace), cmp.Compare(a.Meta().Name, b.Meta().Name))
	})
	return objs
}

// list reads every resource under prefix, reporting values that fail to
// decode (and skipping them) and ignoring kinds not in the registry.
func (s *Store) list(ctx context.Context, prefix string, bad func(key string, err error)) ([]api.Object, int64, error) {
	resp, err := s.client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	type entry struct {
		kind string
		obj  api.Object
	}
	entries := make([]entry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		k, _, _, known, err := s.kinds.parseKey(string(kv.Key))
		if !known {
			continue
		}
		if err != nil {
			bad(string(kv.Key), err)
			continue
		}
		obj, err := k.decode(kv.Value, kv.ModRevision)
		if err != nil {
			bad(string(kv.Key), err)
			continue
		}
		entries = append(entries, entry{k.info.Kind, obj})
	}
	// Keys sort by the stored policy names; callers see the restored ones.
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(
			cmp.Compare(a.kind, b.kind),
			cmp.Compare(a.obj.Meta().Namespace, b.obj.Meta().Namespace),
			cmp.Compare(a.obj.Meta().Name, b.obj.Meta().Name),
		)
	})
	objs := make([]api.Object, len(entries))
	for i, e := range entries {
		objs[i] = e.obj
	}
	return objs, resp.Header.Revision, nil
}

// Delete removes a resource and returns it as it was. With resourceVersion
// set the delete succeeds only if the stored resource is at that version
// (ErrConflict otherwise).
func (s *Store) Delete(ctx context.Context, kind, namespace, name, resourceVersion string) (api.Object, error) {
	k, key, err := s.locate("delete", kind, namespace, name)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (api.Object, error) {
		return nil, &datastore.Error{Op: "delete", Kind: k.info.Kind, Namespace: namespace, Name: name, Err: err}
	}
	if k.isDefaultAllow(name) {
		return fail(fmt.Errorf("%w: the profile %q is provided by Calico and cannot be deleted", datastore.ErrNotSupported, name))
	}
	var conds []clientv3.Cmp
	if resourceVersion != "" {
		rev, err := parseRevision(resourceVersion)
		if err != nil {
			return fail(err)
		}
		conds = append(conds, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	resp, err := s.client.Txn(ctx).If(conds...).
		Then(clientv3.OpDelete(key, clientv3.WithPrevKV())).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return fail(s.etcdErr(err))
	}
	if !resp.Succeeded {
		if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			return fail(datastore.ErrNotFound)
		}
		return fail(datastore.ErrConflict)
	}
	del := resp.Responses[0].GetResponseDeleteRange()
	if del.Deleted == 0 || len(del.PrevKvs) == 0 {
		return fail(datastore.ErrNotFound)
	}
	prev := del.PrevKvs[0]
	obj, err := k.decode(prev.Value, prev.ModRevision)
	if err != nil {
		// The delete happened; an unreadable old value should not make it
		// look as if it had not.
		_, ns, etcdName, _, _ := s.kinds.parseKey(key)
		obj = k.stub(ns, etcdName, prev.ModRevision)
	}
	return obj, nil
}

// locate resolves kind and name to the registered kind and etcd key.
func (s *Store) locate(op, kind, namespace, name string) (*kindEntry, string, error) {
	k, ok := s.kinds.lookup(kind)
	if !ok {
		return nil, "", &datastore.Error{Op: op, Kind: kind, Namespace: namespace, Name: name, Err: datastore.ErrUnknownKind}
	}
	if !k.info.Namespaced {
		namespace = ""
	}
	fail := func(err error) (*kindEntry, string, error) {
		return nil, "", &datastore.Error{Op: op, Kind: k.info.Kind, Namespace: namespace, Name: name, Err: err}
	}
	switch {
	case name == "":
		return fail(errors.New("name must be set"))
	case k.info.Namespaced && namespace == "":
		return fail(errors.New("namespace must be set for a namespaced kind"))
	}
	return k, k.keyForName(namespace, name), nil
}

// ListPrefix returns the resources of kind in namespace whose names start
// with prefix: one ranged read of their keys. Policy kinds, whose keys
// carry the tier, are listed and filtered.
func (s *Store) ListPrefix(ctx context.Context, kind, namespace, prefix string) ([]api.Object, error) {
	k, ok := s.kinds.lookup(kind)
	if !ok {
		return nil, &datastore.Error{Op: "list", Kind: kind, Namespace: namespace, Err: datastore.ErrUnknownKind}
	}
	if k.isPolicy() {
		objs, _, err := s.List(ctx, kind, namespace)
		if err != nil {
			return nil, err
		}
		return slices.DeleteFunc(objs, func(o api.Object) bool { return !strings.HasPrefix(o.Meta().Name, prefix) }), nil
	}
	if !k.info.Namespaced {
		namespace = ""
	} else if namespace == "" {
		return nil, &datastore.Error{Op: "list", Kind: k.info.Kind, Err: errors.New("namespace must be set for a name prefix")}
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	objs, _, err := s.list(ctx, k.keyForName(namespace, prefix), func(key string, err error) {
		s.logger.Warn("skipping resource that does not decode", "key", key, "err", err)
	})
	if err != nil {
		return nil, &datastore.Error{Op: "list", Kind: k.info.Kind, Namespace: namespace, Err: s.etcdErr(err)}
	}
	return objs, nil
}
