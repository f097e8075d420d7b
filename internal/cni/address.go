package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// handleID names a container's addresses in Calico IPAM: the network name
// and the container ID ("k8s-pod-network.<containerID>" for the usual
// Kubernetes network), exactly as Calico's plugins do, so that addresses
// allocated by either implementation are released by the other.
func handleID(network, containerID string) string { return network + "." + containerID }

// ipamRequestFromConf is the Calico IPAM request the config alone asks
// for; annotations may then override it.
func ipamRequestFromConf(c *netConf) ipamRequest {
	// validate already checked the pools.
	v4, _ := normalizePools(c.IPAMConf.IPv4Pools, true)
	v6, _ := normalizePools(c.IPAMConf.IPv6Pools, false)
	return ipamRequest{v4Pools: v4, v6Pools: v6, num4: c.assignV4(), num6: c.assignV6()}
}

// calicoAssign allocates the container's addresses in-process with Calico
// IPAM. It is all or nothing: on error the handle holds nothing, as far as
// etcd can still be told.
//
// Two cases need more than ipam's own all-or-nothing:
//   - Addresses the handle already holds are left over from an earlier ADD
//     of this container that failed while etcd was away, so that its undo
//     could not release them (the CNI spec allows no second ADD without a
//     DEL otherwise). The request replaces them (Replace) instead of
//     adding to them, so the retried ADD does not leak the first address
//     for the pod's whole life; Calico leaves them to the DEL or to IPAM
//     garbage collection.
//   - When the connection to etcd fails during the write, etcd may have
//     applied it. The handle is then released, best effort, so that a
//     broken connection to a healthy etcd leaves nothing behind; when
//     etcd itself is gone the release fails too and the runtime's DEL or
//     the retried ADD cleans up.
func (inv *invocation) calicoAssign(ctx context.Context, req ipamRequest, nsLabels map[string]string) ([]netip.Prefix, error) {
	store, err := inv.datastore(ctx)
	if err != nil {
		return nil, err
	}
	client := inv.ipamClient(store)
	ctx, cancel := context.WithTimeout(ctx, ipamTimeout)
	defer cancel()
	handle := handleID(inv.conf.Name, inv.args.ContainerID)
	attrs := map[string]string{
		"node":      inv.node,
		"timestamp": time.Now().UTC().String(),
	}
	if inv.k8s != nil {
		attrs["namespace"] = inv.k8s.namespace
		attrs["pod"] = inv.k8s.pod
	}

	// AutoAssign holds the node's IPAM lock around its datastore work
	// (in the agent, once for all the ADDs queued for it together).
	lock := inv.ipamLock
	release := func(why string) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		defer cancel()
		if rerr := client.ReleaseByHandle(rctx, handle); rerr != nil {
			inv.logger.Warn("undo: release addresses", "handle", handle, "why", why, "err", rerr)
		}
	}

	if len(req.ips) > 0 {
		unlock := lock()
		defer unlock()
		var out []netip.Prefix
		for i, ip := range req.ips {
			err := client.AssignIP(ctx, ipam.AssignIPArgs{IP: ip, HandleID: handle, Node: inv.node, Attrs: attrs, Replace: i == 0})
			if err != nil {
				if len(out) > 0 || isUnavailable(err) {
					release("requested address failed")
				}
				return nil, ipamError(fmt.Errorf("assign requested address %s: %w", ip, err))
			}
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		}
		return out, nil
	}

	v4, v6, err := client.AutoAssign(ctx, ipam.AutoAssignArgs{
		Num4:            req.num4,
		Num6:            req.num6,
		HandleID:        handle,
		Node:            inv.node,
		IPv4Pools:       req.v4Pools,
		IPv6Pools:       req.v6Pools,
		Attrs:           attrs,
		NamespaceLabels: nsLabels,
		Replace:         true,
		Lock:            lock,
	})
	if err != nil {
		if isUnavailable(err) {
			unlock := lock()
			release("etcd failed during the allocation")
			unlock()
		}
		return nil, ipamError(fmt.Errorf("assign addresses for %s: %w", handle, err))
	}
	if len(v4) < req.num4 || len(v6) < req.num6 {
		unlock := lock()
		release("partial allocation")
		unlock()
		return nil, fmt.Errorf("assign addresses for %s: got %d IPv4 and %d IPv6, want %d and %d", handle, len(v4), len(v6), req.num4, req.num6)
	}
	return append(v4, v6...), nil
}

