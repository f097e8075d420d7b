package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/projectcalico/calico-node/controllers"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/guard"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// writeOp is one of the document-driven write verbs.
type writeOp struct {
	name string // "create"
	past string // "created"
	do   func(s *session, obj api.Object) error
}

func cmdCreate(s *session) error {
	skip := s.c.Bool("skip-exists")
	return s.writeDocs(writeOp{name: "create", past: "created", do: func(s *session, obj api.Object) error {
		_, err := s.store.Create(s.ctx, obj)
		if skip && errors.Is(err, datastore.ErrAlreadyExists) {
			return nil
		}
		return err
	}})
}

func cmdApply(s *session) error {
	if s.c.Bool("dry-run") {
		return s.dryRunApply()
	}
	return s.writeDocs(writeOp{name: "apply", past: "applied", do: func(s *session, obj api.Object) error {
		_, err := s.store.Apply(s.ctx, obj)
		return err
	}})
}

func cmdReplace(s *session) error {
	return s.writeDocs(writeOp{name: "replace", past: "replaced", do: func(s *session, obj api.Object) error {
		_, err := s.store.Update(s.ctx, obj)
		return err
	}})
}

// readOnly refuses what calicoctl refuses for every kind it lets users
// read but not write: ClusterInformation, which calico-node owns
// (datastoreReady false would stop every node's dataplane).
func readOnly(op, kind, namespace, name string) error {
	if kind != "ClusterInformation" {
		return nil
	}
	return &datastore.Error{Op: op, Kind: kind, Namespace: namespace, Name: name,
		Err: fmt.Errorf("%w: resource is readonly: calico-node manages it", datastore.ErrNotSupported)}
}

// writeDocs validates every document, then writes them in order. A failed
// write does not stop the others; every failure is reported.
func (s *session) writeDocs(op writeOp) error {
	docs, err := readInputs(s.c.StringSlice("filename"), s.stdin)
	if err != nil {
		return err
	}
	objs, err := prepare(docs, s.c.String("namespace"), true)
	if err != nil {
		return err
	}
	var failed []string
	var done []api.Object
	for _, obj := range objs {
		m := obj.Meta()
		if err := readOnly(op.name, obj.Type().Kind, m.Namespace, m.Name); err != nil {
			failed = append(failed, err.Error())
			continue
		}
		if err := op.do(s, obj); err != nil {
			failed = append(failed, err.Error())
			continue
		}
		done = append(done, obj)
	}
	s.reportSuccess(op.past, done)
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d resources were not %s:\n  %s", len(failed), len(objs), op.past, strings.Join(failed, "\n  "))
	}
	return nil
}

// reportSuccess prints calicoctl's summary line.
func (s *session) reportSuccess(past string, objs []api.Object) {
	if len(objs) == 0 {
		return
	}
	kind := objs[0].Type().Kind
	for _, o := range objs[1:] {
		if o.Type().Kind != kind {
			kind = ""
			break
		}
	}
	if kind != "" {
		fmt.Fprintf(s.out, "Successfully %s %d '%s' resource(s)\n", past, len(objs), kind)
		return
	}
	fmt.Fprintf(s.out, "Successfully %s %d resource(s)\n", past, len(objs))
}

// ref names one resource.
type ref struct {
	kind      api.KindInfo
	namespace string
	name      string
}

func (r ref) String() string {
	if r.namespace != "" {
		return fmt.Sprintf("%s(%s/%s)", r.kind.Kind, r.namespace, r.name)
	}
	return fmt.Sprintf("%s(%s)", r.kind.Kind, r.name)
}

// refsFromArgs resolves `KIND NAME...` (names optional when allowNoName).
func (s *session) refsFromArgs(allowNoName bool) (api.KindInfo, []ref, error) {
	args := s.c.Args().Slice()
	if len(args) == 0 {
		return api.KindInfo{}, nil, errors.New("give a resource kind (and names) or -f FILE")
	}
	info, ok := api.LookupKind(args[0])
	if !ok {
		return api.KindInfo{}, nil, fmt.Errorf("unknown resource kind %q", args[0])
	}
	if len(args) == 1 && !allowNoName {
		return info, nil, fmt.Errorf("give the name of the %s", info.Kind)
	}
	ns := ""
	if info.Namespaced {
		ns = s.c.String("namespace")
		if ns == "" {
			ns = "default"
		}
	}
	var refs []ref
	for _, n := range args[1:] {
		refs = append(refs, ref{kind: info, namespace: ns, name: n})
	}
	return info, refs, nil
}

// refsFromFiles names the resources in -f files without validating their
// specs (deleting needs only kind, namespace and name).
func (s *session) refsFromFiles() ([]ref, error) {
	docs, err := readInputs(s.c.StringSlice("filename"), s.stdin)
	if err != nil {
		return nil, err
	}
	objs, err := prepare(docs, s.c.String("namespace"), false)
	if err != nil {
		return nil, err
	}
	refs := make([]ref, 0, len(objs))
	for _, o := range objs {
		info, _ := api.LookupKind(o.Type().Kind)
		if o.Meta().Name == "" {
			return nil, fmt.Errorf("a %s document has no metadata.name", info.Kind)
		}
		refs = append(refs, ref{kind: info, namespace: o.Meta().Namespace, name: o.Meta().Name})
	}
	return refs, nil
}

