package api

import (
	"slices"
	"strings"
)

// KindInfo describes one resource kind.
type KindInfo struct {
	Kind       string   // "IPPool"
	Plural     string   // lower-case plural, the etcd key segment: "ippools"
	Namespaced bool     // whether objects live in a namespace
	Aliases    []string // other names the CLI accepts: "ippool", "pool", ...
	New        func() Object
}

// Kinds returns the registry, in a stable order.
func Kinds() []KindInfo { return slices.Clone(kinds) }

// LookupKind finds a kind by its name, plural or alias, case-insensitively.
func LookupKind(name string) (KindInfo, bool) {
	n := strings.ToLower(name)
	for _, k := range kinds {
		if strings.ToLower(k.Kind) == n || k.Plural == n {
			return k, true
		}
		for _, a := range k.Aliases {
			if a == n {
				return k, true
			}
		}
	}
	return KindInfo{}, false
}

// kinds is the registry, in the order "calicoctl get all"-style listings
// use. Aliases are those calicoctl accepts plus the CRD-style short names
// the project's CLI documents; all are lower case.
var kinds = []KindInfo{
	{Kind: "IPPool", Plural: "ippools", Aliases: []string{"ippool", "ipp", "ipps", "pool", "pools"},
		New: func() Object { return &IPPool{TypeMeta: typeMeta("IPPool")} }},
	{Kind: "IPReservation", Plural: "ipreservations", Aliases: []string{"ipreservation", "reservation", "reservations"},
		New: func() Object { return &IPReservation{TypeMeta: typeMeta("IPReservation")} }},
	{Kind: "Node", Plural: "nodes", Aliases: []string{"node", "no", "nos"},
		New: func() Object { return &Node{TypeMeta: typeMeta("Node")} }},
	{Kind: "BGPConfiguration", Plural: "bgpconfigurations", Aliases: []string{"bgpconfiguration", "bgpconfig", "bgpconfigs"},
		New: func() Object { return &BGPConfiguration{TypeMeta: typeMeta("BGPConfiguration")} }},
	{Kind: "BGPPeer", Plural: "bgppeers", Aliases: []string{"bgppeer", "bgpp", "bgpps", "bp", "bps"},
		New: func() Object { return &BGPPeer{TypeMeta: typeMeta("BGPPeer")} }},
	{Kind: "BGPFilter", Plural: "bgpfilters", Aliases: []string{"bgpfilter", "bgpf", "bgpfs", "bf", "bfs"},
		New: func() Object { return &BGPFilter{TypeMeta: typeMeta("BGPFilter")} }},
	{Kind: "FelixConfiguration", Plural: "felixconfigurations", Aliases: []string{"felixconfiguration", "felixconfig", "felixconfigs"},
		New: func() Object { return &FelixConfiguration{TypeMeta: typeMeta("FelixConfiguration")} }},
	{Kind: "Tier", Plural: "tiers", Aliases: []string{"tier"},
		New: func() Object { return &Tier{TypeMeta: typeMeta("Tier")} }},
	{Kind: "NetworkPolicy", Plural: "networkpolicies", Namespaced: true,
		Aliases: []string{"networkpolicy", "policy", "policies", "np", "nps", "pol", "pols"},
		New:     func() Object { return &NetworkPolicy{TypeMeta: typeMeta("NetworkPolicy")} }},
	{Kind: "GlobalNetworkPolicy", Plural: "globalnetworkpolicies", Aliases: []string{"globalnetworkpolicy", "gnp", "gnps"},
		New: func() Object { return &GlobalNetworkPolicy{TypeMeta: typeMeta("GlobalNetworkPolicy")} }},
	{Kind: "NetworkSet", Plural: "networksets", Namespaced: true, Aliases: []string{"networkset", "netset", "netsets"},
		New: func() Object { return &NetworkSet{TypeMeta: typeMeta("NetworkSet")} }},
	{Kind: "GlobalNetworkSet", Plural: "globalnetworksets", Aliases: []string{"globalnetworkset", "gnetset", "gnetsets", "gns"},
		New: func() Object { return &GlobalNetworkSet{TypeMeta: typeMeta("GlobalNetworkSet")} }},
	{Kind: "HostEndpoint", Plural: "hostendpoints", Aliases: []string{"hostendpoint", "hep", "heps"},
		New: func() Object { return &HostEndpoint{TypeMeta: typeMeta("HostEndpoint")} }},
	{Kind: "Profile", Plural: "profiles", Aliases: []string{"profile", "pro", "pros"},
		New: func() Object { return &Profile{TypeMeta: typeMeta("Profile")} }},
	{Kind: "WorkloadEndpoint", Plural: "workloadendpoints", Namespaced: true, Aliases: []string{"workloadendpoint", "wep", "weps"},
		New: func() Object { return &WorkloadEndpoint{TypeMeta: typeMeta("WorkloadEndpoint")} }},
	{Kind: "KubeControllersConfiguration", Plural: "kubecontrollersconfigurations",
		Aliases: []string{"kubecontrollersconfiguration", "kubecontrollersconfig", "kubecontrollersconfigs"},
		New: func() Object {
			return &KubeControllersConfiguration{TypeMeta: typeMeta("KubeControllersConfiguration")}
		}},
	{Kind: "ClusterInformation", Plural: "clusterinformations", Aliases: []string{"clusterinformation", "clusterinfo", "clusterinfos"},
		New: func() Object { return &ClusterInformation{TypeMeta: typeMeta("ClusterInformation")} }},
}

// kindInfo returns the registry entry for an exact Kind name.
func kindInfo(kind string) (KindInfo, bool) {
	for _, k := range kinds {
		if k.Kind == kind {
			return k, true
		}
	}
	return KindInfo{}, false
}

// typeMeta is the canonical header of kind.
func typeMeta(kind string) TypeMeta { return TypeMeta{Kind: kind, APIVersion: GroupVersion} }
