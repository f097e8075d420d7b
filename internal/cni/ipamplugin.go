package cni

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/projectcalico/calico-node/internal/ipam"
)

// The calico-ipam plugin, for runtimes (or other network plugins) that
// execute it. The calico network plugin does not: with "ipam": {"type":
// "calico-ipam"} it runs the same code in-process.

func ipamAdd(args *skel.CmdArgs) error {
	return run(&host{}, IPAMPlugin, "ADD", args, (*invocation).ipamAdd)
}

func ipamDel(args *skel.CmdArgs) error {
	return run(&host{}, IPAMPlugin, "DEL", args, (*invocation).ipamDel)
}

func ipamCheck(args *skel.CmdArgs) error {
	return run(&host{}, IPAMPlugin, "CHECK", args, (*invocation).ipamCheck)
}

// ipamAdd allocates the container's addresses: the address CNI_ARGS "IP="
// names, else the pod's ipAddrs annotation, else automatically from the
// configured (or annotated) pools.
func (inv *invocation) ipamAdd(ctx context.Context) error {
	req := ipamRequestFromConf(inv.conf)
	var nsLabels map[string]string
	if inv.k8s != nil && inv.conf.k8sAPIConfigured() {
		pod, err := fetchPodInfo(ctx, inv.conf, inv.k8s.namespace, inv.k8s.pod)
		if err != nil {
			return err
		}
		if err := req.applyAnnotations(pod); err != nil {
			return err
		}
		nsLabels = pod.NSLabels
	}
	if inv.requestedIP != "" {
		ips, err := parseIPAddrs([]string{inv.requestedIP})
		if err != nil {
			return types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_ARGS IP: "+err.Error(), "")
		}
		req.ips = ips
	}
	addrs, err := inv.calicoAssign(ctx, req, nsLabels)
	if err != nil {
		return err
	}
	result := &types100.Result{CNIVersion: types100.ImplementedSpecVersion, DNS: inv.conf.DNS}
	for _, a := range addrs {
		result.IPs = append(result.IPs, &types100.IPConfig{Address: *ipNet(inv.withBlockMask(ctx, a))})
	}
	return printResult(inv.host.out(), result, inv.cniVersion())
}

// withBlockMask gives an address the prefix length of its IPAM block, as
// Calico's calico-ipam reports addresses (10.244.166.128/26): network
// plugins such as ptp or bridge derive a subnet from it. The calico
// network plugin itself only ever uses the address.
func (inv *invocation) withBlockMask(ctx context.Context, a netip.Prefix) netip.Prefix {
	store, err := inv.datastore(ctx)
	if err != nil {
		return a
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout(store))
	defer cancel()
	h, err := ipam.New(store.IPAM(), store, inv.logger).Lookup(ctx, a.Addr())
	if err != nil || !h.Block.IsValid() {
		inv.logger.Debug("no block for address; reporting it as a host address", "address", a, "err", err)
		return a
	}
	return netip.PrefixFrom(a.Addr(), h.Block.Bits())
}

// ipamDel releases the container's handle; nothing held is fine.
func (inv *invocation) ipamDel(ctx context.Context) error {
	return inv.calicoRelease(ctx, inv.args.ContainerID)
}

// ipamCheck verifies that the container's handle still holds every
// address prevResult reports.
func (inv *invocation) ipamCheck(ctx context.Context) error {
	prev, err := inv.prevResult()
	if err != nil {
		return err
	}
	store, err := inv.datastore(ctx)
	if err != nil {
		return err
	}
	handle := handleID(inv.conf.Name, inv.args.ContainerID)
	ctx, cancel := context.WithTimeout(ctx, ipamTimeout)
	defer cancel()
	held, err := ipam.New(store.IPAM(), store, inv.logger).IPsByHandle(ctx, handle)
	if err != nil {
		return datastoreError(fmt.Errorf("addresses of %s: %w", handle, err))
	}
	for _, ip := range prev.IPs {
		p, ok := prefixFromIPNet(ip.Address)
		if !ok {
			continue
		}
		if !slices.Contains(held, p.Addr()) {
			return checkError("address %s is not held by %s (it holds %v)", p.Addr(), handle, held)
		}
	}
	return nil
}
