package controllers

import (
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Labels Calico's IPAM controller uses for what it cannot attribute.
const (
	noPoolLabel     = "no_ippool"
	noNodeLabel     = "unknown_node"
	noAffinityLabel = "no_affinity"
)

// ipamMetrics are Calico kube-controllers' IPAM metrics, with its names,
// types, labels and help: per pool and node, and the older per-node
// ("legacy") gauges. Only the leader keeps them; they are cleared when it
// stops leading.
type ipamMetrics struct {
	poolSize                                      *prometheus.GaugeVec // ippool
	inUse, borrowed, blocks, gcCandidates         *prometheus.GaugeVec // ippool, node
	gcReclamations                                *prometheus.CounterVec
	perNodeAllocs, perNodeBorrowed, perNodeBlocks *prometheus.GaugeVec // node
}

func newIPAMMetrics() *ipamMetrics {
	byPoolNode := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"ippool", "node"})
	}
	byNode := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"node"})
	}
	return &ipamMetrics{
		poolSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ipam_ippool_size", Help: "Total number of addresses in the IP Pool"}, []string{"ippool"}),
		inUse:    byPoolNode("ipam_allocations_in_use", "IPs currently allocated in IPAM to a workload or tunnel endpoint."),
		borrowed: byPoolNode("ipam_allocations_borrowed", "IPs currently allocated in IPAM to a workload or tunnel endpoint, where the allocation was borrowed "+
			"from a block affine to another node."),
		blocks: byPoolNode("ipam_blocks", "IPAM blocks currently allocated for the IP pool."),
		gcCandidates: byPoolNode("ipam_allocations_gc_candidates", "Allocations that are currently marked by the garbage collector as potential candidates to "+
			"reclaim. Under normal operation, this metric should return to zero after the garbage collector "+
			"confirms that this allocation can be reclaimed and reclaims it, or the allocation is confirmed as valid."),
		gcReclamations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ipam_allocations_gc_reclamations",
			Help: "The total allocations that have been reclaimed by the garbage collector over time. Under normal " +
				"operation, this counter should increase, and increases of this counter should align to a return to zero " +
				"for the candidate gauge."}, []string{"ippool", "node"}),
		perNodeAllocs:   byNode("ipam_allocations_per_node", "Number of IPs allocated"),
		perNodeBorrowed: byNode("ipam_allocations_borrowed_per_node", "Number of allocated IPs that are from non-affine blocks."),
		perNodeBlocks:   byNode("ipam_blocks_per_node", "Number of blocks in IPAM"),
	}
}

func (m *ipamMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.poolSize, m.inUse, m.borrowed, m.blocks, m.gcCandidates, m.gcReclamations,
		m.perNodeAllocs, m.perNodeBorrowed, m.perNodeBlocks}
}

// poolNode labels a gauge of one pool and node.
type poolNode struct{ pool, node string }

// ipamCounts are the values of the IPAM gauges at one moment.
type ipamCounts struct {
	poolSize                              map[string]float64
	inUse, borrowed, blocks, gcCandidates map[poolNode]int
	allocs, borrowedByNode, blocksByNode  map[string]int
}

// countIPAM computes the gauges as Calico's IPAM controller does, from an
// IPAM check report, the IP pools and the Calico nodes (each of which
// gets a zero in every pool's per-node gauges). candidate says which
// allocations the garbage collector holds as possible leaks. It is pure.
func countIPAM(report *ipam.CheckReport, pools []api.Pool, nodes []string, candidate func(*ipam.Allocation) bool) ipamCounts {
	c := ipamCounts{
		poolSize: map[string]float64{},
		inUse:    map[poolNode]int{}, borrowed: map[poolNode]int{}, blocks: map[poolNode]int{}, gcCandidates: map[poolNode]int{},
		allocs: map[string]int{}, borrowedByNode: map[string]int{}, blocksByNode: map[string]int{},
	}
	for _, p := range pools {
		c.poolSize[p.Name] = float64(uint64(1) << min(p.CIDR.Addr().BitLen()-p.CIDR.Bits(), 63))
		for _, node := range nodes {
			pn := poolNode{p.Name, node}
			c.inUse[pn], c.borrowed[pn], c.gcCandidates[pn] = 0, 0, 0
		}
	}
	owner := map[netip.Prefix]string{}
	for _, b := range report.Stats.BlockList {
		cidr, err := netip.ParsePrefix(b.CIDR)
		if err != nil {
			continue
		}
		node := b.Node
		if node == "" {
			node = noAffinityLabel
		}
		owner[cidr] = b.Node
		c.blocks[poolNode{poolOf(pools, cidr), node}]++
		c.blocksByNode[node]++
	}
	for _, as := range report.Allocations {
		for _, a := range as {
			pool := poolOf(pools, a.Block)
			node := a.Attrs[ipam.AttrNode]
			if node == "" {
				node = noNodeLabel
			}
			pn := poolNode{pool, node}
			c.inUse[pn]++
			c.allocs[node]++
			if aff := owner[a.Block]; node != noNodeLabel && (aff == "" || aff != node) {
				c.borrowed[pn]++
				c.borrowedByNode[node]++
			}
			if candidate != nil && candidate(a) {
				c.gcCandidates[pn]++
			}
		}
	}
	return c
}

// set publishes c, replacing what the gauges showed.
func (m *ipamMetrics) set(c ipamCounts) {
	byPool := func(v *prometheus.GaugeVec, counts map[poolNode]int) {
		v.Reset()
		for pn, n := range counts {
			v.WithLabelValues(pn.pool, pn.node).Set(float64(n))
		}
	}
	byNode := func(v *prometheus.GaugeVec, counts map[string]int) {
		v.Reset()
		for node, n := range counts {
			v.WithLabelValues(node).Set(float64(n))
		}
	}
	m.poolSize.Reset()
	for pool, n := range c.poolSize {
		m.poolSize.WithLabelValues(pool).Set(n)
	}
	byPool(m.inUse, c.inUse)
	byPool(m.borrowed, c.borrowed)
	byPool(m.blocks, c.blocks)
	byPool(m.gcCandidates, c.gcCandidates)
	byNode(m.perNodeAllocs, c.allocs)
	byNode(m.perNodeBorrowed, c.borrowedByNode)
	byNode(m.perNodeBlocks, c.blocksByNode)
}

// clear empties the gauges: this instance no longer knows.
func (m *ipamMetrics) clear() {
	for _, v := range []*prometheus.GaugeVec{m.poolSize, m.inUse, m.borrowed, m.blocks, m.gcCandidates,
		m.perNodeAllocs, m.perNodeBorrowed, m.perNodeBlocks} {
		v.Reset()
	}
}

// reclaimed counts one allocation the garbage collector released.
func (m *ipamMetrics) reclaimed(pools []api.Pool, a *ipam.Allocation) {
	pool := poolOf(pools, a.Block)
	node := a.Attrs[ipam.AttrNode]
	if node == "" {
		node = noNodeLabel
	}
	m.gcReclamations.WithLabelValues(pool, node).Inc()
}

// poolOf names the pool holding block, the first of pools by name (the
// order api.ParsePools gives), or noPoolLabel.
func poolOf(pools []api.Pool, block netip.Prefix) string {
	for _, p := range pools {
		if p.CIDR.Bits() <= block.Bits() && p.CIDR.Contains(block.Addr()) {
			return p.Name
		}
	}
	return noPoolLabel
}
