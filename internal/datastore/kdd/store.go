package kdd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

const (
	defaultDialTimeout    = 5 * time.Second
	defaultRequestTimeout = 10 * time.Second

	// CRDGroupVersion is where Calico's custom resources live.
	CRDGroupVersion = "crd.projectcalico.org/v1"
)

// source is one Kubernetes collection a kind is computed from.
type source struct {
	// path is the collection's path across all namespaces:
	// "/apis/crd.projectcalico.org/v1/ippools", "/api/v1/pods".
	path string
	// resource names it in errors and RBAC terms: "ippools.crd.projectcalico.org", "pods".
	resource   string
	namespaced bool
}

// nsPath is the collection's path within namespace ns ("" = all).
func (s source) nsPath(ns string) string {
	if !s.namespaced || ns == "" {
		return s.path
	}
	i := strings.LastIndex(s.path, "/")
	return s.path[:i] + "/namespaces/" + url.PathEscape(ns) + s.path[i:]
}

// objPath is the path of one object of the collection.
func (s source) objPath(ns, name string) string {
	return s.nsPath(ns) + "/" + url.PathEscape(name)
}

// mapper stores one Calico kind in the Kubernetes API.
//
// The read side is shared: a kind is computed from one or more sources,
// and convert turns one object of a source into the Calico objects it
// yields (none, for example, for a Pod without an address). The generic
// list and watch code in this package call it. The write side is the
// mapper's own.
type mapper interface {
	info() api.KindInfo
	sources() []source
	// convert returns the Calico objects one Kubernetes object of
	// sources()[i] yields, each with its ResourceVersion set.
	convert(i int, raw json.RawMessage) ([]api.Object, error)
	// get reads one object; ErrNotFound when it does not exist.
	get(ctx context.Context, ns, name string) (api.Object, error)
	// write creates, updates or applies obj, which the Store has already
	// cloned, defaulted and validated.
	write(ctx context.Context, mode writeMode, obj api.Object) (api.Object, error)
	// remove deletes one object and returns it as it was.
	remove(ctx context.Context, ns, name, rv string) (api.Object, error)
}

// prefixLister is implemented by mappers that can list names with a
// prefix without reading the namespace (WorkloadEndpoints from one Pod).
type prefixLister interface {
	listPrefix(ctx context.Context, ns, prefix string) ([]api.Object, error)
}

// staticLister is implemented by mappers with objects that exist without
// any Kubernetes object behind them (Calico's projectcalico-default-allow
// Profile). List and a Watch's Reset include them; they never change, so
// a watch sends nothing else for them.
type staticLister interface {
	static() []api.Object
}

type writeMode int

const (
	modeCreate writeMode = iota
	modeUpdate
	modeApply
)

func (m writeMode) String() string {
	return [...]string{"create", "update", "apply"}[m]
}

// Store is datastore.Store on the Kubernetes API. See the package doc.
type Store struct {
	c              *client
	requestTimeout time.Duration
	logger         *slog.Logger
	mappers        map[string]mapper // by Kind
	kv             *ipamKV

	// ctx is cancelled by Close and ends all watches.
	ctx    context.Context
	cancel context.CancelFunc
}

// New connects to the Kubernetes API and checks that it answers and that
// Calico's custom resources are installed.
func New(ctx context.Context, cfg datastore.Config) (*Store, error) {
	rc, err := RESTConfig(cfg.Kube)
	if err != nil {
		return nil, err
	}
	requestTimeout := cmp.Or(cfg.RequestTimeout, defaultRequestTimeout)
	c, err := newClient(rc, requestTimeout)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Store{c: c, requestTimeout: requestTimeout, logger: logger, ctx: sctx, cancel: cancel}
	s.mappers = newMappers(s)
	s.kv = newIPAMKV(s)
	if cfg.NoProbe {
		return s, nil
	}
	pctx, pcancel := context.WithTimeout(ctx, cmp.Or(cfg.DialTimeout, defaultDialTimeout))
	defer pcancel()
	if err := s.probe(pctx); err != nil {
		cancel()
		return nil, err
	}
	return s, nil
}

