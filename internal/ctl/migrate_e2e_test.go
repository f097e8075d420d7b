package ctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/etcd"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// side is one datastore as the test and calicoctl see it.
type side struct {
	t     *testing.T
	ctx   context.Context
	bin   string
	env   []string // calicoctl's connection settings
	store datastore.Store
	ipam  *ipam.Client
}

func newSide(t *testing.T, bin string, cfg datastore.Config, env []string) *side {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	var store datastore.Store
	var err error
	if cfg.Type == datastore.TypeKubernetes {
		store, err = kdd.New(ctx, cfg)
	} else {
		store, err = etcd.New(ctx, cfg)
	}
	if err != nil {
		t.Fatalf("open %s datastore: %v", cfg.EffectiveType(), err)
	}
	t.Cleanup(func() { store.Close() })
	return &side{t: t, ctx: ctx, bin: bin, env: env, store: store, ipam: ipam.New(store.IPAM(), store, nil)}
}

func etcdSide(t *testing.T, bin string) *side {
	t.Helper()
	srv := etcdtest.Start(t)
	return newSide(t, bin, datastore.Config{Endpoints: srv.Endpoints},
		[]string{"ETCD_ENDPOINTS=" + strings.Join(srv.Endpoints, ",")})
}

// kddSide is a fresh kube-apiserver with Calico's CRDs, as the migration
// guide has them installed before the import.
func kddSide(t *testing.T, bin string) (*side, *kubetest.Cluster) {
	t.Helper()
	c := kubetest.Start(t)
	if out, err := c.RunKubectl(nil, "apply", "--server-side", "-f", filepath.Join(testbin.RepoRoot(), "deploy", "crds.yaml")); err != nil {
		t.Fatalf("apply CRDs: %v\n%s", err, out)
	}
	if out, err := c.RunKubectl(nil, "wait", "--for=condition=Established", "--timeout=120s", "crd", "--all"); err != nil {
		t.Fatalf("wait for CRDs: %v\n%s", err, out)
	}
	s := newSide(t, bin, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{Kubeconfig: c.Kubeconfig}},
		[]string{"DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + c.Kubeconfig})
	return s, c
}

// ctl runs calicoctl against this side.
func (s *side) ctl(stdin string, args ...string) result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + s.t.TempDir()}, s.env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return result{out.String(), errOut.String(), err}
}

