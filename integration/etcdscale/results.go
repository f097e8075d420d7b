package etcdscale

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/projectcalico/calico-node/internal/atomicfile"
)

// Results is what one `make bench-etcd-scale` measured: one Run per
// number of simulated nodes. BenchmarkEtcdScale writes it as JSON
// (ResultsFile); the plot command reads it.
type Results struct {
	Commit  string `json:"commit"`
	Date    string `json:"date"`
	Machine string `json:"machine"` // CPUs, memory, etcd version
	Runs    []Run  `json:"runs"`
}

// Run is one fleet of simulated nodes against the 3-member etcd cluster.
// Durations are in milliseconds, sizes in MB (2^20 bytes), CPU in cores
// (CPU seconds per wall second) unless a field says otherwise.
type Run struct {
	Nodes int `json:"nodes"`
	// Mode is "direct" (every node watches etcd, `calico-node run`'s
	// default) or "fanout" (the nodes read one `calico-node fanout`).
	Mode          string  `json:"mode"`
	HubCPU        float64 `json:"hubCPU"`      // the fan-out during churn, cores
	HubRSS        float64 `json:"hubRSS"`      // MB, end of churn
	Processes     int     `json:"processes"`   // agent processes
	Calibration   int     `json:"calibration"` // of which hold one node each
	Nice          int     `json:"nice"`        // the agent processes' niceness
	Reflectors    int     `json:"reflectors"`  // route reflector nodes
	SeededPods    int     `json:"seededPods"`  // before the fleet started
	Resources     int     `json:"resources"`   // Calico resources in etcd at the end
	Blocks        int     `json:"blocks"`      // IPAM blocks at the end
	ChurnSeconds  float64 `json:"churnSeconds"`
	TargetPodRate float64 `json:"targetPodRate"` // pods started per second: min(30, Budget / nodes)
	Budget        float64 `json:"budget"`        // pods/s × nodes the run was capped at
	PodRate       float64 `json:"podRate"`       // achieved
	PodsStarted   int     `json:"podsStarted"`
	PodsDeleted   int     `json:"podsDeleted"`
	PolicyChanges int     `json:"policyChanges"` // timed: reached every node
	PolicyWritten int     `json:"policyWritten"`
	LoadBefore    string  `json:"loadBefore"`
	LoadAfter     string  `json:"loadAfter"`

	// etcd, the three members together unless per member.
	EtcdCPU          float64   `json:"etcdCPU"`          // during churn
	EtcdCPUPerMember []float64 `json:"etcdCPUPerMember"` // during churn
	EtcdCPUStart     float64   `json:"etcdCPUStart"`     // CPU seconds while the fleet started
	EtcdRSS          float64   `json:"etcdRSS"`          // largest member, end of churn
	EtcdRSSPerMember []float64 `json:"etcdRSSPerMember"`
	DBSize           float64   `json:"dbSize"`      // largest member
	DBSizeInUse      float64   `json:"dbSizeInUse"` // largest member
	WatchEventsPerS  float64   `json:"watchEventsPerS"`
	EtcdUsPerEvent   float64   `json:"etcdUsPerEvent"` // etcd CPU during churn / watch events sent
	Watchers         float64   `json:"watchers"`
	WatchStreams     float64   `json:"watchStreams"`
	SlowWatchersMax  float64   `json:"slowWatchersMax"`
	SentMBPerS       float64   `json:"sentMBPerS"` // to clients
	TxnPerS          float64   `json:"txnPerS"`
	LeaderChanges    float64   `json:"leaderChanges"` // during the run, all members' view summed
	KilledMember     string    `json:"killedMember"`
	WatchersOnKilled float64   `json:"watchersOnKilled"` // watchers the killed member served

	KillSeconds float64 `json:"killSeconds"` // killed at, from the churn's start
	DownSeconds float64 `json:"downSeconds"`

	// Agents.
	SyncAll          float64 `json:"syncAll"` // launch → last node in sync
	SyncEachP50      float64 `json:"syncEachP50"`
	SyncEachP99      float64 `json:"syncEachP99"`
	AgentCPU         float64 `json:"agentCPU"`         // all agents during churn, cores
	AgentCPUPerNode  float64 `json:"agentCPUPerNode"`  // ms of CPU per second per node, packed processes
	AgentUsPerEvent  float64 `json:"agentUsPerEvent"`  // packed processes' CPU per watch event received
	AgentRSSPerNode  float64 `json:"agentRSSPerNode"`  // packed processes' RSS / their nodes
	AgentRSSCalib    float64 `json:"agentRSSCalib"`    // one-node processes' mean RSS
	AgentHeapPerNode float64 `json:"agentHeapPerNode"` // packed processes' live heap / their nodes
	AgentHeapCalib   float64 `json:"agentHeapCalib"`
	CalibCPUPerNode  float64 `json:"calibCPUPerNode"` // ms/s, one-node processes
	UpdatesPerNodeS  float64 `json:"updatesPerNodeS"` // confwatch updates per node per second
	KVEventsPerNodeS float64 `json:"kvEventsPerNodeS"`
	CompilesPerNodeS float64 `json:"compilesPerNodeS"`
	AgentWarnings    int64   `json:"agentWarnings"`

	// Propagation: from the write to the last node (all) and to each node.
	// The "all" figures leave out the writes made during the member's
	// outage (from its kill until outageSettle after its restart), which
	// are counted (…OutageN) and their slowest given (…OutageMax).
	// Cached: in the node's confwatch cache (every node). Compiled: in
	// what the policy actor compiled (the one-node processes' nodes).
	// Routed: the node's routes reach the pod (every node).
	PolicyCachedAllP50   float64 `json:"policyCachedAllP50"`
	PolicyCachedAllP99   float64 `json:"policyCachedAllP99"`
	PolicyCachedEachP50  float64 `json:"policyCachedEachP50"`
	PolicyCachedEachP99  float64 `json:"policyCachedEachP99"`
	PolicyCompiledAllP50 float64 `json:"policyCompiledAllP50"`
	PolicyCompiledAllP99 float64 `json:"policyCompiledAllP99"`
	CompileMs            float64 `json:"compileMs"` // one node's policy.Compile of the final cluster, by the harness
	PodAllP50            float64 `json:"podAllP50"`
	PodAllP99            float64 `json:"podAllP99"`
	PodEachP50           float64 `json:"podEachP50"`
	PodEachP99           float64 `json:"podEachP99"`
	PolicyOutageN        int     `json:"policyOutageN"`
	PolicyOutageMax      float64 `json:"policyOutageMax"`
	PodOutageN           int     `json:"podOutageN"`
	PodOutageMax         float64 `json:"podOutageMax"`
	PodsTimed            int     `json:"podsTimed"`
	PodsMissed           int     `json:"podsMissed"` // deleted before every node routed them
	CNIAddP50            float64 `json:"cniAddP50"`
	CNIAddP99            float64 `json:"cniAddP99"`
	CNIRetries           int     `json:"cniRetries"`

	// BGP sessions as bgp.Compute configures them, counted at both ends.
	SessionsRR     int     `json:"sessionsRR"`
	SessionsMesh   int     `json:"sessionsMesh"`
	ComputeRRMs    float64 `json:"computeRRMs"`   // one node's bgp.Compute, route reflectors
	ComputeMeshMs  float64 `json:"computeMeshMs"` // ... full mesh
	RRTopologyOK   bool    `json:"rrTopologyOK"`
	ReflectorPeers int     `json:"reflectorPeers"` // sessions of one reflector
	ClientPeers    int     `json:"clientPeers"`    // sessions of one other node

	// Correctness at the end.
	LostWrites       int  `json:"lostWrites"`
	DoubleAllocated  int  `json:"doubleAllocated"`
	IPAMProblems     int  `json:"ipamProblems"`
	NodesResynced    int  `json:"nodesResynced"`
	FailedOperations int  `json:"failedOperations"`
	Correct          bool `json:"correct"`
}

// ResultsFile is where BenchmarkEtcdScale writes its Results, relative to
// the repository root; ETCD_SCALE_OUT overrides it.
const ResultsFile = "docs/img/etcd-scale.json"

// WriteResults writes r to path as indented JSON, atomically.
func WriteResults(path string, r Results) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write results %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results %s: %w", path, err)
	}
	return nil
}

// ReadResults reads a results file.
func ReadResults(path string) (Results, error) {
	var r Results
	data, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("read results: %w", err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("decode results %s: %w", path, err)
	}
	return r, nil
}
