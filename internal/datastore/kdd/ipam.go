package kdd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// ipamKV is datastore.KV on Calico's IPAM custom resources: each etcd
// IPAM key is one object of ipamblocks, blockaffinities, ipamhandles or
// ipamconfigs, named and shaped as libcalico-go's Kubernetes backend does
// (see ipam_convert.go), and each value is the object's spec spelt in
// Calico's etcd JSON. A key's revision is its object's resourceVersion.
//
// Objects Calico has marked deleted (its Kubernetes backend sets
// spec.deleted before deleting, and may stop in between) do not exist for
// this KV; a Get clears them away as Calico's does.
type ipamKV struct {
	s *Store
	// beforeWrite, when set (tests), runs before write number i of a Txn
	// to key; an error it returns fails that write.
	beforeWrite func(ctx context.Context, i int, key string) error
	// affinityRV is the newest revision of an affinity this KV has read
	// or written (see listObjects).
	affinityRV atomic.Int64
}

// saw records a revision of r that this KV read or wrote.
func (k *ipamKV) saw(r *ipamResource, rev int64) {
	if r != ipamAffinities {
		return
	}
	for {
		cur := k.affinityRV.Load()
		if rev <= cur || k.affinityRV.CompareAndSwap(cur, rev) {
			return
		}
	}
}

func newIPAMKV(s *Store) *ipamKV { return &ipamKV{s: s} }

func (k *ipamKV) String() string { return "Kubernetes API at " + k.s.c.base }

// getConcurrency bounds the GETs of one Get: the API server has no
// multi-object read, and IPAM asks for up to a few dozen keys at once.
const getConcurrency = 8

// apiErr names the resource an API error concerns; a refusal by RBAC is
// a configuration problem, as for every other kind.
func apiErr(verb string, r *ipamResource, err error) error {
	if err == nil {
		return nil
	}
	if forbidden(err) {
		return &datastore.ConfigError{Err: fmt.Errorf("forbidden by RBAC: %s %s.crd.projectcalico.org: %w", verb, r.plural, err)}
	}
	src := source{path: r.path(), resource: r.plural + ".crd.projectcalico.org"}
	return missingCRD(src, err)
}

// getObject reads one object.
func (k *ipamKV) getObject(ctx context.Context, r *ipamResource, name string) (ipamObject, error) {
	ctx, cancel := k.s.callCtx(ctx)
	defer cancel()
	var obj ipamObject
	err := k.s.c.do(ctx, http.MethodGet, r.objPath(name), nil, "", nil, &obj)
	return obj, apiErr("get", r, err)
}

// Get reads each key's object, several at a time.
func (k *ipamKV) Get(ctx context.Context, keys ...string) ([]datastore.KeyValue, error) {
	out := make([]datastore.KeyValue, len(keys))
	errs := make([]error, len(keys))
	sem := make(chan struct{}, getConcurrency)
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], errs[i] = k.read(ctx, key)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// read returns key as stored; Rev 0 when it does not exist. A key outside
// Calico's layout cannot exist. An object whose spec does not convert
// exists with no value, as an undecodable etcd value would.
func (k *ipamKV) read(ctx context.Context, key string) (datastore.KeyValue, error) {
	absent := datastore.KeyValue{Key: key}
	r, name, err := resourceOfKey(key)
	if err != nil {
		return absent, nil
	}
	obj, err := k.getObject(ctx, r, name)
	if errors.Is(err, datastore.ErrNotFound) {
		return absent, nil
	}
	if err != nil {
		return absent, fmt.Errorf("read %s: %w", key, err)
	}
	rev, err := parseRV(obj.Metadata.ResourceVersion)
	if err != nil {
		return absent, fmt.Errorf("read %s: %w", key, err)
	}
	k.saw(r, rev)
	got, value, deleted, err := r.decode(obj)
	switch {
	case err != nil:
		k.s.logger.Warn("IPAM object does not convert", "key", key, "err", err)
		return datastore.KeyValue{Key: key, Rev: rev}, nil
	case got != key:
		// Another key's object under the same name (handle IDs that
		// differ in case only): this key does not exist.
		return absent, nil
	case deleted:
		k.clearDeleted(ctx, r, obj)
		return absent, nil
	}
	return datastore.KeyValue{Key: key, Value: value, Rev: rev}, nil
}

