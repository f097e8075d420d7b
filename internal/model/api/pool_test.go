package api

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParsePool(t *testing.T) {
	manual := AssignmentModeManual
	empty := AssignmentMode("")
	tests := []struct {
		name string
		spec IPPoolSpec
		del  bool // metadata.deletionTimestamp set
		// want is checked field by field when wantErr is empty.
		want    Pool
		wantErr string
		// wantCIDR is PoolError.CIDR when wantErr is set.
		wantCIDR string
	}{
		{
			name: "IPv4 with Calico's defaults",
			spec: IPPoolSpec{CIDR: "10.244.0.0/16"},
			want: Pool{CIDR: netip.MustParsePrefix("10.244.0.0/16"), BlockSize: 26, IPIPMode: IPIPModeNever, VXLANMode: VXLANModeNever,
				AllowedUses: []IPPoolAllowedUse{IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel}, AssignmentMode: AssignmentModeAutomatic},
		},
		{
			name: "IPv6 with Calico's defaults",
			spec: IPPoolSpec{CIDR: "fd00:10::/48"},
			want: Pool{CIDR: netip.MustParsePrefix("fd00:10::/48"), BlockSize: 122, IPIPMode: IPIPModeNever, VXLANMode: VXLANModeNever,
				AllowedUses: []IPPoolAllowedUse{IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel}, AssignmentMode: AssignmentModeAutomatic},
		},
		{
			name: "every field set",
			spec: IPPoolSpec{CIDR: "10.245.0.0/16", BlockSize: 28, VXLANMode: VXLANModeCrossSubnet, NATOutgoing: true, Disabled: true,
				DisableBGPExport: true, NodeSelector: "zone == 'a'", NamespaceSelector: "team == 'x'",
				AllowedUses: []IPPoolAllowedUse{IPPoolAllowedUseWorkload}, AssignmentMode: &manual},
			del: true,
			want: Pool{CIDR: netip.MustParsePrefix("10.245.0.0/16"), BlockSize: 28, IPIPMode: IPIPModeNever, VXLANMode: VXLANModeCrossSubnet,
				NATOutgoing: true, Disabled: true, DisableBGPExport: true, Deleting: true,
				AllowedUses: []IPPoolAllowedUse{IPPoolAllowedUseWorkload}, AssignmentMode: AssignmentModeManual},
		},
		{
			// Validate refuses it; consumers read a stored one as Calico's
			// do, as its network.
			name: "host bits set: masked",
			spec: IPPoolSpec{CIDR: "10.244.7.1/16", IPIPMode: IPIPModeAlways},
			want: Pool{CIDR: netip.MustParsePrefix("10.244.0.0/16"), BlockSize: 26, IPIPMode: IPIPModeAlways, VXLANMode: VXLANModeNever,
				AllowedUses: []IPPoolAllowedUse{IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel}, AssignmentMode: AssignmentModeAutomatic},
		},
		{
			name: "IPv6 host bits set: masked",
			spec: IPPoolSpec{CIDR: "fd00:10::1/64"},
			want: Pool{CIDR: netip.MustParsePrefix("fd00:10::/64"), BlockSize: 122, IPIPMode: IPIPModeNever, VXLANMode: VXLANModeNever,
				AllowedUses: []IPPoolAllowedUse{IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel}, AssignmentMode: AssignmentModeAutomatic},
		},
		{name: "bad CIDR", spec: IPPoolSpec{CIDR: "10.244.0.0/33"}, wantErr: `IPPool p: cidr "10.244.0.0/33" is not a valid CIDR`},
		{name: "no CIDR", spec: IPPoolSpec{}, wantErr: `IPPool p: cidr "" is not a valid CIDR`},
		{name: "single address", spec: IPPoolSpec{CIDR: "10.244.0.1"}, wantErr: `IPPool p: cidr "10.244.0.1" is not a valid CIDR`},
		{name: "IPv4-mapped IPv6", spec: IPPoolSpec{CIDR: "::ffff:10.0.0.0/104"}, wantErr: `IPPool p: cidr "::ffff:10.0.0.0/104" is an IPv4-mapped IPv6 CIDR`},
		{
			name: "bad node selector", spec: IPPoolSpec{CIDR: "10.244.0.0/16", NodeSelector: "zone =="},
			wantErr: `IPPool p: nodeSelector: selector "zone =="`, wantCIDR: "10.244.0.0/16",
		},
		{
			name: "bad namespace selector", spec: IPPoolSpec{CIDR: "fd00::/64", NamespaceSelector: "has("},
			wantErr: `IPPool p: namespaceSelector: selector "has("`, wantCIDR: "fd00::/64",
		},
		{
			name: "IPv4 block size out of range", spec: IPPoolSpec{CIDR: "10.244.0.0/16", BlockSize: 19},
			wantErr: "IPPool p: blockSize 19 is out of range: IPv4 block sizes are 20-32", wantCIDR: "10.244.0.0/16",
		},
		{
			name: "IPv6 block size out of range", spec: IPPoolSpec{CIDR: "fd00::/64", BlockSize: 26},
			wantErr: "IPPool p: blockSize 26 is out of range: IPv6 block sizes are 116-128", wantCIDR: "fd00::/64",
		},
		{
			name: "unknown ipipMode", spec: IPPoolSpec{CIDR: "10.244.0.0/16", IPIPMode: "always"},
			wantErr: `IPPool p: ipipMode "always" must be one of Never, Always, CrossSubnet`, wantCIDR: "10.244.0.0/16",
		},
		{
			name: "unknown vxlanMode", spec: IPPoolSpec{CIDR: "10.244.0.0/16", VXLANMode: "On"},
			wantErr: `IPPool p: vxlanMode "On" must be one of Never, Always, CrossSubnet`, wantCIDR: "10.244.0.0/16",
		},
		{
			name: "unknown allowed use", spec: IPPoolSpec{CIDR: "10.244.0.0/16", AllowedUses: []IPPoolAllowedUse{"Pods"}},
			wantErr: `IPPool p: allowedUses: "Pods" must be one of Workload, Tunnel, LoadBalancer`, wantCIDR: "10.244.0.0/16",
		},
		{
			name: "empty assignmentMode", spec: IPPoolSpec{CIDR: "10.244.0.0/16", AssignmentMode: &empty},
			wantErr: `IPPool p: assignmentMode "" must be one of Automatic, Manual`, wantCIDR: "10.244.0.0/16",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &IPPool{ObjectMeta: ObjectMeta{Name: "p"}, Spec: tc.spec}
			if tc.del {
				in.DeletionTimestamp = "2025-01-01T00:00:00Z"
			}
			got, err := ParsePool(in)
			if tc.wantErr != "" {
				var pe *PoolError
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) || !errors.As(err, &pe) || pe.Name != "p" {
					t.Fatalf("err %v, want a *PoolError starting %q", err, tc.wantErr)
				}
				wantCIDR := netip.Prefix{}
				if tc.wantCIDR != "" {
					wantCIDR = netip.MustParsePrefix(tc.wantCIDR)
				}
				if pe.CIDR != wantCIDR {
					t.Errorf("PoolError.CIDR %v, want %v", pe.CIDR, wantCIDR)
				}
				// Only a pool written behind validation can fail to parse.
				if in.Validate() == nil {
					t.Errorf("Validate accepts a pool ParsePool refuses")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			if got.Name != "p" || got.CIDR != w.CIDR || got.BlockSize != w.BlockSize || got.IPIPMode != w.IPIPMode ||
				got.VXLANMode != w.VXLANMode || got.NATOutgoing != w.NATOutgoing || got.Disabled != w.Disabled ||
				got.DisableBGPExport != w.DisableBGPExport || got.Deleting != w.Deleting ||
				!slices.Equal(got.AllowedUses, w.AllowedUses) || got.AssignmentMode != w.AssignmentMode {
				t.Errorf("got  %+v\nwant %+v", got, w)
			}
			if got.NodeSelector == nil || got.NamespaceSelector == nil {
				t.Fatalf("nil selector in %+v", got)
			}
		})
	}
}

