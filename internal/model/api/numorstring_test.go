package api

import (
	"encoding/json"
	"testing"
	"time"
)

func TestPortJSON(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		want    Port
		err     bool
	}{
		{in: `80`, out: `80`, want: SinglePort(80)},
		{in: `"80"`, out: `80`, want: SinglePort(80)},
		{in: `"8000:9000"`, out: `"8000:9000"`, want: Port{MinPort: 8000, MaxPort: 9000}},
		{in: `"5:5"`, out: `5`, want: SinglePort(5)},
		{in: `"http-alt"`, out: `"http-alt"`, want: NamedPort("http-alt")},
		{in: `0`, out: `0`, want: SinglePort(0)},
		{in: `65536`, err: true},
		{in: `-1`, err: true},
		{in: `"9000:8000"`, err: true},
		{in: `"1:65536"`, err: true},
		{in: `"*"`, err: true},
		{in: `true`, err: true},
	} {
		var p Port
		err := json.Unmarshal([]byte(tc.in), &p)
		if tc.err {
			if err == nil {
				t.Errorf("Unmarshal(%s) = %+v, want error", tc.in, p)
			}
			continue
		}
		if err != nil || p != tc.want {
			t.Errorf("Unmarshal(%s) = %+v, %v; want %+v", tc.in, p, err, tc.want)
			continue
		}
		if b, _ := json.Marshal(p); string(b) != tc.out {
			t.Errorf("Marshal(%+v) = %s, want %s", p, b, tc.out)
		}
	}
}

func TestProtocolJSON(t *testing.T) {
	for _, tc := range []struct {
		in, out, msg string
		ports        bool
	}{
		{in: `"TCP"`, out: `"TCP"`, ports: true},
		{in: `6`, out: `6`, ports: true},
		{in: `"17"`, out: `17`, ports: true},
		{in: `"SCTP"`, out: `"SCTP"`, ports: true},
		{in: `"ICMPv6"`, out: `"ICMPv6"`},
		{in: `"UDPLite"`, out: `"UDPLite"`},
		{in: `"udp"`, out: `"udp"`, msg: "is not a valid protocol: must be one of TCP, UDP, ICMP, ICMPv6, SCTP, UDPLite or a number 1-255"},
		{in: `0`, out: `0`, msg: "is not a valid protocol number: must be 1-255"},
		{in: `"256"`, out: `"256"`, msg: "is not a valid protocol: must be one of TCP, UDP, ICMP, ICMPv6, SCTP, UDPLite or a number 1-255"},
	} {
		var p Protocol
		if err := json.Unmarshal([]byte(tc.in), &p); err != nil {
			t.Errorf("Unmarshal(%s): %v", tc.in, err)
			continue
		}
		if b, _ := json.Marshal(p); string(b) != tc.out {
			t.Errorf("Marshal(%s) = %s, want %s", tc.in, b, tc.out)
		}
		if got := p.validate(); got != tc.msg {
			t.Errorf("%s: validate() = %q, want %q", tc.in, got, tc.msg)
		}
		if p.SupportsPorts() != tc.ports {
			t.Errorf("%s: SupportsPorts() = %v", tc.in, p.SupportsPorts())
		}
	}
	var p Protocol
	if err := json.Unmarshal([]byte(`256`), &p); err == nil {
		t.Error("Unmarshal(256) succeeded")
	}
	if ProtocolFromString("icmpv6") != ProtocolFromString(ProtocolICMPv6) {
		t.Error("ProtocolFromString does not canonicalise case")
	}
}

func TestASNumberJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ASNumber
		err  bool
	}{
		{in: `64512`, want: 64512},
		{in: `"64512"`, want: 64512},
		{in: `"1.10"`, want: 65546},
		{in: `"65535.65535"`, want: 4294967295},
		{in: `4294967295`, want: 4294967295},
		{in: `4294967296`, err: true},
		{in: `-1`, err: true},
		{in: `"1.1.1"`, err: true},
		{in: `"65536.0"`, err: true},
		{in: `1.10`, err: true},
	} {
		var a ASNumber
		err := json.Unmarshal([]byte(tc.in), &a)
		if tc.err != (err != nil) || a != tc.want {
			t.Errorf("Unmarshal(%s) = %d, %v", tc.in, a, err)
		}
	}
	if b, _ := json.Marshal(ASNumber(65546)); string(b) != "65546" {
		t.Errorf("Marshal = %s", b)
	}
}

func TestDurationJSON(t *testing.T) {
	var d Duration
	if err := json.Unmarshal([]byte(`"90s"`), &d); err != nil || d.Duration != 90*time.Second {
		t.Errorf("Unmarshal = %v, %v", d, err)
	}
	if b, _ := json.Marshal(d); string(b) != `"1m30s"` {
		t.Errorf("Marshal = %s", b)
	}
	for _, bad := range []string{`90`, `"ninety"`, `true`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
}

func TestDSCP(t *testing.T) {
	for _, tc := range []struct {
		in  string
		val uint8
		msg string
	}{
		{`"AF11"`, 10, ""},
		{`"ef"`, 46, ""},
		{`46`, 46, ""},
		{`64`, 64, "is not a valid DSCP: must be 0-63"},
		{`"XX"`, 0, "is not a valid DSCP class name"},
	} {
		var d DSCP
		if err := json.Unmarshal([]byte(tc.in), &d); err != nil {
			t.Fatalf("Unmarshal(%s): %v", tc.in, err)
		}
		if d.Value() != tc.val || d.validate() != tc.msg {
			t.Errorf("%s: Value %d validate %q", tc.in, d.Value(), d.validate())
		}
	}
}
