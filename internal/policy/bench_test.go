package policy_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// benchSnapshot is the benchmark cluster: 1,000 local endpoints
// (plus 1,000 on other nodes) in 20 namespaces and 50 apps, and 500
// policies mixing app and namespace selectors, ports and nets.
func benchSnapshot() *policy.Snapshot {
	s := &policy.Snapshot{Node: node, IPPools: []api.IPPool{pool("pods", "10.64.0.0/12", true)}}
	for ns := 0; ns < 20; ns++ {
		s.Profiles = append(s.Profiles, nsProfile(fmt.Sprintf("ns%d", ns), map[string]string{"team": fmt.Sprintf("t%d", ns%5)}))
	}
	for i := 0; i < 2000; i++ {
		ns := fmt.Sprintf("ns%d", i%20)
		ip := fmt.Sprintf("10.%d.%d.%d", 64+i/65536, (i/256)%256, i%256)
		opts := []wepOpt{namedPorts(api.WorkloadEndpointPort{Name: "http", Protocol: api.ProtocolFromString("TCP"), Port: 8080})}
		if i >= 1000 {
			opts = append(opts, onNode("node2"))
		}
		s.WorkloadEndpoints = append(s.WorkloadEndpoints, wep(ns, fmt.Sprintf("pod%d", i), fmt.Sprintf("cali%011x", i),
			map[string]string{"app": fmt.Sprintf("app%d", i%50), "tier": []string{"fe", "be", "db"}[i%3]}, []string{ip}, opts...))
	}
	tcp := proto("TCP")
	for i := 0; i < 500; i++ {
		ns := fmt.Sprintf("ns%d", i%20)
		app := fmt.Sprintf("app%d", i%50)
		var in []api.Rule
		switch i % 5 {
		case 0:
			in = []api.Rule{{Action: api.Allow, Protocol: tcp, Source: api.EntityRule{Selector: fmt.Sprintf("app == 'app%d'", (i+1)%50)},
				Destination: api.EntityRule{Ports: ports("80", "443", "8000:9000")}}}
		case 1:
			in = []api.Rule{{Action: api.Allow, Source: api.EntityRule{NamespaceSelector: fmt.Sprintf("team == 't%d'", i%5)}}}
		case 2:
			in = []api.Rule{
				{Action: api.Deny, Source: api.EntityRule{Nets: []string{fmt.Sprintf("192.0.%d.0/24", i%256)}}},
				{Action: api.Allow, Protocol: tcp, Destination: api.EntityRule{Ports: ports("http")}},
			}
		case 3:
			in = []api.Rule{{Action: api.Allow, Source: api.EntityRule{Nets: []string{"10.0.0.0/8"}, NotNets: []string{fmt.Sprintf("10.%d.0.0/16", 64+i%16)}}}}
		case 4:
			in = []api.Rule{{Action: api.Allow, Protocol: tcp, Source: api.EntityRule{Selector: "tier == 'fe'"}}}
		}
		s.NetworkPolicies = append(s.NetworkPolicies, np(ns, fmt.Sprintf("pol%d", i), api.NetworkPolicySpec{
			Selector: fmt.Sprintf("app == '%s'", app), Ingress: in,
			Egress: []api.Rule{{Action: api.Allow, Protocol: proto("UDP"), Destination: api.EntityRule{Ports: ports("53")}}, {Action: api.Allow}},
		}))
	}
	return s
}

// BenchmarkCompile measures compiling the benchmark cluster and reports
// the size of what the programmer would write: the iptables-restore and
// ipset restore payloads (IPv4).
func BenchmarkCompile(b *testing.B) {
	s := benchSnapshot()
	var res *policy.Result
	for b.Loop() {
		res = policy.Compile(s)
	}
	if len(res.Problems) > 0 {
		b.Fatal(res.Problems)
	}
	f := res.V4
	ipt := policy.Render(policy.TableFilter, f.Filter.Chains, f.Filter.Hooks...) + policy.Render(policy.TableNAT, f.NAT.Chains, f.NAT.Hooks...)
	sets := policy.RenderIPSets(f.IPSets, 0)
	rules := 0
	for _, c := range f.Filter.Chains {
		rules += len(c.Rules)
	}
	b.ReportMetric(float64(len(ipt)), "iptables-bytes")
	b.ReportMetric(float64(rules), "rules")
	b.ReportMetric(float64(len(f.Filter.Chains)), "chains")
	b.ReportMetric(float64(len(sets)), "ipset-bytes")
	b.ReportMetric(float64(len(f.IPSets)), "ipsets")
}

// BenchmarkRender measures rendering (hashing included) on its own.
func BenchmarkRender(b *testing.B) {
	res := policy.Compile(benchSnapshot())
	for b.Loop() {
		_ = policy.Render(policy.TableFilter, res.V4.Filter.Chains, res.V4.Filter.Hooks...)
	}
}

// BenchmarkCompileIncremental measures a policy change at the benchmark
// cluster's scale through policy.Compiler: one policy's port flips
// between two values, so every compilation follows a one-policy change.
func BenchmarkCompileIncremental(b *testing.B) {
	s := benchSnapshot()
	alt := *s
	alt.NetworkPolicies = slices.Clone(s.NetworkPolicies)
	p := &alt.NetworkPolicies[0]
	p.Spec.Ingress = slices.Clone(p.Spec.Ingress)
	p.Spec.Ingress[0].Destination.Ports = ports("81")
	ic := policy.NewCompiler()
	ic.Compile(s)
	i := 0
	for b.Loop() {
		if i++; i%2 == 0 {
			ic.Compile(s)
		} else {
			ic.Compile(&alt)
		}
	}
}
