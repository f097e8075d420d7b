package policy_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/internal/cni"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/explain"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// packetLab is a node on real network namespaces: the node's namespace,
// holding the compiled rules of both families (programmed by the agent's
// own iptables programmers) and a host veth per local pod; a namespace
// per pod, with the pod's addresses and Calico's gateways (169.254.1.1,
// and the host veth's fe80::ecee:eeff:feee:eeee for IPv6); and an
// outside namespace behind the node's eth0, holding the outside
// addresses. Every namespace serves TCP on listenPorts and UDP echo on
// udpPort.
type packetLab struct {
	node, outside *netnstest.NS
	prog4         *xtables.Programmer
	// prog6 is nil when the host has no ip6tables: IPv6 is not probed.
	prog6 *xtables.Programmer
	// pods maps a pod's host interface to its namespace; pods are made as
	// cases need them and kept for the rest of the test (root's).
	pods map[string]*labPod
	root *testing.T
}

type labPod struct {
	ns    *netnstest.NS
	addrs []string
}

// The lab's addresses: the node's eth0 (hostIP and hostV6, also a host
// endpoint's expected IPs in several cases), its outside neighbour, and
// addresses of the outside that policies name (or not).
var (
	labOutsideIP, labOutsideIP6 = "10.0.0.1", "fd00:10::1"
	labOutside                  = []string{"192.0.2.5", "198.51.100.7", "203.0.113.9", "2001:db8::1", "2001:db8:bad::1"}
	// probePorts are the TCP ports the golden and scenario cases' policies
	// name; corpusPorts those of the random clusters' (the generator's
	// ports and named ports).
	probePorts  = []int{80, 5432, 22}
	corpusPorts = []int{80, 443, 53, 8080, 9091, 22}
	listenPorts = []int{80, 5432, 22, 443, 53, 8080, 9091}
	udpPort     = 53
)

// nsRun is the xtables Runner for the node's namespace.
type nsRun struct{ ns string }

func (r nsRun) Run(ctx context.Context, name string, args []string, stdin string) (string, error) {
	return xtables.ExecRunner{}.Run(ctx, "ip", append([]string{"netns", "exec", r.ns, name}, args...), stdin)
}

// noDAD makes the addresses of the interfaces created in ns from now on
// usable at once: duplicate address detection would hold a fresh IPv6
// address (and the host veth's link-local gateway) for a second or two.
func noDAD(t *testing.T, ns *netnstest.NS) {
	t.Helper()
	ns.MustRun(t, "sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad; echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad")
}