func (s *side) ok(stdin string, args ...string) string {
	s.t.Helper()
	r := s.ctl(stdin, args...)
	if r.err != nil {
		s.t.Fatalf("calicoctl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.err, r.stdout, r.stderr)
	}
	return r.stdout
}

func (s *side) create(objs ...api.Object) {
	s.t.Helper()
	for _, o := range objs {
		if _, err := s.store.Create(s.ctx, o); err != nil {
			s.t.Fatalf("create %s %s: %v", o.Type().Kind, o.Meta().Name, err)
		}
	}
}

func (s *side) clusterInfo() *api.ClusterInformation {
	s.t.Helper()
	o, err := s.store.Get(s.ctx, "ClusterInformation", "", "default")
	if err != nil {
		s.t.Fatalf("get ClusterInformation: %v", err)
	}
	return o.(*api.ClusterInformation)
}

func (s *side) locked() bool {
	r := s.clusterInfo().Spec.DatastoreReady
	return r != nil && !*r
}

// etcdResources is what the etcd cluster holds besides nodes, endpoints
// and IPAM: one or more of every kind the migration carries, tiered
// policies, node-specific configuration of a node whose etcd name is not
// its Kubernetes name, and a Kubernetes policy's mirror.
const etcdResources = `
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods-v4}
spec: {cidr: 10.65.0.0/16, blockSize: 26, natOutgoing: true, vxlanMode: CrossSubnet}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods-v6}
spec: {cidr: "fd00:65::/48", blockSize: 122}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: spare, labels: {use: later}}
spec: {cidr: 10.66.0.0/24, blockSize: 28, disabled: true, nodeSelector: "rack == 'r9'"}
---
apiVersion: projectcalico.org/v3
kind: IPReservation
metadata: {name: reserved}
spec: {reservedCIDRs: [10.65.255.0/24]}
---
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 100, defaultAction: Deny}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: security.block-bad, labels: {owner: secteam}, annotations: {note: hello}}
spec:
  tier: security
  order: 10
  selector: all()
  types: [Ingress]
  ingress:
  - {action: Deny, source: {selector: "role == 'blocked'"}}
  - {action: Pass}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: allow-dns}
spec:
  order: 100
  selector: all()
  types: [Egress]
  egress: [{action: Allow, protocol: UDP, destination: {ports: [53]}}]
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: allow-web, namespace: shop}
spec:
  selector: app == 'web'
  types: [Ingress]
  ingress: [{action: Allow, protocol: TCP, source: {selector: "role == 'frontend'"}, destination: {ports: [8080]}}]
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: security.shop-only, namespace: shop}
spec: {tier: security, selector: all(), types: [Egress], egress: [{action: Pass}]}
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: knp.default.from-k8s, namespace: shop}
spec: {order: 1000, selector: "projectcalico.org/orchestrator == 'k8s'", types: [Ingress]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: bad-nets, labels: {role: blocked}}
spec: {nets: [198.51.100.0/24]}
---
apiVersion: projectcalico.org/v3
kind: NetworkSet
metadata: {name: partners, namespace: shop, labels: {role: frontend}}
spec: {nets: [203.0.113.0/24]}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-1-eth0, labels: {host: "yes"}}
spec: {node: etcd-node-1, interfaceName: eth0, expectedIPs: [192.0.2.11]}
---
apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, nodeToNodeMeshEnabled: false, logSeverityScreen: Info}
---
apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: node.etcd-node-1}
spec: {logSeverityScreen: Debug}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor-global}
spec: {peerIP: 192.0.2.254, asNumber: 64600}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor-node-1}
spec: {node: etcd-node-1, peerIP: 192.0.2.253, asNumber: 64601}
---
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {logSeverityScreen: Info, iptablesRefreshInterval: 60s}
---
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: node.etcd-node-1}
spec: {defaultEndpointToHostAction: Accept}
---
apiVersion: projectcalico.org/v3
kind: KubeControllersConfiguration
metadata: {name: default}
spec:
  controllers:
    node: {syncLabels: Disabled, leakGracePeriod: 15m}
    policy: {reconcilerPeriod: 5m}
`

// cluster is the etcd cluster's nodes: etcd name, Kubernetes name.
var clusterNodes = []struct{ etcdName, k8sName string }{
	{"etcd-node-1", "k8s-node-1"}, // registered before CALICO_K8S_NODE_REF matched
	{"k8s-node-2", "k8s-node-2"},
}

// pod is one workload of the etcd cluster.
type pod struct {
	name, cid, etcdNode, k8sNode string
	addrs                        []netip.Addr
}

func (p pod) handle() string { return "k8s-pod-network." + p.cid }

// populateEtcd writes the cluster: resources, nodes with tunnel addresses,
// and pods whose addresses come from IPAM as the CNI plugin allocates
// them, with their WorkloadEndpoints.
func populateEtcd(t *testing.T, s *side, npods int) []pod {
	t.Helper()
	s.create(storetest.Objects(t, etcdResources)...)
	for i, n := range clusterNodes {
		node := &api.Node{TypeMeta: api.TypeMeta{Kind: "Node", APIVersion: api.GroupVersion},
			ObjectMeta: api.ObjectMeta{Name: n.etcdName, Labels: map[string]string{"rack": fmt.Sprintf("r%d", i+1), "kubernetes.io/hostname": n.k8sName}},
			Spec: api.NodeSpec{
				BGP:      &api.NodeBGPSpec{IPv4Address: fmt.Sprintf("192.0.2.%d/24", 11+i), IPv6Address: fmt.Sprintf("2001:db8::%d/64", 11+i)},
				OrchRefs: []api.OrchRef{{NodeName: n.k8sName, Orchestrator: api.OrchestratorKubernetes}},
			}}
		if i == 1 {
			asn := api.ASNumber(64700)
			node.Spec.BGP.ASNumber = &asn
			node.Spec.BGP.RouteReflectorClusterID = "224.0.0.1"
		}
		// Tunnel addresses, as calico-node allocates them.
		handle, typ := "vxlan-tunnel-addr-"+n.etcdName, "vxlanTunnelAddress"
		if i == 1 {
			handle, typ = "ipip-tunnel-addr-"+n.etcdName, "ipipTunnelAddress"
		}
		v4, _, err := s.ipam.AutoAssign(s.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: handle, Node: n.etcdName,
			Use: api.IPPoolAllowedUseTunnel, Attrs: map[string]string{ipam.AttrType: typ}})
		if err != nil {
			t.Fatalf("tunnel address of %s: %v", n.etcdName, err)
		}
		if i == 0 {
			node.Spec.IPv4VXLANTunnelAddr = v4[0].Addr().String()
			node.Spec.VXLANTunnelMACAddr = "66:0e:6f:1d:5b:01"
		} else {
			node.Spec.BGP.IPv4IPIPTunnelAddr = v4[0].Addr().String()
		}
		s.create(node)
	}
	// A node that never joined the Kubernetes cluster: calicoctl's import
	// skips it with a warning.
	s.create(&api.Node{TypeMeta: api.TypeMeta{Kind: "Node", APIVersion: api.GroupVersion},
		ObjectMeta: api.ObjectMeta{Name: "gone-node"},
		Spec:       api.NodeSpec{OrchRefs: []api.OrchRef{{NodeName: "gone-node", Orchestrator: api.OrchestratorKubernetes}}}})
	if err := s.ipam.SetConfig(s.ctx, ipam.Config{AutoAllocateBlocks: true}); err != nil {
		t.Fatal(err)
	}

	var pods []pod
	for i := range npods {
		n := clusterNodes[i%len(clusterNodes)]
		p := pod{name: fmt.Sprintf("web-%d", i), cid: fmt.Sprintf("%064x", 0xc0ffee00+i), etcdNode: n.etcdName, k8sNode: n.k8sName}
		num6 := i % 2 // every other pod is dual-stack
		v4, v6, err := s.ipam.AutoAssign(s.ctx, ipam.AutoAssignArgs{Num4: 1, Num6: num6, HandleID: p.handle(), Node: n.etcdName,
			Attrs: map[string]string{ipam.AttrNamespace: "shop", ipam.AttrPod: p.name}})
		if err != nil {
			t.Fatalf("allocate for %s: %v", p.name, err)
		}
		var nets []string
		for _, a := range slices.Concat(v4, v6) {
			p.addrs = append(p.addrs, a.Addr())
			nets = append(nets, a.String())
		}
		spec := api.WorkloadEndpointSpec{Orchestrator: api.OrchestratorKubernetes, Node: n.etcdName, Pod: p.name, Endpoint: "eth0",
			ContainerID: p.cid, InterfaceName: fmt.Sprintf("cali%011x", i), IPNetworks: nets,
			Profiles: []string{"kns.shop", "ksa.shop.default"}, ServiceAccountName: "default"}
		name, err := api.WorkloadEndpointName(&spec)
		if err != nil {
			t.Fatal(err)
		}
		s.create(&api.WorkloadEndpoint{TypeMeta: api.TypeMeta{Kind: "WorkloadEndpoint", APIVersion: api.GroupVersion},
			ObjectMeta: api.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": "web",
				api.LabelNamespace: "shop", api.LabelOrchestrator: api.OrchestratorKubernetes, api.LabelServiceAccount: "default"}},
			Spec: spec})
		pods = append(pods, p)
	}
	return pods
}

