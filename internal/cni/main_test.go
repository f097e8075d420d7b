package cni_test

import (
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// The tests play a whole node. Run as root, the test binary re-executes
// itself in a fresh, private network namespace: that namespace is the
// "node" (the plugin's host side), with loopback for etcd and the fake API
// server, and an uplink with default routes so that proxy ARP answers
// for the pods' gateway as on a real node. Pods are further namespaces.
// Nothing is ever configured in the machine's own network namespace, and
// the node namespace dies with the test process.
const nodeNetNSEnv = "CALICO_CNI_TEST_NODE_NETNS"

// Addresses of the node's uplink (documentation ranges; the node namespace
// has no way out, so nothing is ever sent to them).
const (
	nodeIPv4 = "192.0.2.1"
	nodeIPv6 = "2001:db8:ff::1"
)

// Without root the namespace tests skip themselves.
func TestMain(m *testing.M) {
	if sock := os.Getenv(agentSocketEnv); sock != "" {
		// A child playing an agent in its own mount namespace
		// (startMountNSAgent).
		if err := runMountNSAgent(sock); err != nil {
			fmt.Fprintln(os.Stderr, "agent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	netnstest.Main(m, nodeNetNSEnv, func() (func(), error) {
		if err := setupNode(); err != nil {
			return nil, err
		}
		// The plugins these tests run do the work themselves unless a
		// test starts an agent's CNI server for them (startServer): an
		// agent another package's test runs on this machine must not get
		// their commands.
		os.Setenv(cnientry.SocketEnv, "none")
		return cleanupReferencePlugins, nil
	})
}

// inNodeNetNS reports whether this process is the re-executed one.
func inNodeNetNS() bool { return os.Getenv(nodeNetNSEnv) != "" }

func requireNode(t testing.TB) {
	t.Helper()
	if !inNodeNetNS() {
		t.Skip("needs root: runs in private network namespaces")
	}
}

// setupNode gives the node namespace what a node has: loopback, an
// uplink (a veth) with addresses and default routes, and forwarding on.
func setupNode() error {
	if _, err := netlink.LinkByName("uplink0"); err == nil {
		return nil // a child of the test process (fuzz worker): already set up
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return err
	}
	// A veth pair stands in for the NIC (not every kernel has dummy
	// links); its far end stays down-stream of nothing.
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "uplink0"
	up := &netlink.Veth{LinkAttrs: attrs, PeerName: "uplink0p"}
	if err := netlink.LinkAdd(up); err != nil {
		return fmt.Errorf("add uplink: %w", err)
	}
	peer, err := netlink.LinkByName("uplink0p")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(peer); err != nil {
		return err
	}
	for _, a := range []string{nodeIPv4 + "/24", nodeIPv6 + "/64"} {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			return err
		}
		addr.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(up, addr); err != nil {
			return fmt.Errorf("add %s: %w", a, err)
		}
	}
	if err := netlink.LinkSetUp(up); err != nil {
		return err
	}
	for _, gw := range []string{"192.0.2.254", "2001:db8:ff::fe"} {
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: up.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
			return fmt.Errorf("add default route via %s: %w", gw, err)
		}
	}
	// IPv6 forwarding is switched on only by the tests that route IPv6
	// between pods: turning it on flips every interface's forwarding, which
	// the reference capture shows off.
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}