// clearDeleted finishes a delete that Calico started (spec.deleted set)
// and did not complete, as libcalico-go's Get does; only at the version
// read, so that a write since is never lost. Best effort: a failure
// leaves the object to the next reader.
func (k *ipamKV) clearDeleted(ctx context.Context, r *ipamResource, obj ipamObject) {
	if err := k.deleteObject(ctx, r, obj.Metadata.Name, obj.Metadata.ResourceVersion); err != nil && !errors.Is(err, datastore.ErrNotFound) {
		k.s.logger.Debug("clearing an IPAM object marked deleted", "resource", r.plural, "name", obj.Metadata.Name, "err", err)
	}
}

// ipamList is a list response.
type ipamList struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	Items []ipamObject `json:"items"`
}

// ipamListPage is the page size of a list. A list with a limit and no
// selector is read from etcd at once; without a limit, the API server
// serves a list from its watch cache once the cache has caught up with
// etcd's newest revision, which writes to other resources keep moving, and
// that wait costs up to a tenth of a second per list
// (ConsistentListFromCache, Kubernetes 1.31 and later).
const ipamListPage = 500

// listObjects lists r, page by page, all at the revision of the first
// page. With a label selector the API server always answers from its
// watch cache: such a list (one node's affinities) asks for the cache as
// it is, provided it holds the newest affinity this KV has seen, which
// takes no wait. It may miss another process's claim of the last few
// milliseconds; every write is conditional, so a stale list costs a
// retry or a block claimed early, never a wrong allocation.
func (k *ipamKV) listObjects(ctx context.Context, r *ipamResource, sel string) ([]ipamObject, int64, error) {
	ctx, cancel := k.s.callCtx(ctx)
	defer cancel()
	q := url.Values{"limit": {strconv.Itoa(ipamListPage)}}
	if sel != "" {
		q = url.Values{"labelSelector": {sel}, "resourceVersionMatch": {"NotOlderThan"},
			"resourceVersion": {strconv.FormatInt(k.affinityRV.Load(), 10)}}
	}
	var items []ipamObject
	var rv string
	for {
		var list ipamList
		if err := k.s.c.do(ctx, http.MethodGet, r.path(), q, "", nil, &list); err != nil {
			return nil, 0, fmt.Errorf("list %s: %w", r.plural, apiErr("list", r, err))
		}
		if rv == "" {
			rv = list.Metadata.ResourceVersion
		}
		items = append(items, list.Items...)
		if list.Metadata.Continue == "" {
			break
		}
		q.Set("continue", list.Metadata.Continue)
	}
	rev, err := parseRV(rv)
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", r.plural, err)
	}
	// Only the objects' own revisions: the list's may be a newer one of
	// another resource, which the affinities' cache would have to wait
	// for.
	for _, obj := range items {
		if orev, err := parseRV(obj.Metadata.ResourceVersion); err == nil {
			k.saw(r, orev)
		}
	}
	return items, rev, nil
}

// listResource returns r's keys under prefix and the list's revision.
func (k *ipamKV) listResource(ctx context.Context, r *ipamResource, prefix string) ([]datastore.KeyValue, int64, error) {
	items, rev, err := k.listObjects(ctx, r, affinitySelector(r, prefix))
	if err != nil {
		return nil, 0, err
	}
	var out []datastore.KeyValue
	for _, obj := range items {
		key, value, deleted, err := r.decode(obj)
		if err != nil {
			k.s.logger.Warn("skipping IPAM object that does not convert", "resource", r.plural, "name", obj.Metadata.Name, "err", err)
			continue
		}
		if deleted || key == "" || !strings.HasPrefix(key, prefix) {
			continue
		}
		orev, err := parseRV(obj.Metadata.ResourceVersion)
		if err != nil {
			continue
		}
		out = append(out, datastore.KeyValue{Key: key, Value: value, Rev: orev})
	}
	return out, rev, nil
}

// affinitySelector is the label selector Calico lists one node's
// affinities with (model.CalculateBlockAffinityLabelSelector), when
// prefix is within one node's affinities; "" otherwise.
func affinitySelector(r *ipamResource, prefix string) string {
	if r != ipamAffinities {
		return ""
	}
	typ := ipamkv.AffinityHost
	rest, ok := strings.CutPrefix(prefix, ipamkv.HostPrefix)
	if !ok {
		// A virtual host's (the LoadBalancer controller's).
		if rest, ok = strings.CutPrefix(prefix, ipamkv.VirtualPrefix); !ok {
			return ""
		}
		typ = ipamkv.AffinityVirtual
	}
	node, rest, ok := strings.Cut(rest, "/")
	if !ok || node == "" {
		return ""
	}
	sel := ipamLabelHostnameHash + "=" + hostnameHash(node) + "," + ipamLabelAffinityType + "=" + typ
	for _, v := range []string{"4", "6"} {
		if strings.HasPrefix(rest, "ipv"+v+"/") {
			sel += "," + ipamLabelIPVersion + "=" + v
		}
	}
	return sel
}

