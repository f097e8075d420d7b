package cni_test

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// etcdCutCase is one point of an ADD at which etcd goes away.
type etcdCutCase struct {
	name  string
	match func(*etcdserverpb.TxnRequest) bool
	// after: etcd applies the request, then dies before answering.
	after bool
	// keepEtcd: only the answer is lost; etcd stays up (a broken
	// connection rather than a dead server).
	keepEtcd bool
	// neighbour: another pod on the node is added first, so the node has
	// its block and the ADD allocates in it instead of claiming one.
	neighbour bool
	// msg are words the error message must contain (lower case).
	msg []string
	// leaked: the allocation reached etcd and the failed ADD could not
	// take it back, so `ipam check` reports it until the runtime's DEL or
	// a retried ADD of the container releases it (as in Calico, where
	// only DEL or IPAM garbage collection does).
	leaked bool
	// endpoint: the WorkloadEndpoint reached etcd too (it lists the
	// address, so nothing counts as leaked; the retried ADD takes the
	// endpoint over).
	endpoint bool
}

// The "etcd stopped during ADD" for calico-ipam's own steps: etcd
// (a real etcd-server) stops at one transaction of a fresh ADD of a
// Kubernetes pod, chosen by a proxy that recognises the request. The ADD
// must fail with "try again later" naming etcd and the step, leave no
// interface on the node or in the pod, and leave in etcd at most what
// etcd accepted before it died; once etcd is back, a retried ADD of the
// same container works and holds exactly one address, and its DEL leaves
// nothing.
//
// This implementation claims a block in ONE transaction (block, confirmed
// affinity, allocation and handle), where Calico writes a pending
// affinity, the block, the confirmation and the allocation one by one.
// So "after the affinity, before the block" and "after the block, before
// the allocation" are no states etcd can hold here: the claim either
// lands whole or not at all. The cases cover both outcomes of the claim,
// an allocation in a block the node already has, and the endpoint write
// after a successful allocation.
func TestAddEtcdStopsMidIPAM(t *testing.T) {
	for _, tc := range []etcdCutCase{
		{name: "reading IPAM state", match: isIPAMRead,
			msg: []string{"etcd", "assign addresses"}},
		{name: "claiming a block, etcd dies first", match: isBlockClaim,
			msg: []string{"etcd", "assign addresses", "write ipam data"}},
		{name: "claiming a block, etcd applies it and dies", match: isBlockClaim, after: true, leaked: true,
			msg: []string{"etcd", "assign addresses", "write ipam data"}},
		{name: "claiming a block, answer lost, etcd stays up", match: isBlockClaim, after: true, keepEtcd: true,
			msg: []string{"etcd", "assign addresses", "write ipam data"}},
		{name: "allocating in the node's block, etcd dies first", match: isAllocation, neighbour: true,
			msg: []string{"etcd", "assign addresses", "write ipam data"}},
		{name: "allocating in the node's block, etcd applies it and dies", match: isAllocation, neighbour: true, after: true, leaked: true,
			msg: []string{"etcd", "assign addresses", "write ipam data"}},
		{name: "writing the endpoint, etcd dies first", match: isEndpointWrite, leaked: true,
			msg: []string{"etcd", "workload endpoint"}},
		{name: "writing the endpoint, etcd applies it and dies", match: isEndpointWrite, after: true, endpoint: true,
			msg: []string{"etcd", "workload endpoint"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.addPool("v4", "10.244.0.0/16", 26)
			direct := e.conf("1.0.0", nil)
			if tc.neighbour {
				e.mustAdd(direct, newPod(t, "default", "neighbour"))
			}
			p := newPod(t, "default", "web")
			handle := "k8s-pod-network." + p.rt.ContainerID
			before := kubetest.CaliLinks(t)

			res := e.addWithCut(tc, p, e.conf("1.0.0", map[string]any{}))
			if code, msg := cniCode(res.err); code != types.ErrTryAgainLater || !containsAll(msg, tc.msg) {
				t.Errorf("ADD: %v, want code 11 naming %q", res.err, tc.msg)
			}
			if after := kubetest.CaliLinks(t); !slices.Equal(before, after) {
				t.Errorf("node interfaces changed: %v -> %v", before, after)
			}
			if links := podLinks(t, p); len(links) != 0 {
				t.Errorf("interfaces left in the pod: %v", links)
			}

			e.etcd.Restart(t)
			e.reconnect()
			held := e.heldBy(handle)
			switch leaked := e.leakedOf(handle); {
			case tc.leaked && (len(leaked) != 1 || len(held) != 1):
				t.Errorf("ipam check reports %v leaked for %s (handle holds %v), want the one address etcd accepted", leaked, handle, held)
			case !tc.leaked && len(leaked) > 0:
				t.Errorf("ipam check reports %v leaked for %s", leaked, handle)
			case !tc.leaked && !tc.endpoint:
				e.assertNothingLeft("k8s-pod-network", p, "")
			}
			if eps := e.endpointsOf(p.rt.ContainerID); (len(eps) == 1) != tc.endpoint {
				t.Errorf("%d endpoints stored for the container, want endpoint=%v", len(eps), tc.endpoint)
			}

			// The runtime tries again (same container, same sandbox).
			addrs := podAddrs(t, e.mustAdd(direct, p))
			if held := e.heldBy(handle); len(addrs) != 1 || !slices.Equal(held, []netip.Addr{addrs[0].Addr()}) {
				t.Errorf("retried ADD gave %v; the handle holds %v", addrs, held)
			}
			if eps := e.endpointsOf(p.rt.ContainerID); len(eps) != 1 || len(addrs) != 1 || !slices.Equal(eps[0].Spec.IPNetworks, []string{addrs[0].String()}) {
				t.Errorf("endpoints after the retried ADD: %v, want one with %v", eps, addrs)
			}
			if links := podLinks(t, p); !slices.Equal(links, []string{"eth0"}) {
				t.Errorf("pod interfaces after the retried ADD: %v", links)
			}
			e.checkClean("after the retried ADD")
			e.mustDel(direct, p)
			e.assertNothingLeft("k8s-pod-network", p, k8sVethName("default", "web"))
			e.checkClean("after DEL")
			if after := kubetest.CaliLinks(t); !slices.Equal(before, after) {
				t.Errorf("node interfaces after DEL: %v, want %v", after, before)
			}
		})
	}

	// The runtime's DEL after the failed ADD (what the CNI spec asks of
	// it) releases what the ADD's undo could not.
	t.Run("DEL after the failed ADD releases the allocation", func(t *testing.T) {
		e := newEnv(t)
		e.addPool("v4", "10.244.0.0/16", 26)
		p := newPod(t, "default", "web")
		res := e.addWithCut(etcdCutCase{name: "endpoint", match: isEndpointWrite}, p, e.conf("1.0.0", map[string]any{}))
		if code, _ := cniCode(res.err); code != types.ErrTryAgainLater {
			t.Errorf("ADD: %v, want code 11", res.err)
		}
		e.etcd.Restart(t)
		e.reconnect()
		if leaked := e.leakedOf("k8s-pod-network." + p.rt.ContainerID); len(leaked) != 1 {
			t.Fatalf("leaked before DEL: %v, want the allocation the undo could not release", leaked)
		}
		e.mustDel(e.conf("1.0.0", nil), p)
		e.assertNothingLeft("k8s-pod-network", p, k8sVethName("default", "web"))
		e.checkClean("after DEL")
	})
}

