package overlay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/agent/routeproto"
	"github.com/projectcalico/calico-node/agent/routetable"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/connect"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
)

// The lab: nodes are network namespaces on two subnets joined by a router.
//
//	        lan namespace: bridges "bra" and "brb"
//	   bra (192.0.2.0/24)                   brb (198.51.100.0/24)
//	    │      │        │                     │        │
//	  node1  node2   router eth-a .1 ── eth-b .1     node3
//	   .11    .12                                     .13
//
// Each node namespace has eth0 (its node address, default route via the
// router) and, per pod, a host-side veth "caliN" with proxy ARP and a /32
// route, the pod namespace holding the other end as eth0 with a default
// route via 169.254.1.1, as Calico's CNI plugin sets them up. Each node
// runs its own confwatch, routetable.Table and overlay actor in-process, with
// netlink handles for its namespace, against one real etcd (newLab) or
// kube-apiserver (newKDDLab).

// labNodeSpec places a node.
type labNodeSpec struct {
	name   string
	addr   string // with prefix length
	subnet string // "a" or "b"
	labels map[string]string
}

// gateway is the router's address on each subnet.
var gateway = map[string]string{"a": "192.0.2.1", "b": "198.51.100.1"}

type lab struct {
	t      *testing.T
	prefix string
	etcd   *etcdtest.Server // nil on KDD (ds.kube)
	ds     *dsFixture
	nodes  map[string]*labNode
	pods   int
}

type labNode struct {
	spec   labNodeSpec
	ns     string
	nl     *netlink.Handle
	health *fakeHealth
	logs   *proctest.Log
	stop   func() // stops the node's actors and waits for them
}

// requireRoot skips tests that need network namespaces.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
}