// TestParsePoolSelectors: the parsed selectors select what the spec's
// strings say; an empty one selects everything, as in Calico.
func TestParsePoolSelectors(t *testing.T) {
	tests := []struct {
		node, ns         string
		nodeLabels       map[string]string
		nsLabels         map[string]string
		wantNode, wantNs bool
	}{
		{node: "", ns: "", nodeLabels: nil, nsLabels: nil, wantNode: true, wantNs: true},
		{node: "all()", ns: "", nodeLabels: map[string]string{"x": "y"}, wantNode: true, wantNs: true},
		{node: "zone == 'a'", ns: "team == 'x'", nodeLabels: map[string]string{"zone": "a"}, nsLabels: map[string]string{"team": "y"}, wantNode: true, wantNs: false},
		{node: "zone == 'a'", ns: "has(team)", nodeLabels: map[string]string{"zone": "b"}, nsLabels: map[string]string{"team": "y"}, wantNode: false, wantNs: true},
	}
	for _, tc := range tests {
		p, err := ParsePool(&IPPool{ObjectMeta: ObjectMeta{Name: "p"}, Spec: IPPoolSpec{CIDR: "10.0.0.0/16", NodeSelector: tc.node, NamespaceSelector: tc.ns}})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.NodeSelector.Evaluate(tc.nodeLabels); got != tc.wantNode {
			t.Errorf("nodeSelector %q on %v = %v, want %v", tc.node, tc.nodeLabels, got, tc.wantNode)
		}
		if got := p.NamespaceSelector.Evaluate(tc.nsLabels); got != tc.wantNs {
			t.Errorf("namespaceSelector %q on %v = %v, want %v", tc.ns, tc.nsLabels, got, tc.wantNs)
		}
	}
}