// The standalone calico-ipam plugin (driven by libcni as the top plugin)
// runs the same allocation code: the same cuts, the same guarantees. It
// writes no endpoint, so every allocation it makes counts as leaked for
// `ipam check`; the assertions count allocations instead.
func TestIPAMPluginEtcdStopsMidIPAM(t *testing.T) {
	for _, tc := range []etcdCutCase{
		{name: "reading IPAM state", match: isIPAMRead, msg: []string{"etcd", "assign addresses"}},
		{name: "claiming a block, etcd dies first", match: isBlockClaim, msg: []string{"etcd", "assign addresses", "write ipam data"}},
		{name: "claiming a block, etcd applies it and dies", match: isBlockClaim, after: true, leaked: true, msg: []string{"etcd", "assign addresses", "write ipam data"}},
		{name: "claiming a block, answer lost, etcd stays up", match: isBlockClaim, after: true, keepEtcd: true, msg: []string{"etcd", "assign addresses", "write ipam data"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.addPool("v4", "10.244.0.0/16", 26)
			direct := e.conf("1.0.0", map[string]any{"type": "calico-ipam"})
			p := newPod(t)
			handle := "k8s-pod-network." + p.rt.ContainerID

			res := e.addWithCut(tc, p, e.conf("1.0.0", map[string]any{"type": "calico-ipam"}))
			if code, msg := cniCode(res.err); code != types.ErrTryAgainLater || !containsAll(msg, tc.msg) {
				t.Errorf("ADD: %v, want code 11 naming %q", res.err, tc.msg)
			}
			e.etcd.Restart(t)
			e.reconnect()
			want := 0
			if tc.leaked {
				want = 1
			}
			if held := e.heldBy(handle); len(held) != want {
				t.Errorf("after the failed ADD the handle holds %v, want %d addresses", held, want)
			}

			addrs := podAddrs(t, e.mustAdd(direct, p))
			if held := e.heldBy(handle); len(addrs) != 1 || !slices.Equal(held, []netip.Addr{addrs[0].Addr()}) {
				t.Errorf("retried ADD gave %v; the handle holds %v", addrs, held)
			}
			if n := e.allocations(); n != 1 {
				t.Errorf("%d allocations after the retried ADD, want 1", n)
			}
			e.mustDel(direct, p)
			e.assertNothingLeft("k8s-pod-network", p, "")
			if n := e.allocations(); n != 0 {
				t.Errorf("%d allocations after DEL, want none", n)
			}
		})
	}
}