// probe checks that the API server answers and serves every Calico CRD
// this store needs, so a cluster without them fails at start with the
// names of the missing ones.
func (s *Store) probe(ctx context.Context) error {
	var list struct {
		Resources []struct {
			Name string `json:"name"`
		} `json:"resources"`
	}
	err := s.c.do(ctx, http.MethodGet, "/apis/"+CRDGroupVersion, nil, "", nil, &list)
	var se *statusError
	switch {
	case errors.As(err, &se) && se.Code == http.StatusNotFound:
		return &datastore.ConfigError{Err: fmt.Errorf("kubernetes API at %s serves no %s custom resources: install Calico's CRDs (kubectl apply -f deploy/crds.yaml)", s.c.base, CRDGroupVersion)}
	case forbidden(err):
		return &datastore.ConfigError{Err: fmt.Errorf("kubernetes API at %s: %w", s.c.base, err)}
	case err != nil:
		return err
	}
	have := map[string]bool{}
	for _, r := range list.Resources {
		have[r.Name] = true
	}
	var missing []string
	for _, plural := range requiredCRDs() {
		if !have[plural] {
			missing = append(missing, plural+".crd.projectcalico.org")
		}
	}
	if len(missing) > 0 {
		return &datastore.ConfigError{Err: fmt.Errorf("kubernetes API at %s lacks Calico CRDs %s: install them (kubectl apply -f deploy/crds.yaml)", s.c.base, strings.Join(missing, ", "))}
	}
	return nil
}

// Close ends all watches.
func (s *Store) Close() error {
	s.cancel()
	return nil
}

// Type is datastore.TypeKubernetes.
func (s *Store) Type() string { return datastore.TypeKubernetes }

// IPAM returns the IPAM store on Calico's IPAM custom resources.
func (s *Store) IPAM() datastore.KV { return s.kv }

func (s *Store) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.requestTimeout)
}

// listCtx bounds a list: by the caller's deadline when it has one, else
// page by page, each request by the HTTP client's request timeout, rather
// than the whole list by one. A list of every pod of a large cluster is
// many pages; while many agents list at once (a rollout, the API server
// back from an outage) the whole takes longer than one request may, and a
// list cut short is started again from its first page by every one of
// them: measured with 50 agents of a 3,000-pod cluster on two cores,
// nearly ten times the lists and eight minutes to get them all in sync.
func listCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}

// mapperFor resolves a kind name as api.LookupKind does.
func (s *Store) mapperFor(op, kind, ns, name string) (mapper, error) {
	info, ok := api.LookupKind(kind)
	if ok {
		if m, ok := s.mappers[info.Kind]; ok {
			return m, nil
		}
	}
	return nil, &datastore.Error{Op: op, Kind: kind, Namespace: ns, Name: name, Err: datastore.ErrUnknownKind}
}

// wrap turns an API error into the datastore's *Error, naming the verb and
// the resource when the API refuses it: RBAC is a configuration problem.
func wrap(op string, info api.KindInfo, ns, name string, err error) error {
	if err == nil {
		return nil
	}
	var de *datastore.Error
	if errors.As(err, &de) {
		return err
	}
	if forbidden(err) {
		err = &datastore.ConfigError{Err: fmt.Errorf("forbidden by RBAC: %w", err)}
	}
	return &datastore.Error{Op: op, Kind: info.Kind, Namespace: ns, Name: name, Err: err}
}

func (s *Store) Create(ctx context.Context, obj api.Object) (api.Object, error) {
	return s.write(ctx, modeCreate, obj)
}

func (s *Store) Update(ctx context.Context, obj api.Object) (api.Object, error) {
	return s.write(ctx, modeUpdate, obj)
}