func TestPoolMethods(t *testing.T) {
	tests := []struct {
		spec             IPPoolSpec
		version          int
		ipip, vxlan      bool
		workload, tunnel bool
		loadBalancer     bool
	}{
		{spec: IPPoolSpec{CIDR: "10.0.0.0/16"}, version: 4, workload: true, tunnel: true},
		{spec: IPPoolSpec{CIDR: "10.0.0.0/16", IPIPMode: IPIPModeCrossSubnet}, version: 4, ipip: true, workload: true, tunnel: true},
		{spec: IPPoolSpec{CIDR: "fd00::/64", VXLANMode: VXLANModeAlways, AllowedUses: []IPPoolAllowedUse{IPPoolAllowedUseTunnel}}, version: 6, vxlan: true, tunnel: true},
		{spec: IPPoolSpec{CIDR: "10.9.0.0/24", IPIPMode: IPIPModeNever, AllowedUses: []IPPoolAllowedUse{IPPoolAllowedUseLoadBalancer}}, version: 4, loadBalancer: true},
	}
	for _, tc := range tests {
		p, err := ParsePool(&IPPool{ObjectMeta: ObjectMeta{Name: "p"}, Spec: tc.spec})
		if err != nil {
			t.Fatal(err)
		}
		if p.Version() != tc.version || p.IPIPOn() != tc.ipip || p.VXLANOn() != tc.vxlan ||
			p.Allows(IPPoolAllowedUseWorkload) != tc.workload || p.Allows(IPPoolAllowedUseTunnel) != tc.tunnel ||
			p.Allows(IPPoolAllowedUseLoadBalancer) != tc.loadBalancer {
			t.Errorf("%+v: version %d ipip %v vxlan %v uses %v", tc.spec, p.Version(), p.IPIPOn(), p.VXLANOn(), p.AllowedUses)
		}
	}
}

// TestParsePools: IPPools only, sorted by name; each broken pool is left
// out and reported by name, the others are kept.
func TestParsePools(t *testing.T) {
	pool := func(name, cidr string) *IPPool {
		return &IPPool{ObjectMeta: ObjectMeta{Name: name}, Spec: IPPoolSpec{CIDR: cidr}}
	}
	objs := []Object{
		pool("zeta", "10.3.0.0/16"),
		&Node{ObjectMeta: ObjectMeta{Name: "node1"}},
		pool("broken-cidr", "nope"),
		pool("alpha", "10.1.0.0/16"),
		pool("broken-block", "10.2.0.0/16"),
		pool("mid", "fd00::/64"),
	}
	objs[4].(*IPPool).Spec.BlockSize = 99
	pools, errs := ParsePools(objs)
	var names []string
	for _, p := range pools {
		names = append(names, p.Name)
	}
	if want := []string{"alpha", "mid", "zeta"}; !slices.Equal(names, want) {
		t.Errorf("pools %q, want %q", names, want)
	}
	var bad []string
	for _, err := range errs {
		var pe *PoolError
		if !errors.As(err, &pe) {
			t.Fatalf("error %v is not a *PoolError", err)
		}
		bad = append(bad, pe.Name)
	}
	if want := []string{"broken-cidr", "broken-block"}; !slices.Equal(bad, want) {
		t.Errorf("errors name %q, want %q", bad, want)
	}
}

// TestValidatePoolCIDRSharesParse: Validate refuses what ParsePool cannot
// read, with its own field path.
func TestValidatePoolCIDRSharesParse(t *testing.T) {
	p := &IPPool{ObjectMeta: ObjectMeta{Name: "p"}, Spec: IPPoolSpec{CIDR: "::ffff:10.0.0.0/104"}}
	err := p.Validate()
	if err == nil || !strings.Contains(err.Error(), `spec.cidr: "::ffff:10.0.0.0/104" is an IPv4-mapped IPv6 CIDR`) {
		t.Errorf("Validate: %v", err)
	}
}