// cutResult is how an ADD through the cutter went.
type cutResult struct{ err error }

// addWithCut runs one ADD of p with conf pointed at a cutter armed for
// tc, and checks that the cut happened where tc says. conf must not be
// the env's direct config: its etcd_endpoints is replaced.
func (e *env) addWithCut(tc etcdCutCase, p *pod, conf []byte) cutResult {
	e.t.Helper()
	cutter := newEtcdCutter(e.t, e.etcd.Endpoints[0])
	stop := e.etcd.Stop
	if tc.keepEtcd {
		stop = func() {}
	}
	cut := cutter.arm(tc.name, tc.after, tc.match, stop)
	conf = withField(e.t, conf, "etcd_endpoints", cutter.endpoint)
	start := time.Now()
	_, err := e.add(conf, p)
	if took := time.Since(start); took > 30*time.Second {
		e.t.Errorf("the failed ADD took %v", took)
	}
	select {
	case <-cut.fired:
	default:
		e.t.Fatalf("the ADD never reached the step (%v)", err)
	}
	if tc.after && !cut.committed {
		e.t.Fatalf("etcd did not apply the request before the cut")
	}
	e.t.Logf("ADD failed: %v", err)
	return cutResult{err: err}
}

// allocations counts every allocated address.
func (e *env) allocations() int {
	e.t.Helper()
	rep, err := e.ipam.Check(e.ctx, e.node)
	if err != nil {
		e.t.Fatalf("ipam check: %v", err)
	}
	return len(rep.Allocations)
}

// podLinks lists the pod's interfaces other than lo.
func podLinks(t testing.TB, p *pod) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(ipOut(t, p, "-o", "link", "show")), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(fields[1], ":"), "@")
		if name != "lo" {
			out = append(out, name)
		}
	}
	return out
}

func containsAll(s string, words []string) bool {
	s = strings.ToLower(s)
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// withField returns the JSON config conf with key set to value.
func withField(t testing.TB, conf []byte, key string, value any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	m[key] = value
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