// ipamClient is the IPAM client of an allocation or release, on
// cachedPools, and in the agent on its IPAM cache for the store.
func (inv *invocation) ipamClient(store datastore.Store) *ipam.Client {
	c := ipam.New(store.IPAM(), cachedPools{store}, inv.logger.With("component", "ipam"))
	if inv.host.ipamCache != nil && inv.sharedStore {
		c.UseCache(inv.host.ipamCache(store))
	}
	return c
}

// cachedPools is the pool source of an allocation: pools, reservations
// and the node's labels may come from the Kubernetes API server's watch
// cache (datastore.WithCachedReads), which spares ADD a wait of up to
// 100 ms for that cache to catch up; the allocation itself is a
// conditional write on the blocks as read now.
type cachedPools struct{ store datastore.Store }

func (c cachedPools) List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error) {
	return c.store.List(datastore.WithCachedReads(ctx), kind, namespace)
}

func (c cachedPools) Get(ctx context.Context, kind, namespace, name string) (api.Object, error) {
	return c.store.Get(datastore.WithCachedReads(ctx), kind, namespace, name)
}

// calicoRelease releases everything the container's handle holds; a
// missing handle is fine.
func (inv *invocation) calicoRelease(ctx context.Context, containerID string) error {
	store, err := inv.datastore(ctx)
	if err != nil {
		return err
	}
	client := inv.ipamClient(store)
	ctx, cancel := context.WithTimeout(ctx, ipamTimeout)
	defer cancel()
	handle := handleID(inv.conf.Name, containerID)
	if err := client.ReleaseHandle(ctx, inv.node, handle, inv.ipamLock); err != nil {
		return ipamError(fmt.Errorf("release addresses of %s: %w", handle, err))
	}
	return nil
}

// ipamError marks datastore trouble as "try again later" (code 11); an
// exhausted pool is too (addresses come back as pods go).
func ipamError(err error) error {
	switch {
	case errors.Is(err, ipam.ErrNoFreeAddresses), errors.Is(err, ipam.ErrBlockLimit), errors.Is(err, ipam.ErrConflict):
		return types.NewError(types.ErrTryAgainLater, err.Error(), "")
	case errors.Is(err, ipam.ErrPoolNotFound), errors.Is(err, ipam.ErrNoPools), errors.Is(err, ipam.ErrNotInPool), errors.Is(err, ipam.ErrPoolDisabled):
		return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	return datastoreError(err)
}

// ipamLock takes the node's IPAM lock of the config (lockIPAM).
func (inv *invocation) ipamLock() (unlock func()) {
	return lockIPAM(inv.conf.ipamLockFile(), inv.logger)
}

// lockIPAM takes the node-wide IPAM lock Calico's plugins share
// (ipam_lock_file). Concurrent ADDs on a node then update the node's block
// one after the other instead of racing for it and retrying. Best effort:
// without the lock the optimistic transactions are still correct.
func lockIPAM(path string, logger *slog.Logger) (unlock func()) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		logger.Debug("no IPAM lock", "path", path, "err", err)
		return func() {}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		logger.Debug("no IPAM lock", "path", path, "err", err)
		return func() {}
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		logger.Debug("no IPAM lock", "path", path, "err", err)
		return func() {}
	}
	return func() { f.Close() } // closing releases the lock
}

// delegateAdd runs another IPAM plugin (host-local, ...) as runtimes
// expect: found in CNI_PATH, same config on stdin, CNI_ARGS with
// IgnoreUnknown=1 so that Kubernetes' arguments do not upset it.
func (inv *invocation) delegateAdd(ctx context.Context) (*types100.Result, error) {
	stdin, err := inv.delegateStdin(ctx, false)
	if err != nil {
		return nil, err
	}
	ignoreUnknownArgs()
	r, err := invoke.DelegateAdd(ctx, inv.conf.IPAMConf.Type, stdin, nil)
	if err != nil {
		return nil, fmt.Errorf("IPAM plugin %s: %w", inv.conf.IPAMConf.Type, err)
	}
	res, err := types100.NewResultFromResult(r)
	if err != nil {
		return nil, fmt.Errorf("IPAM plugin %s returned an unusable result: %w", inv.conf.IPAMConf.Type, err)
	}
	if len(res.IPs) == 0 {
		inv.delegateDel(ctx)
		return nil, fmt.Errorf("IPAM plugin %s returned no address", inv.conf.IPAMConf.Type)
	}
	return res, nil
}

