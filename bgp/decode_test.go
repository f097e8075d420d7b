package bgp

import (
	"net/netip"
	"strings"
	"testing"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestDecodeBest decodes paths as gobgp's watch hands them over (its own
// marshalling of NLRI and attributes): the prefix, the peer and the first
// next hop of IPv4 and IPv6 paths, withdrawals, this node's own paths,
// and a clear error for an NLRI that is no IP prefix or bytes that are no
// message.
func TestDecodeBest(t *testing.T) {
	path := func(t *testing.T, nlri bgp.AddrPrefixInterface, peer string, withdraw bool, attrs ...bgp.PathAttributeInterface) *api.Path {
		t.Helper()
		n, err := apiutil.MarshalNLRI(nlri)
		if err != nil {
			t.Fatal(err)
		}
		as, err := apiutil.MarshalPathAttributes(append([]bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0)}, attrs...))
		if err != nil {
			t.Fatal(err)
		}
		return &api.Path{Nlri: n, Pattrs: as, NeighborIp: peer, IsWithdraw: withdraw}
	}
	v6 := bgp.NewIPv6AddrPrefix(122, "fd00:10::40")
	for _, tc := range []struct {
		name             string
		path             func(t *testing.T) *api.Path
		want             Learned
		withdrawn, local bool
		wantErr          string
	}{
		{"IPv4", func(t *testing.T) *api.Path {
			return path(t, bgp.NewIPAddrPrefix(26, "10.244.1.0"), "192.0.2.12", false,
				bgp.NewPathAttributeNextHop("192.0.2.13"), bgp.NewPathAttributeMultiExitDisc(5))
		}, Learned{Prefix: netip.MustParsePrefix("10.244.1.0/26"), Peer: netip.MustParseAddr("192.0.2.12"), NextHop: netip.MustParseAddr("192.0.2.13")}, false, false, ""},
		{"IPv4 host bits masked", func(t *testing.T) *api.Path {
			return path(t, bgp.NewIPAddrPrefix(32, "10.244.1.5"), "192.0.2.12", false, bgp.NewPathAttributeNextHop("192.0.2.12"))
		}, Learned{Prefix: netip.MustParsePrefix("10.244.1.5/32"), Peer: netip.MustParseAddr("192.0.2.12"), NextHop: netip.MustParseAddr("192.0.2.12")}, false, false, ""},
		{"IPv6: the first of MP_REACH's next hops", func(t *testing.T) *api.Path {
			mp := bgp.NewPathAttributeMpReachNLRI("fd00::12", []bgp.AddrPrefixInterface{v6})
			mp.LinkLocalNexthop = netip.MustParseAddr("fe80::12").AsSlice()
			return path(t, v6, "fd00::12", false, mp)
		}, Learned{Prefix: netip.MustParsePrefix("fd00:10::40/122"), Peer: netip.MustParseAddr("fd00::12"), NextHop: netip.MustParseAddr("fd00::12")}, false, false, ""},
		{"withdrawn", func(t *testing.T) *api.Path {
			return path(t, bgp.NewIPAddrPrefix(26, "10.244.2.0"), "192.0.2.12", true)
		}, Learned{Prefix: netip.MustParsePrefix("10.244.2.0/26")}, true, false, ""},
		{"this node's own", func(t *testing.T) *api.Path {
			return path(t, bgp.NewIPAddrPrefix(26, "10.244.3.0"), "<nil>", false, bgp.NewPathAttributeNextHop("0.0.0.0"))
		}, Learned{Prefix: netip.MustParsePrefix("10.244.3.0/26")}, false, true, ""},
		{"no next hop", func(t *testing.T) *api.Path {
			return path(t, bgp.NewIPAddrPrefix(26, "10.244.4.0"), "192.0.2.12", false)
		}, Learned{Prefix: netip.MustParsePrefix("10.244.4.0/26"), Peer: netip.MustParseAddr("192.0.2.12")}, false, false, ""},
		{"labeled NLRI", func(t *testing.T) *api.Path {
			return path(t, bgp.NewLabeledIPAddrPrefix(24, "10.9.0.0", *bgp.NewMPLSLabelStack(100)), "192.0.2.12", false)
		}, Learned{}, false, false, "decode NLRI: not an apipb.IPAddressPrefix"},
		{"truncated NLRI", func(t *testing.T) *api.Path {
			p := path(t, bgp.NewIPAddrPrefix(26, "10.244.1.0"), "192.0.2.12", false)
			p.Nlri.Value = p.Nlri.Value[:len(p.Nlri.Value)-3]
			return p
		}, Learned{}, false, false, "decode NLRI: "},
		{"no NLRI", func(t *testing.T) *api.Path {
			return &api.Path{Nlri: &anypb.Any{}, NeighborIp: "192.0.2.12"}
		}, Learned{}, false, false, "decode NLRI: not an apipb.IPAddressPrefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, withdrawn, local, err := decodeBest(tc.path(t))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l != tc.want || withdrawn != tc.withdrawn || local != tc.local {
				t.Errorf("decodeBest = %+v withdrawn %v local %v, want %+v withdrawn %v local %v", l, withdrawn, local, tc.want, tc.withdrawn, tc.local)
			}
		})
	}
}