func (s *Store) Apply(ctx context.Context, obj api.Object) (api.Object, error) {
	return s.write(ctx, modeApply, obj)
}

func (s *Store) write(ctx context.Context, mode writeMode, in api.Object) (api.Object, error) {
	m, err := s.mapperFor(mode.String(), in.Type().Kind, in.Meta().Namespace, in.Meta().Name)
	if err != nil {
		return nil, err
	}
	obj, err := datastore.Prepare(mode.String(), m.info(), in)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	out, err := m.write(ctx, mode, obj)
	return out, wrap(mode.String(), m.info(), obj.Meta().Namespace, obj.Meta().Name, err)
}

func (s *Store) Get(ctx context.Context, kind, namespace, name string) (api.Object, error) {
	m, err := s.mapperFor("get", kind, namespace, name)
	if err != nil {
		return nil, err
	}
	if !m.info().Namespaced {
		namespace = ""
	}
	if err := checkName("get", m.info(), namespace, name); err != nil {
		return nil, err
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	obj, err := m.get(ctx, namespace, name)
	return obj, wrap("get", m.info(), namespace, name, err)
}

func (s *Store) Delete(ctx context.Context, kind, namespace, name, resourceVersion string) (api.Object, error) {
	m, err := s.mapperFor("delete", kind, namespace, name)
	if err != nil {
		return nil, err
	}
	if !m.info().Namespaced {
		namespace = ""
	}
	if err := checkName("delete", m.info(), namespace, name); err != nil {
		return nil, err
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	obj, err := m.remove(ctx, namespace, name, resourceVersion)
	return obj, wrap("delete", m.info(), namespace, name, err)
}

func checkName(op string, info api.KindInfo, ns, name string) error {
	switch {
	case name == "":
		return &datastore.Error{Op: op, Kind: info.Kind, Namespace: ns, Err: errors.New("name must be set")}
	case info.Namespaced && ns == "":
		return &datastore.Error{Op: op, Kind: info.Kind, Name: name, Err: errors.New("namespace must be set for a namespaced kind")}
	}
	return nil
}

// List reads every source of the kind and converts what it finds. The
// revision is the lowest of the sources' list revisions, so a Watch from
// it misses nothing (it may repeat a change, which carries its revision).
func (s *Store) List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error) {
	m, err := s.mapperFor("list", kind, namespace, "")
	if err != nil {
		return nil, 0, err
	}
	if !m.info().Namespaced {
		namespace = ""
	}
	ctx, cancel := listCtx(ctx)
	defer cancel()
	var out []api.Object
	var rev int64
	for i, src := range m.sources() {
		objs, r, err := s.listSource(ctx, m, i, src, namespace, "")
		if err != nil {
			return nil, 0, wrap("list", m.info(), namespace, "", err)
		}
		out = append(out, objs...)
		if rev == 0 || r < rev {
			rev = r
		}
	}
	if sl, ok := m.(staticLister); ok {
		out = append(out, sl.static()...)
	}
	sortObjects(out)
	return out, rev, nil
}

// ListPrefix lists names with prefix: through the mapper when it knows a
// shortcut, else by listing and filtering.
func (s *Store) ListPrefix(ctx context.Context, kind, namespace, prefix string) ([]api.Object, error) {
	m, err := s.mapperFor("list", kind, namespace, "")
	if err != nil {
		return nil, err
	}
	if pl, ok := m.(prefixLister); ok {
		ctx, cancel := s.callCtx(ctx)
		defer cancel()
		objs, err := pl.listPrefix(ctx, namespace, prefix)
		return objs, wrap("list", m.info(), namespace, "", err)
	}
	objs, _, err := s.List(ctx, kind, namespace)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(objs, func(o api.Object) bool { return !strings.HasPrefix(o.Meta().Name, prefix) }), nil
}

// rawList is a Kubernetes list response.
type rawList struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	Items []json.RawMessage `json:"items"`
}

