package cni_test

import (
	"encoding/json"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// conflist wraps plugin configs into a network config list.
func (e *env) conflist(cniVersion string, plugins ...[]byte) *libcni.NetworkConfigList {
	e.t.Helper()
	var ps []json.RawMessage
	for _, p := range plugins {
		var m map[string]any
		json.Unmarshal(p, &m)
		delete(m, "cniVersion")
		delete(m, "name")
		data, _ := json.Marshal(m)
		ps = append(ps, data)
	}
	data, _ := json.Marshal(map[string]any{"cniVersion": cniVersion, "name": "k8s-pod-network", "plugins": ps})
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		e.t.Fatalf("conflist: %v\n%s", err, data)
	}
	return list
}

// A conflist chains calico with a plugin that consumes its result.
func TestConflistChained(t *testing.T) {
	e := newEnv(t)
	e.addPool("v4", "10.244.0.0/16", 26)
	tuning := []byte(`{"type":"tuning","sysctl":{"net.ipv4.conf.eth0.accept_local":"1"}}`)
	for _, v := range specVersionsWithCheck {
		t.Run(v, func(t *testing.T) {
			e := e.in(t)
			list := e.conflist(v, e.conf(v, nil), tuning)
			p := newPod(t)
			r, err := e.cni.AddNetworkList(e.ctx, list, p.rt)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			res, _ := types100.NewResultFromResult(r)
			if len(res.IPs) != 1 || len(res.Interfaces) != 2 {
				t.Errorf("chained result %+v", res)
			}
			if got := podSysctl(t, p, "net/ipv4/conf/eth0/accept_local"); got != "1" {
				t.Errorf("tuning did not find calico's interface in prevResult (accept_local=%s)", got)
			}
			if err := e.cni.CheckNetworkList(e.ctx, list, p.rt); err != nil {
				t.Errorf("CHECK: %v", err)
			}
			if err := e.cni.DelNetworkList(e.ctx, list, p.rt); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			e.assertNothingLeft("k8s-pod-network", p, "cali"+p.rt.ContainerID)
		})
	}
}

// A second ADD for a container that already has an endpoint (another
// network, another interface name) is answered as Calico answers it: the
// existing endpoint and its addresses, now also in the second network's
// profile; no second veth.
func TestSecondAddSameContainer(t *testing.T) {
	e := newEnv(t)
	e.addPool("v4", "10.244.0.0/16", 26)
	first := e.conf("1.0.0", nil)
	second := e.conf("1.0.0", map[string]any{"name": "other-net"})
	p := newPod(t)
	addrs := podAddrs(t, e.mustAdd(first, p))

	p.rt.IfName = "eth1"
	res := e.mustAdd(second, p)
	if got := podAddrs(t, res); !slices.Equal(got, addrs) {
		t.Errorf("second ADD reported %v, want the existing %v", got, addrs)
	}
	inPod(t, p, func() error {
		if _, err := netlink.LinkByName("eth1"); err == nil {
			t.Error("second ADD created eth1")
		}
		return nil
	})
	eps := e.endpointsOf(p.rt.ContainerID)
	if len(eps) != 1 || !slices.Equal(eps[0].Spec.Profiles, []string{"k8s-pod-network", "other-net"}) {
		t.Fatalf("endpoints %v: want one with both networks' profiles", eps)
	}
	if _, err := e.store.Get(e.ctx, "Profile", "", "other-net"); err != nil {
		t.Errorf("profile other-net: %v", err)
	}

	e.mustDel(second, p)
	p.rt.IfName = "eth0"
	e.mustDel(first, p)
	e.assertNothingLeft("k8s-pod-network", p, "cali"+p.rt.ContainerID)
}

func TestDelIsIdempotent(t *testing.T) {
	e := newEnv(t)
	e.addPool("v4", "10.244.0.0/16", 26)
	conf := e.conf("1.0.0", nil)

	t.Run("never added", func(t *testing.T) {
		e := e.in(t)
		e.mustDel(conf, newPod(t))
	})
	// The runtime removed the namespace's path, but the kernel has not
	// destroyed the namespace (and with it the veth) yet: under load that
	// takes a while, and here a reference holds it until the test ends.
	// DEL must not wait for the kernel.
	t.Run("netns already gone", func(t *testing.T) {
		e := e.in(t)
		p, veth := e.addThenDropNetNS(conf)
		e.mustDel(conf, p)
		e.assertNothingLeft("k8s-pod-network", p, veth)
		e.mustDel(conf, p) // and again: idempotent
	})
	t.Run("no netns given", func(t *testing.T) {
		e := e.in(t)
		p := newPod(t)
		e.mustAdd(conf, p)
		rt := *p.rt
		rt.NetNS = ""
		net, _ := libcni.ConfFromBytes(conf)
		if err := e.cni.DelNetwork(e.ctx, net, &rt); err != nil {
			t.Fatalf("DEL without CNI_NETNS: %v", err)
		}
		if eps := e.endpointsOf(p.rt.ContainerID); len(eps) != 0 {
			t.Errorf("endpoint left: %v", eps[0].Name)
		}
		if held := e.heldBy("k8s-pod-network." + p.rt.ContainerID); len(held) != 0 {
			t.Errorf("addresses left: %v", held)
		}
		// Nor routes to the freed addresses through the pod's veth.
		if _, err := netlink.LinkByName("cali" + p.rt.ContainerID); err == nil {
			t.Errorf("host veth cali%s left", p.rt.ContainerID)
		}
	})
}

