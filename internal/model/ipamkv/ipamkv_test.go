package ipamkv

import (
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	tests := []struct {
		cidr, block, affinity string
	}{
		{"10.244.166.128/26", "/calico/ipam/v2/assignment/ipv4/block/10.244.166.128-26",
			"/calico/ipam/v2/host/node1/ipv4/block/10.244.166.128-26"},
		{"10.0.0.0/20", "/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-20",
			"/calico/ipam/v2/host/node1/ipv4/block/10.0.0.0-20"},
		{"10.0.0.7/32", "/calico/ipam/v2/assignment/ipv4/block/10.0.0.7-32",
			"/calico/ipam/v2/host/node1/ipv4/block/10.0.0.7-32"},
		{"fd00:10::/122", "/calico/ipam/v2/assignment/ipv6/block/fd00:10::-122",
			"/calico/ipam/v2/host/node1/ipv6/block/fd00:10::-122"},
		{"2001:db8:0:1::40/122", "/calico/ipam/v2/assignment/ipv6/block/2001:db8:0:1::40-122",
			"/calico/ipam/v2/host/node1/ipv6/block/2001:db8:0:1::40-122"},
		{"fd00::1:0:0:0:1000/116", "/calico/ipam/v2/assignment/ipv6/block/fd00:0:0:1::1000-116",
			"/calico/ipam/v2/host/node1/ipv6/block/fd00:0:0:1::1000-116"},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			p := netip.MustParsePrefix(tt.cidr)
			if got := BlockKey(p); got != tt.block {
				t.Errorf("BlockKey = %s, want %s", got, tt.block)
			}
			if got := AffinityKey(AffinityHost, "node1", p); got != tt.affinity {
				t.Errorf("AffinityKey = %s, want %s", got, tt.affinity)
			}
			back, ok := ParseBlockKey(tt.block)
			if !ok || back != p {
				t.Errorf("ParseBlockKey(%s) = %v %v", tt.block, back, ok)
			}
			typ, node, back, ok := ParseAffinityKey(tt.affinity)
			if !ok || back != p || typ != AffinityHost || node != "node1" {
				t.Errorf("ParseAffinityKey(%s) = %s %s %v %v", tt.affinity, typ, node, back, ok)
			}
		})
	}
	// Calico names keys with net.IPNet.String(); netip must spell every
	// IPv6 block the same way.
	for _, s := range []string{"fd00::/122", "2001:db8::40/122", "fd00:0:0:1::1000/116", "2001:0:0:1:0:0:1:0/128"} {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := cidrSegment(netip.MustParsePrefix(s)), strings.Replace(n.String(), "/", "-", 1); got != want {
			t.Errorf("key segment of %s = %s, Calico's %s", s, got, want)
		}
	}
}

func TestVirtualAffinityKey(t *testing.T) {
	p := netip.MustParsePrefix("10.0.0.0/26")
	const key = "/calico/ipam/v2/virtual/load-balancer/ipv4/block/10.0.0.0-26"
	if got := AffinityKey(AffinityVirtual, "load-balancer", p); got != key {
		t.Errorf("AffinityKey = %s, want %s", got, key)
	}
	typ, host, back, ok := ParseAffinityKey(key)
	if !ok || typ != AffinityVirtual || host != "load-balancer" || back != p {
		t.Errorf("ParseAffinityKey(%s) = %s %s %v %v", key, typ, host, back, ok)
	}
}

func TestParseRefusesOtherKeys(t *testing.T) {
	for _, bad := range []string{
		"/calico/ipam/v2/assignment/ipv4/block/10.0.0.1-26", // host bits
		"/calico/ipam/v2/assignment/ipv6/block/10.0.0.0-26", // wrong version
		"/calico/ipam/v2/assignment/ipv6/block/::ffff:10.0.0.0-122",
		"/calico/ipam/v2/assignment/ipv4/block/junk",
		"/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26/x",
		"/calico/ipam/v2/host/node1/ipv4/block/10.0.0.0-26",
	} {
		if p, ok := ParseBlockKey(bad); ok {
			t.Errorf("ParseBlockKey(%s) accepted: %v", bad, p)
		}
	}
	for _, bad := range []string{
		"/calico/ipam/v2/host/node1/ipv4/block/10.0.0.1-26",
		"/calico/ipam/v2/host//ipv4/block/10.0.0.0-26",
		"/calico/ipam/v2/host/node1/ipv6/block/10.0.0.0-26",
		"/calico/ipam/v2/host/node1",
		"/calico/ipam/v2/other/node1/ipv4/block/10.0.0.0-26",
		"/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26",
	} {
		if _, _, p, ok := ParseAffinityKey(bad); ok {
			t.Errorf("ParseAffinityKey(%s) accepted: %v", bad, p)
		}
	}
	for _, bad := range []string{"/calico/ipam/v2/handle/", "/calico/ipam/v2/handle/a/b", "/calico/ipam/v2/config"} {
		if id, ok := ParseHandleKey(bad); ok {
			t.Errorf("ParseHandleKey(%s) accepted: %q", bad, id)
		}
	}
}

// A block from before Calico v3 has only hostAffinity: read, it is
// affine to that node and written back with affinity alone.
func TestUpgradeAffinity(t *testing.T) {
	var b Block
	if err := json.Unmarshal([]byte(`{"cidr":"10.0.0.0/26","hostAffinity":"node1"}`), &b); err != nil {
		t.Fatal(err)
	}
	b.UpgradeAffinity()
	if b.Affinity == nil || *b.Affinity != "host:node1" || b.HostAffinity != nil {
		t.Errorf("upgraded: affinity %v, hostAffinity %v; want host:node1 and none", b.Affinity, b.HostAffinity)
	}
	// A v3 affinity wins over a stale hostAffinity.
	v3, old := "host:node2", "node1"
	b = Block{Affinity: &v3, HostAffinity: &old}
	b.UpgradeAffinity()
	if *b.Affinity != "host:node2" {
		t.Errorf("affinity %s, want host:node2", *b.Affinity)
	}
}
