package cni_test

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// enableIPv6Forwarding switches IPv6 routing on in the node namespace, as
// calico-node does on a real node, for the duration of the test.
func enableIPv6Forwarding(t *testing.T) {
	t.Helper()
	const path = "/proc/sys/net/ipv6/conf/all/forwarding"
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(path, old, 0o644) })
}

// echoServer accepts connections on l and answers each line with the
// caller's address as the server saw it.
func echoServer(t *testing.T, l net.Listener) {
	netnstest.Serve(t, l, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			fmt.Fprintln(c, host)
		}
	})
}

// dialFrom connects from inside the pod to addr over TCP and returns the
// pod address the server saw.
func dialFrom(t *testing.T, p *pod, addr string) string {
	t.Helper()
	var seen string
	inPod(t, p, func() error {
		// The socket is created on this thread, so it lives in the pod's
		// namespace.
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return fmt.Errorf("pod %s: dial %s: %w", p.rt.ContainerID, addr, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintln(c, "hello"); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return fmt.Errorf("pod %s: read from %s: %w", p.rt.ContainerID, addr, err)
		}
		seen = line[:len(line)-1]
		return nil
	})
	return seen
}

func TestPodConnectivity(t *testing.T) {
	e := newEnv(t)
	enableIPv6Forwarding(t)
	e.addPool("v4", "10.244.0.0/16", 26)
	e.addPool("v6", "fd00:244::/112", 122)
	conf := e.conf("1.0.0", map[string]any{"ipam": map[string]any{"type": "calico-ipam", "assign_ipv6": "true"}})
	a, b := newPod(t), newPod(t)
	addrsA := podAddrs(t, e.mustAdd(conf, a))
	addrsB := podAddrs(t, e.mustAdd(conf, b))
	t.Cleanup(func() { e.del(conf, a); e.del(conf, b) })
	pick := func(addrs []netip.Prefix, v4 bool) netip.Addr {
		for _, p := range addrs {
			if p.Addr().Is4() == v4 {
				return p.Addr()
			}
		}
		t.Fatalf("no IPv%v address in %v", map[bool]int{true: 4, false: 6}[v4], addrs)
		return netip.Addr{}
	}

	for _, fam := range []struct {
		name   string
		v4     bool
		nodeIP string
		gw     string
	}{
		{"ipv4", true, nodeIPv4, "169.254.1.1"},
		{"ipv6", false, nodeIPv6, "fe80::ecee:eeff:feee:eeee"},
	} {
		t.Run(fam.name, func(t *testing.T) {
			// Pod to node: a listener on the node's uplink address.
			l, err := net.Listen("tcp", net.JoinHostPort(fam.nodeIP, "0"))
			if err != nil {
				t.Fatal(err)
			}
			echoServer(t, l)
			if seen := dialFrom(t, a, l.Addr().String()); seen != pick(addrsA, fam.v4).String() {
				t.Errorf("node saw the pod as %q, want %s (no NAT)", seen, pick(addrsA, fam.v4))
			}

			// The gateway was resolved to the host veth's MAC (proxy ARP for
			// IPv4, the host veth's own link-local address for IPv6).
			inPod(t, a, func() error {
				link, err := netlink.LinkByName("eth0")
				if err != nil {
					return err
				}
				family := netlink.FAMILY_V4
				if !fam.v4 {
					family = netlink.FAMILY_V6
				}
				neighs, err := netlink.NeighList(link.Attrs().Index, family)
				if err != nil {
					return err
				}
				for _, n := range neighs {
					if n.IP.String() == fam.gw {
						if n.HardwareAddr.String() != "ee:ee:ee:ee:ee:ee" || n.State&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE) != 0 {
							t.Errorf("neighbour %s: %s state %#x, want ee:ee:ee:ee:ee:ee resolved", fam.gw, n.HardwareAddr, n.State)
						}
						return nil
					}
				}
				t.Errorf("gateway %s is not in the pod's neighbour table: %v", fam.gw, neighs)
				return nil
			})

			// Pod to pod on the same node, routed by the node.
			var lb net.Listener
			inPod(t, b, func() error {
				var err error
				lb, err = net.Listen("tcp", net.JoinHostPort(pick(addrsB, fam.v4).String(), "0"))
				return err
			})
			echoServer(t, lb)
			if seen := dialFrom(t, a, lb.Addr().String()); seen != pick(addrsA, fam.v4).String() {
				t.Errorf("pod B saw pod A as %q, want %s", seen, pick(addrsA, fam.v4))
			}
		})
	}
}