func cmdDelete(s *session) error {
	var refs []ref
	var err error
	if len(s.c.StringSlice("filename")) > 0 {
		if s.c.Args().Len() > 0 {
			return errors.New("give either -f FILE or KIND NAME..., not both")
		}
		refs, err = s.refsFromFiles()
	} else {
		_, refs, err = s.refsFromArgs(false)
	}
	if err != nil {
		return err
	}
	skip := s.c.Bool("skip-not-exists")
	var failed []string
	var done []api.Object
	for _, r := range refs {
		obj, err := s.deleteOne(r)
		if err != nil {
			if skip && errors.Is(err, datastore.ErrNotFound) {
				continue
			}
			failed = append(failed, err.Error())
			continue
		}
		done = append(done, obj)
	}
	s.reportSuccess("deleted", done)
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d resources were not deleted:\n  %s", len(failed), len(refs), strings.Join(failed, "\n  "))
	}
	return nil
}

func cmdGet(s *session) error {
	out, err := parseOutput(s.c.String("output"))
	if err != nil {
		return err
	}
	allNS := s.c.Bool("all-namespaces")
	// As calicoctl: results are a listing (one <Kind>List) or the objects
	// asked for by name, each on its own; names that are not found are
	// reported after the ones that are printed.
	var results []any
	var failed []error
	getEach := func(refs []ref) {
		for _, r := range refs {
			obj, err := s.store.Get(s.ctx, r.kind.Kind, r.namespace, r.name)
			if err != nil {
				failed = append(failed, err)
				continue
			}
			clientView(obj)
			results = append(results, obj)
		}
	}
	if len(s.c.StringSlice("filename")) > 0 {
		refs, err := s.refsFromFiles()
		if err != nil {
			return err
		}
		getEach(refs)
	} else {
		info, refs, err := s.refsFromArgs(true)
		if err != nil {
			return err
		}
		if len(refs) == 0 {
			ns := ""
			if info.Namespaced && !allNS {
				ns = s.c.String("namespace")
				if ns == "" {
					ns = "default"
				}
			}
			objs, _, err := s.store.List(s.ctx, info.Kind, ns)
			if err != nil {
				return err
			}
			for _, o := range objs {
				clientView(o)
			}
			results = append(results, &objectList{TypeMeta: api.TypeMeta{Kind: info.Kind + "List"}, Items: objs})
		} else {
			getEach(refs)
		}
	}
	p := &printer{w: s.out, out: out, printNamespace: allNS || s.c.String("namespace") != "", asNumber: s.defaultASNumber}
	if err := p.print(results); err != nil {
		return err
	}
	return errors.Join(failed...)
}

// defaultASNumber is the AS number of nodes without their own, as
// calicoctl's config "asnumber" reads it: BGPConfiguration default's, else
// 64512; "unknown" when it cannot be read.
func (s *session) defaultASNumber() string {
	obj, err := s.store.Get(s.ctx, "BGPConfiguration", "", "default")
	switch {
	case errors.Is(err, datastore.ErrNotFound):
		return "64512"
	case err != nil:
		return "unknown"
	}
	if c, ok := obj.(*api.BGPConfiguration); ok && c.Spec.ASNumber != nil {
		return c.Spec.ASNumber.String()
	}
	return "64512"
}

// deleteOne deletes one resource. A Node takes everything of its own with
// it (endpoints, addresses, block affinities, peers, node config), as
// calicoctl's node deletion does; the Node goes last, so a failure half way
// can be retried. As in Calico, that cleanup runs even for a Node that is
// not there (the leftovers of one deleted otherwise), which is then
// reported as not found; on the Kubernetes datastore, where the Calico Node
// is the Kubernetes Node, the Node's own deletion is refused after the
// cleanup (datastore.ErrNotSupported), as Calico's calicoctl refuses it.
func (s *session) deleteOne(r ref) (api.Object, error) {
	if err := readOnly("delete", r.kind.Kind, r.namespace, r.name); err != nil {
		return nil, err
	}
	if r.kind.Kind == "IPPool" {
		return s.deletePool(r.name)
	}
	if r.kind.Kind != "Node" {
		return s.store.Delete(s.ctx, r.kind.Kind, r.namespace, r.name, "")
	}
	node, getErr := s.store.Get(s.ctx, "Node", "", r.name)
	if getErr != nil && !errors.Is(getErr, datastore.ErrNotFound) {
		return nil, getErr
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := controllers.RemoveNode(s.ctx, s.store, ipam.New(s.store.IPAM(), s.store, quiet), r.name, quiet)
	if getErr != nil && (err == nil || errors.Is(err, datastore.ErrNotFound) || errors.Is(err, datastore.ErrNotSupported)) {
		return nil, getErr
	}
	if err != nil {
		return nil, err
	}
	return node, nil
}

// poolDeleter is guard.Store's pool deletion, which reports what it left.
type poolDeleter interface {
	DeletePool(ctx context.Context, name, resourceVersion string) (api.Object, guard.PoolRelease, error)
}

// deletePool deletes an IP pool as libcalico-go does (disabled first, its
// blocks' affinities released, empty blocks deleted) and warns about the
// addresses still allocated from it.
func (s *session) deletePool(name string) (api.Object, error) {
	pd, ok := s.store.(poolDeleter)
	if !ok {
		return s.store.Delete(s.ctx, "IPPool", "", name, "")
	}
	obj, rep, err := pd.DeletePool(s.ctx, name, "")
	if err != nil {
		return nil, err
	}
	if len(rep.InUse) > 0 {
		total := 0
		blocks := make([]string, len(rep.InUse))
		for i, b := range rep.InUse {
			total += b.InUse
			blocks[i] = fmt.Sprintf("%s (%d)", b.CIDR, b.InUse)
		}
		fmt.Fprintf(s.errOut, "Warning: IPPool(%s) is deleted but %d address(es) from it are still in use, in blocks %s: "+
			"they stay allocated until their workloads are deleted or `calicoctl ipam release` frees them\n",
			name, total, strings.Join(blocks, ", "))
	}
	return obj, nil
}
