package main

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// The specs of the custom resources Calico v3.31 defines that package api
// does not model: IPAM's four kinds (IPAM works on Calico's etcd key
// vocabulary and the KDD backend maps it onto these), and kinds calico-node
// does not act on but a Calico cluster may hold (CalicoNodeStatus, the
// staged policies). They exist only to describe the
// stored JSON to the generator: field names and types are Calico's
// (libcalico-go/lib/apis/v3, api/pkg/apis/projectcalico/v3); omitempty
// marks what Calico's CRD does not require.

type ipamBlockSpec struct {
	CIDR string `json:"cidr"`
	// Affinity is "host:<node>" (or absent for a block without one).
	Affinity *string `json:"affinity,omitempty"`
	// Allocations has one entry per address of the block: null when free,
	// else the index of its attributes.
	Allocations []*int `json:"allocations"`
	// Unallocated lists the free ordinals, released ones last.
	Unallocated []int                 `json:"unallocated"`
	Attributes  []allocationAttribute `json:"attributes"`
	// SequenceNumber counts the block's writes (uint64, 0 when absent).
	SequenceNumber uint64 `json:"sequenceNumber,omitempty"`
	// SequenceNumberForAllocation maps an ordinal (as a string: JSON keys)
	// to the block's sequence number when it was allocated.
	SequenceNumberForAllocation map[string]uint64 `json:"sequenceNumberForAllocation,omitempty"`
	// Deleted marks a block being deleted, so a racing write conflicts.
	Deleted bool `json:"deleted,omitempty"`
	// StrictAffinity is deprecated on the block (IPAMConfig holds it) but
	// still written and required.
	StrictAffinity bool `json:"strictAffinity"`
}

type allocationAttribute struct {
	HandleID  *string           `json:"handle_id,omitempty"`
	Secondary map[string]string `json:"secondary,omitempty"`
}

type blockAffinitySpec struct {
	// State is "confirmed", "pending" or "pendingDeletion".
	State string `json:"state"`
	Node  string `json:"node"`
	// Type is "host" (or "virtual").
	Type string `json:"type,omitempty"`
	CIDR string `json:"cidr"`
	// Deleted is the STRING "true" or "false": older Calico releases
	// treated it as one, and Calico keeps it so.
	Deleted string `json:"deleted"`
}

type ipamHandleSpec struct {
	HandleID string `json:"handleID"`
	// Block maps a block CIDR to the number of the handle's addresses in it.
	Block   map[string]int `json:"block"`
	Deleted bool           `json:"deleted,omitempty"`
}

type ipamConfigSpec struct {
	StrictAffinity     bool `json:"strictAffinity"`
	AutoAllocateBlocks bool `json:"autoAllocateBlocks"`
	// MaxBlocksPerHost: 0 is no limit.
	MaxBlocksPerHost int `json:"maxBlocksPerHost,omitempty"`
}

type calicoNodeStatusSpec struct {
	Node                string   `json:"node,omitempty"`
	Classes             []string `json:"classes,omitempty"`
	UpdatePeriodSeconds *uint32  `json:"updatePeriodSeconds,omitempty"`
}

type calicoNodeStatusStatus struct {
	// LastUpdated is a metav1.Time: null when unset, despite omitempty.
	LastUpdated metav1.Time              `json:"lastUpdated,omitempty"`
	Agent       calicoNodeAgentStatus    `json:"agent,omitempty"`
	BGP         calicoNodeBGPStatus      `json:"bgp,omitempty"`
	Routes      calicoNodeBGPRouteStatus `json:"routes,omitempty"`
}

type calicoNodeAgentStatus struct {
	BIRDV4 bgpDaemonStatus `json:"birdV4,omitempty"`
	BIRDV6 bgpDaemonStatus `json:"birdV6,omitempty"`
}

type bgpDaemonStatus struct {
	State                   string `json:"state,omitempty"`
	Version                 string `json:"version,omitempty"`
	RouterID                string `json:"routerID,omitempty"`
	LastBootTime            string `json:"lastBootTime,omitempty"`
	LastReconfigurationTime string `json:"lastReconfigurationTime,omitempty"`
}

type calicoNodeBGPStatus struct {
	NumberEstablishedV4    int              `json:"numberEstablishedV4"`
	NumberNotEstablishedV4 int              `json:"numberNotEstablishedV4"`
	NumberEstablishedV6    int              `json:"numberEstablishedV6"`
	NumberNotEstablishedV6 int              `json:"numberNotEstablishedV6"`
	PeersV4                []calicoNodePeer `json:"peersV4,omitempty"`
	PeersV6                []calicoNodePeer `json:"peersV6,omitempty"`
}

type calicoNodePeer struct {
	PeerIP string `json:"peerIP,omitempty"`
	Type   string `json:"type,omitempty"`
	State  string `json:"state,omitempty"`
	Since  string `json:"since,omitempty"`
}

type calicoNodeBGPRouteStatus struct {
	RoutesV4 []calicoNodeRoute `json:"routesV4,omitempty"`
	RoutesV6 []calicoNodeRoute `json:"routesV6,omitempty"`
}

type calicoNodeRoute struct {
	Type        string                     `json:"type,omitempty"`
	Destination string                     `json:"destination,omitempty"`
	Gateway     string                     `json:"gateway,omitempty"`
	Interface   string                     `json:"interface,omitempty"`
	LearnedFrom calicoNodeRouteLearnedFrom `json:"learnedFrom,omitempty"`
}

type calicoNodeRouteLearnedFrom struct {
	SourceType string `json:"sourceType,omitempty"`
	PeerIP     string `json:"peerIP,omitempty"`
}

// The staged policies are their enforced counterparts plus stagedAction
// (Set, Delete, Learn, Ignore).

type stagedNetworkPolicySpec struct {
	StagedAction string `json:"stagedAction,omitempty"`
	api.NetworkPolicySpec
}

type stagedGlobalNetworkPolicySpec struct {
	StagedAction string `json:"stagedAction,omitempty"`
	api.GlobalNetworkPolicySpec
}

type stagedKubernetesNetworkPolicySpec struct {
	StagedAction string                                  `json:"stagedAction,omitempty"`
	PodSelector  metav1.LabelSelector                    `json:"podSelector,omitempty"`
	Ingress      []networkingv1.NetworkPolicyIngressRule `json:"ingress,omitempty"`
	Egress       []networkingv1.NetworkPolicyEgressRule  `json:"egress,omitempty"`
	PolicyTypes  []networkingv1.PolicyType               `json:"policyTypes,omitempty"`
}
