package routes

import (
	"net/netip"
	"testing"
)

func TestRouteString(t *testing.T) {
	dst := netip.MustParsePrefix("10.244.1.0/26")
	for want, r := range map[string]Route{
		"10.244.1.0/26 blackhole":                            {Dst: dst, Type: Blackhole},
		"10.244.1.0/26 unreachable":                          {Dst: dst, Type: Unreachable},
		"10.244.1.0/26 via 192.0.2.2 dev tunl0 onlink":       {Dst: dst, Via: netip.MustParseAddr("192.0.2.2"), Dev: "tunl0", OnLink: true},
		"10.244.1.0/26 dev cali1 table 100 metric 5 src ::1": {Dst: dst, Dev: "cali1", Table: 100, Metric: 5, Src: netip.IPv6Loopback()},
	} {
		if got := r.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}