// kubernetesObjects creates what the Kubernetes cluster already has when
// Calico moves onto its API: the Nodes and the running Pods (kubelet
// reports their addresses; the CNI plugin's annotations say the same).
func kubernetesObjects(t *testing.T, c *kubetest.Cluster, pods []pod) {
	t.Helper()
	ctx := context.Background()
	for _, n := range clusterNodes {
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.k8sName,
			Labels: map[string]string{"kubernetes.io/hostname": n.k8sName}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.CreateNamespace(t, "shop", nil)
	for _, p := range pods {
		var ips []string
		for _, a := range p.addrs {
			ips = append(ips, netip.PrefixFrom(a, a.BitLen()).String())
		}
		_, err := c.Client.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"app": "web"}, Annotations: map[string]string{
				"cni.projectcalico.org/containerID": p.cid,
				"cni.projectcalico.org/podIP":       ips[0],
				"cni.projectcalico.org/podIPs":      strings.Join(ips, ","),
			}},
			Spec: corev1.PodSpec{NodeName: p.k8sNode, Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, p := range pods {
			_ = c.Client.CoreV1().Pods("shop").Delete(context.Background(), p.name, kubetest.ForceDelete())
		}
	})
}

// comparable is what must survive a migration of a resource: its name,
// namespace, labels, annotations and spec.
func comparable(t *testing.T, o api.Object) string {
	t.Helper()
	raw, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	md, _ := m["metadata"].(map[string]any)
	out, _ := json.Marshal(map[string]any{"name": md["name"], "namespace": md["namespace"], "labels": md["labels"],
		"annotations": md["annotations"], "spec": m["spec"]})
	return string(out)
}

