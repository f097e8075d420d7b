package policy_test

import (
	"fmt"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

func TestSnapshotAdd(t *testing.T) {
	tests := []struct {
		obj   api.Object
		added bool
		count func(*policy.Snapshot) int
	}{
		{&api.WorkloadEndpoint{}, true, func(s *policy.Snapshot) int { return len(s.WorkloadEndpoints) }},
		{&api.HostEndpoint{}, true, func(s *policy.Snapshot) int { return len(s.HostEndpoints) }},
		{&api.NetworkPolicy{}, true, func(s *policy.Snapshot) int { return len(s.NetworkPolicies) }},
		{&api.GlobalNetworkPolicy{}, true, func(s *policy.Snapshot) int { return len(s.GlobalNetworkPolicies) }},
		{&api.Profile{}, true, func(s *policy.Snapshot) int { return len(s.Profiles) }},
		{&api.NetworkSet{}, true, func(s *policy.Snapshot) int { return len(s.NetworkSets) }},
		{&api.GlobalNetworkSet{}, true, func(s *policy.Snapshot) int { return len(s.GlobalNetworkSets) }},
		{&api.Tier{}, true, func(s *policy.Snapshot) int { return len(s.Tiers) }},
		{&api.IPPool{}, true, func(s *policy.Snapshot) int { return len(s.IPPools) }},
		{&api.Node{}, true, func(s *policy.Snapshot) int { return len(s.Nodes) }},
		// Configuration reaches the compiler through Config, not the lists.
		{&api.FelixConfiguration{}, false, nil},
		{&api.BGPConfiguration{}, false, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%T", tt.obj), func(t *testing.T) {
			var s policy.Snapshot
			if got := s.Add(tt.obj); got != tt.added {
				t.Fatalf("Add = %v, want %v", got, tt.added)
			}
			if tt.count != nil && tt.count(&s) != 1 {
				t.Errorf("the %T is not in its slice", tt.obj)
			}
			if !tt.added && (len(s.WorkloadEndpoints)+len(s.HostEndpoints)+len(s.NetworkPolicies)+
				len(s.GlobalNetworkPolicies)+len(s.Profiles)+len(s.NetworkSets)+
				len(s.GlobalNetworkSets)+len(s.Tiers)+len(s.IPPools)+len(s.Nodes)) != 0 {
				t.Errorf("a %T ended up in the snapshot", tt.obj)
			}
		})
	}
}
