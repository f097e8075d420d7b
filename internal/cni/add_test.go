package cni_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/projectcalico/calico-node/agent/routeproto"
)

var specVersionsWithCheck = []string{"0.4.0", "1.0.0", "1.1.0"}

// podAddrs are the addresses ADD reported for the pod interface.
func podAddrs(t testing.TB, res *types100.Result) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, ip := range res.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		ones, _ := ip.Address.Mask.Size()
		out = append(out, netip.PrefixFrom(a.Unmap(), ones))
	}
	return out
}

// assertPodNetworking checks what ADD must have built for addrs: the pod
// interface with the addresses and gateway routes, the host veth with
// its /32 and /128 routes marked with our protocol.
func assertPodNetworking(t *testing.T, p *pod, hostVeth string, addrs []netip.Prefix, mtu int) {
	t.Helper()
	var has4, has6 bool
	for _, a := range addrs {
		if a.Bits() != a.Addr().BitLen() {
			t.Errorf("address %s is not a host address", a)
		}
		has4 = has4 || a.Addr().Is4()
		has6 = has6 || !a.Addr().Is4()
	}
	inPod(t, p, func() error {
		link, err := netlink.LinkByName(p.rt.IfName)
		if err != nil {
			t.Errorf("pod interface %s: %v", p.rt.IfName, err)
			return nil
		}
		if link.Attrs().MTU != mtu {
			t.Errorf("pod MTU %d, want %d", link.Attrs().MTU, mtu)
		}
		have, _ := netlink.AddrList(link, netlink.FAMILY_ALL)
		for _, want := range addrs {
			if !slices.ContainsFunc(have, func(a netlink.Addr) bool { return a.IPNet.String() == want.String() }) {
				t.Errorf("pod lacks address %s (has %v)", want, have)
			}
		}
		return nil
	})
	routes := ipOut(t, p, "route", "show")
	if has4 {
		for _, want := range []string{"default via 169.254.1.1 dev " + p.rt.IfName, "169.254.1.1 dev " + p.rt.IfName + " scope link"} {
			if !strings.Contains(routes, want+" \n") && !strings.Contains(routes, want+"\n") {
				t.Errorf("pod routes lack %q:\n%s", want, routes)
			}
		}
	}
	if has6 {
		r6 := ipOut(t, p, "-6", "route", "show")
		if !strings.Contains(r6, "default via fe80::ecee:eeff:feee:eeee dev "+p.rt.IfName) {
			t.Errorf("pod IPv6 routes lack the default via the host veth:\n%s", r6)
		}
	}
	host, err := netlink.LinkByName(hostVeth)
	if err != nil {
		t.Fatalf("host veth %s: %v", hostVeth, err)
	}
	if host.Attrs().HardwareAddr.String() != "ee:ee:ee:ee:ee:ee" || host.Attrs().MTU != mtu {
		t.Errorf("host veth MAC %s MTU %d, want ee:ee:ee:ee:ee:ee %d", host.Attrs().HardwareAddr, host.Attrs().MTU, mtu)
	}
	hr, _ := netlink.RouteList(host, netlink.FAMILY_ALL)
	for _, a := range addrs {
		if !slices.ContainsFunc(hr, func(r netlink.Route) bool {
			// IPv6 routes have no scope.
			return r.Dst != nil && r.Dst.String() == a.String() && r.Protocol == routeproto.Calico &&
				(r.Scope == netlink.SCOPE_LINK || !a.Addr().Is4())
		}) {
			t.Errorf("no host route %s dev %s proto %d scope link (have %v)", a, hostVeth, routeproto.Calico, hr)
		}
	}
}

func TestAddCheckDelEverySpecVersion(t *testing.T) {
	e := newEnv(t)
	e.addPool("v4", "10.244.0.0/16", 26)
	e.addPool("v6", "fd00:244::/112", 122)
	families := []struct {
		name string
		ipam map[string]any
		n4   int
		n6   int
	}{
		{"ipv4", map[string]any{"type": "calico-ipam"}, 1, 0},
		{"ipv6", map[string]any{"type": "calico-ipam", "assign_ipv4": "false", "assign_ipv6": "true"}, 0, 1},
		{"dual", map[string]any{"type": "calico-ipam", "assign_ipv6": "true"}, 1, 1},
		{"host-local", e.hostLocal("10.99.0.0/24"), 1, 0},
		{"host-local dual", e.hostLocal("10.99.1.0/24", "fd00:99::/120"), 1, 1},
	}
	for _, v := range specVersions {
		for _, fam := range families {
			t.Run(v+"/"+fam.name, func(t *testing.T) {
				e := e.in(t)
				conf := e.conf(v, map[string]any{"ipam": fam.ipam, "mtu": 1400})
				p := newPod(t)
				res := e.mustAdd(conf, p)
				addrs := podAddrs(t, res)
				var n4, n6 int
				for _, a := range addrs {
					if a.Addr().Is4() {
						n4++
					} else {
						n6++
					}
				}
				if n4 != fam.n4 || n6 != fam.n6 {
					t.Fatalf("ADD gave %v, want %d IPv4 and %d IPv6 addresses", addrs, fam.n4, fam.n6)
				}
				hostVeth := "cali" + p.rt.ContainerID
				if v >= "0.3.0" {
					if len(res.Interfaces) != 2 || res.Interfaces[0].Name != hostVeth || res.Interfaces[1].Name != "eth0" || res.Interfaces[1].Sandbox != p.ns.Path() {
						t.Errorf("result interfaces %v: want the host veth and eth0 in the sandbox", res.Interfaces)
					}
					for _, ip := range res.IPs {
						if ip.Interface == nil || *ip.Interface != 1 {
							t.Errorf("IP %s is not attached to the pod interface", ip.Address.String())
						}
					}
				}
				assertPodNetworking(t, p, hostVeth, addrs, 1400)

				eps := e.endpointsOf(p.rt.ContainerID)
				if len(eps) != 1 {
					t.Fatalf("%d endpoints stored for %s, want 1", len(eps), p.rt.ContainerID)
				}
				if slices.Compare(eps[0].Spec.IPNetworks, prefixStrings(addrs)) != 0 {
					t.Errorf("endpoint ipNetworks %v, want %v", eps[0].Spec.IPNetworks, addrs)
				}
				if fam.ipam["type"] == "calico-ipam" {
					if held := e.heldBy("k8s-pod-network." + p.rt.ContainerID); len(held) != len(addrs) {
						t.Errorf("handle holds %v, want %v", held, addrs)
					}
				}

				if slices.Contains(specVersionsWithCheck, v) {
					if err := e.check(conf, p); err != nil {
						t.Errorf("CHECK after ADD: %v", err)
					}
					// CHECK notices a missing host route.
					host, _ := netlink.LinkByName(hostVeth)
					if err := netlink.RouteDel(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: ipNetOf(addrs[0]), Scope: netlink.SCOPE_LINK}); err != nil {
						t.Fatal(err)
					}
					if err := e.check(conf, p); err == nil || !strings.Contains(err.Error(), addrs[0].String()) {
						t.Errorf("CHECK with the host route gone: %v, want an error naming %s", err, addrs[0])
					}
				}

				e.mustDel(conf, p)
				e.assertNothingLeft("k8s-pod-network", p, hostVeth)
				inPod(t, p, func() error {
					if _, err := netlink.LinkByName("eth0"); err == nil {
						t.Error("eth0 is still in the pod after DEL")
					}
					return nil
				})
				// DEL again: nothing to do is not an error.
				e.mustDel(conf, p)
			})
		}
	}
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
