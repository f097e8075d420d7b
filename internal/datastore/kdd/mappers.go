package kdd

import "github.com/projectcalico/calico-node/internal/model/api"

// newMappers builds the mapper of every kind: Calico's custom resources
// for most, and the Kubernetes objects Calico computes the others from.
func newMappers(s *Store) map[string]mapper {
	ms := map[string]mapper{}
	for _, info := range api.Kinds() {
		switch info.Kind {
		case "Node":
			ms[info.Kind] = newNodeMapper(s, info)
		case "WorkloadEndpoint":
			ms[info.Kind] = newEndpointMapper(s, info)
		case "Profile":
			ms[info.Kind] = newProfileMapper(s, info)
		case "NetworkPolicy":
			ms[info.Kind] = newNetworkPolicyMapper(s, info)
		default:
			ms[info.Kind] = newCRDMapper(s, info)
		}
	}
	return ms
}

// requiredCRDs are the plurals of the custom resources New requires.
func requiredCRDs() []string {
	out := []string{"ipamblocks", "blockaffinities", "ipamhandles", "ipamconfigs"}
	for _, info := range api.Kinds() {
		switch info.Kind {
		case "Node", "WorkloadEndpoint", "Profile":
		default:
			out = append(out, info.Plural)
		}
	}
	return out
}