// TestStatusAndGC: STATUS says "plugin not available" while the datastore
// is down; GC removes exactly this node's attachments that are not valid
// any more, and this node's leaked addresses. On the Kubernetes datastore
// the workloads are Pods (another node's pod holds its address in its
// annotations), and a collected endpoint lives on without addresses, as
// its Pod does.
func TestStatusAndGC(t *testing.T) {
	for _, ds := range []struct {
		name string
		open func(testing.TB) *env
	}{{"etcd", func(t testing.TB) *env { return newEnv(t) }}, {"kubernetes", newKDDEnv}} {
		t.Run(ds.name, func(t *testing.T) { testStatusAndGC(t, ds.open(t)) })
	}
}

func testStatusAndGC(t *testing.T, e *env) {
	e.addPool("v4", "10.244.0.0/16", 26)
	list := e.conflist("1.1.0", e.conf("1.1.0", nil))

	if err := e.cni.GetStatusNetworkList(e.ctx, list); err != nil {
		t.Errorf("STATUS with the datastore up: %v", err)
	}
	if e.kube != nil {
		e.kube.StopAPIServer(t)
	} else {
		e.etcd.Stop()
	}
	err := e.cni.GetStatusNetworkList(e.ctx, list)
	if code, _ := cniCode(err); code != types.ErrPluginNotAvailable {
		t.Errorf("STATUS with the datastore down: %v, want code 50", err)
	}
	if e.kube != nil {
		e.kube.RestartAPIServer(t)
	} else {
		e.etcd.Restart(t)
		e.reconnect()
	}

	var keep, gone *pod
	if e.kube != nil {
		e.addNode(e.node)
		keep, gone = newPod(t, "default", "keep"), newPod(t, "default", "gone")
		e.addK8sPod("default", "keep", e.node)
		e.addK8sPod("default", "gone", e.node)
	} else {
		keep, gone = newPod(t), newPod(t)
	}
	for _, p := range []*pod{keep, gone} {
		if _, err := e.cni.AddNetworkList(e.ctx, list, p.rt); err != nil {
			t.Fatal(err)
		}
	}
	// A handle this node leaked (no endpoint), and another node's pod,
	// which this node's GC must not touch.
	if _, _, err := e.ipam.AutoAssign(e.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "k8s-pod-network.leaked0", Node: e.node}); err != nil {
		t.Fatal(err)
	}
	remoteIPs, _, err := e.ipam.AutoAssign(e.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "k8s-pod-network.remote0", Node: "node2"})
	if err != nil {
		t.Fatal(err)
	}
	if e.kube != nil {
		e.addNode("node2")
		e.addK8sPod("default", "remote", "node2", map[string]string{
			"cni.projectcalico.org/containerID": "remote0",
			"cni.projectcalico.org/podIP":       remoteIPs[0].String(),
			"cni.projectcalico.org/podIPs":      remoteIPs[0].String(),
		})
	} else {
		remote := &api.WorkloadEndpoint{
			TypeMeta:   api.TypeMeta{Kind: "WorkloadEndpoint", APIVersion: api.GroupVersion},
			ObjectMeta: api.ObjectMeta{Namespace: "default"},
			Spec: api.WorkloadEndpointSpec{Orchestrator: "cni", Node: "node2", ContainerID: "remote0", Endpoint: "eth0",
				InterfaceName: "caliremote0", IPNetworks: []string{remoteIPs[0].String()}},
		}
		if _, err := e.store.Create(e.ctx, remote); err != nil {
			t.Fatal(err)
		}
	}

	err = e.cni.GCNetworkList(e.ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: keep.rt.ContainerID, IfName: "eth0"}}})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	// addressed counts the container's endpoints that have addresses.
	addressed := func(containerID string) int {
		n := 0
		for _, ep := range e.endpointsOf(containerID) {
			if len(ep.Spec.IPNetworks) > 0 {
				n++
			}
		}
		return n
	}
	if addressed(keep.rt.ContainerID) != 1 || len(e.heldBy("k8s-pod-network."+keep.rt.ContainerID)) != 1 {
		t.Error("GC removed a valid attachment")
	}
	if addressed(gone.rt.ContainerID) != 0 || len(e.heldBy("k8s-pod-network."+gone.rt.ContainerID)) != 0 {
		t.Error("GC kept a stale attachment")
	}
	if e.kube == nil && len(e.endpointsOf(gone.rt.ContainerID)) != 0 {
		t.Error("GC kept a stale endpoint")
	}
	if len(e.heldBy("k8s-pod-network.leaked0")) != 0 {
		t.Error("GC kept this node's leaked handle")
	}
	if addressed("remote0") != 1 || len(e.heldBy("k8s-pod-network.remote0")) != 1 {
		t.Error("GC touched another node's endpoint or addresses")
	}
	e.cni.DelNetworkList(e.ctx, list, keep.rt)
	e.cni.DelNetworkList(e.ctx, list, gone.rt)
}

