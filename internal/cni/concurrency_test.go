package cni_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/projectcalico/calico-node/internal/cni"
	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// Three nodes each run ADDs concurrently against one pool, as kubelets
// starting pods at once do, on either datastore: no address is handed out
// twice, each node's pods come from blocks affine to that node while free
// blocks remain, borrowing happens only once the pool has no free block
// (and never with strictAffinity), and after every DEL nothing is left
// allocated. On the Kubernetes datastore the pods are Kubernetes Pods the
// plugin reads and annotates, and IPAM is Calico's custom resources; there
// each node's plugins hand their commands to that node's agent (a CNI
// server per node, as on a node where calico-node runs), each agent with
// its one warm API server connection: 300 plugin processes each opening
// their own would measure how long a small machine takes to start them,
// not IPAM (the plugins' own datastore path is the etcd case's; the
// etcd case runs through agents too).
func TestConcurrentAddsAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("300 pods: not in -short")
	}
	for _, tc := range []struct {
		name     string
		env      func(testing.TB) *env
		viaAgent bool
	}{
		{datastore.TypeEtcd, func(t testing.TB) *env { return newEnv(t) }, false},
		{datastore.TypeKubernetes, newKDDEnv, true},
		// The agents' IPAM caches and batched allocations (ipam.Cache)
		// on etcd too.
		{datastore.TypeEtcd + "-agent", func(t testing.TB) *env { return newEnv(t) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testConcurrentAdds(t, tc.env(t), tc.viaAgent) })
	}
}

func testConcurrentAdds(t *testing.T, e *env, viaAgent bool) {
	e = e.in(t)
	// 512 addresses in 32 blocks of 16: 3 x 100 pods need 21 blocks.
	e.addPool("shared", "10.230.0.0/23", 28)
	const perNode = 100
	nodes := []string{"node-a", "node-b", "node-c"}
	confs := map[string][]byte{}
	envs := map[string]*env{}
	servers := map[string]*cni.Server{}
	for _, n := range nodes {
		// Registered nodes, so that their blocks are not reported as
		// belonging to missing nodes.
		e.addNode(n)
		ne := *e
		ne.node = n
		// Each node has its own lock file, like separate hosts.
		ne.lockFile = filepath.Join(t.TempDir(), "ipam.lock")
		confs[n] = ne.conf("1.0.0", map[string]any{"log_level": "error"})
		if viaAgent {
			srv, sock := startServerAt(t)
			servers[n] = srv
			ne.cni = libcni.NewCNIConfigWithCacheDir([]string{e.binDir}, e.cacheDir, &socketExec{
				Exec: &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}},
				env:  cnientry.SocketEnv + "=" + sock,
			})
		}
		envs[n] = &ne
	}
	type placed struct {
		node string
		pod  *pod
		ip   netip.Addr
	}
	var (
		mu   sync.Mutex
		all  []placed
		wg   sync.WaitGroup
		errs []error
	)
	pods := map[string][]*pod{}
	for _, n := range nodes {
		for i := range perNode {
			// A Kubernetes pod, as kubelet names it in CNI_ARGS.
			name := fmt.Sprintf("%s-%d", n, i)
			e.addK8sPod("default", name, n)
			pods[n] = append(pods[n], newPod(t, "default", name))
		}
	}
	start := time.Now()
	for _, n := range nodes {
		for _, p := range pods[n] {
			wg.Add(1)
			go func(n string, p *pod) {
				defer wg.Done()
				res, err := envs[n].add(confs[n], p)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s ADD %s: %w", n, p.rt.ContainerID, err))
					return
				}
				if len(res.IPs) != 1 {
					errs = append(errs, fmt.Errorf("%s: %d addresses", p.rt.ContainerID, len(res.IPs)))
					return
				}
				ip, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
				all = append(all, placed{n, p, ip.Unmap()})
			}(n, p)
		}
	}
	wg.Wait()
	t.Logf("%d concurrent ADDs in %s", len(nodes)*perNode, time.Since(start).Round(10*time.Millisecond))
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	seen := map[netip.Addr]string{}
	for _, pl := range all {
		if prev, dup := seen[pl.ip]; dup {
			t.Errorf("%s handed out twice (%s and %s)", pl.ip, prev, pl.pod.rt.ContainerID)
		}
		seen[pl.ip] = pl.pod.rt.ContainerID
	}
	if len(seen) != len(nodes)*perNode {
		t.Fatalf("%d distinct addresses for %d pods", len(seen), len(nodes)*perNode)
	}
	// Every pod's endpoint carries the address its ADD returned.
	eps := e.endpoints("default")
	if len(eps) != len(all) {
		t.Errorf("%d endpoints for %d pods", len(eps), len(all))
	}
	for _, ep := range eps {
		if len(ep.Spec.IPNetworks) != 1 {
			t.Errorf("endpoint %s has addresses %v, want its one", ep.Name, ep.Spec.IPNetworks)
		}
		for _, n := range ep.Spec.IPNetworks {
			a, err := netip.ParsePrefix(n)
			if err != nil || seen[a.Addr()] != ep.Spec.ContainerID {
				t.Errorf("endpoint %s has %s, which its ADD did not return", ep.Name, n)
			}
		}
	}
	// Enough blocks for everyone: every address is in a block affine to
	// the node whose pod holds it.
	report, err := e.ipam.Check(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range all {
		allocs := report.Allocations[pl.ip.String()]
		if len(allocs) != 1 {
			t.Fatalf("%s: %d allocations", pl.ip, len(allocs))
		}
		if allocs[0].Borrowed {
			t.Errorf("%s of %s is borrowed although free blocks remained", pl.ip, pl.node)
		}
	}
	for _, n := range nodes {
		blocks, err := e.ipam.AffineBlocks(e.ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(blocks) != 7 { // ceil(100/16)
			t.Errorf("%s claimed %d blocks, want 7", n, len(blocks))
		}
	}

	// All DELs at once: nothing leaked.
	start = time.Now()
	for _, pl := range all {
		wg.Add(1)
		go func(pl placed) {
			defer wg.Done()
			if err := envs[pl.node].del(confs[pl.node], pl.pod); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("DEL %s: %w", pl.pod.rt.ContainerID, err))
				mu.Unlock()
			}
		}(pl)
	}
	wg.Wait()
	t.Logf("%d concurrent DELs in %s", len(all), time.Since(start).Round(10*time.Millisecond))
	for _, err := range errs {
		t.Error(err)
	}
	report, err = e.ipam.Check(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(report.Allocations); n != 0 || report.Problems() != 0 {
		t.Errorf("after all DELs: %d allocations, %d problems: leaked %v, handles %v, missing nodes %v", n, report.Problems(), report.Leaked(), report.LeakedHandles, report.BlocksOfMissingNodes)
	}
	if links := kubetest.CaliLinks(t); len(links) != 0 {
		t.Errorf("host veths left: %v", links)
	}
	// On etcd DEL deletes the endpoint. On the Kubernetes datastore the
	// endpoint is the pod's, as long as the pod exists (as in Calico: a
	// pod not being deleted is not finished), and DEL empties the address
	// annotations it is computed from.
	for _, ep := range e.endpoints("default") {
		if e.kube == nil || len(ep.Spec.IPNetworks) != 0 {
			t.Errorf("endpoint %s left, addresses %v", ep.Name, ep.Spec.IPNetworks)
		}
	}
	// Each node's agent ran its node's commands, not the plugins.
	for n, srv := range servers {
		if srv.Served.Load() < 2*perNode || srv.Declined.Load() != 0 {
			t.Errorf("%s's agent served %d commands and declined %d; want its %d ADDs and DELs, none declined", n, srv.Served.Load(), srv.Declined.Load(), 2*perNode)
		}
	}
}

