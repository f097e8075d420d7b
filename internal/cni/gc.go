package cni

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// statusFunc answers STATUS (CNI 1.1.0): ready when the datastore answers,
// else "plugin not available" (code 50), so the runtime holds pods back
// instead of failing their ADDs one by one. It asks the datastore for
// one object: connecting alone proves nothing on the Kubernetes
// datastore, whose plugin connects without a request.
func statusFunc(plugin string) func(*skel.CmdArgs) error {
	return func(args *skel.CmdArgs) error {
		return run(&host{}, plugin, "STATUS", args, func(inv *invocation, ctx context.Context) error {
			store, err := inv.datastore(ctx)
			if err == nil {
				rctx, cancel := context.WithTimeout(ctx, requestTimeout(store))
				_, err = store.Get(rctx, "ClusterInformation", "", "default")
				cancel()
				if errors.Is(err, datastore.ErrNotFound) {
					err = nil
				}
			}
			if err != nil {
				return types.NewError(types.ErrPluginNotAvailable, "datastore is not reachable: "+err.Error(), "")
			}
			if plugin == NetworkPlugin && inv.conf.IPAMConf.Type != calicoIPAMType {
				if err := invoke.DelegateStatus(ctx, inv.conf.IPAMConf.Type, inv.args.StdinData, nil); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// gcFunc answers GC (CNI 1.1.0): everything of this network on this node
// that belongs to a container not in cni.dev/valid-attachments goes:
// WorkloadEndpoints (network plugin only) and Calico IPAM handles.
func gcFunc(plugin string) func(*skel.CmdArgs) error {
	return func(args *skel.CmdArgs) error {
		return run(&host{}, plugin, "GC", args, func(inv *invocation, ctx context.Context) error {
			return inv.gc(ctx, plugin == NetworkPlugin)
		})
	}
}

func (inv *invocation) gc(ctx context.Context, endpoints bool) error {
	// GC is no hurry, but must not hang on an unreachable etcd.
	ctx, cancel := context.WithTimeout(ctx, ipamTimeout)
	defer cancel()
	valid := map[string]bool{}
	for _, a := range inv.conf.ValidAttachments {
		valid[a.ContainerID] = true
	}
	store, err := inv.datastore(ctx)
	if err != nil {
		return err
	}
	var errs []error
	// Containers whose endpoints on this node are stale: their handles are
	// this node's even if the addresses were borrowed from another node's
	// block.
	stale := map[string]bool{}
	if endpoints {
		objs, _, err := store.List(ctx, "WorkloadEndpoint", "")
		if err != nil {
			return datastoreError(fmt.Errorf("list workload endpoints: %w", err))
		}
		for _, obj := range objs {
			ep := obj.(*api.WorkloadEndpoint)
			s := &ep.Spec
			if s.Node != inv.node || s.ContainerID == "" || valid[s.ContainerID] ||
				(s.Orchestrator != api.OrchestratorKubernetes && s.Orchestrator != api.OrchestratorCNI) {
				continue
			}
			stale[s.ContainerID] = true
			inv.logger.Info("GC: deleting stale workload endpoint", "endpoint", ep.Namespace+"/"+ep.Name)
			if _, err := store.Delete(ctx, "WorkloadEndpoint", ep.Namespace, ep.Name, ep.ResourceVersion); err != nil && !errors.Is(err, datastore.ErrNotFound) {
				errs = append(errs, writeError("delete workload endpoint "+ep.Name, err))
			}
		}
	}
	if inv.conf.IPAMConf.Type == calicoIPAMType || !endpoints {
		if err := inv.gcHandles(ctx, store, valid, stale); err != nil {
			errs = append(errs, err)
		}
	} else if err := invoke.DelegateGC(ctx, inv.conf.IPAMConf.Type, inv.args.StdinData, nil); err != nil {
		errs = append(errs, fmt.Errorf("IPAM plugin %s: %w", inv.conf.IPAMConf.Type, err))
	}
	return errors.Join(errs...)
}

// gcHandles releases this network's handles ("<network>.<containerID>")
// whose container is not valid and whose addresses were allocated by this
// node (the allocation's "node" attribute), or whose endpoint on this node
// was stale.
func (inv *invocation) gcHandles(ctx context.Context, store datastore.Store, valid, stale map[string]bool) error {
	prefix := ipam.HandleKey(handleID(inv.conf.Name, ""))
	kvs, _, err := store.IPAM().List(ctx, prefix, true)
	if err != nil {
		return datastoreError(fmt.Errorf("list IPAM handles: %w", err))
	}
	client := ipam.New(store.IPAM(), store, inv.logger)
	unlock := lockIPAM(inv.conf.ipamLockFile(), inv.logger)
	defer unlock()
	var errs []error
	for _, kv := range kvs {
		handle := strings.TrimPrefix(kv.Key, ipam.HandleKey(""))
		cid := strings.TrimPrefix(handle, handleID(inv.conf.Name, ""))
		if cid == "" || strings.Contains(cid, ".") || valid[cid] {
			continue
		}
		if !stale[cid] {
			ips, err := client.IPsByHandle(ctx, handle)
			if err != nil || len(ips) == 0 {
				continue
			}
			holder, err := client.Lookup(ctx, ips[0])
			if err != nil || holder.Attrs[ipam.AttrNode] != inv.node {
				continue
			}
		}
		inv.logger.Info("GC: releasing stale IPAM handle", "handle", handle)
		if err := client.ReleaseByHandle(ctx, handle); err != nil {
			errs = append(errs, ipamError(fmt.Errorf("release handle %s: %w", handle, err)))
		}
	}
	return errors.Join(errs...)
}
