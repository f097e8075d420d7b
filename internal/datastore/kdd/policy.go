package kdd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy/k8spolicy"
)

// networkPolicyMapper serves NetworkPolicy from two sources: Calico's
// networkpolicies custom resources (source 0, stored as every CRD kind is)
// and the Kubernetes NetworkPolicies (source 1), each read as the Calico
// policy knp.default.<name> that enforces it, translated by k8spolicy as
// in etcd mode's policy controller and with the metadata libcalico-go's
// K8sNetworkPolicyToCalico gives it (creationTimestamp, converted uid,
// resourceVersion; no labels or annotations).
//
// Real calicoctl on KDD does not list knp.default.* policies (they are a
// separate backend kind there); this Store does, so that everything
// reading NetworkPolicies — confwatch's policy compiler above all — sees
// the same set as in etcd mode, where the policy controller copies them
// into etcd. They cannot be written: Kubernetes owns them.
type networkPolicyMapper struct {
	*crdMapper
	knp source
}

func newNetworkPolicyMapper(s *Store, info api.KindInfo) mapper {
	return &networkPolicyMapper{
		crdMapper: newCRD(s, info),
		knp: source{
			path:       "/apis/networking.k8s.io/v1/networkpolicies",
			resource:   "networkpolicies.networking.k8s.io",
			namespaced: true,
		},
	}
}

func (m *networkPolicyMapper) sources() []source { return []source{m.src, m.knp} }

func (m *networkPolicyMapper) convert(i int, raw json.RawMessage) ([]api.Object, error) {
	if i == 0 {
		return m.crdMapper.convert(i, raw)
	}
	p, err := m.convertKNP(raw)
	if err != nil {
		return nil, err
	}
	return []api.Object{p}, nil
}

func (m *networkPolicyMapper) convertKNP(raw []byte) (*api.NetworkPolicy, error) {
	var np networkingv1.NetworkPolicy
	if err := json.Unmarshal(raw, &np); err != nil {
		return nil, fmt.Errorf("decode %s: %w", m.knp.resource, err)
	}
	p, err := k8spolicy.Convert(&np)
	if err != nil {
		// The rest of the policy is still enforced, as Calico does.
		m.s.logger.Warn("network policy not fully converted", "policy", np.Namespace+"/"+np.Name, "err", err)
	}
	if !np.CreationTimestamp.IsZero() {
		p.CreationTimestamp = np.CreationTimestamp.UTC().Format(time.RFC3339)
	}
	if np.UID != "" {
		uid, err := convertUID(string(np.UID))
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", m.knp.resource, np.Namespace, np.Name, err)
		}
		p.UID = uid
	}
	p.ResourceVersion = np.ResourceVersion
	return p, nil
}

func (m *networkPolicyMapper) get(ctx context.Context, ns, name string) (api.Object, error) {
	k8sName, ok := strings.CutPrefix(name, k8spolicy.NamePrefix)
	if !ok {
		return m.crdMapper.get(ctx, ns, name)
	}
	var raw json.RawMessage
	if err := m.s.c.do(ctx, http.MethodGet, m.knp.objPath(ns, k8sName), nil, "", nil, &raw); err != nil {
		return nil, sentinel(err)
	}
	return m.convertKNP(raw)
}

func (m *networkPolicyMapper) write(ctx context.Context, mode writeMode, obj api.Object) (api.Object, error) {
	if err := refuseKNP(obj.Meta().Namespace, obj.Meta().Name); err != nil {
		return nil, err
	}
	return m.crdMapper.write(ctx, mode, obj)
}

func (m *networkPolicyMapper) remove(ctx context.Context, ns, name, rv string) (api.Object, error) {
	if err := refuseKNP(ns, name); err != nil {
		return nil, err
	}
	return m.crdMapper.remove(ctx, ns, name, rv)
}

// refuseKNP stops writes to the policies computed from Kubernetes
// NetworkPolicies: a write would be overwritten (or resurrected) by the
// next read of the Kubernetes object.
func refuseKNP(ns, name string) error {
	k8sName, ok := strings.CutPrefix(name, k8spolicy.NamePrefix)
	if !ok {
		return nil
	}
	return fmt.Errorf("%s is the Kubernetes NetworkPolicy %s/%s as Calico enforces it: it is read-only here, change the Kubernetes NetworkPolicy instead (kubectl)", name, ns, k8sName)
}