// List reads every resource whose keys can fall under prefix, one after
// the other, and filters on the key. The revision is the newest of the
// lists'.
func (k *ipamKV) List(ctx context.Context, prefix string, keysOnly bool) ([]datastore.KeyValue, int64, error) {
	var out []datastore.KeyValue
	var rev int64
	for _, r := range ipamResources {
		if !r.covers(prefix) {
			continue
		}
		kvs, lrev, err := k.listResource(ctx, r, prefix)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, kvs...)
		rev = max(rev, lrev)
	}
	slices.SortFunc(out, func(a, b datastore.KeyValue) int { return cmp.Compare(a.Key, b.Key) })
	if keysOnly {
		for i := range out {
			out[i].Value = nil
		}
	}
	return out, rev, nil
}

// Snapshot lists the prefixes one after the other: the Kubernetes API
// has no read across collections at one revision.
func (k *ipamKV) Snapshot(ctx context.Context, prefixes ...string) ([][]datastore.KeyValue, error) {
	out := make([][]datastore.KeyValue, len(prefixes))
	for i, p := range prefixes {
		kvs, _, err := k.List(ctx, p, false)
		if err != nil {
			return nil, err
		}
		out[i] = kvs
	}
	return out, nil
}

// createObject creates obj and returns its resourceVersion. An object of
// the same name that Calico marked deleted is cleared first.
func (k *ipamKV) createObject(ctx context.Context, r *ipamResource, obj ipamObject) (int64, error) {
	for attempt := 0; ; attempt++ {
		rev, err := k.send(ctx, http.MethodPost, r, r.path(), obj)
		if attempt > 0 || !errors.Is(err, datastore.ErrAlreadyExists) {
			return rev, err
		}
		cur, gerr := k.getObject(ctx, r, obj.Metadata.Name)
		if gerr != nil {
			return 0, err
		}
		if _, _, deleted, derr := r.decode(cur); derr != nil || !deleted {
			return 0, err
		}
		k.clearDeleted(ctx, r, cur)
	}
}

// updateObject replaces the object at resourceVersion rev.
func (k *ipamKV) updateObject(ctx context.Context, r *ipamResource, obj ipamObject, rev int64) (int64, error) {
	obj.Metadata.ResourceVersion = strconv.FormatInt(rev, 10)
	return k.send(ctx, http.MethodPut, r, r.objPath(obj.Metadata.Name), obj)
}

// send writes obj and returns the resourceVersion the server gave it.
func (k *ipamKV) send(ctx context.Context, method string, r *ipamResource, path string, obj ipamObject) (int64, error) {
	ctx, cancel := k.s.callCtx(ctx)
	defer cancel()
	var got struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update"}[method]
	if err := k.s.c.do(ctx, method, path, nil, "", obj, &got); err != nil {
		return 0, apiErr(verb, r, err)
	}
	rev, err := parseRV(got.Metadata.ResourceVersion)
	k.saw(r, rev)
	return rev, err
}

// deleteObject deletes an object, only at resourceVersion rv when set.
func (k *ipamKV) deleteObject(ctx context.Context, r *ipamResource, name, rv string) error {
	ctx, cancel := k.s.callCtx(ctx)
	defer cancel()
	opts := map[string]any{"kind": "DeleteOptions", "apiVersion": "v1"}
	if rv != "" {
		opts["preconditions"] = map[string]string{"resourceVersion": rv}
	}
	body, err := json.Marshal(opts)
	if err != nil {
		return err
	}
	// The answer is the object as deleted, at the deletion's revision.
	var got struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := k.s.c.do(ctx, http.MethodDelete, r.objPath(name), nil, "", body, &got); err != nil {
		return apiErr("delete", r, err)
	}
	if rev, err := parseRV(got.Metadata.ResourceVersion); err == nil {
		k.saw(r, rev)
	}
	return nil
}
