package policy_test

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/sim"
	"github.com/projectcalico/calico-node/internal/testkit/goldentest"
)

const node = "node1"

func ptr[T any](v T) *T { return &v }

func proto(s string) *api.Protocol {
	p := api.ProtocolFromString(s)
	return &p
}

func protoNum(n uint8) *api.Protocol {
	p := api.ProtocolFromInt(n)
	return &p
}

func ports(ss ...string) []api.Port {
	var out []api.Port
	for _, s := range ss {
		p, err := api.PortFromString(s)
		if err != nil {
			panic(err)
		}
		out = append(out, p)
	}
	return out
}

type wepOpt func(*api.WorkloadEndpoint)

func onNode(n string) wepOpt { return func(w *api.WorkloadEndpoint) { w.Spec.Node = n } }
func sa(name string) wepOpt {
	return func(w *api.WorkloadEndpoint) {
		w.Spec.ServiceAccountName = name
		w.Spec.Profiles = append(w.Spec.Profiles, "ksa."+w.Namespace+"."+name)
	}
}
func namedPorts(ps ...api.WorkloadEndpointPort) wepOpt {
	return func(w *api.WorkloadEndpoint) { w.Spec.Ports = ps }
}
func spoofs(prefixes ...string) wepOpt {
	return func(w *api.WorkloadEndpoint) { w.Spec.AllowSpoofedSourcePrefixes = prefixes }
}
func profiles(ps ...string) wepOpt {
	return func(w *api.WorkloadEndpoint) { w.Spec.Profiles = ps }
}

// wep makes a Kubernetes workload endpoint on the local node, with the
// labels and profiles Calico's CNI plugin writes. ips are addresses.
func wep(ns, pod, iface string, labels map[string]string, ips []string, opts ...wepOpt) api.WorkloadEndpoint {
	w := api.WorkloadEndpoint{}
	w.Namespace = ns
	w.Labels = map[string]string{}
	for k, v := range labels {
		w.Labels[k] = v
	}
	w.Spec = api.WorkloadEndpointSpec{
		Orchestrator: api.OrchestratorKubernetes, Node: node, Pod: pod, Endpoint: "eth0",
		InterfaceName: iface, Profiles: []string{"kns." + ns},
	}
	for _, ip := range ips {
		if strings.Contains(ip, ":") {
			w.Spec.IPNetworks = append(w.Spec.IPNetworks, ip+"/128")
		} else {
			w.Spec.IPNetworks = append(w.Spec.IPNetworks, ip+"/32")
		}
	}
	for _, o := range opts {
		o(&w)
	}
	w.Default()
	return w
}

func nsProfile(ns string, labels map[string]string) api.Profile {
	l := map[string]string{"pcns.projectcalico.org/name": ns}
	for k, v := range labels {
		l["pcns."+k] = v
	}
	return api.Profile{
		ObjectMeta: api.ObjectMeta{Name: "kns." + ns},
		Spec: api.ProfileSpec{
			Ingress:       []api.Rule{{Action: api.Allow}},
			Egress:        []api.Rule{{Action: api.Allow}},
			LabelsToApply: l,
		},
	}
}

func saProfile(ns, name string, labels map[string]string) api.Profile {
	l := map[string]string{"pcsa.projectcalico.org/name": name}
	for k, v := range labels {
		l["pcsa."+k] = v
	}
	return api.Profile{
		ObjectMeta: api.ObjectMeta{Name: "ksa." + ns + "." + name},
		Spec:       api.ProfileSpec{LabelsToApply: l},
	}
}

