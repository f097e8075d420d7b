package api

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestDefaults(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		want string // the JSON of the defaulted spec
	}{
		{"pool v4", doc("IPPool", "name: p", "cidr: 10.244.0.0/16\nnatOutgoing: true"),
			`{"cidr":"10.244.0.0/16","vxlanMode":"Never","ipipMode":"Never","natOutgoing":true,"blockSize":26,"nodeSelector":"all()","allowedUses":["Workload","Tunnel"],"assignmentMode":"Automatic"}`},
		{"pool v6 canonical cidr", doc("IPPool", "name: p", "cidr: 'FD00:0:0::/48'"),
			`{"cidr":"fd00::/48","vxlanMode":"Never","ipipMode":"Never","blockSize":122,"nodeSelector":"all()","allowedUses":["Workload","Tunnel"],"assignmentMode":"Automatic"}`},
		{"pool keeps given values", doc("IPPool", "name: p", "cidr: 10.0.0.0/8\nblockSize: 29\nipipMode: CrossSubnet\nnodeSelector: a == 'b'\nallowedUses: [Tunnel]\nassignmentMode: Manual"),
			`{"cidr":"10.0.0.0/8","vxlanMode":"Never","ipipMode":"CrossSubnet","blockSize":29,"nodeSelector":"a == 'b'","allowedUses":["Tunnel"],"assignmentMode":"Manual"}`},
		{"pool host bits left for Validate", doc("IPPool", "name: p", "cidr: 10.1.2.3/16"),
			`{"cidr":"10.1.2.3/16","vxlanMode":"Never","ipipMode":"Never","blockSize":26,"nodeSelector":"all()","allowedUses":["Workload","Tunnel"],"assignmentMode":"Automatic"}`},
		{"policy without rules", doc("GlobalNetworkPolicy", "name: p", "selector: all()"),
			`{"selector":"all()","types":["Ingress"]}`},
		{"policy egress only", doc("GlobalNetworkPolicy", "name: p", "egress: [{action: Allow}]"),
			`{"egress":[{"action":"Allow","source":{},"destination":{}}],"types":["Egress"]}`},
		// An explicit default tier is kept, as Calico stores it.
		{"policy both", doc("NetworkPolicy", "name: p\nnamespace: ns", "tier: default\ningress: [{action: Deny}]\negress: [{action: Allow}]"),
			`{"tier":"default","ingress":[{"action":"Deny","source":{},"destination":{}}],"egress":[{"action":"Allow","source":{},"destination":{}}],"types":["Ingress","Egress"]}`},
		{"policy explicit types kept", doc("NetworkPolicy", "name: sec.p\nnamespace: ns", "tier: sec\ningress: [{action: Deny}]\ntypes: [Egress]"),
			`{"tier":"sec","ingress":[{"action":"Deny","source":{},"destination":{}}],"types":["Egress"]}`},
		{"felix", doc("FelixConfiguration", "name: default", "ipipEnabled: true"),
			`{"ipipEnabled":true,"bpfLogLevel":"","bpfConnectTimeLoadBalancing":"TCP","bpfHostNetworkedNATWithoutCTLB":"Enabled","floatingIPs":"Disabled"}`},
		{"felix deprecated ctlb flag", doc("FelixConfiguration", "name: default", "bpfConnectTimeLoadBalancingEnabled: true"),
			`{"bpfLogLevel":"","bpfConnectTimeLoadBalancingEnabled":true,"bpfConnectTimeLoadBalancing":"Enabled","bpfHostNetworkedNATWithoutCTLB":"Disabled","floatingIPs":"Disabled"}`},
		{"kube controllers", doc("KubeControllersConfiguration", "name: default", "controllers: {node: {}, loadBalancer: {}, policy: {}}"),
			`{"prometheusMetricsPort":9094,"controllers":{"node":{"leakGracePeriod":"15m0s"},"policy":{},"loadBalancer":{"assignIPs":"AllServices"}}}`},
		{"tier", doc("Tier", "name: t", ""), `{"order":1000000,"defaultAction":"Deny"}`},
		{"node untouched", doc("Node", "name: n1", "bgp: {ipv4Address: 10.0.0.1/24}"), `{"bgp":{"ipv4Address":"10.0.0.1/24"}}`},
		{"peer untouched", doc("BGPPeer", "name: p", "peerIP: 10.0.0.1\nasNumber: 65000"), `{"peerIP":"10.0.0.1","asNumber":65000}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := mustDecodeOne(t, tc.doc)
			obj.Default()
			var parts map[string]json.RawMessage
			b, _ := json.Marshal(obj)
			if err := json.Unmarshal(b, &parts); err != nil {
				t.Fatal(err)
			}
			if string(parts["spec"]) != tc.want {
				t.Errorf("spec:\n got: %s\nwant: %s", parts["spec"], tc.want)
			}
		})
	}
}

func TestDefaultWorkloadEndpoint(t *testing.T) {
	w := mustDecodeOne(t, doc("WorkloadEndpoint", "namespace: default\nlabels: {app: web}",
		"orchestrator: cni\nnode: node1\ncontainerID: probecontainer000\nendpoint: eth0\ninterfaceName: caliprobecontai")).(*WorkloadEndpoint)
	w.Default()
	if w.Name != "node1-cni-probecontainer000-eth0" {
		t.Errorf("name %q", w.Name)
	}
	want := map[string]string{"app": "web", LabelNamespace: "default", LabelOrchestrator: "cni"}
	if len(w.Labels) != len(want) {
		t.Errorf("labels %v, want %v", w.Labels, want)
	}
	for k, v := range want {
		if w.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, w.Labels[k], v)
		}
	}
	// A namespace not yet known gets no label.
	w2 := &WorkloadEndpoint{Spec: WorkloadEndpointSpec{Orchestrator: "k8s"}}
	w2.Default()
	if _, ok := w2.Labels[LabelNamespace]; ok || w2.Name != "" {
		t.Errorf("incomplete endpoint defaulted to name %q labels %v", w2.Name, w2.Labels)
	}
}

func TestPolicyTierName(t *testing.T) {
	np := &NetworkPolicy{}
	if np.Spec.TierName() != "default" {
		t.Errorf("TierName() = %q", np.Spec.TierName())
	}
	gnp := &GlobalNetworkPolicy{Spec: GlobalNetworkPolicySpec{Tier: "security"}}
	if gnp.Spec.TierName() != "security" {
		t.Errorf("TierName() = %q", gnp.Spec.TierName())
	}
}

// TestDefaultIdempotent defaults an empty and a fully populated object of
// every kind twice; the second call must change nothing.
func TestDefaultIdempotent(t *testing.T) {
	for _, k := range Kinds() {
		for _, populated := range []bool{false, true} {
			obj := k.New()
			if populated {
				fill(reflectValue(obj).Elem(), 0)
			}
			obj.Default()
			once, _ := json.Marshal(obj)
			obj.Default()
			twice, _ := json.Marshal(obj)
			if !bytes.Equal(once, twice) {
				t.Errorf("%s (populated %v): second Default changed\n%s\nto\n%s", k.Kind, populated, once, twice)
			}
		}
	}
}
