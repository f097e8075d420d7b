package ipam

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// CheckReport is the result of Check. Its JSON is calicoctl's `ipam check
// -o` report (version, clusterGUID, allocations, leakedHandles, ...), so
// reports travel between this project's calicoctl and Calico's; the fields
// after LeakedHandles are this project's additions.
type CheckReport struct {
	// Version is the calicoctl version that wrote the report (set by the
	// caller).
	Version             string `json:"version"`
	ClusterGUID         string `json:"clusterGUID"`
	DatastoreLocked     bool   `json:"datastoreLocked"`
	ClusterInfoRevision string `json:"clusterInformationRevision"`
	ClusterType         string `json:"clusterType"`
	// Allocations maps each allocated address to its allocation(s) (more
	// than one only if blocks overlap, which is itself a fault).
	Allocations map[string][]*Allocation `json:"allocations"`
	// LeakedHandles are handles no allocation refers to.
	LeakedHandles []HandleInfo `json:"leakedHandles,omitempty"`

	// MissingHandles are handle IDs allocations refer to that do not exist.
	MissingHandles []string `json:"missingHandles,omitempty"`
	// BlocksOfMissingNodes are blocks affine to a node that does not exist.
	BlocksOfMissingNodes []BlockRef `json:"blocksOfMissingNodes,omitempty"`
	// InUseNotAllocated are addresses of workloads or nodes, inside an
	// enabled pool, that IPAM has not allocated.
	InUseNotAllocated []InUseIP `json:"inUseNotAllocated,omitempty"`
	// InUseNotInPool are such addresses outside every enabled pool.
	InUseNotInPool []InUseIP `json:"inUseNotInPool,omitempty"`

	// Stats are counts for the human-readable summary.
	Stats CheckStats `json:"-"`
}

// Allocation is one allocated address as calicoctl's report records it.
type Allocation struct {
	IP                string  `json:"ip"`
	Handle            string  `json:"handle,omitempty"`
	SequenceNumber    *uint64 `json:"sequenceNumber,omitempty"`
	Pod               string  `json:"pod,omitempty"`
	Namespace         string  `json:"namespace,omitempty"`
	Node              string  `json:"node,omitempty"`
	Type              string  `json:"type,omitempty"`
	CreationTimestamp string  `json:"creationTimestamp,omitempty"`
	// InUse: a workload endpoint or node uses the address. An allocation
	// that is not in use has leaked.
	InUse bool `json:"inUse"`
	// Borrowed: the block is affine to another node.
	Borrowed bool     `json:"borrowed,omitempty"`
	Owners   []string `json:"owners"`

	// Block and Attrs are for display; not part of the report.
	Block netip.Prefix      `json:"-"`
	Attrs map[string]string `json:"-"`
}

// HandleInfo identifies a handle at a revision (calicoctl's field names).
type HandleInfo struct {
	ID       string
	UID      *string
	Revision string
}

// BlockRef is a block and the node its affinity names.
type BlockRef struct {
	CIDR string `json:"cidr"`
	Node string `json:"node"`
	// Affinity is the block's raw affinity (for display: a virtual
	// host's block names no node).
	Affinity string `json:"-"`
}

// InUseIP is an address and what uses it.
type InUseIP struct {
	IP     string   `json:"ip"`
	Owners []string `json:"owners"`
}

// CheckStats are counts gathered by Check.
type CheckStats struct {
	Blocks, Allocations, Handles int
	// BlockList is every block and the node it is affine to ("" = none).
	BlockList            []BlockRef
	ActivePools          []string
	NodeIPs, WorkloadIPs int
	// LoadBalancerServices counts the Services holding LoadBalancer
	// addresses (see Check).
	LoadBalancerServices int
	InUseIPs             int
	// AllocationsByNode counts allocations per node.
	AllocationsByNode map[string]int
}

// Leaked returns the allocations nothing uses, sorted by address.
func (r *CheckReport) Leaked() []*Allocation {
	var out []*Allocation
	for _, ip := range r.sortedIPs() {
		for _, a := range r.Allocations[ip] {
			if !a.InUse {
				out = append(out, a)
			}
		}
	}
	return out
}

// Problems counts everything Check found wrong; 0 means clean.
func (r *CheckReport) Problems() int {
	return len(r.Leaked()) + len(r.LeakedHandles) + len(r.MissingHandles) +
		len(r.BlocksOfMissingNodes) + len(r.InUseNotAllocated) + len(r.InUseNotInPool)
}

func (r *CheckReport) sortedIPs() []string {
	ips := slices.Collect(maps.Keys(r.Allocations))
	sortAddrs(ips)
	return ips
}