func np(ns, name string, spec api.NetworkPolicySpec) api.NetworkPolicy {
	p := api.NetworkPolicy{ObjectMeta: api.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	p.Default()
	return p
}

func gnp(name string, spec api.GlobalNetworkPolicySpec) api.GlobalNetworkPolicy {
	p := api.GlobalNetworkPolicy{ObjectMeta: api.ObjectMeta{Name: name}, Spec: spec}
	p.Default()
	return p
}

func hep(name, iface string, labels map[string]string, ips []string, profiles ...string) api.HostEndpoint {
	return api.HostEndpoint{
		ObjectMeta: api.ObjectMeta{Name: name, Labels: labels},
		Spec:       api.HostEndpointSpec{Node: node, InterfaceName: iface, ExpectedIPs: ips, Profiles: profiles},
	}
}

func pool(name, cidr string, nat bool) api.IPPool {
	p := api.IPPool{ObjectMeta: api.ObjectMeta{Name: name}, Spec: api.IPPoolSpec{CIDR: cidr, NATOutgoing: nat}}
	p.Default()
	return p
}

// overlayPool is a pool with the given VXLAN and IP-in-IP modes.
func overlayPool(name, cidr string, vxlan api.VXLANMode, ipip api.IPIPMode) api.IPPool {
	p := pool(name, cidr, false)
	p.Spec.VXLANMode, p.Spec.IPIPMode = vxlan, ipip
	return p
}

// calicoNode is a Node with the given BGP addresses and VXLAN tunnel
// addresses ("" leaves a field out; no BGP spec when both addresses are
// empty).
func calicoNode(name, ip4, ip6, tun4, tun6 string) api.Node {
	n := api.Node{ObjectMeta: api.ObjectMeta{Name: name},
		Spec: api.NodeSpec{IPv4VXLANTunnelAddr: tun4, IPv6VXLANTunnelAddr: tun6}}
	if ip4 != "" || ip6 != "" {
		n.Spec.BGP = &api.NodeBGPSpec{IPv4Address: ip4, IPv6Address: ip6}
	}
	return n
}

// overlayNodes is a cluster of this node and four others: node2 a dual
// stack VXLAN peer, node3 an IPv4 VXLAN peer registered with a bare
// address, node4 without tunnel addresses (BGP or IP-in-IP only), node5
// without addresses.
func overlayNodes() []api.Node {
	return []api.Node{
		calicoNode(node, "10.0.0.10/24", "fd00:10::10/64", "10.65.0.0", "fd00:65::"),
		calicoNode("node2", "10.0.0.11/24", "fd00:10::11/64", "10.65.1.0", "fd00:65::1:0"),
		calicoNode("node3", "10.0.1.12", "", "10.65.2.0", ""),
		calicoNode("node4", "10.0.1.13/24", "", "", ""),
		calicoNode("node5", "", "", "", ""),
	}
}

func tier(name string, order float64, action api.Action) api.Tier {
	return api.Tier{ObjectMeta: api.ObjectMeta{Name: name}, Spec: api.TierSpec{Order: &order, DefaultAction: &action}}
}

// dump renders a compilation result as the golden files show it: the
// problems, then per family each table's iptables-restore payload (with
// all hooks) and each IP set with its members.
func dump(r *policy.Result) string {
	var b strings.Builder
	b.WriteString("# problems\n")
	for _, p := range r.Problems {
		b.WriteString(p + "\n")
	}
	for _, f := range []*policy.Family{r.V4, r.V6} {
		if f == nil {
			continue
		}
		// Filter and nat first, so that the older cases' files read as
		// before; then the tables that act before them.
		for _, t := range []policy.Table{f.Filter, f.NAT, f.Raw, f.Mangle} {
			fmt.Fprintf(&b, "# IPv%d %s\n", f.Version, t.Name)
			b.WriteString(policy.Render(t.Name, t.Chains, t.Hooks...))
		}
		fmt.Fprintf(&b, "# IPv%d ipsets\n", f.Version)
		for _, s := range f.IPSets {
			fmt.Fprintf(&b, "%s %s %s (%s)\n", s.Name, s.Type, s.Family, s.ID)
			for _, m := range s.Members {
				b.WriteString("  " + m + "\n")
			}
		}
	}
	return b.String()
}

// golden compares got with testdata/<name>.golden, rewriting it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	goldentest.Check(t, filepath.Join("testdata", name+".golden"), []byte(got))
}

// mustSets are the IP sets of a compiled family, as the simulator reads
// them.
func mustSets(t testing.TB, f *policy.Family) *sim.Sets {
	t.Helper()
	sets, err := sim.NewSets(f)
	if err != nil {
		t.Fatal(err)
	}
	return sets
}

// simFamily is the compiled family of src's IP version and its IP sets.
func simFamily(t testing.TB, res *policy.Result, src netip.Addr) (*policy.Family, *sim.Sets) {
	t.Helper()
	f := res.V4
	if src.Is6() {
		f = res.V6
	}
	return f, mustSets(t, f)
}
