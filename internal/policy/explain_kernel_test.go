package policy_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/explain"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// packetLab is a node on real network namespaces: the node's namespace,
// holding the compiled rules (programmed by the agent's own iptables
// programmer) and a host veth per local pod; a namespace per pod, with
// the pod's address and Calico's 169.254.1.1 gateway; and an outside
// namespace behind the node's eth0, holding the outside addresses. Every
// namespace serves TCP on probePorts and UDP echo on udpPort.
type packetLab struct {
	node, outside *netnstest.NS
	prog          *xtables.Programmer
	// pods maps a pod's interface and address to its namespace; pods are
	// made as cases need them and kept for the rest of the test (root's).
	pods map[string]*netnstest.NS
	root *testing.T
}

// The lab's addresses: the node's eth0 (hostIP, also a host endpoint's
// expected IP in several cases), its outside neighbour, and addresses of
// the outside that policies name (or not).
var (
	labOutsideIP = "10.0.0.1"
	labOutside   = []string{"192.0.2.5", "198.51.100.7", "203.0.113.9"}
	probePorts   = []int{80, 5432, 22}
	udpPort      = 53
)

// nsRun is the xtables Runner for the node's namespace.
type nsRun struct{ ns string }

func (r nsRun) Run(ctx context.Context, name string, args []string, stdin string) (string, error) {
	return xtables.ExecRunner{}.Run(ctx, "ip", append([]string{"netns", "exec", r.ns, name}, args...), stdin)
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
	l := &packetLab{node: netnstest.New(t, "xpl-node"), outside: netnstest.New(t, "xpl-out"), pods: map[string]*netnstest.NS{}, root: t}
	n, o := l.node, l.outside
	n.MustRun(t, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", o.Name)
	n.MustRun(t, "ip", "addr", "add", hostIP+"/24", "dev", "eth0")
	n.MustRun(t, "ip", "link", "set", "eth0", "up")
	n.MustRun(t, "ip", "route", "add", "default", "via", labOutsideIP)
	n.MustRun(t, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
	o.MustRun(t, "ip", "addr", "add", labOutsideIP+"/24", "dev", "eth0")
	for _, a := range labOutside {
		o.MustRun(t, "ip", "addr", "add", a+"/32", "dev", "eth0")
	}
	o.MustRun(t, "ip", "link", "set", "eth0", "up")
	o.MustRun(t, "ip", "route", "add", "10.65.0.0/16", "via", hostIP)
	// natOutgoingAddress of the nat-outgoing-address case: its replies
	// come back to the node, which undoes the SNAT.
	o.MustRun(t, "ip", "route", "add", "192.0.2.1/32", "via", hostIP)
	l.serve(t, n, hostIP)
	l.serve(t, o, append([]string{labOutsideIP}, labOutside...)...)
	// The agent's programmer, in the host's iptables flavour.
	ctx := context.Background()
	b, err := xtables.Detect(ctx, xtables.ExecRunner{}, 4)
	if err != nil {
		t.Skip(err)
	}
	l.prog = xtables.New(b, nsRun{n.Name}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return l
}

// serve starts the TCP listeners and, on each of addrs (so that replies
// leave from the address asked), the UDP echo in ns.
func (l *packetLab) serve(t *testing.T, ns *netnstest.NS, addrs ...string) {
	t.Helper()
	for _, p := range probePorts {
		ln, err := ns.Listen("tcp4", ":"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("listen in %s: %v", ns.Name, err)
		}
		netnstest.Serve(t, ln, func(c net.Conn) {})
	}
	for _, a := range addrs {
		u, err := ns.ListenPacket("udp4", net.JoinHostPort(a, strconv.Itoa(udpPort)))
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

// pod returns the namespace of the local pod on iface with address ip,
// plumbed as Calico's CNI plugin does it. It lives as long as the lab.
func (l *packetLab) pod(iface, ip string) *netnstest.NS {
	t := l.root
	key := iface + " " + ip
	if p := l.pods[key]; p != nil {
		return p
	}
	for k := range l.pods {
		if strings.HasPrefix(k, iface+" ") {
			t.Fatalf("interface %s is already a pod with another address (%s)", iface, k)
		}
	}
	p := netnstest.New(t, "xpl-pod")
	n := l.node
	n.MustRun(t, "ip", "link", "add", iface, "type", "veth", "peer", "name", "eth0", "netns", p.Name)
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
	n.MustRun(t, "ip", "route", "add", ip+"/32", "dev", iface)
	p.MustRun(t, "ip", "addr", "add", ip+"/32", "dev", "eth0")
	p.MustRun(t, "ip", "link", "set", "eth0", "up")
	p.MustRun(t, "ip", "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
	p.MustRun(t, "ip", "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
	l.serve(t, p, ip)
	l.pods[key] = p
	return p
}

// source is the namespace a packet from e starts in, and the address to
// send from (for the outside, which has several).
func (l *packetLab) source(t *testing.T, e explain.End) (*netnstest.NS, string) {
	switch e.Kind {
	case explain.KindWorkload:
		return l.pod(e.Interface, e.Address), ""
	case explain.KindAddress:
		return l.outside, e.Address
	}
	return l.node, ""
}

// send reports whether a new connection from one end to the other gets
// through: a TCP handshake, or a UDP datagram echoed back. A connection
// that fails is tried once more, so that a first packet lost to neighbour
// resolution does not count as denied.
func (l *packetLab) send(t *testing.T, from, to explain.End, proto uint8, port int) bool {
	return l.try(t, from, to, proto, port) || l.try(t, from, to, proto, port)
}

func (l *packetLab) try(t *testing.T, from, to explain.End, proto uint8, port int) bool {
	ns, local := l.source(t, from)
	addr := net.JoinHostPort(to.Address, strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if proto == 6 {
		c, err := ns.DialFrom(ctx, "tcp4", local, addr)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	c, err := ns.DialFrom(ctx, "udp4", local, addr)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("ping")); err != nil {
		return false
	}
	buf := make([]byte, 8)
	k, err := c.Read(buf)
	return err == nil && string(buf[:k]) == "ping"
}

// TestExplainOnRealPackets programs each golden case's IPv4 rules with the
// agent's programmer into the lab's node, sends real TCP and UDP
// connections between the node's pods, the node itself and the outside,
// and checks that explain's verdict for each is what the packets got.
func TestExplainOnRealPackets(t *testing.T) {
	lab := newPacketLab(t)
	cases := goldenCases()
	if testing.Short() {
		cases = cases[:6]
	}
	total := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.edit(s)
			s.Config.IPv6 = false
			res := policy.Compile(s)
			if _, err := lab.prog.Apply(context.Background(), res.V4); err != nil {
				t.Fatalf("program the node: %v", err)
			}
			ends := lab.ends(t, s)
			type probe struct {
				from, to explain.End
				proto    uint8
				port     int
				ex       *explain.Explanation
				got      bool
			}
			var probes []*probe
			for _, from := range ends {
				for _, to := range ends {
					if from.Address == to.Address || (from.Kind != explain.KindWorkload && to.Kind != explain.KindWorkload && from.Kind == to.Kind) {
						continue
					}
					for _, pp := range append([][2]int{{17, udpPort}}, func() (o [][2]int) {
						for _, p := range probePorts {
							o = append(o, [2]int{6, p})
						}
						return o
					}()...) {
						ex, err := explain.Explain(explain.Request{From: from, To: to, Protocol: uint8(pp[0]), DstPort: uint16(pp[1])}, snapshotsOf(s))
						if err != nil {
							t.Fatalf("%s -> %s: %v", from.Name, to.Name, err)
						}
						probes = append(probes, &probe{from: from, to: to, proto: uint8(pp[0]), port: pp[1], ex: ex})
					}
				}
			}
			var wg sync.WaitGroup
			for _, p := range probes {
				wg.Go(func() { p.got = lab.send(t, p.from, p.to, p.proto, p.port) })
			}
			wg.Wait()
			for _, p := range probes {
				// A connection needs its replies to get back too.
				works := p.ex.Verdict == explain.Allow && p.ex.Reply.Verdict == explain.Allow
				if works != p.got {
					var b strings.Builder
					p.ex.WriteText(&b)
					t.Errorf("%s %s -> %s:%d: explain says the connection works: %v, the packets say %v\n%s",
						explain.ProtocolName(p.proto), p.from.Name, p.to.Name, p.port, works, p.got, b.String())
				}
			}
			total += len(probes)
		})
	}
	t.Logf("%d connections compared", total)
}

// ends are the ends the lab can play in s: the local pods with an IPv4
// address, the node itself (as its host endpoint when it has one) and
// the outside addresses. Pods of other nodes and hops there are not the
// lab's: it has one node.
func (l *packetLab) ends(t *testing.T, s *policy.Snapshot) []explain.End {
	t.Helper()
	var out []explain.End
	for _, e := range endsOf(t, s) {
		var a netip.Addr
		for _, x := range e.Addrs {
			if x.Is4() {
				a = x
				break
			}
		}
		switch {
		case !a.IsValid():
			continue
		case e.Kind == explain.KindWorkload && e.Node == node:
		case e.Kind == explain.KindNode && e.Node == node:
			if hep, err := explain.Resolve(s, hostIP); err == nil && hep.Kind == explain.KindHost {
				e = hep
			}
			a = netip.MustParseAddr(hostIP)
		case e.Kind == explain.KindAddress && contains(labOutside, a.String()):
		default:
			continue
		}
		e.Addrs = []netip.Addr{a}
		e.Address = a.String()
		if e.Kind == explain.KindWorkload {
			l.pod(e.Interface, e.Address)
		}
		out = append(out, e)
	}
	if len(out) < 4 {
		t.Fatalf("only %d ends: %v", len(out), out)
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}