// userKinds are the kinds compared one for one across a migration.
var userKinds = []string{"IPPool", "IPReservation", "BGPPeer", "Tier", "GlobalNetworkPolicy", "GlobalNetworkSet", "HostEndpoint",
	"KubeControllersConfiguration", "NetworkPolicy", "NetworkSet", "BGPConfiguration", "FelixConfiguration"}

// resources lists userKinds, renamed (for comparison) as the migration
// renames nodes, leaving out what the target makes itself (the tiers
// Calico creates, mirrors of Kubernetes policies). With forKDD the
// defaults Calico's CRD schemas give a custom resource are filled in, as
// the Kubernetes API server fills them in on import, and the node
// controller's syncLabels is Enabled, as the import makes it.
func (s *side) resources(renames map[string]string, forKDD bool) map[string]string {
	s.t.Helper()
	out := map[string]string{}
	for _, kind := range userKinds {
		objs, _, err := s.store.List(s.ctx, kind, "")
		if err != nil {
			s.t.Fatalf("list %s: %v", kind, err)
		}
		for _, o := range objs {
			m := o.Meta()
			switch o := o.(type) {
			case *api.Tier:
				if o.Name == "default" || o.Name == api.AdminNetworkPolicyTierName || o.Name == api.BaselineAdminNetworkPolicyTierName {
					continue
				}
			case *api.NetworkPolicy:
				if strings.HasPrefix(o.Name, "knp.default.") {
					continue
				}
			case *api.HostEndpoint:
				if n, ok := renames[o.Spec.Node]; ok {
					o.Spec.Node = n
				}
			case *api.BGPPeer:
				if n, ok := renames[o.Spec.Node]; ok {
					o.Spec.Node = n
				}
			case *api.FelixConfiguration:
				if node, ok := strings.CutPrefix(m.Name, "node."); ok {
					if n, ok := renames[node]; ok {
						m.Name = "node." + n
					}
				}
			case *api.KubeControllersConfiguration:
				if n := o.Spec.Controllers.Node; forKDD && n != nil && n.SyncLabels == "Disabled" {
					n.SyncLabels = "Enabled"
				}
			case *api.BGPConfiguration:
				if node, ok := strings.CutPrefix(m.Name, "node."); ok {
					if n, ok := renames[node]; ok {
						m.Name = "node." + n
					}
				}
				if forKDD && o.Spec.ServiceLoadBalancerAggregation == nil {
					enabled := api.ServiceLoadBalancerAggregationEnabled
					o.Spec.ServiceLoadBalancerAggregation = &enabled
				}
			}
			out[kind+" "+m.Namespace+"/"+m.Name] = comparable(s.t, o)
		}
	}
	return out
}

