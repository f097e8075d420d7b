package cni

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/projectcalico/calico-node/agent/epstatus"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// defaultPolicySetupTimeout is how long ADD waits for the agent to
// program the endpoint when neither the network config nor the agent
// says: well inside kubelet's patience, far longer than programming takes
// (tens of milliseconds; docs/benchmarks.md).
const defaultPolicySetupTimeout = 5 * time.Second

// statusPoll is how often a plugin process looks for the status file.
const statusPoll = 5 * time.Millisecond

// Dataplane is the agent's record of what its dataplane has programmed,
// which ADD reports its progress to and waits on when the agent serves it
// (*epstatus.Tracker).
type Dataplane interface {
	// Node is the node whose endpoints the agent programs.
	Node() string
	ADDReceived(key epstatus.Key, pod, containerID string, at time.Time)
	ADDProgress(key epstatus.Key, containerID string, stage epstatus.Stage, at time.Time)
	ADDWritten(w *api.WorkloadEndpoint, at time.Time)
	ADDFailed(key epstatus.Key, containerID string, err error)
	// Wait returns once the endpoint is programmed at revision or later,
	// or an error saying what is missing when ctx ends.
	Wait(ctx context.Context, namespace, name, revision string) error
}

// policySetupTimeout is how long ADD waits for the dataplane: the
// config's policy_setup_timeout_seconds (explicit), else the agent's
// default when it serves the ADD, else defaultPolicySetupTimeout.
func (inv *invocation) policySetupTimeout() (d time.Duration, explicit bool) {
	if t := inv.conf.PolicySetupTimeoutSeconds; t != nil {
		return time.Duration(*t * float64(time.Second)), true
	}
	if inv.host.dataplane != nil && inv.host.policyTimeout != 0 {
		return max(inv.host.policyTimeout, 0), false
	}
	return defaultPolicySetupTimeout, false
}

// statusDir is the agent's endpoint status directory.
func (c *netConf) statusDir() string {
	if c.EndpointStatusDir != "" {
		return c.EndpointStatusDir
	}
	return epstatus.DefaultDir
}

// waitProgrammed returns once this node's agent has programmed ep's
// policy and routes, so that the pod's first packet is not dropped, or
// fails ADD (code 11) when that takes longer than the timeout: a pod
// started without its network is worse than a sandbox the runtime
// retries.
//
// When the agent serves the ADD it waits on the agent's own record. A
// plugin process (no agent answered, or it declined) waits for the
// agent's status file for ep, but only where an agent keeps the status
// directory (its marker names this node) or the config sets
// policy_setup_timeout_seconds: with no agent on the node there is
// nobody to program policy and nothing that would drop the pod's packets
// (the agent's chains live as long as its marker: both go at reboot and
// with `calico-node cleanup`), so the pod starts as it would without
// Calico's dataplane.
func (inv *invocation) waitProgrammed(ctx context.Context, ep *api.WorkloadEndpoint) error {
	timeout, explicit := inv.policySetupTimeout()
	if timeout <= 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if dp := inv.host.dataplane; dp != nil {
		if ep.Spec.Node != dp.Node() {
			inv.logger.Warn("the endpoint is not of the agent's node: not waiting for its dataplane", "endpointNode", ep.Spec.Node, "agentNode", dp.Node())
			return nil
		}
		if err := dp.Wait(wctx, ep.Namespace, ep.Name, ep.ResourceVersion); err != nil {
			return notProgrammed(err, timeout)
		}
		inv.phase("wait for the dataplane")
		return nil
	}
	dir := inv.conf.statusDir()
	node, marked := epstatus.ReadMarker(dir)
	switch {
	case !marked && !explicit:
		inv.logger.Info("no calico-node agent keeps the endpoint status directory: not waiting for the dataplane", "dir", dir)
		return nil
	case marked && node != ep.Spec.Node && !explicit:
		inv.logger.Info("the endpoint status directory is another node's agent's: not waiting for the dataplane", "dir", dir, "agentNode", node)
		return nil
	}
	tick := time.NewTicker(statusPoll)
	defer tick.Stop()
	for {
		ok, err := epstatus.FileProgrammed(dir, ep)
		if err != nil {
			inv.logger.Debug("endpoint status file", "err", err)
		}
		if ok {
			inv.phase("wait for the dataplane (status file)")
			return nil
		}
		select {
		case <-wctx.Done():
			who := "no calico-node agent has marked " + dir
			if marked {
				who = "the agent of node " + node + " keeps " + dir + "; is calico-node running?"
			}
			return notProgrammed(fmt.Errorf("no status file %q in %s says workload endpoint %s/%s is programmed at revision %s (%s)",
				epstatus.FileName(ep), dir, ep.Namespace, ep.Name, ep.ResourceVersion, who), timeout)
		case <-tick.C:
		}
	}
}

// notProgrammed is ADD's error when the wait timed out.
func notProgrammed(err error, timeout time.Duration) error {
	var np *epstatus.NotProgrammedError
	msg := err.Error()
	if errors.As(err, &np) {
		msg = np.Error()
	}
	return types.NewError(types.ErrTryAgainLater,
		fmt.Sprintf("policy and routes not programmed within %s: %s", timeout, msg),
		"the pod would start without its network; policy_setup_timeout_seconds in the CNI network config sets how long ADD waits (0: do not wait)")
}

// addProgress reports ADD's stages to the agent's tracker; a no-op in a
// plugin process.
type addProgress struct {
	dp        Dataplane
	key       epstatus.Key
	container string
}

// startProgress starts the ADD's timeline at the invocation's start.
func (inv *invocation) startProgress(namespace, name, pod string) *addProgress {
	p := &addProgress{dp: inv.host.dataplane, key: epstatus.Key{Namespace: namespace, Name: name}, container: inv.args.ContainerID}
	if p.dp != nil {
		p.dp.ADDReceived(p.key, pod, p.container, inv.start)
	}
	return p
}

func (p *addProgress) stage(s epstatus.Stage) {
	if p != nil && p.dp != nil {
		p.dp.ADDProgress(p.key, p.container, s, time.Now())
	}
}

func (p *addProgress) written(w *api.WorkloadEndpoint) {
	if p != nil && p.dp != nil {
		p.dp.ADDWritten(w, time.Now())
	}
}

// done records how the ADD ended.
func (p *addProgress) done(err error) {
	if p == nil || p.dp == nil {
		return
	}
	if err != nil {
		p.dp.ADDFailed(p.key, p.container, err)
		return
	}
	p.stage(epstatus.StageADDReturned)
}
