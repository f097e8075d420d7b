package ctl_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
)

const k8sPolicyYAML = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: web-from-frontend
  namespace: shop
spec:
  podSelector:
    matchLabels: {app: web}
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector:
        matchLabels: {role: frontend}
    ports:
    - protocol: TCP
      port: 8080
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: deny-db
spec:
  selector: app == 'db'
  types: [Ingress]
`

// TestKubernetesNetworkPolicy checks that calicoctl stores a Kubernetes
// NetworkPolicy as the Calico policy the policy controller would write,
// beside Calico documents in the same file, and deletes it by file.
func TestKubernetesNetworkPolicy(t *testing.T) {
	c := newCLI(t)
	r := c.run(k8sPolicyYAML, "apply", "-f", "-")
	if r.err != nil {
		t.Fatalf("apply: %+v", r)
	}
	if !strings.Contains(r.stdout, "Successfully applied 2") {
		t.Errorf("apply output: %q", r.stdout)
	}

	np := decodeOne(t, c.ok("get", "networkpolicy", "knp.default.web-from-frontend", "-n", "shop", "-o", "json")).(*api.NetworkPolicy)
	spec, _ := json.Marshal(np.Spec)
	// The tier is shown as calicoctl shows it (clientv3 fills it in).
	want := `{"tier":"default","order":1000,"ingress":[{"action":"Allow","protocol":"TCP","source":{"selector":"projectcalico.org/orchestrator == 'k8s' \u0026\u0026 role == 'frontend'"},"destination":{"ports":[8080]}}],"selector":"projectcalico.org/orchestrator == 'k8s' \u0026\u0026 app == 'web'","types":["Ingress"]}`
	if string(spec) != want {
		t.Errorf("stored spec\n got %s\nwant %s", spec, want)
	}
	if out := c.ok("get", "globalnetworkpolicies", "-o", "name"); !strings.Contains(out, "deny-db") {
		t.Errorf("the Calico document beside it was not stored: %q", out)
	}

	// create of the same policy conflicts under its Calico name.
	k8sOnly := strings.SplitN(k8sPolicyYAML, "---", 2)[0]
	if r := c.run(k8sOnly, "create", "-f", "-"); r.err == nil || !strings.Contains(r.stderr, "knp.default.web-from-frontend") {
		t.Errorf("second create: %+v", r)
	}
	// replace changes it; -n applies to a policy without a namespace.
	changed := strings.Replace(k8sOnly, "port: 8080", "port: 9090", 1)
	if r := c.run(changed, "replace", "-f", "-"); r.err != nil {
		t.Fatalf("replace: %+v", r)
	}
	if out := c.ok("get", "networkpolicy", "knp.default.web-from-frontend", "-n", "shop", "-o", "yaml"); !strings.Contains(out, "9090") {
		t.Errorf("after replace: %s", out)
	}
	noNS := strings.Replace(k8sOnly, "  namespace: shop\n", "", 1)
	c.ok("apply", "-n", "other", "-f", writeTemp(t, noNS))
	if out := c.ok("get", "networkpolicies", "-n", "other", "-o", "name"); out != "networkpolicy/knp.default.web-from-frontend\n" {
		t.Errorf("-n other: %q", out)
	}

	// A NetworkPolicyList is expanded.
	list := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicyList\nitems:\n- metadata: {name: a, namespace: shop}\n  spec: {podSelector: {}}\n- metadata: {name: b, namespace: shop}\n  spec: {podSelector: {}, policyTypes: [Egress]}\n"
	if r := c.run(list, "apply", "-f", "-"); r.err != nil {
		t.Fatalf("apply list: %+v", r)
	}
	if out := c.ok("get", "networkpolicies", "-n", "shop", "-o", "name"); out != "networkpolicy/knp.default.a\nnetworkpolicy/knp.default.b\nnetworkpolicy/knp.default.web-from-frontend\n" {
		t.Errorf("after list: %q", out)
	}

	// An invalid Kubernetes policy writes nothing, not even its neighbours.
	bad := strings.Replace(k8sPolicyYAML, "policyTypes:", "polycyTypes:", 1)
	bad = strings.Replace(bad, "deny-db", "deny-db-2", 1)
	if r := c.run(bad, "apply", "-f", "-"); r.err == nil || !strings.Contains(r.stderr, "polycyTypes") {
		t.Errorf("invalid policy: %+v", r)
	}
	if out := c.ok("get", "globalnetworkpolicies", "-o", "name"); strings.Contains(out, "deny-db-2") {
		t.Errorf("a document beside an invalid one was written: %q", out)
	}

	// delete -f removes the converted policy.
	if r := c.run(k8sPolicyYAML, "delete", "-f", "-"); r.err != nil {
		t.Fatalf("delete: %+v", r)
	}
	if out := c.ok("get", "networkpolicies", "-n", "shop", "-o", "name"); strings.Contains(out, "web-from-frontend") {
		t.Errorf("after delete: %q", out)
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
