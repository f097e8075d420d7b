package api

import "time"

// Default methods fill what Calico's clientv3 fills before it writes an
// object (libcalico-go/lib/clientv3 and lib/resources), so that what we
// store matches what Calico stores. Every Default is idempotent and never
// turns an invalid value into a valid one: Validate still sees the user's
// mistakes.

// Default implements Object.
func (p *IPPool) Default() {
	s := &p.Spec
	if pfx, err := parsePoolCIDR(s.CIDR); err == nil {
		// Canonical text ("fd00:0::/64" -> "fd00::/64") only when the CIDR is
		// strictly masked: Calico rejects one with host bits set rather than
		// masking it, and so does Validate.
		if pfx.Masked() == pfx {
			s.CIDR = pfx.String()
		}
		if s.BlockSize == 0 {
			s.BlockSize = defaultBlockSize(pfx.Addr().Is6())
		}
	}
	if s.IPIPMode == "" {
		s.IPIPMode = IPIPModeNever
	}
	if s.VXLANMode == "" {
		s.VXLANMode = VXLANModeNever
	}
	if s.NodeSelector == "" {
		s.NodeSelector = "all()"
	}
	if len(s.AllowedUses) == 0 {
		s.AllowedUses = []IPPoolAllowedUse{IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel}
	}
	if s.AssignmentMode == nil {
		m := AssignmentModeAutomatic
		s.AssignmentMode = &m
	}
}

// Default implements Object; Calico defaults nothing in an IPReservation.
func (r *IPReservation) Default() {}

// Default implements Object; Calico defaults nothing in a Node.
func (n *Node) Default() {}

// Default implements Object. The mesh (on) and AS number (64512) defaults
// apply when the fields are read, as in Calico; nothing is written.
func (c *BGPConfiguration) Default() {}

// Default implements Object; Calico defaults nothing in a BGPPeer.
func (p *BGPPeer) Default() {}

// Default implements Object with the defaults Calico writes explicitly in
// etcd mode (in Kubernetes mode its CRD schema supplies the same values).
func (c *FelixConfiguration) Default() {
	s := &c.Spec
	if s.FloatingIPs == nil {
		v := FloatingIPsDisabled
		s.FloatingIPs = &v
	}
	if s.BPFConnectTimeLoadBalancing == nil {
		v := BPFConnectTimeLBTCP
		s.BPFConnectTimeLoadBalancing = &v
	}
	if s.BPFHostNetworkedNATWithoutCTLB == nil {
		v := BPFHostNetworkedNATEnabled
		s.BPFHostNetworkedNATWithoutCTLB = &v
	}
	// The deprecated boolean overrides its replacements.
	if s.BPFConnectTimeLoadBalancingEnabled != nil {
		nat := BPFHostNetworkedNATDisabled
		s.BPFHostNetworkedNATWithoutCTLB = &nat
		ctlb := BPFConnectTimeLBDisabled
		if *s.BPFConnectTimeLoadBalancingEnabled {
			ctlb = BPFConnectTimeLBEnabled
		}
		s.BPFConnectTimeLoadBalancing = &ctlb
	}
}

// Default implements Object: fills types from the rules present. The tier
// is left as written: Calico stores an explicit "tier: default" as it is,
// and a policy without one without it.
func (p *NetworkPolicy) Default() {
	defaultPolicyTypes(p.Spec.Ingress, p.Spec.Egress, &p.Spec.Types)
}

// Default implements Object; see NetworkPolicy.Default.
func (p *GlobalNetworkPolicy) Default() {
	defaultPolicyTypes(p.Spec.Ingress, p.Spec.Egress, &p.Spec.Types)
}

// Default implements Object; nothing to default.
func (n *NetworkSet) Default() {}

// Default implements Object; nothing to default.
func (n *GlobalNetworkSet) Default() {}

// Default implements Object; nothing to default.
func (h *HostEndpoint) Default() {}

// Default implements Object; nothing to default.
func (p *Profile) Default() {}

// Default implements Object: derives the name from the spec when it is
// unset, and sets the namespace and orchestrator labels Calico maintains on
// every workload endpoint (only once those are known, so that a namespace
// filled in later by the caller is not contradicted).
func (w *WorkloadEndpoint) Default() {
	if w.Name == "" {
		if name, fe := workloadEndpointName(&w.Spec); fe == nil {
			w.Name = name
		}
	}
	setLabel := func(k, v string) {
		if v == "" {
			return
		}
		if w.Labels == nil {
			w.Labels = map[string]string{}
		}
		w.Labels[k] = v
	}
	setLabel(LabelNamespace, w.Namespace)
	setLabel(LabelOrchestrator, w.Spec.Orchestrator)
}

// Default implements Object; nothing to default.
func (c *ClusterInformation) Default() {}

// Default implements Object: the metrics port, the node controller's leak
// grace period and the LoadBalancer controller's mode.
func (k *KubeControllersConfiguration) Default() {
	s := &k.Spec
	if s.PrometheusMetricsPort == nil {
		port := 9094
		s.PrometheusMetricsPort = &port
	}
	if n := s.Controllers.Node; n != nil && n.LeakGracePeriod == nil {
		n.LeakGracePeriod = &Duration{15 * time.Minute}
	}
	if lb := s.Controllers.LoadBalancer; lb != nil && lb.AssignIPs == "" {
		lb.AssignIPs = AllServices
	}
}

// Default implements Object: order 1000000 (the default tier's) and action
// Deny, as Calico does for any tier created without them.
func (t *Tier) Default() {
	if t.Spec.Order == nil {
		o := DefaultTierOrder
		t.Spec.Order = &o
	}
	if t.Spec.DefaultAction == nil {
		a := Deny
		t.Spec.DefaultAction = &a
	}
}
