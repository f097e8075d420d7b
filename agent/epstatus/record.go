package epstatus

import (
	"slices"
	"time"
)

// Stage is one step of an endpoint's way to having its network.
type Stage string

// The stages, in the order they normally happen (Stages).
const (
	StageADDReceived      Stage = "add_received"
	StageIPAM             Stage = "ipam_done"
	StageVeth             Stage = "veth_up"
	StageEndpointWritten  Stage = "endpoint_written"
	StageAgentSeen        Stage = "agent_seen"
	StagePolicy           Stage = "policy_programmed"
	StageRoutes           Stage = "routes_programmed"
	StageAdvertised       Stage = "route_advertised"
	StageADDReturned      Stage = "add_returned"
	StageRemoteProgrammed Stage = "remote_programmed"
)

// Stages lists the stages in their usual order: the timeline's rows.
var Stages = []Stage{
	StageADDReceived, StageIPAM, StageVeth, StageEndpointWritten, StageAgentSeen,
	StagePolicy, StageRoutes, StageAdvertised, StageADDReturned, StageRemoteProgrammed,
}

// Describe is how the timeline names a stage.
func (s Stage) Describe() string {
	switch s {
	case StageADDReceived:
		return "ADD received"
	case StageIPAM:
		return "IPAM done"
	case StageVeth:
		return "veth up"
	case StageEndpointWritten:
		return "endpoint written"
	case StageAgentSeen:
		return "seen by the agent"
	case StagePolicy:
		return "policy programmed"
	case StageRoutes:
		return "routes programmed"
	case StageAdvertised:
		return "route advertised (BGP)"
	case StageADDReturned:
		return "ADD returned"
	case StageRemoteProgrammed:
		return "programmed on"
	}
	return string(s)
}

// StageTime is when a stage happened.
type StageTime struct {
	Stage Stage     `json:"stage"`
	At    time.Time `json:"at"`
}

// Record is one endpoint's timeline as one agent saw it: for an endpoint
// of its own node the local stages, for another node's endpoint
// remote_programmed.
type Record struct {
	// Node is the agent's node; EndpointNode the endpoint's.
	Node         string      `json:"node"`
	EndpointNode string      `json:"endpointNode"`
	Namespace    string      `json:"namespace"`
	Endpoint     string      `json:"endpoint"` // the WorkloadEndpoint's name
	Pod          string      `json:"pod,omitempty"`
	ContainerID  string      `json:"containerID,omitempty"`
	Revision     string      `json:"revision,omitempty"` // the first revision seen
	Addresses    []string    `json:"addresses,omitempty"`
	Stages       []StageTime `json:"stages"`
	// Error is why ADD failed, when it did.
	Error string `json:"error,omitempty"`
}

// At is when stage happened; ok is false when it has not (yet).
func (r *Record) At(stage Stage) (time.Time, bool) {
	for _, s := range r.Stages {
		if s.Stage == stage {
			return s.At, true
		}
	}
	return time.Time{}, false
}

// Start is the record's first stage time.
func (r *Record) Start() time.Time {
	var t time.Time
	for _, s := range r.Stages {
		if t.IsZero() || s.At.Before(t) {
			t = s.At
		}
	}
	return t
}

// set records stage at t unless it is recorded already; it reports
// whether it was new.
func (r *Record) set(stage Stage, t time.Time) bool {
	if _, ok := r.At(stage); ok {
		return false
	}
	r.Stages = append(r.Stages, StageTime{stage, t})
	return true
}

// clone is a deep copy for readers outside the lock.
func (r *Record) clone() Record {
	c := *r
	c.Addresses = slices.Clone(r.Addresses)
	c.Stages = slices.Clone(r.Stages)
	return c
}

// Matches reports whether the record is the pod (or endpoint, or
// container) name in namespace.
func (r *Record) Matches(namespace, name string) bool {
	return r.Namespace == namespace && (r.Pod == name || r.Endpoint == name || (r.ContainerID != "" && r.ContainerID == name))
}