// ip runs the ip command; a failure ends the test.
func (l *lab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// sysctl sets a sysctl inside namespace nsName.
func (l *lab) sysctl(nsName, key, value string) {
	l.t.Helper()
	if out, err := exec.Command("ip", "netns", "exec", nsName, "sysctl", "-q", "-w", key+"="+value).CombinedOutput(); err != nil {
		l.t.Fatalf("sysctl %s=%s in %s: %v\n%s", key, value, nsName, err, out)
	}
}

// addNS creates a namespace that is deleted when the test ends.
func (l *lab) addNS(suffix string) string {
	l.t.Helper()
	name := l.prefix + "-" + suffix
	l.ip("netns", "add", name)
	l.t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	l.ip("-n", name, "link", "set", "lo", "up")
	return name
}

// newLab builds the network and an etcd; no agents run yet.
func newLab(t *testing.T, specs ...labNodeSpec) *lab {
	requireRoot(t)
	srv := etcdtest.Start(t)
	return buildLab(t, srv, newDS(t, srv), specs)
}

// newKDDLab is newLab on the Kubernetes datastore: the nodes' actors
// read a kube-apiserver (in this process's namespace, as their stores
// are), and each Node is the Kubernetes Node kubelet registered.
func newKDDLab(t *testing.T, specs ...labNodeSpec) *lab {
	requireRoot(t)
	if testing.Short() {
		t.Skip("-short: no kube-apiserver")
	}
	return buildLab(t, nil, newKDD(t), specs)
}

// onBothLabs runs fn on a lab on etcd and on one on the Kubernetes API.
func onBothLabs(t *testing.T, fn func(t *testing.T, l *lab), specs ...labNodeSpec) {
	t.Run("etcd", func(t *testing.T) { fn(t, newLab(t, specs...)) })
	t.Run("kdd", func(t *testing.T) { fn(t, newKDDLab(t, specs...)) })
}

func buildLab(t *testing.T, srv *etcdtest.Server, ds *dsFixture, specs []labNodeSpec) *lab {
	l := &lab{
		t:      t,
		prefix: fmt.Sprintf("ovl%d-%d", os.Getpid()%100000, time.Now().UnixNano()%100000),
		etcd:   srv,
		ds:     ds,
		nodes:  map[string]*labNode{},
	}
	lan := l.addNS("lan")
	rtr := l.addNS("rtr")
	for _, sub := range []string{"a", "b"} {
		br := "br" + sub
		l.ip("-n", lan, "link", "add", br, "type", "bridge")
		l.ip("-n", lan, "link", "set", br, "up")
		l.ip("-n", lan, "link", "add", "r"+sub, "type", "veth", "peer", "name", "eth-"+sub, "netns", rtr)
		l.ip("-n", lan, "link", "set", "r"+sub, "master", br, "up")
		l.ip("-n", rtr, "addr", "add", gateway[sub]+"/24", "dev", "eth-"+sub)
		l.ip("-n", rtr, "link", "set", "eth-"+sub, "up")
	}
	l.sysctl(rtr, "net.ipv4.ip_forward", "1")
	for _, s := range specs {
		nsName := l.addNS(s.name)
		l.ip("-n", lan, "link", "add", "v"+s.name, "type", "veth", "peer", "name", "eth0", "netns", nsName)
		l.ip("-n", lan, "link", "set", "v"+s.name, "master", "br"+s.subnet, "up")
		l.ip("-n", nsName, "addr", "add", s.addr, "dev", "eth0")
		l.ip("-n", nsName, "link", "set", "eth0", "up")
		l.ip("-n", nsName, "route", "add", "default", "via", gateway[s.subnet])
		l.sysctl(nsName, "net.ipv4.ip_forward", "1")
		nl := netnstest.NetlinkAt(t, nsName)
		l.nodes[s.name] = &labNode{spec: s, ns: nsName, nl: nl}
		// The Node as calico-node's startup registers it.
		n := testNode(s.name, s.addr)
		n.Labels = s.labels
		l.ds.apply(t, n)
	}
	return l
}

// start runs confwatch, a route table and the overlay actor for node.
func (l *lab) start(name string) { l.startGated(name, nil) }

// startGated is start with the overlay behind gate (nil: none).
func (l *lab) startGated(name string, gate Gate) {
	l.t.Helper()
	n := l.nodes[name]
	n.logs = &proctest.Log{}
	logger := slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// Registered before the stop below, so it runs after it: the logs
	// are complete. OVERLAY_TEST_LOGS=1 shows them for passing tests too.
	l.t.Cleanup(func() {
		if l.t.Failed() || os.Getenv("OVERLAY_TEST_LOGS") != "" {
			l.t.Logf("%s log:\n%s", name, n.logs)
		}
	})
	var cfg datastore.Config
	if l.ds.kube != nil {
		cfg = datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{Kubeconfig: l.ds.kube.Kubeconfig}}
	} else {
		cfg = datastore.Config{Endpoints: l.etcd.Endpoints}
	}
	store, err := connect.New(l.ds.ctx, cfg)
	if err != nil {
		l.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := confwatch.New(store, logger, nil)
	table := routetable.New(n.nl, 5*time.Second, logger)
	n.health = &fakeHealth{}
	ov := New(Config{NodeName: name, Resync: 3 * time.Second, Logger: logger}, Deps{
		Updates: w.Subscribe(Kinds()...),
		Blocks:  StoreBlocks(store.IPAM(), logger),
		Store:   store,
		IPAM:    ipam.New(store.IPAM(), store, logger),
		Kernel:  n.nl,
		Routes:  table,
		Health:  n.health,
		Gate:    gate,
	})
	var wg sync.WaitGroup
	run := func(what string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil {
				l.t.Errorf("%s %s: %v", name, what, err)
			}
			if ctx.Err() == nil {
				l.t.Errorf("%s %s returned before it was stopped", name, what)
			}
		}()
	}
	run("confwatch", w.Run)
	run("route table", table.Run)
	run("overlay", ov.Run)
	n.stop = func() {
		cancel()
		wg.Wait()
		store.Close()
	}
	l.t.Cleanup(n.stop)
}

// addPod allocates an address for a pod on node from IPAM (as the CNI
// plugin would) and wires a pod namespace to the node. It returns the
// pod's namespace and address.
func (l *lab) addPod(node string) (string, netip.Addr) {
	l.t.Helper()
	return l.addPodIn(node)
}