// calico-ipam as a stand-alone IPAM plugin: executed by the runtime's
// network plugin (here the reference ptp), or directly.
func TestCalicoIPAMPlugin(t *testing.T) {
	e := newEnv(t)
	e.addPool("v4", "10.244.0.0/16", 26)
	e.addPool("v6", "fd00:244::/112", 122)

	t.Run("dual stack, addresses with their block's prefix", func(t *testing.T) {
		e := e.in(t)
		p := newPod(t)
		conf := string(e.conf("1.0.0", map[string]any{"ipam": map[string]any{"type": "calico-ipam", "assign_ipv6": "true"}}))
		env := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": p.rt.ContainerID, "CNI_NETNS": p.ns.Path(),
			"CNI_IFNAME": "eth0", "CNI_PATH": e.binDir}
		out, err := runPlugin(t, filepath.Join(e.binDir, "calico-ipam"), env, conf)
		if err != nil {
			t.Fatalf("calico-ipam ADD: %v: %s", err, out)
		}
		var res struct {
			IPs []struct{ Address string } `json:"ips"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatal(err)
		}
		held := e.heldBy("k8s-pod-network." + p.rt.ContainerID)
		if len(res.IPs) != 2 || len(held) != 2 {
			t.Fatalf("ADD gave %+v, handle holds %v: want one IPv4 and one IPv6", res.IPs, held)
		}
		for _, ip := range res.IPs {
			pfx := netip.MustParsePrefix(ip.Address)
			if !slices.Contains(held, pfx.Addr()) {
				t.Errorf("address %s is not held by the container's handle", pfx)
			}
			if want := map[bool]int{true: 26, false: 122}[pfx.Addr().Is4()]; pfx.Bits() != want {
				t.Errorf("address %s: want the block's /%d", pfx, want)
			}
		}
		env["CNI_COMMAND"] = "DEL"
		if out, err := runPlugin(t, filepath.Join(e.binDir, "calico-ipam"), env, conf); err != nil {
			t.Fatalf("calico-ipam DEL: %v: %s", err, out)
		}
		e.assertNothingLeft("k8s-pod-network", p, "")
	})

	// Driven by libcni as the top plugin (the result carries addresses
	// only), including CHECK against the cached result.
	t.Run("through libcni", func(t *testing.T) {
		e := e.in(t)
		conf := e.conf("1.0.0", map[string]any{"type": "calico-ipam"})
		p := newPod(t)
		addrs := podAddrs(t, e.mustAdd(conf, p))
		if held := e.heldBy("k8s-pod-network." + p.rt.ContainerID); len(addrs) != 1 || !slices.Equal(held, []netip.Addr{addrs[0].Addr()}) {
			t.Errorf("ADD gave %v, the handle holds %v", addrs, held)
		}
		if err := e.check(conf, p); err != nil {
			t.Errorf("CHECK: %v", err)
		}
		e.ipam.ReleaseByHandle(e.ctx, "k8s-pod-network."+p.rt.ContainerID)
		if err := e.check(conf, p); err == nil || !strings.Contains(err.Error(), "not held") {
			t.Errorf("CHECK after the address was released: %v, want an error", err)
		}
		e.mustDel(conf, p)
		e.assertNothingLeft("k8s-pod-network", p, "")
	})

	t.Run("CNI_ARGS IP", func(t *testing.T) {
		e := e.in(t)
		p := newPod(t)
		p.rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"IP", "10.244.99.9"}}
		conf := e.conf("1.0.0", map[string]any{"type": "calico-ipam"})
		res := e.mustAdd(conf, p)
		if got := podAddrs(t, res); len(got) != 1 || got[0].String() != "10.244.99.9/26" {
			t.Errorf("ADD with IP=10.244.99.9 gave %v", got)
		}
		e.mustDel(conf, p)
		e.assertNothingLeft("k8s-pod-network", p, "")
	})

	t.Run("pool exhausted", func(t *testing.T) {
		e := e.in(t)
		e.addPool("tiny", "10.252.0.0/31", 31)
		conf := e.conf("1.0.0", map[string]any{"ipam": map[string]any{"type": "calico-ipam", "ipv4_pools": []string{"tiny"}}})
		var pods []*pod
		for range 2 {
			p := newPod(t)
			e.mustAdd(conf, p)
			pods = append(pods, p)
		}
		p := newPod(t)
		_, err := e.add(conf, p)
		if code, msg := cniCode(err); code != types.ErrTryAgainLater || !strings.Contains(msg, "no free addresses") {
			t.Errorf("ADD from an exhausted pool: %v, want code 11 (no free addresses)", err)
		}
		e.assertNothingLeft("k8s-pod-network", p, "cali"+p.rt.ContainerID)
		for _, p := range pods {
			e.mustDel(conf, p)
		}
	})
}