func diffResources(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if want[k] != got[k] {
			t.Errorf("%s: %s\n got %s\nwant %s", what, k, got[k], want[k])
		}
	}
	if len(want) < 15 {
		t.Errorf("%s: only %d resources compared", what, len(want))
	}
}

// nodeData is what a Calico Node carries across: BGP identity, tunnel
// addresses, labels.
func (s *side) nodeData(name string) string {
	s.t.Helper()
	o, err := s.store.Get(s.ctx, "Node", "", name)
	if err != nil {
		s.t.Fatalf("get node %s: %v", name, err)
	}
	n := o.(*api.Node)
	b, _ := json.Marshal(map[string]any{"bgp": n.Spec.BGP, "vxlan": n.Spec.IPv4VXLANTunnelAddr, "mac": n.Spec.VXLANTunnelMACAddr,
		"rack": n.Labels["rack"], "hostname": n.Labels["kubernetes.io/hostname"]})
	return string(b)
}

// checkAddresses asserts every pod holds exactly its addresses under its
// handle, with its attributes, and that IPAM check finds nothing wrong.
func (s *side) checkAddresses(pods []pod) {
	s.t.Helper()
	for _, p := range pods {
		got, err := s.ipam.IPsByHandle(s.ctx, p.handle())
		if err != nil {
			s.t.Errorf("%s: IPsByHandle: %v", p.name, err)
			continue
		}
		slices.SortFunc(got, func(a, b netip.Addr) int { return a.Compare(b) })
		want := slices.SortedFunc(slices.Values(p.addrs), func(a, b netip.Addr) int { return a.Compare(b) })
		if !slices.Equal(got, want) {
			s.t.Errorf("%s: handle holds %v, want %v", p.name, got, want)
		}
		for _, a := range p.addrs {
			h, err := s.ipam.Lookup(s.ctx, a)
			switch {
			case err != nil:
				s.t.Errorf("%s: lookup %s: %v", p.name, a, err)
			case h.Handle != p.handle() || h.Attrs[ipam.AttrNode] != p.k8sNode || h.Attrs[ipam.AttrPod] != p.name || h.Attrs[ipam.AttrNamespace] != "shop" || h.Affinity != "host:"+p.k8sNode:
				s.t.Errorf("%s: %s is held by %+v", p.name, a, h)
			}
		}
	}
	r, err := s.ipam.Check(s.ctx)
	if err != nil {
		s.t.Fatalf("ipam check: %v", err)
	}
	if r.Problems() != 0 {
		b, _ := json.MarshalIndent(r, "", "  ")
		s.t.Errorf("ipam check found %d problems: %s", r.Problems(), b)
	}
	if out := s.ok("", "ipam", "check"); !strings.Contains(out, "Check complete; found 0 problems.") {
		s.t.Errorf("calicoctl ipam check:\n%s", out)
	}
}