// addPodIn is addPod with the address taken from the given pools.
func (l *lab) addPodIn(node string, pools ...string) (string, netip.Addr) {
	l.t.Helper()
	l.pods++
	n := l.nodes[node]
	v4, _, err := l.ds.ipam.AutoAssign(l.ds.ctx, ipam.AutoAssignArgs{Num4: 1, Node: node, IPv4Pools: pools,
		HandleID: fmt.Sprintf("k8s-pod-network.pod%d", l.pods)})
	if err != nil {
		l.t.Fatalf("allocate pod address on %s: %v", node, err)
	}
	addr := v4[0].Addr()
	podNS := l.addNS(fmt.Sprintf("pod%d", l.pods))
	host := fmt.Sprintf("cali%d", l.pods)
	l.ip("-n", n.ns, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", podNS)
	l.sysctl(n.ns, "net.ipv4.conf."+host+".proxy_arp", "1")
	l.sysctl(n.ns, "net.ipv4.neigh."+host+".proxy_delay", "0")
	l.ip("-n", n.ns, "link", "set", host, "up")
	l.ip("-n", n.ns, "route", "add", addr.String()+"/32", "dev", host)
	l.ip("-n", podNS, "addr", "add", addr.String()+"/32", "dev", "eth0")
	l.ip("-n", podNS, "link", "set", "eth0", "up")
	l.ip("-n", podNS, "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
	l.ip("-n", podNS, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
	l.serve(podNS, addr)
	return podNS, addr
}

// serve answers TCP connections to addr:8080 inside namespace nsName with
// the namespace's name.
func (l *lab) serve(nsName string, addr netip.Addr) {
	l.t.Helper()
	ln, err := netnstest.ListenAt("/var/run/netns/"+nsName, "tcp4", netip.AddrPortFrom(addr, 8080).String())
	if err != nil {
		l.t.Fatal(err)
	}
	netnstest.Serve(l.t, ln, func(c net.Conn) { c.Write([]byte(nsName)) })
}

// dial connects from namespace fromNS to addr:8080 and returns what the
// server said.
func dial(fromNS string, addr netip.Addr) (string, error) {
	var reply []byte
	err := ns.WithNetNSPath("/var/run/netns/"+fromNS, func(ns.NetNS) error {
		d := net.Dialer{Timeout: 2 * time.Second}
		c, err := d.Dial("tcp4", netip.AddrPortFrom(addr, 8080).String())
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		reply, err = io.ReadAll(c)
		return err
	})
	return string(reply), err
}

// eventually retries check until it returns nil or the time is up.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	polltest.Eventually(t, 30*time.Second, what, check)
}

// reach asserts that a TCP connection from fromNS to the pod toNS at addr
// works (retrying while the dataplane converges).
func (l *lab) reach(fromNS, toNS string, addr netip.Addr) {
	l.t.Helper()
	eventually(l.t, fmt.Sprintf("TCP %s -> %s (%s)", fromNS, toNS, addr), func() error {
		got, err := dial(fromNS, addr)
		if err != nil {
			return err
		}
		if got != toNS {
			return fmt.Errorf("answered by %q", got)
		}
		return nil
	})
}

// kernelState is what a node's kernel holds that the overlay owns, as
// sorted strings.
type kernelState struct {
	routes, neigh, fdb []string
	device             string // "" when vxlan.calico does not exist
}

func (n *labNode) kernel(t *testing.T) kernelState {
	t.Helper()
	var s kernelState
	rs, err := n.nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: routeproto.Calico, Table: unix.RT_TABLE_UNSPEC},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		d := r.Dst.String()
		if r.Gw != nil {
			d += " via " + r.Gw.String()
		}
		if l, err := n.nl.LinkByIndex(r.LinkIndex); err == nil {
			d += " dev " + l.Attrs().Name
		}
		if r.Flags&int(netlink.FLAG_ONLINK) != 0 {
			d += " onlink"
		}
		s.routes = append(s.routes, d)
	}
	slices.Sort(s.routes)
	link, err := n.nl.LinkByName(VXLANDevice)
	if err != nil {
		return s
	}
	v, ok := link.(*netlink.Vxlan)
	if !ok {
		t.Fatalf("%s is a %s", VXLANDevice, link.Type())
	}
	addrs, _ := n.nl.AddrList(link, netlink.FAMILY_V4)
	var as []string
	for _, a := range addrs {
		as = append(as, a.IPNet.String())
	}
	up := "down"
	if link.Attrs().Flags&net.FlagUp != 0 {
		up = "up"
	}
	s.device = fmt.Sprintf("vni %d port %d local %s learning %v mtu %d mac %s %s addrs %v",
		v.VxlanId, v.Port, v.SrcAddr, v.Learning, link.Attrs().MTU, link.Attrs().HardwareAddr, up, as)
	neigh, err := n.nl.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range neigh {
		if e.State == netlink.NUD_PERMANENT {
			s.neigh = append(s.neigh, e.IP.String()+" lladdr "+e.HardwareAddr.String())
		}
	}
	slices.Sort(s.neigh)
	fdb, err := n.nl.NeighList(link.Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range fdb {
		s.fdb = append(s.fdb, e.HardwareAddr.String()+" dst "+e.IP.String())
	}
	slices.Sort(s.fdb)
	return s
}

// fakeHealth records the last report.
type fakeHealth struct {
	mu          sync.Mutex
	live, ready bool
	detail      string
}

func (h *fakeHealth) Report(live, ready bool, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live, h.ready, h.detail = live, ready, detail
}

func (h *fakeHealth) get() (bool, bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live, h.ready, h.detail
}

// nodeOf reads a Node from the datastore.
func (l *lab) nodeOf(name string) *api.Node { return l.ds.node(l.t, name) }
