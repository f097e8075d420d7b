package policy

import "github.com/projectcalico/calico-node/internal/model/api"

// Add appends o to the slice of the snapshot that holds its kind and
// reports whether it did: resources the compiler does not read directly
// (FelixConfiguration and the default BGPConfiguration's service ranges,
// which go in through Config) are left out. The agent's cache and the benchmarks assemble snapshots
// through it, so that both feed the compiler the same way.
func (s *Snapshot) Add(o api.Object) bool {
	switch o := o.(type) {
	case *api.WorkloadEndpoint:
		s.WorkloadEndpoints = append(s.WorkloadEndpoints, *o)
	case *api.HostEndpoint:
		s.HostEndpoints = append(s.HostEndpoints, *o)
	case *api.NetworkPolicy:
		s.NetworkPolicies = append(s.NetworkPolicies, *o)
	case *api.GlobalNetworkPolicy:
		s.GlobalNetworkPolicies = append(s.GlobalNetworkPolicies, *o)
	case *api.Profile:
		s.Profiles = append(s.Profiles, *o)
	case *api.NetworkSet:
		s.NetworkSets = append(s.NetworkSets, *o)
	case *api.GlobalNetworkSet:
		s.GlobalNetworkSets = append(s.GlobalNetworkSets, *o)
	case *api.Tier:
		s.Tiers = append(s.Tiers, *o)
	case *api.IPPool:
		s.IPPools = append(s.IPPools, *o)
	case *api.Node:
		s.Nodes = append(s.Nodes, *o)
	default:
		return false
	}
	return true
}