// allocated is every address IPAM holds.
func (s *side) allocated() map[netip.Addr]bool {
	s.t.Helper()
	r, err := s.ipam.Check(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[netip.Addr]bool{}
	for ip := range r.Allocations {
		out[netip.MustParseAddr(ip)] = true
	}
	return out
}

// TestMigrateEtcdToKubernetesAndBack follows Calico's documented
// migration with real parts: a populated etcd is locked and exported, the
// file is imported into a fresh kube-apiserver (which has the cluster's
// Nodes and Pods), and the Kubernetes datastore is unlocked. Every
// resource, node and address arrives; new allocations never collide. Then
// the way back: the Kubernetes datastore is locked, exported and imported
// into a fresh etcd.
func TestMigrateEtcdToKubernetesAndBack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts etcd and kube-apiserver")
	}
	bin := filepath.Join(testbin.Dir(t), "calicoctl")
	src := etcdSide(t, bin)
	pods := populateEtcd(t, src, 12)
	dst, cluster := kddSide(t, bin)
	kubernetesObjects(t, cluster, pods)

	// 1. Lock etcd: the export refuses an unlocked datastore.
	if r := src.ctl("", "datastore", "migrate", "export"); r.err == nil || !strings.Contains(r.stderr, "datastore is not locked") {
		t.Fatalf("export of an unlocked datastore: %+v", r)
	}
	if out := src.ok("", "datastore", "migrate", "lock"); out != "Datastore locked.\n" {
		t.Errorf("lock: %q", out)
	}
	if !src.locked() {
		t.Fatal("etcd not locked")
	}
	guid := src.clusterInfo().Spec.ClusterGUID

	// 2. Export.
	file := filepath.Join(t.TempDir(), "etcd-data")
	exported := src.ok("", "datastore", "migrate", "export")
	if err := os.WriteFile(file, []byte(exported), 0o600); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(exported, "knp.default.") || strings.Contains(exported, "etcd-node-1") {
		t.Errorf("the export holds a Kubernetes policy's mirror or an etcd node name:\n%s", exported)
	}

	// 3. Import into the Kubernetes datastore.
	out := dst.ok("", "datastore", "migrate", "import", "-f", file)
	texttest.Contains(t, "import output", out,
		"[WARNING] Attempted to import node gone-node",
		"KubeControllersConfiguration default: node syncLabels Disabled becomes Enabled",
		"Successfully applied",
		"IPAM resource(s)\n",
		"Datastore information successfully imported.",
	)
	if !dst.locked() || dst.clusterInfo().Spec.ClusterGUID != guid {
		t.Errorf("imported ClusterInformation: %+v, want locked with GUID %s", dst.clusterInfo().Spec, guid)
	}
	if r := dst.ctl("", "datastore", "migrate", "import", "-f", file); r.err == nil || !strings.Contains(r.stderr, "datastore already has Calico resources") {
		t.Errorf("second import: %+v", r)
	}

	// 4. Unlock the Kubernetes datastore.
	if out := dst.ok("", "datastore", "migrate", "unlock"); out != "Datastore unlocked.\n" {
		t.Errorf("unlock: %q", out)
	}
	if dst.locked() {
		t.Error("still locked after unlock")
	}

	renames := map[string]string{}
	for _, n := range clusterNodes {
		renames[n.etcdName] = n.k8sName
	}
	diffResources(t, "etcd → kubernetes", src.resources(renames, true), dst.resources(nil, false))
	for _, n := range clusterNodes {
		if got, want := dst.nodeData(n.k8sName), src.nodeData(n.etcdName); got != want {
			t.Errorf("node %s on KDD: %s, want %s", n.k8sName, got, want)
		}
	}
	dst.checkAddresses(pods)

	// New allocations on the Kubernetes datastore never take an address
	// the etcd cluster had handed out.
	taken := src.allocated()
	var fresh []string
	for i := range 200 {
		n := clusterNodes[i%len(clusterNodes)].k8sName
		h := fmt.Sprintf("new-%d", i)
		v4, v6, err := dst.ipam.AutoAssign(dst.ctx, ipam.AutoAssignArgs{Num4: 1, Num6: i % 2, HandleID: h, Node: n})
		if err != nil {
			t.Fatalf("new allocation %d: %v", i, err)
		}
		for _, a := range slices.Concat(v4, v6) {
			if taken[a.Addr()] {
				t.Fatalf("new allocation %d on %s got %s, which the etcd cluster had allocated", i, n, a.Addr())
			}
			taken[a.Addr()] = true
		}
		fresh = append(fresh, h)
	}
	for _, h := range fresh {
		if err := dst.ipam.ReleaseByHandle(dst.ctx, h); err != nil {
			t.Fatal(err)
		}
	}

	// The way back: lock the Kubernetes datastore, export it, import into
	// a fresh etcd, unlock.
	dst.ok("", "datastore", "migrate", "lock")
	back := filepath.Join(t.TempDir(), "kdd-data")
	if err := os.WriteFile(back, []byte(dst.ok("", "datastore", "migrate", "export")), 0o600); err != nil {
		t.Fatal(err)
	}
	etcd2 := etcdSide(t, bin)
	out = etcd2.ok("", "datastore", "migrate", "import", "-f", back)
	if !strings.Contains(out, "Datastore information successfully imported.") {
		t.Errorf("import into etcd:\n%s", out)
	}
	etcd2.ok("", "datastore", "migrate", "unlock")
	if etcd2.locked() || etcd2.clusterInfo().Spec.ClusterGUID != guid {
		t.Errorf("etcd ClusterInformation after the way back: %+v", etcd2.clusterInfo().Spec)
	}
	diffResources(t, "kubernetes → etcd", dst.resources(nil, false), etcd2.resources(nil, false))
	for _, n := range clusterNodes {
		if got, want := etcd2.nodeData(n.k8sName), dst.nodeData(n.k8sName); got != want {
			t.Errorf("node %s back on etcd: %s, want %s", n.k8sName, got, want)
		}
	}
	// The pods' endpoints come along (on etcd the CNI plugin wrote them),
	// and so do the profiles their policy falls back to.
	weps, _, err := etcd2.store.List(etcd2.ctx, "WorkloadEndpoint", "shop")
	if err != nil || len(weps) != len(pods) {
		t.Fatalf("endpoints on etcd: %d (%v), want %d", len(weps), err, len(pods))
	}
	if _, err := etcd2.store.Get(etcd2.ctx, "Profile", "", "kns.shop"); err != nil {
		t.Errorf("profile kns.shop on etcd: %v", err)
	}
	etcd2.checkAddresses(pods)
}

