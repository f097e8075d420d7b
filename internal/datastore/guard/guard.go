package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// DefaultSettle is how long DeletePool waits between disabling a pool and
// releasing its blocks, as libcalico-go does, so that allocations already
// under way finish first.
const DefaultSettle = 500 * time.Millisecond

// Store is a datastore.Store with clientv3's cross-resource checks on
// writes. See the package doc.
type Store struct {
	datastore.Store
	ipam   *ipam.Client
	logger *slog.Logger
	settle time.Duration
}

// Option configures a Store.
type Option func(*Store)

// WithSettle replaces DefaultSettle (tests use 0).
func WithSettle(d time.Duration) Option { return func(s *Store) { s.settle = d } }

// New wraps s. A nil logger discards.
func New(s datastore.Store, logger *slog.Logger, opts ...Option) *Store {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g := &Store{Store: s, logger: logger, settle: DefaultSettle}
	for _, o := range opts {
		o(g)
	}
	g.ipam = ipam.New(s.IPAM(), s, logger)
	return g
}

// Unwrap returns the Store underneath.
func (g *Store) Unwrap() datastore.Store { return g.Store }

// kindOf names obj's kind by its Go type (which is what the backends go
// by), falling back to its TypeMeta.
func kindOf(obj api.Object) string {
	switch obj.(type) {
	case *api.IPPool:
		return "IPPool"
	case *api.NetworkPolicy:
		return "NetworkPolicy"
	case *api.GlobalNetworkPolicy:
		return "GlobalNetworkPolicy"
	}
	if info, ok := api.LookupKind(obj.Type().Kind); ok {
		return info.Kind
	}
	return ""
}

// Create implements datastore.Store.
func (g *Store) Create(ctx context.Context, obj api.Object) (api.Object, error) {
	switch kindOf(obj) {
	case "IPPool":
		return g.createPool(ctx, obj)
	case "NetworkPolicy", "GlobalNetworkPolicy":
		if err := g.checkTier(ctx, "create", obj); err != nil {
			return nil, err
		}
	}
	return g.Store.Create(ctx, obj)
}

// Update implements datastore.Store.
func (g *Store) Update(ctx context.Context, obj api.Object) (api.Object, error) {
	if kindOf(obj) == "IPPool" {
		return g.updatePool(ctx, "update", obj)
	}
	return g.Store.Update(ctx, obj)
}

// Apply implements datastore.Store.
func (g *Store) Apply(ctx context.Context, obj api.Object) (api.Object, error) {
	switch kindOf(obj) {
	case "IPPool":
		return g.updatePool(ctx, "apply", obj)
	case "NetworkPolicy", "GlobalNetworkPolicy":
		if err := g.checkTier(ctx, "apply", obj); err != nil {
			return nil, err
		}
	}
	return g.Store.Apply(ctx, obj)
}

// Delete implements datastore.Store.
func (g *Store) Delete(ctx context.Context, kind, namespace, name, resourceVersion string) (api.Object, error) {
	info, ok := api.LookupKind(kind)
	if ok {
		switch info.Kind {
		case "IPPool":
			out, _, err := g.DeletePool(ctx, name, resourceVersion)
			return out, err
		case "Tier":
			if err := g.checkTierDelete(ctx, name); err != nil {
				return nil, err
			}
		}
	}
	return g.Store.Delete(ctx, kind, namespace, name, resourceVersion)
}

// prepare is the backends' own preparation of a write (defaults,
// validation), done first so that these checks see what will be stored
// and an invalid object is reported as the backend would report it.
func prepare(op, kind string, obj api.Object) (api.Object, error) {
	info, ok := api.LookupKind(kind)
	if !ok {
		return nil, &datastore.Error{Op: op, Kind: kind, Name: obj.Meta().Name, Err: datastore.ErrUnknownKind}
	}
	return datastore.Prepare(op, info, obj)
}

// checkTier refuses a policy whose tier does not exist, as clientv3's
// policy Create does. A missing default tier is not refused: calicoctl and
// calico-node's start-up create it, and Kubernetes-derived policies
// (knp.default.*) must never wait for it.
func (g *Store) checkTier(ctx context.Context, op string, obj api.Object) error {
	p, err := prepare(op, kindOf(obj), obj)
	if err != nil {
		return err
	}
	var tier string
	switch q := p.(type) {
	case *api.NetworkPolicy:
		tier = q.Spec.TierName()
	case *api.GlobalNetworkPolicy:
		tier = q.Spec.TierName()
	}
	if tier == api.DefaultTierName {
		return nil
	}
	if _, err := g.Store.Get(ctx, "Tier", "", tier); err != nil {
		if errors.Is(err, datastore.ErrNotFound) {
			m := p.Meta()
			return &datastore.Error{Op: op, Kind: kindOf(obj), Namespace: m.Namespace, Name: m.Name,
				Err: fmt.Errorf("tier %q does not exist: create the Tier first: %w", tier, datastore.ErrNotFound)}
		}
		return err
	}
	return nil
}

// checkTierDelete refuses to delete the tiers Calico keeps and any tier
// that still holds a policy (clientv3's Tier Delete).
func (g *Store) checkTierDelete(ctx context.Context, name string) error {
	fail := func(reason string) error {
		return &datastore.Error{Op: "delete", Kind: "Tier", Name: name, Err: fmt.Errorf("%w: %s", datastore.ErrNotSupported, reason)}
	}
	if name == api.DefaultTierName || name == api.AdminNetworkPolicyTierName {
		return fail(fmt.Sprintf("the %s tier cannot be deleted", name))
	}
	for _, kind := range []string{"GlobalNetworkPolicy", "NetworkPolicy"} {
		objs, _, err := g.Store.List(ctx, kind, "")
		if err != nil {
			return err
		}
		for _, o := range objs {
			var tier string
			switch q := o.(type) {
			case *api.NetworkPolicy:
				tier = q.Spec.TierName()
			case *api.GlobalNetworkPolicy:
				tier = q.Spec.TierName()
			}
			if tier != name {
				continue
			}
			ref := kind + "(" + o.Meta().Name + ")"
			if ns := o.Meta().Namespace; ns != "" {
				ref = kind + "(" + ns + "/" + o.Meta().Name + ")"
			}
			return fail("a non-empty tier cannot be deleted: " + ref + " is in it")
		}
	}
	return nil
}
