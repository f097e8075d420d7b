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

// Clear empties the slice of the snapshot that holds kind (an object
// kind, as Add files them) and reports whether there is one. The slice
// is dropped, not truncated: a snapshot made by copying another shares
// its slices, and the next Add of kind must not write into them.
func (s *Snapshot) Clear(kind string) bool {
	switch kind {
	case "WorkloadEndpoint":
		s.WorkloadEndpoints = nil
	case "HostEndpoint":
		s.HostEndpoints = nil
	case "NetworkPolicy":
		s.NetworkPolicies = nil
	case "GlobalNetworkPolicy":
		s.GlobalNetworkPolicies = nil
	case "Profile":
		s.Profiles = nil
	case "NetworkSet":
		s.NetworkSets = nil
	case "GlobalNetworkSet":
		s.GlobalNetworkSets = nil
	case "Tier":
		s.Tiers = nil
	case "IPPool":
		s.IPPools = nil
	case "Node":
		s.Nodes = nil
	default:
		return false
	}
	return true
}
