package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// NamespaceProfile is the YAML document of the Profile the Kubernetes
// datastore makes of namespace ns, for tests that write it to the etcd
// datastore themselves: kns.<ns> allows all traffic both ways and gives
// the namespace's endpoints pcns.projectcalico.org/name: <ns> and, for
// each of the namespace's labels, pcns.<key>: <value>.
func NamespaceProfile(ns string, labels map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "---\napiVersion: projectcalico.org/v3\nkind: Profile\nmetadata: {name: kns.%s}\nspec:\n", ns)
	b.WriteString("  ingress: [{action: Allow}]\n  egress: [{action: Allow}]\n")
	fmt.Fprintf(&b, "  labelsToApply: {pcns.projectcalico.org/name: %s", ns)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fmt.Fprintf(&b, ", pcns.%s: %s", k, labels[k])
	}
	b.WriteString("}\n")
	return b.String()
}

// ServiceAccountProfile is the YAML document of the Profile the
// Kubernetes datastore makes of service account ns/name: ksa.<ns>.<name>
// has no rules and gives the account's endpoints
// pcsa.projectcalico.org/name: <name>.
func ServiceAccountProfile(ns, name string) string {
	return fmt.Sprintf("---\napiVersion: projectcalico.org/v3\nkind: Profile\nmetadata: {name: ksa.%s.%s}\nspec:\n  labelsToApply: {pcsa.projectcalico.org/name: %s}\n", ns, name, name)
}

// Objects decodes and validates a YAML or JSON document stream, as
// calicoctl apply reads a file, and fails the test on any document it
// cannot use.
func Objects(t testing.TB, docs string) []api.Object {
	t.Helper()
	ds, err := api.DecodeAndValidate([]byte(docs))
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, docs)
	}
	out := make([]api.Object, 0, len(ds))
	for _, d := range ds {
		if d.Err != nil {
			t.Fatalf("document %d (%s %s): %v", d.Index, d.Kind, d.Name, d.Err)
		}
		out = append(out, d.Object)
	}
	return out
}

// DataplaneCluster is the policy dataplane benchmarks' cluster (make
// bench-dataplane, agent's BenchmarkPolicyChange): an IP pool, node
// nodeName with nEP local pods in 10 namespaces and nPol policies mixing
// selectors, named and numbered ports, ranges, nets and namespace
// selectors (one in five global).
func DataplaneCluster(b testing.TB, nodeName string, nEP, nPol int) []api.Object {
	b.Helper()
	var y strings.Builder
	y.WriteString("apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: pool}\nspec: {cidr: 10.96.0.0/12, blockSize: 26}\n")
	for ns := range 10 {
		y.WriteString(NamespaceProfile(fmt.Sprint("ns", ns), map[string]string{"team": fmt.Sprint("t", ns%3)}))
	}
	for i := range nEP {
		fmt.Fprintf(&y, `---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: %s-k8s-pod%d-eth0, namespace: ns%d, labels: {app: app%d, tier: t%d, projectcalico.org/namespace: ns%d, projectcalico.org/orchestrator: k8s}}
spec:
  orchestrator: k8s
  node: %s
  pod: pod%d
  endpoint: eth0
  interfaceName: cali%011x
  ipNetworks: [10.%d.%d.%d/32]
  profiles: [kns.ns%d]
  ports: [{name: http, protocol: TCP, port: 8080}]
`, nodeName, i, i%10, i%100, i%20, i%10, nodeName, i, i, 96+i/65536, (i/256)%256, i%256, i%10)
	}
	for k := range nPol {
		rules := fmt.Sprintf(`  ingress:
  - action: Allow
    protocol: TCP
    source: {selector: tier == 't%d'}
    destination: {ports: [%d, http, "9000:9100"]}
  - action: Allow
    protocol: UDP
    source: {nets: [172.%d.0.0/16], notNets: [172.%d.1.0/24]}
  - action: Deny
    source: {namespaceSelector: team == 't%d'}
  egress:
  - action: Allow
    protocol: TCP
    destination: {selector: app == 'app%d', ports: [5432]}
  - action: Allow
    destination: {nets: [192.168.%d.0/24]}
`, k%20, 80+k%50, 16+k%16, 16+k%16, k%3, (k+1)%100, k%256)
		if k%5 == 4 {
			fmt.Fprintf(&y, "---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: gnp%d}\nspec:\n  order: %d\n  selector: app == 'app%d' && has(tier)\n  namespaceSelector: team == 't%d'\n%s", k, k, k%100, k%3, rules)
		} else {
			fmt.Fprintf(&y, "---\napiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: np%d, namespace: ns%d}\nspec:\n  order: %d\n  selector: app == 'app%d'\n%s", k, k%10, k, k%100, rules)
		}
	}
	return Objects(b, y.String())
}