// SortedAllocations returns every allocation sorted by address.
func (r *CheckReport) SortedAllocations() []*Allocation {
	var out []*Allocation
	for _, ip := range r.sortedIPs() {
		out = append(out, r.Allocations[ip]...)
	}
	return out
}

// Check cross-checks IPAM against the rest of the datastore, as
// `calicoctl ipam check` does against Kubernetes: an allocation is in use
// when a WorkloadEndpoint lists its address in ipNetworks or a Node uses it
// as a tunnel address; otherwise it has leaked. It also reports handles
// without addresses, allocations whose handle is missing, and blocks whose
// affinity names a node that does not exist. liveNodes, when given, is the
// authoritative list of node names (e.g. Kubernetes' nodes); otherwise the
// Node resources are.
func (c *Client) Check(ctx context.Context, liveNodes ...string) (*CheckReport, error) {
	var (
		wg                          sync.WaitGroup
		blocks                      []*block
		handles                     map[string]storedHandle
		poolObjs, nodeObjs, wepObjs []api.Object
		ci                          api.Object
		kvErr, poolErr, nodeErr     error
		wepErr, ciErr               error
	)
	wg.Add(5)
	go func() { defer wg.Done(); blocks, handles, kvErr = c.readAll(ctx) }()
	go func() { defer wg.Done(); poolObjs, _, poolErr = c.store.List(ctx, "IPPool", "") }()
	go func() { defer wg.Done(); nodeObjs, _, nodeErr = c.store.List(ctx, "Node", "") }()
	go func() { defer wg.Done(); wepObjs, _, wepErr = c.store.List(ctx, "WorkloadEndpoint", "") }()
	go func() { defer wg.Done(); ci, ciErr = c.store.Get(ctx, "ClusterInformation", "", "default") }()
	wg.Wait()
	for _, err := range []error{kvErr, poolErr, nodeErr, wepErr} {
		if err != nil {
			return nil, fmt.Errorf("ipam check: %w", err)
		}
	}
	if ciErr != nil && !errors.Is(ciErr, datastore.ErrNotFound) {
		return nil, fmt.Errorf("ipam check: %w", ciErr)
	}

	r := &CheckReport{Allocations: map[string][]*Allocation{}}
	r.Stats.AllocationsByNode = map[string]int{}
	if info, ok := ci.(*api.ClusterInformation); ok && ciErr == nil {
		r.ClusterGUID = info.Spec.ClusterGUID
		r.ClusterType = info.Spec.ClusterType
		r.ClusterInfoRevision = info.ResourceVersion
		r.DatastoreLocked = info.Spec.DatastoreReady != nil && !*info.Spec.DatastoreReady
	}

	// Allocations.
	usedHandles := map[string]bool{}
	r.Stats.Blocks = len(blocks)
	for _, b := range blocks {
		owner := b.host()
		r.Stats.BlockList = append(r.Stats.BlockList, BlockRef{CIDR: b.cidr.String(), Node: owner, Affinity: b.affinity()})
		for ord := range b.v.Allocations {
			at, ok := b.attrsOf(ord)
			if !ok {
				continue
			}
			ip := b.addr(ord).String()
			seq := b.seqOf(ord)
			a := &Allocation{IP: ip, Handle: b.handleOf(ord), SequenceNumber: &seq, Block: b.cidr,
				Attrs: at.Secondary, Node: owner,
				Pod: at.Secondary[AttrPod], Namespace: at.Secondary[AttrNamespace],
				Type: at.Secondary[AttrType], CreationTimestamp: at.Secondary[AttrTimestamp]}
			if n := at.Secondary[AttrNode]; n != "" {
				a.Node = n
			}
			a.Borrowed = a.Node != owner
			if a.Handle != "" {
				usedHandles[a.Handle] = true
			}
			r.Allocations[ip] = append(r.Allocations[ip], a)
			r.Stats.AllocationsByNode[a.Node]++
			r.Stats.Allocations++
		}
	}

	// What uses addresses: nodes' tunnel addresses and workload endpoints.
	inUse := map[string][]string{}
	use := func(addr, owner string) bool {
		ip, ok := normaliseIP(addr)
		if !ok {
			return false
		}
		inUse[ip] = append(inUse[ip], owner)
		for _, a := range r.Allocations[ip] {
			a.InUse = true
			a.Owners = append(a.Owners, owner)
		}
		return true
	}
	nodes := map[string]bool{}
	for _, o := range nodeObjs {
		n, ok := o.(*api.Node)
		if !ok {
			continue
		}
		nodes[n.Name] = true
		owner := fmt.Sprintf("Node(%s)", n.Name)
		for _, addr := range nodeTunnelAddrs(n) {
			if use(addr, owner) {
				r.Stats.NodeIPs++
			}
		}
	}
	for _, o := range wepObjs {
		w, ok := o.(*api.WorkloadEndpoint)
		if !ok {
			continue
		}
		owner := fmt.Sprintf("Workload(%s/%s)", w.Namespace, w.Name)
		for _, n := range w.Spec.IPNetworks {
			if use(n, owner) {
				r.Stats.WorkloadIPs++
			}
		}
	}
	// LoadBalancer addresses: Calico's calicoctl counts a Service's
	// status addresses as in use; without the Kubernetes API here, an
	// allocation of the LoadBalancer controller (a block of the virtual
	// host, the service and namespace attributes) counts as used by its
	// Service. The controller's full pass releases those of Services that
	// are gone.
	lbServices := map[string]bool{}
	for _, b := range blocks {
		if b.owner() != lbOwner {
			continue
		}
		for ord := range b.v.Allocations {
			at, ok := b.attrsOf(ord)
			ns, svc := at.Secondary[AttrNamespace], at.Secondary[AttrService]
			if !ok || ns == "" || svc == "" {
				continue
			}
			if use(b.addr(ord).String(), fmt.Sprintf("Service(%s/%s)", ns, svc)) {
				lbServices[ns+"/"+svc] = true
			}
		}
	}
	r.Stats.LoadBalancerServices = len(lbServices)
	r.Stats.InUseIPs = len(inUse)

	// Addresses in use but not allocated.
	var active []netip.Prefix
	for _, q := range parsePools(poolObjs, c.logger) {
		if !q.Disabled {
			active = append(active, q.CIDR)
			r.Stats.ActivePools = append(r.Stats.ActivePools, q.CIDR.String())
		}
	}
	inUseIPs := slices.Collect(maps.Keys(inUse))
	sortAddrs(inUseIPs)
	for _, ip := range inUseIPs {
		if len(r.Allocations[ip]) > 0 {
			continue
		}
		u := InUseIP{IP: ip, Owners: inUse[ip]}
		addr := netip.MustParseAddr(ip)
		if slices.ContainsFunc(active, func(p netip.Prefix) bool { return p.Contains(addr) }) {
			r.InUseNotAllocated = append(r.InUseNotAllocated, u)
		} else {
			r.InUseNotInPool = append(r.InUseNotInPool, u)
		}
	}

	// Handles.
	r.Stats.Handles = len(handles)
	for _, id := range slices.Sorted(maps.Keys(handles)) {
		if !usedHandles[id] {
			r.LeakedHandles = append(r.LeakedHandles, HandleInfo{ID: id, Revision: revString(handles[id].rev)})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(usedHandles)) {
		if _, ok := handles[id]; !ok {
			r.MissingHandles = append(r.MissingHandles, id)
		}
	}

	// Blocks of nodes that are gone.
	if len(liveNodes) > 0 {
		nodes = map[string]bool{}
		for _, n := range liveNodes {
			nodes[n] = true
		}
	}
	for _, b := range blocks {
		if h := b.host(); h != "" && !nodes[h] {
			r.BlocksOfMissingNodes = append(r.BlocksOfMissingNodes, BlockRef{CIDR: b.cidr.String(), Node: h})
		}
	}
	return r, nil
}

// nodeTunnelAddrs are the addresses a Node takes from IPAM for itself.
func nodeTunnelAddrs(n *api.Node) []string {
	var out []string
	add := func(s string) {
		if s != "" {
			out = append(out, s)
		}
	}
	add(n.Spec.IPv4VXLANTunnelAddr)
	add(n.Spec.IPv6VXLANTunnelAddr)
	if n.Spec.BGP != nil {
		add(n.Spec.BGP.IPv4IPIPTunnelAddr)
	}
	if n.Spec.Wireguard != nil {
		add(n.Spec.Wireguard.InterfaceIPv4Address)
		add(n.Spec.Wireguard.InterfaceIPv6Address)
	}
	return out
}

// normaliseIP turns "10.0.0.1", "10.0.0.1/32" or "10.0.0.1/24" into
// "10.0.0.1".
func normaliseIP(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Unmap().String(), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().String(), true
	}
	return "", false
}