func newPacketLab(t *testing.T) *packetLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: real packets in network namespaces")
	}
	for _, bin := range []string{"ip", "ipset", "iptables", "iptables-restore"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s", bin)
		}
	}
	l := &packetLab{node: netnstest.New(t, "xpl-node"), outside: netnstest.New(t, "xpl-out"), pods: map[string]*labPod{}, root: t}
	n, o := l.node, l.outside
	noDAD(t, n)
	noDAD(t, o)
	n.MustRun(t, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", o.Name)
	n.MustRun(t, "ip", "addr", "add", hostIP+"/24", "dev", "eth0")
	n.MustRun(t, "ip", "addr", "add", hostV6.String()+"/64", "dev", "eth0", "nodad")
	n.MustRun(t, "ip", "link", "set", "eth0", "up")
	n.MustRun(t, "ip", "route", "add", "default", "via", labOutsideIP)
	n.MustRun(t, "ip", "-6", "route", "add", "default", "via", labOutsideIP6)
	n.MustRun(t, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward; echo 1 > /proc/sys/net/ipv6/conf/all/forwarding")
	o.MustRun(t, "ip", "addr", "add", labOutsideIP+"/24", "dev", "eth0")
	o.MustRun(t, "ip", "addr", "add", labOutsideIP6+"/64", "dev", "eth0", "nodad")
	for _, a := range labOutside {
		if strings.Contains(a, ":") {
			o.MustRun(t, "ip", "addr", "add", a+"/128", "dev", "eth0", "nodad")
		} else {
			o.MustRun(t, "ip", "addr", "add", a+"/32", "dev", "eth0")
		}
	}
	o.MustRun(t, "ip", "link", "set", "eth0", "up")
	o.MustRun(t, "ip", "route", "add", "10.65.0.0/16", "via", hostIP)
	o.MustRun(t, "ip", "-6", "route", "add", "fd00:65::/64", "via", hostV6.String())
	// natOutgoingAddress of the nat-outgoing-address case: its replies
	// come back to the node, which undoes the SNAT.
	o.MustRun(t, "ip", "route", "add", "192.0.2.1/32", "via", hostIP)
	l.serve(t, n, hostIP, hostV6.String())
	l.serve(t, o, append([]string{labOutsideIP, labOutsideIP6}, labOutside...)...)
	// The link's carrier and first neighbour resolutions take a moment
	// after it comes up (longer on a loaded machine): wait for both
	// families both ways before anything is measured, so that no probe
	// counts the wait as a drop.
	for _, hop := range []struct {
		from *netnstest.NS
		to   string
	}{{o, hostIP}, {o, hostV6.String()}, {n, labOutsideIP}, {n, labOutsideIP6}} {
		addr := net.JoinHostPort(hop.to, "80")
		for deadline := time.Now().Add(10 * time.Second); ; {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			c, err := hop.from.Dial(ctx, "tcp", addr)
			cancel()
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s does not reach %s: %v", hop.from.Name, addr, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The agent's programmers, in the host's iptables flavour.
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := xtables.Detect(ctx, xtables.ExecRunner{}, 4)
	if err != nil {
		t.Skip(err)
	}
	l.prog4 = xtables.New(b, nsRun{n.Name}, nil, quiet)
	if b6, err := xtables.Detect(ctx, xtables.ExecRunner{}, 6); err == nil {
		l.prog6 = xtables.New(b6, nsRun{n.Name}, nil, quiet)
	} else {
		t.Logf("IPv6 not probed: %v", err)
	}
	return l
}

// serve starts the TCP listeners (both families) and, on each of addrs
// (so that replies leave from the address asked), the UDP echo in ns.
func (l *packetLab) serve(t *testing.T, ns *netnstest.NS, addrs ...string) {
	t.Helper()
	for _, p := range listenPorts {
		ln, err := ns.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("listen in %s: %v", ns.Name, err)
		}
		netnstest.Serve(t, ln, func(c net.Conn) {})
	}
	for _, a := range addrs {
		u, err := ns.ListenPacket("udp", net.JoinHostPort(a, strconv.Itoa(udpPort)))
		if err != nil {
			t.Fatalf("listen in %s: %v", ns.Name, err)
		}
		t.Cleanup(func() { u.Close() })
		go func() {
			buf := make([]byte, 64)
			for {
				k, from, err := u.ReadFrom(buf)
				if err != nil {
					return
				}
				u.WriteTo(buf[:k], from)
			}
		}()
	}
}

// pod returns the namespace of the local pod on iface with addrs,
// plumbed as Calico's CNI plugin does it. It lives as long as the lab;
// a pod that had iface or one of addrs before, with other addresses,
// is unplugged first (random clusters reuse both).
func (l *packetLab) pod(iface string, addrs []string) *netnstest.NS {
	t := l.root
	if p := l.pods[iface]; p != nil && slices.Equal(p.addrs, addrs) {
		return p.ns
	}
	n := l.node
	for other, p := range l.pods {
		if other == iface || slices.ContainsFunc(p.addrs, func(a string) bool { return slices.Contains(addrs, a) }) {
			n.MustRun(t, "ip", "link", "del", other)
			delete(l.pods, other)
		}
	}
	p := netnstest.New(t, "xpl-pod")
	noDAD(t, n)
	n.MustRun(t, "ip", "link", "add", iface, "address", cni.HostVethMAC().String(), "type", "veth", "peer", "name", "eth0", "netns", p.Name)
	// The host veth's settings, as the agent asserts them.
	err := agent.ApplyHostVethSysctls(func(path, value string) error {
		out, err := n.Command("sh", "-c", "echo "+value+" > /proc/sys/"+path).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}, iface)
	if err != nil {
		t.Fatal(err)
	}
	n.MustRun(t, "ip", "link", "set", iface, "up")
	p.MustRun(t, "ip", "link", "set", "eth0", "up")
	p.MustRun(t, "ip", "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
	p.MustRun(t, "ip", "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
	for _, a := range addrs {
		if strings.Contains(a, ":") {
			n.MustRun(t, "ip", "-6", "route", "add", a+"/128", "dev", iface)
			p.MustRun(t, "ip", "addr", "add", a+"/128", "dev", "eth0", "nodad")
			continue
		}
		n.MustRun(t, "ip", "route", "add", a+"/32", "dev", iface)
		p.MustRun(t, "ip", "addr", "add", a+"/32", "dev", "eth0")
	}
	if slices.ContainsFunc(addrs, func(a string) bool { return strings.Contains(a, ":") }) {
		p.MustRun(t, "ip", "-6", "route", "add", "default", "via", "fe80::ecee:eeff:feee:eeee", "dev", "eth0")
	}
	l.serve(t, p, addrs...)
	l.pods[iface] = &labPod{ns: p, addrs: addrs}
	return p
}

// source is the namespace a packet from e starts in, and the address to
// send from (for the outside, which has several).
func (l *packetLab) source(e explain.End) (*netnstest.NS, string) {
	switch e.Kind {
	case explain.KindWorkload:
		return l.pods[e.Interface].ns, ""
	case explain.KindAddress:
		return l.outside, e.Address
	}
	return l.node, ""
}

// send reports whether a new connection from one end to the other gets
// through: a TCP handshake, or a UDP datagram echoed back. A connection
// that fails is tried once more, so that a first packet lost to neighbour
// resolution does not count as denied.
func (l *packetLab) send(from, to explain.End, proto uint8, port int) bool {
	return l.try(from, to, proto, port, 500*time.Millisecond) || l.try(from, to, proto, port, 500*time.Millisecond)
}

// sendAlone is send for a connection that failed among the concurrent
// ones: tried on its own with a longer wait, so that a handshake that a
// loaded machine (hundreds of connections at once, other suites beside)
// was too slow to answer does not count as denied. Only a failure can be
// the machine's doing; a connection that gets through was let through.
func (l *packetLab) sendAlone(from, to explain.End, proto uint8, port int) bool {
	for range 2 {
		if l.try(from, to, proto, port, 3*time.Second) {
			return true
		}
	}
	return false
}

func (l *packetLab) try(from, to explain.End, proto uint8, port int, wait time.Duration) bool {
	ns, local := l.source(from)
	addr := net.JoinHostPort(to.Address, strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if proto == 6 {
		c, err := ns.DialFrom(ctx, "tcp", local, addr)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	c, err := ns.DialFrom(ctx, "udp", local, addr)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte("ping")); err != nil {
		return false
	}
	buf := make([]byte, 8)
	k, err := c.Read(buf)
	return err == nil && string(buf[:k]) == "ping"
}

// labProbe is one connection the lab sends, with explain's answer for
// it and what the packets got.
type labProbe struct {
	from, to explain.End
	proto    uint8
	port     int
	ex       *explain.Explanation
	got      bool
}

// probes are the connections between every two of the lab's ends in s
// (of one family; not between two outside addresses, nor from the node
// to itself), UDP to udpPort and TCP to each of tcpPorts, explained;
// with r, a random sample of n of them.
func (l *packetLab) probes(t *testing.T, s *policy.Snapshot, tcpPorts []int, r *rand.Rand, n int) []*labProbe {
	t.Helper()
	ends := l.ends(t, s)
	pps := [][2]int{{17, udpPort}}
	for _, p := range tcpPorts {
		pps = append(pps, [2]int{6, p})
	}
	var out []*labProbe
	for _, from := range ends {
		for _, to := range ends {
			if from.Address == to.Address || from.Addrs[0].Is6() != to.Addrs[0].Is6() ||
				(from.Kind != explain.KindWorkload && to.Kind != explain.KindWorkload && from.Kind == to.Kind) {
				continue
			}
			for _, pp := range pps {
				out = append(out, &labProbe{from: from, to: to, proto: uint8(pp[0]), port: pp[1]})
			}
		}
	}
	if r != nil {
		r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		out = out[:min(n, len(out))]
	}
	for _, p := range out {
		ex, err := explain.Explain(explain.Request{From: p.from, To: p.to, Protocol: p.proto, DstPort: uint16(p.port)}, snapshotsOf(s))
		if err != nil {
			t.Fatalf("%s -> %s: %v", p.from.Address, p.to.Address, err)
		}
		p.ex = ex
	}
	return out
}

// check programs s's rules into the node, sends the probes at once and
// checks that explain's verdict for each is what the packets got, and
// that each node's part of it is the simulator's walk of the packet.
func (l *packetLab) check(t *testing.T, s *policy.Snapshot, probes []*labProbe) {
	t.Helper()
	res := policy.Compile(s)
	if _, err := l.prog4.Apply(context.Background(), res.V4); err != nil {
		t.Fatalf("program the node (IPv4): %v", err)
	}
	if res.V6 != nil && l.prog6 != nil {
		if _, err := l.prog6.Apply(context.Background(), res.V6); err != nil {
			t.Fatalf("program the node (IPv6): %v", err)
		}
	}
	var wg sync.WaitGroup
	for _, p := range probes {
		wg.Go(func() { p.got = l.send(p.from, p.to, p.proto, p.port) })
	}
	wg.Wait()
	compiled := map[string]*policy.Result{node: res}
	for _, p := range probes {
		checkExplanation(t, s, compiled, p.ex)
		// A connection needs its replies to get back too.
		works := p.ex.Verdict == explain.Allow && p.ex.Reply.Verdict == explain.Allow
		if works && !p.got {
			p.got = l.sendAlone(p.from, p.to, p.proto, p.port)
		}
		if works != p.got {
			var b strings.Builder
			p.ex.WriteText(&b)
			t.Errorf("%s %s (%s) -> %s (%s):%d: explain says the connection works: %v, the packets say %v\n%s",
				explain.ProtocolName(p.proto), p.from.Name, p.from.Address, p.to.Name, p.to.Address, p.port, works, p.got, b.String())
		}
	}
}

// TestExplainOnRealPackets programs each golden and scenario case's rules
// with the agent's programmers into the lab's node, sends real TCP and
// UDP connections, in both families where the case has them, between the
// node's pods, the node itself and the outside, and checks that
// explain's verdict for each is what the packets got (and what the
// simulator gets).
func TestExplainOnRealPackets(t *testing.T) {
	lab := newPacketLab(t)
	golden, scenarios := goldenCases(), scenarioCases()
	if testing.Short() {
		// A few of each, one with IPv6.
		golden = golden[:6]
		scenarios = slices.DeleteFunc(scenarios, func(c goldenCase) bool {
			return !slices.Contains([]string{"deny-by-default-once-selected", "host-endpoint-failsafe", "scenario-ipv6"}, c.name)
		})
	}
	total, v6 := 0, 0
	for _, tc := range append(golden, scenarios...) {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.edit(s)
			probes := lab.probes(t, s, probePorts, nil, 0)
			lab.check(t, s, probes)
			total += len(probes)
			for _, p := range probes {
				if p.from.Addrs[0].Is6() {
					v6++
				}
			}
		})
	}
	if lab.prog6 != nil && v6 == 0 {
		t.Errorf("no IPv6 connection among %d", total)
	}
	t.Logf("%d connections compared, %d of them IPv6", total, v6)
}

// TestExplainRandomOnRealPackets does the same for random clusters (the
// generator of TestExplainRandomCorpus): a random sample of the
// connections between each cluster's ends, so that many clusters fit in
// a few seconds each.
func TestExplainRandomOnRealPackets(t *testing.T) {
	lab := newPacketLab(t)
	worlds, perWorld := 15, 24
	if testing.Short() {
		worlds = 4
	}
	total, works := 0, 0
	for w := 0; w < worlds; w++ {
		t.Run(fmt.Sprintf("world-%d", w), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(w), 1414))
			s, _ := gen{r}.world()
			probes := lab.probes(t, s, corpusPorts, r, perWorld)
			lab.check(t, s, probes)
			total += len(probes)
			for _, p := range probes {
				if p.got {
					works++
				}
			}
		})
	}
	if works < total/10 || works > total*9/10 {
		t.Errorf("weak test: %d of %d connections work", works, total)
	}
	t.Logf("%d connections compared, %d work", total, works)
}

