package api

import "testing"

func TestKindRegistry(t *testing.T) {
	plurals := map[string]string{
		"IPPool": "ippools", "IPReservation": "ipreservations", "Node": "nodes",
		"BGPConfiguration": "bgpconfigurations", "BGPPeer": "bgppeers", "BGPFilter": "bgpfilters",
		"FelixConfiguration": "felixconfigurations", "NetworkPolicy": "networkpolicies",
		"GlobalNetworkPolicy": "globalnetworkpolicies", "NetworkSet": "networksets",
		"GlobalNetworkSet": "globalnetworksets", "HostEndpoint": "hostendpoints",
		"Profile": "profiles", "WorkloadEndpoint": "workloadendpoints",
		"KubeControllersConfiguration": "kubecontrollersconfigurations",
		"ClusterInformation":           "clusterinformations", "Tier": "tiers",
	}
	namespaced := map[string]bool{"NetworkPolicy": true, "NetworkSet": true, "WorkloadEndpoint": true}
	ks := Kinds()
	if len(ks) != len(plurals) {
		t.Errorf("%d kinds, want %d", len(ks), len(plurals))
	}
	seen := map[string]string{}
	for _, k := range ks {
		if plurals[k.Kind] != k.Plural {
			t.Errorf("%s plural %q, want %q", k.Kind, k.Plural, plurals[k.Kind])
		}
		if k.Namespaced != namespaced[k.Kind] {
			t.Errorf("%s namespaced %v", k.Kind, k.Namespaced)
		}
		obj := k.New()
		if obj.Type().Kind != k.Kind || obj.Type().APIVersion != GroupVersion {
			t.Errorf("%s New() type %+v", k.Kind, *obj.Type())
		}
		// Every name must lead to one kind only.
		for _, n := range append([]string{k.Plural}, k.Aliases...) {
			if other, dup := seen[n]; dup {
				t.Errorf("name %q is used by %s and %s", n, other, k.Kind)
			}
			seen[n] = k.Kind
		}
	}
	// Kinds returns a copy: changing it leaves the registry intact.
	ks[0].Kind = "Changed"
	if Kinds()[0].Kind == "Changed" {
		t.Error("Kinds() exposes the registry")
	}
}

func TestLookupKind(t *testing.T) {
	for name, want := range map[string]string{
		"IPPool": "IPPool", "ippools": "IPPool", "pool": "IPPool", "IPPOOL": "IPPool",
		"policy": "NetworkPolicy", "np": "NetworkPolicy", "policies": "NetworkPolicy", "networkpolicy": "NetworkPolicy",
		"gnp": "GlobalNetworkPolicy", "bgpconfig": "BGPConfiguration", "felixconfig": "FelixConfiguration",
		"hep": "HostEndpoint", "wep": "WorkloadEndpoint", "netset": "NetworkSet", "gns": "GlobalNetworkSet",
		"gnetsets": "GlobalNetworkSet", "bgpp": "BGPPeer", "clusterinfo": "ClusterInformation",
		"kubecontrollersconfig": "KubeControllersConfiguration", "tier": "Tier", "no": "Node",
		"reservation": "IPReservation", "profile": "Profile",
	} {
		k, ok := LookupKind(name)
		if !ok || k.Kind != want {
			t.Errorf("LookupKind(%q) = %q, %v; want %q", name, k.Kind, ok, want)
		}
	}
	if _, ok := LookupKind("pods"); ok {
		t.Error("LookupKind(pods) found a kind")
	}
}
