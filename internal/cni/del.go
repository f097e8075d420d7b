package cni

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

func cmdDel(args *skel.CmdArgs) error {
	return run(&host{}, NetworkPlugin, "DEL", args, (*invocation).del)
}

// del is the network plugin's DEL: delete the WorkloadEndpoint, the pod's
// interface (which takes the host veth and its routes along) and the
// addresses. It is idempotent: whatever is already gone is skipped. The
// three are independent (the interface is found in this sandbox's
// namespace, the addresses by this container's handle; only the endpoint,
// named after the pod, needs its owner checked) and run at the same time;
// the interface goes even while etcd is unreachable. The first error is
// returned so that the runtime retries.
func (inv *invocation) del(ctx context.Context) error {
	ids := newWorkloadIDs(inv)
	linkDone := make(chan error, 1)
	go func() { linkDone <- deleteContainerLink(inv.args.Netns, inv.args.IfName) }()

	store, err := inv.datastore(ctx)
	if err != nil {
		<-linkDone
		return err
	}
	inv.phase("connect etcd")
	endpointDone := make(chan error, 1)
	go func() { endpointDone <- inv.deleteEndpoint(ctx, store, ids) }()
	var ipamErr error
	if inv.conf.IPAMConf.Type == calicoIPAMType {
		ipamErr = inv.calicoRelease(ctx, inv.args.ContainerID)
	} else {
		ipamErr = inv.delegateDel(ctx)
	}
	inv.phase("release addresses")
	endpointErr := <-endpointDone
	inv.phase("delete endpoint")
	linkErr := <-linkDone
	inv.phase("delete interface")
	return errors.Join(endpointErr, linkErr, ipamErr)
}

// deleteEndpoint removes the endpoint named for this container and
// interface. A Kubernetes endpoint is named after the pod, so a DEL for
// one of the pod's old sandboxes must leave the endpoint of its current
// one alone: it is deleted only when its containerID is this one's.
func (inv *invocation) deleteEndpoint(ctx context.Context, store datastore.Store, ids workloadIDs) error {
	name, err := ids.name()
	if err != nil {
		return configError("CNI_CONTAINERID/K8S_POD_NAME", "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, ipamTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		obj, err := store.Get(ctx, "WorkloadEndpoint", ids.namespace, name)
		if errors.Is(err, datastore.ErrNotFound) {
			return nil
		}
		if err != nil {
			return datastoreError(fmt.Errorf("read workload endpoint %s/%s: %w", ids.namespace, name, err))
		}
		ep := obj.(*api.WorkloadEndpoint)
		if ep.Spec.ContainerID != "" && ep.Spec.ContainerID != inv.args.ContainerID {
			inv.logger.Info("workload endpoint belongs to another sandbox: kept", "endpoint", name, "endpointContainerID", ep.Spec.ContainerID)
			return nil
		}
		_, err = store.Delete(ctx, "WorkloadEndpoint", ids.namespace, name, ep.ResourceVersion)
		switch {
		case err == nil, errors.Is(err, datastore.ErrNotFound):
			return nil
		case errors.Is(err, datastore.ErrConflict) && attempt < 5:
			continue // changed between read and delete: look again
		}
		return writeError("delete workload endpoint "+name, err)
	}
}