// ends are the ends the lab can play in s, one per address: the local
// pods, the node itself (as its host endpoint when it has one) and the
// outside addresses; IPv6 ones only when s has IPv6 and the lab can
// program it. Pods of other nodes and hops there are not the lab's: it
// has one node.
func (l *packetLab) ends(t *testing.T, s *policy.Snapshot) []explain.End {
	t.Helper()
	v6 := s.Config.IPv6 && l.prog6 != nil
	family := func(addrs []netip.Addr) (out []netip.Addr) {
		for _, a := range addrs {
			if a.Is4() || v6 {
				out = append(out, a)
			}
		}
		return out
	}
	var out []explain.End
	one := func(e explain.End, a netip.Addr) {
		e.Addrs = []netip.Addr{a}
		e.Address = a.String()
		out = append(out, e)
	}
	for _, e := range endsOf(t, s) {
		switch {
		case e.Kind == explain.KindWorkload && e.Node == node:
			addrs := family(e.Addrs)
			var strs []string
			for _, a := range addrs {
				strs = append(strs, a.String())
			}
			l.pod(e.Interface, strs)
			for _, a := range addrs {
				one(e, a)
			}
		case e.Kind == explain.KindNode && e.Node == node:
			for _, a := range family([]netip.Addr{hostV4, hostV6}) {
				n := e
				if hep, err := explain.Resolve(s, a.String()); err == nil && hep.Kind == explain.KindHost {
					n = hep
				}
				one(n, a)
			}
		}
	}
	for _, a := range labOutside {
		addr := netip.MustParseAddr(a)
		if !addr.Is4() && !v6 {
			continue
		}
		e, err := explain.Resolve(s, a)
		if err != nil {
			t.Fatal(err)
		}
		if e.Kind == explain.KindAddress {
			one(e, addr)
		}
	}
	if len(out) < 4 {
		t.Fatalf("only %d ends: %v", len(out), out)
	}
	return out
}