// listSource lists one source in namespace ns (at resourceVersion rv
// exactly, when set) and converts its items; items that do not convert
// are logged and skipped, as Calico does.
func (s *Store) listSource(ctx context.Context, m mapper, i int, src source, ns, rv string) ([]api.Object, int64, error) {
	list, rev, err := s.listRaw(ctx, src, ns, rv)
	if err != nil {
		return nil, 0, err
	}
	var out []api.Object
	for _, item := range list.Items {
		objs, err := m.convert(i, item)
		if err != nil {
			s.logger.Warn("skipping object that does not convert", "resource", src.resource, "err", err)
			continue
		}
		out = append(out, objs...)
	}
	return out, rev, nil
}

// listPage is the page size of a list. The API server answers a list
// without a resourceVersion from its watch cache once the cache has caught
// up with etcd's newest revision (ConsistentListFromCache, Kubernetes 1.31
// and later; with or without a limit on 1.36): after a write to another
// resource that is a wait of up to a tenth of a second per list, as long as
// the API server takes to ask etcd for progress. Reads marked
// datastore.WithCachedReads ask for the cache as it is (resourceVersion 0).
const listPage = 500

// listRaw lists one source in namespace ns ("" = all), at resourceVersion
// rv exactly when set, page by page at the first page's revision.
func (s *Store) listRaw(ctx context.Context, src source, ns, rv string) (rawList, int64, error) {
	q := url.Values{"limit": {strconv.Itoa(listPage)}}
	switch {
	case rv != "":
		q.Set("resourceVersion", rv)
		q.Set("resourceVersionMatch", "Exact")
	case datastore.CachedReads(ctx):
		q.Set("resourceVersion", "0") // the watch cache, without waiting for it
	}
	var all rawList
	for {
		var page rawList
		if err := s.c.do(ctx, http.MethodGet, src.nsPath(ns), q, "", nil, &page); err != nil {
			return all, 0, missingCRD(src, err)
		}
		if all.Metadata.ResourceVersion == "" {
			all.Metadata.ResourceVersion = page.Metadata.ResourceVersion
		}
		all.Items = append(all.Items, page.Items...)
		if page.Metadata.Continue == "" {
			break
		}
		// The continue token carries the revision; the server refuses it
		// together with resourceVersion.
		q.Del("resourceVersion")
		q.Del("resourceVersionMatch")
		q.Set("continue", page.Metadata.Continue)
	}
	rev, err := parseRV(all.Metadata.ResourceVersion)
	if err != nil {
		return all, 0, fmt.Errorf("list %s: %w", src.resource, err)
	}
	return all, rev, nil
}

// missingCRD names the CRD when the API server does not know a Calico
// collection: the CRDs were not installed (or an old set was).
func missingCRD(src source, err error) error {
	var se *statusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound && strings.HasPrefix(src.path, "/apis/crd.projectcalico.org/") &&
		strings.Count(se.Path, "/") == strings.Count(src.path, "/") {
		return &datastore.ConfigError{Err: fmt.Errorf("custom resource %s is not installed (kubectl apply -f deploy/crds.yaml): %w", src.resource, err)}
	}
	return err
}

func parseRV(rv string) (int64, error) {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("resourceVersion %q is not a revision", rv)
	}
	return n, nil
}

func sortObjects(objs []api.Object) {
	slices.SortFunc(objs, func(a, b api.Object) int {
		return cmp.Or(
			cmp.Compare(a.Type().Kind, b.Type().Kind),
			cmp.Compare(a.Meta().Namespace, b.Meta().Namespace),
			cmp.Compare(a.Meta().Name, b.Meta().Name),
		)
	})
}

// Server is the base URL of the API server the store reads and writes
// ("https://10.0.0.1:6443"), as ServerURL spells it.
func (s *Store) Server() string { return s.c.base }
