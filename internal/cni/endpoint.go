package cni

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// workloadIDs identify a pod's endpoint the way Calico does: node,
// orchestrator ("k8s" when CNI_ARGS name a pod, else "cni"), pod or
// container ID, and the interface.
type workloadIDs struct {
	orchestrator string
	node         string
	namespace    string // the pod's namespace; "default" for plain CNI
	pod          string // k8s only
	containerID  string
	endpoint     string // CNI_IFNAME
	vethPrefix   string // FELIX_INTERFACEPREFIX's first entry, else "cali"
}

func newWorkloadIDs(inv *invocation) workloadIDs {
	prefix, _, _ := strings.Cut(inv.getenv("FELIX_INTERFACEPREFIX"), ",")
	ids := workloadIDs{
		vethPrefix:   prefix,
		orchestrator: api.OrchestratorCNI,
		node:         inv.node,
		namespace:    "default",
		containerID:  inv.args.ContainerID,
		endpoint:     inv.args.IfName,
	}
	if inv.k8s != nil {
		ids.orchestrator = api.OrchestratorKubernetes
		ids.namespace = inv.k8s.namespace
		ids.pod = inv.k8s.pod
	}
	return ids
}

func (w workloadIDs) spec() api.WorkloadEndpointSpec {
	s := api.WorkloadEndpointSpec{
		Orchestrator: w.orchestrator,
		Node:         w.node,
		ContainerID:  w.containerID,
		Endpoint:     w.endpoint,
	}
	if w.orchestrator == api.OrchestratorKubernetes {
		s.Pod = w.pod
	}
	return s
}

// name is the endpoint's resource name (Calico's format and escaping).
func (w workloadIDs) name() (string, error) {
	s := w.spec()
	name, err := api.WorkloadEndpointName(&s)
	if err != nil {
		return "", fmt.Errorf("workload endpoint name: %w", err)
	}
	return name, nil
}

// namePrefix is the name without the endpoint part: every endpoint of the
// workload, whatever its interface, starts with it.
func (w workloadIDs) namePrefix() (string, error) {
	s := w.spec()
	s.Endpoint = "x"
	name, err := api.WorkloadEndpointName(&s)
	if err != nil {
		return "", fmt.Errorf("workload endpoint name: %w", err)
	}
	return strings.TrimSuffix(name, "x"), nil
}

// matches reports whether a stored endpoint belongs to this workload (a
// prefix match alone would also find pod "web-1" for pod "web").
func (w workloadIDs) matches(ep *api.WorkloadEndpoint) bool {
	s := &ep.Spec
	if s.Node != w.node || s.Orchestrator != w.orchestrator {
		return false
	}
	if w.orchestrator == api.OrchestratorKubernetes {
		return s.Pod == w.pod
	}
	return s.ContainerID == w.containerID
}

// HostVethPrefix starts the host veth's name unless FELIX_INTERFACEPREFIX
// names another prefix.
const HostVethPrefix = "cali"

// hostVethName is the host end's name, exactly as Calico derives it:
// for Kubernetes pods "cali" + the first 11 hex digits of
// sha1("<namespace>.<pod>") (the agent can compute it from the pod alone),
// for plain CNI "cali" + the first 11 characters of the container ID. The
// prefix follows FELIX_INTERFACEPREFIX (its first entry) like Calico.
func (w workloadIDs) hostVethName() string {
	prefix := w.vethPrefix
	if prefix == "" {
		prefix = HostVethPrefix
	}
	if w.orchestrator == api.OrchestratorKubernetes {
		sum := sha1.Sum([]byte(w.namespace + "." + w.pod))
		return prefix + hex.EncodeToString(sum[:])[:11]
	}
	return prefix + w.containerID[:min(11, len(w.containerID))]
}

// findEndpoint returns the workload's existing endpoint, whatever its
// interface, or nil. It reads the endpoints named after the workload (one
// ranged etcd read, or the pod itself on Kubernetes), not the namespace.
func findEndpoint(ctx context.Context, store datastore.Store, w workloadIDs) (*api.WorkloadEndpoint, error) {
	prefix, err := w.namePrefix()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout(store))
	defer cancel()
	objs, err := store.ListPrefix(ctx, "WorkloadEndpoint", w.namespace, prefix)
	if err != nil {
		return nil, datastoreError(fmt.Errorf("look up workload endpoints %s/%s*: %w", w.namespace, prefix, err))
	}
	for _, o := range objs {
		if ep, ok := o.(*api.WorkloadEndpoint); ok && w.matches(ep) {
			return ep, nil
		}
	}
	return nil, nil
}

// datastoreError classifies a datastore failure for the runtime: an
// unreachable etcd is "try again later" (code 11), a bad configuration is
// code 7, anything else internal.
func datastoreError(err error) error {
	if err == nil {
		return nil
	}
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	var cfgErr *datastore.ConfigError
	if errors.As(err, &cfgErr) {
		return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	if isUnavailable(err) {
		return types.NewError(types.ErrTryAgainLater, err.Error(), "")
	}
	return err
}
