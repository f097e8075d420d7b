package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	listersnetworkingv1 "k8s.io/client-go/listers/networking/v1"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy/k8spolicy"
)

// policyController keeps a knp.default.<name> Calico policy per
// Kubernetes NetworkPolicy.
type policyController struct {
	*queue
	c      *Controllers
	lister listersnetworkingv1.NetworkPolicyLister
}

func newPolicyController(c *Controllers, f *informers, src *kccSource, log *slog.Logger) (runner, error) {
	inf := f.networkPolicies()
	pc := &policyController{c: c, lister: listersnetworkingv1.NewNetworkPolicyLister(inf.GetIndexer())}
	pc.queue = c.newQueue(Policy, log, src, pc.sync, pc.keys)
	if _, err := inf.AddEventHandler(pc.handler()); err != nil {
		return nil, err
	}
	return pc, nil
}

func (pc *policyController) keys(ctx context.Context) ([]string, error) {
	nps, err := pc.lister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, np := range nps {
		keys = append(keys, np.Namespace+"/"+np.Name)
	}
	objs, _, err := pc.c.store.List(ctx, "NetworkPolicy", "")
	if err != nil {
		return nil, fmt.Errorf("list network policies: %w", err)
	}
	for _, o := range objs {
		m := o.Meta()
		if name, ok := strings.CutPrefix(m.Name, k8spolicy.NamePrefix); ok {
			keys = append(keys, m.Namespace+"/"+name)
		}
	}
	return keys, nil
}

func (pc *policyController) sync(ctx context.Context, key string) error {
	ns, name := splitKey(key)
	calicoName := k8spolicy.Name(name)
	np, err := pc.lister.NetworkPolicies(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return deleteResource(ctx, pc.c.store, "NetworkPolicy", ns, calicoName, pc.log)
	}
	if err != nil {
		return err
	}
	want, err := k8spolicy.Convert(np)
	if err != nil {
		// The rest of the policy is still enforced, as Calico does.
		pc.log.Warn("network policy not fully converted", "policy", key, "err", err)
	}
	obj, err := pc.c.store.Get(ctx, "NetworkPolicy", ns, calicoName)
	if errors.Is(err, datastore.ErrNotFound) {
		if _, err := pc.c.store.Create(ctx, want); err != nil {
			return fmt.Errorf("create network policy %s/%s: %w", ns, calicoName, err)
		}
		pc.log.Info("created network policy", "policy", ns+"/"+calicoName)
		return nil
	}
	if err != nil {
		return fmt.Errorf("read network policy %s/%s: %w", ns, calicoName, err)
	}
	have := obj.(*api.NetworkPolicy)
	defaulted := &api.NetworkPolicy{Spec: want.Spec}
	defaulted.Default()
	if jsonEqual(have.Spec, defaulted.Spec) {
		return nil
	}
	have.Spec = want.Spec
	if _, err := pc.c.store.Update(ctx, have); err != nil {
		return fmt.Errorf("update network policy %s/%s: %w", ns, calicoName, err)
	}
	pc.log.Info("updated network policy", "policy", ns+"/"+calicoName)
	return nil
}