// LeakRelease is what ReleaseLeaked did.
type LeakRelease struct {
	// Released are the leaked addresses now free.
	Released []netip.Addr
	// Skipped are reported addresses no longer leaked: now in use, freed or
	// handed out again since the report.
	Skipped []netip.Addr
	// HandlesDeleted and HandlesSkipped are the reported leaked handles
	// deleted, and those that changed or went away since.
	HandlesDeleted, HandlesSkipped []string
}

// ErrWrongCluster: a report was written for another cluster.
var ErrWrongCluster = errors.New("report is from a different cluster")

// ReleaseLeaked releases exactly the leaked addresses and handles of the
// given check reports (those leaked in every report, when several are
// given), after re-checking each against the datastore now: an address is
// released only if it is still allocated to the same handle with the same
// sequence number and still nothing uses it, and the release itself is
// conditional on both, so an address handed out again meanwhile is left
// alone. A handle is deleted only if it is still unused at the reported
// revision.
func (c *Client) ReleaseLeaked(ctx context.Context, reports ...*CheckReport) (LeakRelease, error) {
	var out LeakRelease
	if len(reports) == 0 {
		return out, errors.New("release leaked addresses: no report given")
	}
	type key struct {
		handle string
		seq    uint64
		hasSeq bool
	}
	var leaked map[string]key
	var handles map[string]string
	for i, r := range reports {
		ips := map[string]key{}
		for _, a := range r.Leaked() {
			k := key{handle: a.Handle}
			if a.SequenceNumber != nil {
				k.seq, k.hasSeq = *a.SequenceNumber, true
			}
			if i == 0 || leaked[a.IP] == k {
				ips[a.IP] = k
			}
		}
		hs := map[string]string{}
		for _, h := range r.LeakedHandles {
			if i == 0 || handles[h.ID] == h.Revision {
				hs[h.ID] = h.Revision
			}
		}
		if i > 0 {
			for ip := range ips {
				if _, ok := leaked[ip]; !ok {
					delete(ips, ip)
				}
			}
		}
		leaked, handles = ips, hs
	}

	now, err := c.Check(ctx)
	if err != nil {
		return out, fmt.Errorf("release leaked addresses: %w", err)
	}
	for _, r := range reports {
		if r.ClusterGUID != "" && now.ClusterGUID != "" && r.ClusterGUID != now.ClusterGUID {
			return out, fmt.Errorf("release leaked addresses: %w (report %s, datastore %s)", ErrWrongCluster, r.ClusterGUID, now.ClusterGUID)
		}
	}

	var opts []ReleaseOptions
	ips := slices.Collect(maps.Keys(leaked))
	sortAddrs(ips)
	for _, ip := range ips {
		k := leaked[ip]
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		still := false
		for _, a := range now.Allocations[ip] {
			if !a.InUse && a.Handle == k.handle && (!k.hasSeq || (a.SequenceNumber != nil && *a.SequenceNumber == k.seq)) {
				still = true
			}
		}
		if len(now.Allocations[ip]) != 1 || !still {
			out.Skipped = append(out.Skipped, addr)
			continue
		}
		o := ReleaseOptions{Addr: addr, Handle: k.handle}
		if k.hasSeq {
			seq := k.seq
			o.SequenceNumber = &seq
		}
		opts = append(opts, o)
	}
	if len(opts) > 0 {
		unallocated, err := c.Release(ctx, opts...)
		if err != nil {
			return out, fmt.Errorf("release leaked addresses: %w", err)
		}
		for _, o := range opts {
			if slices.Contains(unallocated, o.Addr) {
				out.Skipped = append(out.Skipped, o.Addr)
			} else {
				out.Released = append(out.Released, o.Addr)
			}
		}
		slices.SortFunc(out.Skipped, netip.Addr.Compare)
	}

	stillLeaked := map[string]string{}
	for _, h := range now.LeakedHandles {
		stillLeaked[h.ID] = h.Revision
	}
	ids := slices.Collect(maps.Keys(handles))
	sort.Strings(ids)
	for _, id := range ids {
		rev := handles[id]
		if stillLeaked[id] != rev || rev == "" {
			out.HandlesSkipped = append(out.HandlesSkipped, id)
			continue
		}
		r, err := parseRev(rev)
		if err != nil {
			out.HandlesSkipped = append(out.HandlesSkipped, id)
			continue
		}
		hkey := HandleKey(id)
		res, err := c.kv.Txn(ctx, datastore.Txn{
			Conds: []datastore.Cond{{Key: hkey, Rev: r}},
			Ops:   []datastore.Op{{Type: datastore.OpDelete, Key: hkey}},
		})
		if err != nil {
			return out, fmt.Errorf("delete leaked handle %s: %w", id, err)
		}
		if res.Succeeded {
			out.HandlesDeleted = append(out.HandlesDeleted, id)
		} else {
			out.HandlesSkipped = append(out.HandlesSkipped, id)
		}
	}
	return out, nil
}

func parseRev(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
