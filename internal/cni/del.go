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
//
// When the sandbox's namespace is already gone (or not given), the host
// veth is removed by name. The kernel would take it with the namespace,
// but only after the namespace's last reference is dropped and its
// asynchronous cleanup has run: seconds later under load, never while
// something still holds the namespace open, and meanwhile the host keeps
// routes to addresses this DEL frees. A Kubernetes pod's veth is named
// after the pod, so it is removed only if the pod's endpoint is gone or
// still names this container: a newer sandbox's veth is left alone.
func (inv *invocation) del(ctx context.Context) error {
	ids := newWorkloadIDs(inv)
	linkDone := make(chan containerLink, 1)
	go func() {
		gone, err := deleteContainerLink(inv.args.Netns, inv.args.IfName)
		linkDone <- containerLink{netnsGone: gone, err: err}
	}()

	store, err := inv.datastore(ctx)
	if err != nil {
		<-linkDone
		return err
	}
	inv.phase("connect etcd")
	// Nothing is released while the datastore is locked; the runtime
	// retries the DEL. (The pod's interface may already be gone: deleting
	// it again is a no-op.)
	if err := checkReady(ctx, store); err != nil {
		<-linkDone
		return err
	}
	endpointDone := make(chan endpointDeletion, 1)
	go func() {
		vethOurs, err := inv.deleteEndpoint(ctx, store, ids)
		endpointDone <- endpointDeletion{vethOurs: vethOurs, err: err}
	}()
	var ipamErr error
	if inv.conf.IPAMConf.Type == calicoIPAMType {
		ipamErr = inv.calicoRelease(ctx, inv.args.ContainerID)
	} else {
		ipamErr = inv.delegateDel(ctx)
	}
	inv.phase("release addresses")
	endpoint := <-endpointDone
	inv.phase("delete endpoint")
	link := <-linkDone
	if link.err == nil && link.netnsGone && endpoint.err == nil && endpoint.vethOurs {
		link.err = deleteHostVeth(ids.hostVethName())
	}
	inv.phase("delete interface")
	return errors.Join(endpoint.err, link.err, ipamErr)
}

// containerLink is the outcome of deleting the pod's interface in its
// namespace: netnsGone when there was no namespace to look in.
type containerLink struct {
	netnsGone bool
	err       error
}

// endpointDeletion is the outcome of deleteEndpoint: vethOurs unless the
// endpoint belongs to another sandbox of the pod (whose host veth has the
// same name).
type endpointDeletion struct {
	vethOurs bool
	err      error
}

// deleteEndpoint removes the endpoint named for this container and
// interface. A Kubernetes endpoint is named after the pod, so a DEL for
// one of the pod's old sandboxes must leave the endpoint of its current
// one alone: it is deleted only when its containerID is this one's. It
// reports whether the host veth of this name is this container's: false
// only for an endpoint kept for another sandbox.
func (inv *invocation) deleteEndpoint(ctx context.Context, store datastore.Store, ids workloadIDs) (vethOurs bool, err error) {
	name, err := ids.name()
	if err != nil {
		return false, configError("CNI_CONTAINERID/K8S_POD_NAME", "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, ipamTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		obj, err := store.Get(ctx, "WorkloadEndpoint", ids.namespace, name)
		if errors.Is(err, datastore.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, datastoreError(fmt.Errorf("read workload endpoint %s/%s: %w", ids.namespace, name, err))
		}
		ep := obj.(*api.WorkloadEndpoint)
		if ep.Spec.ContainerID != "" && ep.Spec.ContainerID != inv.args.ContainerID {
			inv.logger.Info("workload endpoint belongs to another sandbox: kept", "endpoint", name, "endpointContainerID", ep.Spec.ContainerID)
			return false, nil
		}
		_, err = store.Delete(ctx, "WorkloadEndpoint", ids.namespace, name, ep.ResourceVersion)
		switch {
		case err == nil, errors.Is(err, datastore.ErrNotFound):
			return true, nil
		case errors.Is(err, datastore.ErrConflict) && attempt < 5:
			continue // changed between read and delete: look again
		}
		return false, writeError("delete workload endpoint "+name, err)
	}
}
