package api

import (
	"fmt"
	"net/netip"
	"strings"
)

// Link-local ranges, which a pool must not overlap.
var (
	ipv4LinkLocal = netip.PrefixFrom(netip.AddrFrom4([4]byte{169, 254}), 16)
	ipv6LinkLocal = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfe, 0x80}), 10)
)

// Validate implements Object.
func (p *IPPool) Validate() error {
	var f fieldErrors
	checkMeta(&f, &p.ObjectMeta, "IPPool", metaRules{})
	p.Spec.validate(&f, "spec")
	return f.err()
}

func (s *IPPoolSpec) validate(f *fieldErrors, path string) {
	checkEnum(f, field(path, "vxlanMode"), s.VXLANMode, VXLANModeNever, VXLANModeAlways, VXLANModeCrossSubnet)
	checkEnum(f, field(path, "ipipMode"), s.IPIPMode, IPIPModeNever, IPIPModeAlways, IPIPModeCrossSubnet)
	checkOptEnum(f, field(path, "assignmentMode"), s.AssignmentMode, AssignmentModeAutomatic, AssignmentModeManual)
	checkSelector(f, field(path, "nodeSelector"), s.NodeSelector)
	checkSelector(f, field(path, "namespaceSelector"), s.NamespaceSelector)
	if strings.Contains(s.NodeSelector, "global(") {
		f.add(field(path, "nodeSelector"), s.NodeSelector, "cannot use global(): use all() to select every node")
	}
	if strings.Contains(s.NamespaceSelector, "global(") {
		f.add(field(path, "namespaceSelector"), s.NamespaceSelector, "cannot use global(): use all() to select every namespace")
	}
	if s.IPIP != nil {
		f.add(field(path, "ipip"), nil, "is the calicoctl v1 form: use ipipMode (Always, CrossSubnet or Never)")
	}
	if s.NATOutgoingV1 {
		f.add(field(path, "nat-outgoing"), nil, "is the calicoctl v1 form: use natOutgoing")
	}

	encap := s.IPIPMode == IPIPModeAlways || s.IPIPMode == IPIPModeCrossSubnet
	vxlan := s.VXLANMode == VXLANModeAlways || s.VXLANMode == VXLANModeCrossSubnet
	if encap && vxlan {
		f.add(field(path, "vxlanMode"), string(s.VXLANMode), "cannot be enabled together with ipipMode "+string(s.IPIPMode)+" on one pool")
	}

	loadBalancer, tunnel := false, false
	for _, u := range s.AllowedUses {
		switch u {
		case IPPoolAllowedUseLoadBalancer:
			loadBalancer = true
		case IPPoolAllowedUseTunnel:
			tunnel = true
		}
	}
	for i, u := range s.AllowedUses {
		switch u {
		case IPPoolAllowedUseLoadBalancer:
		case IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel:
			if loadBalancer {
				f.add(index(field(path, "allowedUses"), i), string(u), "cannot be combined with LoadBalancer")
			}
		default:
			f.add(index(field(path, "allowedUses"), i), string(u), "must be one of Workload, Tunnel, LoadBalancer")
		}
	}
	if loadBalancer {
		if encap || vxlan {
			f.add(path, nil, "a LoadBalancer pool cannot use IPIP or VXLAN")
		}
		if s.DisableBGPExport {
			f.add(field(path, "disableBGPExport"), nil, "must be false for a LoadBalancer pool")
		}
		if s.NodeSelector != "" && s.NodeSelector != "all()" {
			f.add(field(path, "nodeSelector"), s.NodeSelector, "must be all() for a LoadBalancer pool")
		}
	}
	if tunnel && s.NamespaceSelector != "" {
		f.add(field(path, "namespaceSelector"), s.NamespaceSelector, "cannot be set on a pool allowed for Tunnel addresses")
	}

	cidrPath := field(path, "cidr")
	if s.CIDR == "" {
		f.add(cidrPath, nil, msgRequired)
		return
	}
	pfx, err := parsePoolCIDR(s.CIDR)
	if err != nil {
		f.add(cidrPath, s.CIDR, err.Error())
		return
	}
	if pfx.Masked() != pfx {
		f.add(cidrPath, s.CIDR, "is not strictly masked: host bits are set (did you mean "+pfx.Masked().String()+"?)")
	}
	v6 := pfx.Addr().Is6()
	if v6 && s.IPIPMode != "" && s.IPIPMode != IPIPModeNever {
		f.add(field(path, "ipipMode"), string(s.IPIPMode), "is not supported on an IPv6 pool")
	}
	if (!v6 && pfx.Overlaps(ipv4LinkLocal)) || (v6 && pfx.Overlaps(ipv6LinkLocal)) {
		f.add(cidrPath, s.CIDR, "overlaps the link-local range")
	}

	bs := s.BlockSize
	if bs == 0 {
		bs = defaultBlockSize(v6)
	}
	ver := 4
	if v6 {
		ver = 6
	}
	if lo, hi := blockSizeRange(v6); bs < lo || bs > hi {
		f.add(field(path, "blockSize"), bs, fmt.Sprintf("is out of range: IPv%d block sizes are %d-%d", ver, lo, hi))
	} else if !s.Disabled && bs < pfx.Bits() {
		f.add(field(path, "blockSize"), bs, fmt.Sprintf("is smaller than the pool prefix /%d: a block cannot be larger than its pool", pfx.Bits()))
	}
}

func defaultBlockSize(v6 bool) int {
	if v6 {
		return 122
	}
	return 26
}

// Validate implements Object.
func (r *IPReservation) Validate() error {
	var f fieldErrors
	checkMeta(&f, &r.ObjectMeta, "IPReservation", metaRules{})
	for i, c := range r.Spec.ReservedCIDRs {
		checkCIDROrIP(&f, index("spec.reservedCIDRs", i), c)
	}
	return f.err()
}