// delegateDel releases what the delegated IPAM plugin holds for the
// container.
func (inv *invocation) delegateDel(ctx context.Context) error {
	stdin, err := inv.delegateStdin(ctx, true)
	if err != nil {
		return err
	}
	ignoreUnknownArgs()
	if err := invoke.DelegateDel(ctx, inv.conf.IPAMConf.Type, stdin, nil); err != nil {
		return fmt.Errorf("IPAM plugin %s: %w", inv.conf.IPAMConf.Type, err)
	}
	return nil
}

func ignoreUnknownArgs() {
	args := os.Getenv("CNI_ARGS")
	if strings.Contains(args, "IgnoreUnknown=") {
		return
	}
	if args == "" {
		os.Setenv("CNI_ARGS", "IgnoreUnknown=1")
	} else {
		os.Setenv("CNI_ARGS", "IgnoreUnknown=1;"+args)
	}
}

// delegateStdin is the config handed to a delegated IPAM plugin. For
// host-local, Calico's special subnet values "usePodCidr" and
// "usePodCidrIPv6" are replaced by the node's pod CIDRs from Kubernetes
// (on DEL by a dummy range: host-local releases by container ID).
func (inv *invocation) delegateStdin(ctx context.Context, forDel bool) ([]byte, error) {
	stdin := inv.args.StdinData
	if inv.conf.IPAMConf.Type != "host-local" || !strings.Contains(strings.ToLower(string(stdin)), "usepodcidr") {
		return stdin, nil
	}
	var doc map[string]any
	if err := json.Unmarshal(stdin, &doc); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "decode network config: "+err.Error(), "")
	}
	ipamSection, ok := doc["ipam"].(map[string]any)
	if !ok {
		return nil, configError("ipam", "is not an object")
	}
	var v4, v6 string
	lookup := func() error {
		if forDel {
			v4, v6 = "0.0.0.0/0", "::/0"
			return nil
		}
		if v4 != "" || v6 != "" {
			return nil
		}
		cidrs, err := fetchPodCIDRs(ctx, inv.conf, inv.node)
		if err != nil {
			return err
		}
		for _, c := range cidrs {
			if ip, _, err := net.ParseCIDR(c); err == nil && ip.To4() != nil {
				v4 = c
			} else if err == nil {
				v6 = c
			}
		}
		return nil
	}
	replace := func(m map[string]any) error {
		s, _ := m["subnet"].(string)
		switch {
		case strings.EqualFold(s, "usePodCidr"):
			if err := lookup(); err != nil {
				return err
			}
			if v4 == "" {
				return fmt.Errorf("usePodCidr: node %s has no IPv4 pod CIDR", inv.node)
			}
			m["subnet"] = v4
		case strings.EqualFold(s, "usePodCidrIPv6"):
			if err := lookup(); err != nil {
				return err
			}
			if v6 == "" {
				return fmt.Errorf("usePodCidrIPv6: node %s has no IPv6 pod CIDR", inv.node)
			}
			m["subnet"] = v6
		}
		return nil
	}
	if err := replace(ipamSection); err != nil {
		return nil, err
	}
	if ranges, ok := ipamSection["ranges"].([]any); ok {
		for _, set := range ranges {
			rs, _ := set.([]any)
			for _, r := range rs {
				if m, ok := r.(map[string]any); ok {
					if err := replace(m); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	return json.Marshal(doc)
}

// delegatedRoutes are the route destinations a delegated IPAM plugin asked
// for (host-local "routes"); their gateways are ignored because the pod's
// link is point-to-point. Empty means the defaults.
func delegatedRoutes(res *types100.Result, includeDefaults bool) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range res.Routes {
		if p, ok := prefixFromIPNet(r.Dst); ok {
			out = append(out, p.Masked())
		}
	}
	if len(out) == 0 {
		return defaultRoutes()
	}
	if includeDefaults {
		out = append(defaultRoutes(), out...)
	}
	return out
}

func prefixFromIPNet(n net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, _ := n.Mask.Size()
	if len(n.Mask) == net.IPv6len && a.Is4() {
		ones -= 96
	}
	return netip.PrefixFrom(a, ones), true
}

// hostPrefixes turns IPAM addresses into the pod's /32 and /128 addresses
// (host-local hands out addresses with their subnet's mask; on a
// point-to-point link only the address matters).
func hostPrefixes(ips []*types100.IPConfig) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ips))
	for _, ip := range ips {
		if p, ok := prefixFromIPNet(ip.Address); ok {
			out = append(out, netip.PrefixFrom(p.Addr(), p.Addr().BitLen()))
		}
	}
	return out
}