// TestMigrateImportCalicoctlExport imports the file real calicoctl
// v3.31 writes (from an etcd cluster) into a fresh Kubernetes datastore,
// as Calico's guide does, and into a fresh etcd: every resource, the
// cluster's identity and the pods' addresses arrive.
func TestMigrateImportCalicoctlExport(t *testing.T) {
	bin := filepath.Join(testbin.Dir(t), "calicoctl")
	data, err := os.ReadFile(filepath.Join("testdata", "migrate", "calicoctl-v3.31.export"))
	if err != nil {
		t.Fatal(err)
	}
	targets := []struct {
		name string
		open func(t *testing.T) *side
	}{
		{"etcd", func(t *testing.T) *side { return etcdSide(t, bin) }},
		{"kubernetes", func(t *testing.T) *side {
			if testing.Short() {
				t.Skip("-short: starts kube-apiserver")
			}
			s, c := kddSide(t, bin)
			c.CreateNamespace(t, "shop", nil)
			for _, n := range []string{"node-1", "node-2"} {
				if _, err := c.Client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			return s
		}},
	}
	for _, tc := range targets {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.open(t)
			out := s.ok(string(data), "datastore", "migrate", "import", "-f", "-")
			if !strings.Contains(out, "Successfully applied 17 resource(s)") || !strings.Contains(out, "Successfully applied 8 IPAM resource(s)") {
				t.Errorf("import output:\n%s", out)
			}
			ci := s.clusterInfo()
			if ci.Spec.ClusterGUID != "2f0a5c9d8e7b4a6c9d1e3f5a7b9c1d3e" || ci.Spec.CalicoVersion != "v3.31.0" || !s.locked() {
				t.Errorf("ClusterInformation: %+v", ci.Spec)
			}
			for _, want := range []string{"GlobalNetworkPolicy security.block-bad", "GlobalNetworkPolicy allow-dns", "NetworkPolicy allow-web",
				"FelixConfiguration node.node-1", "BGPPeer tor-a", "NetworkSet partners", "GlobalNetworkSet bad-nets", "Tier security"} {
				f := strings.Fields(want)
				ns := ""
				if f[0] == "NetworkPolicy" || f[0] == "NetworkSet" {
					ns = "shop"
				}
				if _, err := s.store.Get(s.ctx, f[0], ns, f[1]); err != nil {
					t.Errorf("%s: %v", want, err)
				}
			}
			if got := s.nodeData("node-1"); !strings.Contains(got, `"asNumber":64601`) || !strings.Contains(got, `"ipv4IPIPTunnelAddr":"192.168.10.0"`) || !strings.Contains(got, `"rack":"r1"`) {
				t.Errorf("node-1: %s", got)
			}
			for ip, want := range map[string]string{
				"192.168.10.1":  "k8s-pod-network.0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9",
				"192.168.20.64": "k8s-pod-network.1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a",
				"192.168.10.0":  "ipip-tunnel-addr-node-1",
			} {
				h, err := s.ipam.Lookup(s.ctx, netip.MustParseAddr(ip))
				if err != nil || h.Handle != want {
					t.Errorf("%s held by %+v (%v), want %s", ip, h, err, want)
				}
			}
			if cfg, err := s.ipam.Config(s.ctx); err != nil || !cfg.AutoAllocateBlocks || cfg.StrictAffinity {
				t.Errorf("IPAM config %+v %v", cfg, err)
			}
			// A new allocation on node-1 continues in its block without reuse.
			v4, _, err := s.ipam.AutoAssign(s.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "new", Node: "node-1"})
			if err != nil || v4[0].Addr().String() != "192.168.10.2" {
				t.Errorf("next address on node-1: %v %v, want 192.168.10.2", v4, err)
			}
		})
	}
}

