package bgp

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// TestIPv6Mesh: dual-stack nodes form the IPv6 mesh beside the IPv4 one and
// exchange their IPv6 blocks, installed with the peer's IPv6 address as
// next hop.
func TestIPv6Mesh(t *testing.T) {
	f := newFabric(t)
	p6 := poolObj("pool6", "fd00:10::/48")
	p6.Spec.BlockSize = 122
	f.apply(poolObj("pool", "10.244.0.0/16"), p6)
	h1, h2 := f.host("n1", "192.0.2.11"), f.host("n2", "192.0.2.12")
	for h, a := range map[*host]string{h1: "2001:db8::11/64", h2: "2001:db8::12/64"} {
		f.ip(h.ns, "-6", "addr", "add", a, "dev", "eth0", "nodad")
	}
	a1 := f.agent(h1, "n1", "--ip6=2001:db8::11/64")
	a2 := f.agent(h2, "n2", "--ip6=2001:db8::12/64")
	a1.waitSessions(t, 60*time.Second, "192.0.2.12", "2001:db8::12")
	a2.waitSessions(t, 60*time.Second, "192.0.2.11", "2001:db8::11")

	f.put(ipamkv.AffinityKey(ipamkv.AffinityHost, "n1", netip.MustParsePrefix("fd00:10::/122")), map[string]any{"state": "confirmed", "deleted": false})
	f.put(ipamkv.AffinityKey(ipamkv.AffinityHost, "n2", netip.MustParsePrefix("fd00:10::40/122")), map[string]any{"state": "confirmed", "deleted": false})
	waitRoutes(t, h2, 20*time.Second, map[string]string{"fd00:10::/122": "via 2001:db8::11"})
	waitRoutes(t, h1, 20*time.Second, map[string]string{"fd00:10::40/122": "via 2001:db8::12"})

	st, err := a1.status()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WriteStatus(&b, st, time.Now())
	if !strings.Contains(b.String(), "IPv6 BGP status") || !strings.Contains(b.String(), "2001:db8::12") {
		t.Errorf("node status lacks the IPv6 session:\n%s", b.String())
	}
}
