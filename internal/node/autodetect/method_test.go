package autodetect

import (
	"net/netip"
	"testing"

	"github.com/projectcalico/calico-node/internal/testkit/errtest"
)

func TestParseMethod(t *testing.T) {
	tests := []struct {
		in      string
		want    string // Method.String() of the result
		wantErr string
	}{
		{in: "", want: "first-found"},
		{in: "first-found", want: "first-found"},
		{in: "  first-found\n", want: "first-found"},
		{in: "kubernetes-internal-ip", want: "kubernetes-internal-ip"},
		{in: "interface=eth0", want: "interface=eth0"},
		{in: "interface=eth.* , en.*", want: "interface=eth.*,en.*"},
		{in: "skip-interface=enp0s3,eth1", want: "skip-interface=enp0s3,eth1"},
		{in: "cidr=10.0.0.0/8", want: "cidr=10.0.0.0/8"},
		{in: "cidr=192.168.1.5/24, 2001:db8::/32", want: "cidr=192.168.1.0/24,2001:db8::/32"},
		{in: "can-reach=8.8.8.8", want: "can-reach=8.8.8.8"},
		{in: "can-reach=2001:db8::1", want: "can-reach=2001:db8::1"},
		{in: "can-reach=[2001:db8::1]", want: "can-reach=2001:db8::1"},
		{in: "first-foundx", wantErr: "unknown method"},
		{in: "interfaces=eth0", wantErr: "unknown method"},
		{in: "interface=", wantErr: "empty list item"},
		{in: "interface=eth0,", wantErr: "empty list item"},
		{in: "interface=eth(", wantErr: `interface regex "eth("`},
		{in: "skip-interface=[", wantErr: `interface regex "["`},
		{in: "cidr=10.0.0.1", wantErr: `CIDR "10.0.0.1"`},
		{in: "cidr=", wantErr: "empty list item"},
		{in: "can-reach=", wantErr: "no destination"},
		{in: "can-reach=www.example.com", wantErr: "host names are not resolved"},
		{in: "can-reach=fe80::1%eth0", wantErr: "zone"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			m, err := ParseMethod(tt.in)
			if !errtest.Want(t, err, tt.wantErr) {
				return
			}
			if got := m.String(); got != tt.want {
				t.Errorf("ParseMethod(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseMethodFields(t *testing.T) {
	m, err := ParseMethod("can-reach=192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != CanReach || m.Dest != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("can-reach parsed as %+v", m)
	}
	m, err = ParseMethod("interface=eth0")
	if err != nil {
		t.Fatal(err)
	}
	// Calico's regexes are unanchored.
	if m.Kind != InterfaceMatch || len(m.Interfaces) != 1 || !m.Interfaces[0].MatchString("veth0") {
		t.Errorf("interface=eth0 parsed as %+v, want an unanchored regex", m)
	}
}

func FuzzParseMethod(f *testing.F) {
	for _, s := range []string{"", "first-found", "interface=eth.*,en.*", "skip-interface=lo", "cidr=10.0.0.0/8,::/0", "can-reach=8.8.8.8", "can-reach=[::1]", "kubernetes-internal-ip"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMethod(s)
		if err != nil {
			return
		}
		// What parses must print back to something that parses the same.
		again, err := ParseMethod(m.String())
		if err != nil {
			t.Fatalf("ParseMethod(%q).String() = %q does not parse: %v", s, m.String(), err)
		}
		if again.String() != m.String() {
			t.Fatalf("round trip of %q: %q then %q", s, m.String(), again.String())
		}
	})
}