// TestMigrateLockUnlock: lock creates the ClusterInformation a datastore
// lacks, both verbs flip only datastoreReady, and export needs the lock;
// on etcd (a migration's source) and on the Kubernetes datastore (its
// target, and the source of a migration back), where the cluster type
// names kdd.
func TestMigrateLockUnlock(t *testing.T) {
	bin := filepath.Join(testbin.Dir(t), "calicoctl")
	t.Run("etcd", func(t *testing.T) { testMigrateLockUnlock(t, etcdSide(t, bin), "") })
	t.Run("kdd", func(t *testing.T) {
		s, _ := kddSide(t, bin)
		testMigrateLockUnlock(t, s, "kdd")
	})
}

// testMigrateLockUnlock runs the lock cycle on s; clusterType is what the
// ClusterInformation lock creates has for cluster type ("" for none).
func testMigrateLockUnlock(t *testing.T, s *side, clusterType string) {
	if r := s.ctl("", "datastore", "migrate", "export"); r.err == nil || !strings.Contains(r.stderr, "datastore is not locked. Run the `calicoctl datastore migrate lock` command") {
		t.Errorf("export without ClusterInformation: %+v", r)
	}
	if r := s.ctl("", "datastore", "migrate", "unlock"); r.err == nil || !strings.Contains(r.stderr, "ClusterInformation") {
		t.Errorf("unlock without ClusterInformation: %+v", r)
	}
	s.ok("", "datastore", "migrate", "lock")
	ci := s.clusterInfo()
	if !s.locked() || len(ci.Spec.ClusterGUID) != 32 || ci.Spec.ClusterType != clusterType {
		t.Fatalf("after lock: %+v, want a GUID and cluster type %q", ci.Spec, clusterType)
	}
	s.ok("", "datastore", "migrate", "lock") // idempotent
	if out := s.ok("", "datastore", "migrate", "export"); !strings.Contains(out, "===\n") {
		t.Errorf("export: %q", out)
	}
	s.ok("", "datastore", "migrate", "unlock")
	after := s.clusterInfo()
	if s.locked() || after.Spec.ClusterGUID != ci.Spec.ClusterGUID || after.Spec.ClusterType != ci.Spec.ClusterType {
		t.Errorf("after unlock: %+v (before %+v)", after.Spec, ci.Spec)
	}
	if r := s.ctl("", "datastore", "migrate", "export"); r.err == nil {
		t.Error("export after unlock succeeded")
	}
	if r := s.ctl("", "datastore", "migrate", "import"); r.err == nil || !strings.Contains(r.stderr, "-f FILE") {
		t.Errorf("import without -f: %+v", r)
	}
}