// socketExec runs plugins with one more environment variable: the CNI
// socket of their node's agent.
type socketExec struct {
	invoke.Exec
	env string
}

func (e *socketExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	return e.Exec.ExecPlugin(ctx, pluginPath, stdinData, append(environ, e.env))
}

// With more pods than one node's share of blocks, a node borrows from
// another's block only when the pool has no free block; with strictAffinity
// it gets a clear error instead.
func TestBorrowingOnlyWhenAllowed(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strictAffinity=%v", strict), func(t *testing.T) {
			e := newEnv(t).in(t)
			e.addPool("tiny", "10.231.0.0/27", 29) // 4 blocks of 8
			if strict {
				if err := e.ipam.SetConfig(e.ctx, ipam.Config{StrictAffinity: true, AutoAllocateBlocks: true}); err != nil {
					t.Fatal(err)
				}
			}
			// node-a takes 3 blocks (20 pods), node-b the last one (8 pods),
			// then node-b needs a ninth address.
			add := func(node string, n int) ([]netip.Addr, error) {
				ne := *e
				ne.node = node
				conf := ne.conf("1.0.0", map[string]any{"log_level": "error"})
				var ips []netip.Addr
				for range n {
					res, err := e.add(conf, newPod(t))
					if err != nil {
						return ips, err
					}
					ip, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
					ips = append(ips, ip.Unmap())
				}
				return ips, nil
			}
			if _, err := add("node-a", 20); err != nil {
				t.Fatal(err)
			}
			if _, err := add("node-b", 8); err != nil {
				t.Fatal(err)
			}
			ips, err := add("node-b", 1)
			if strict {
				if err == nil || !strings.Contains(err.Error(), "no free") && !strings.Contains(strings.ToLower(err.Error()), "exhausted") {
					t.Fatalf("strict affinity: ninth address for node-b: %v %v, want a no-free-addresses error", ips, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("borrowing: %v", err)
			}
			report, err := e.ipam.Check(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if a := report.Allocations[ips[0].String()]; len(a) != 1 || !a[0].Borrowed {
				t.Errorf("the ninth address %s should be borrowed from node-a's block: %+v", ips[0], a)
			}
		})
	}
}
