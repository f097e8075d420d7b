package ctl_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

func readRef(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata/reference", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestPolicyTiersAsCalico: tiered policies print, read back and are
// stored as real calicoctl v3.31 prints, reads and stores them (the
// tables are Calico's own output, from the KDD reference capture).
func TestPolicyTiersAsCalico(t *testing.T) {
	onBothDatastores(t, func(t *testing.T, e *dsEnv) {
		c := e.c
		c.ok("apply", "-f", "testdata/reference/06-policies.yaml")
		if got, want := c.ok("get", "globalnetworkpolicies", "-o", "wide"), readRef(t, "06-gnp.wide.txt"); got != want {
			t.Errorf("get gnp -o wide:\n%s\nwant (Calico's):\n%s", got, want)
		}
		if got, want := c.ok("get", "networkpolicies", "-A", "-o", "wide"), readRef(t, "06-np.wide.txt"); got != want {
			t.Errorf("get networkpolicies -A -o wide:\n%s\nwant (Calico's):\n%s", got, want)
		}
		withPrefix := "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: default.withprefix}\nspec: {selector: all()}\n"
		if r := c.run(withPrefix, "create", "-f", "-"); r.err != nil {
			t.Fatalf("create default.withprefix: %+v", r)
		}
		if got, want := c.ok("get", "gnp", "-o", "wide"), readRef(t, "06-gnp-withprefix.wide.txt"); got != want {
			t.Errorf("get gnp -o wide:\n%s\nwant (Calico's):\n%s", got, want)
		}

		// get shows the tier and its label as Calico's clientv3 reads them.
		for _, tc := range []struct{ args []string }{
			{[]string{"get", "gnp", "allow-dns"}},
			{[]string{"get", "networkpolicy", "allow-web", "-n", "default"}},
			{[]string{"get", "gnp", "security.block-bad"}},
		} {
			o := decodeOne(t, c.ok(append(tc.args, "-o", "yaml")...))
			tier := "default"
			if strings.HasPrefix(o.Meta().Name, "security.") {
				tier = "security"
			}
			var specTier string
			switch p := o.(type) {
			case *api.GlobalNetworkPolicy:
				specTier = p.Spec.Tier
			case *api.NetworkPolicy:
				specTier = p.Spec.Tier
			}
			if o.Meta().Labels[api.LabelTier] != tier || specTier != tier {
				t.Errorf("%v: label %q spec.tier %q, want %q for both", tc.args, o.Meta().Labels[api.LabelTier], specTier, tier)
			}
		}
		if o := decodeOne(t, c.ok("get", "gnp", "security.block-bad", "-o", "yaml")); o.Meta().Labels["owner"] != "secteam" || o.Meta().Annotations["note"] != "hello" {
			t.Errorf("labels and annotations: %+v", o.Meta())
		}

		// What get prints applies back unchanged, tier and label included.
		out := c.ok("get", "gnp", "allow-dns", "-o", "yaml")
		if r := c.run(out, "apply", "-f", "-"); r.err != nil {
			t.Fatalf("apply what get printed: %+v", r)
		}
		if again := decodeOne(t, c.ok("get", "gnp", "allow-dns", "-o", "yaml")); specJSON(t, again) != specJSON(t, decodeOne(t, out)) {
			t.Errorf("round trip changed the policy:\n%s\nwas\n%s", specJSON(t, again), specJSON(t, decodeOne(t, out)))
		}
		if !e.kdd {
			// In etcd the explicit tier and label are stored, as Calico
			// stores what it is given; a policy written without them has
			// neither (TestCalicoWrittenDatastore compares the bytes).
			kv := c.etcd.Client(t)
			resp, err := kv.Get(context.Background(), "/calico/resources/v3/projectcalico.org/globalnetworkpolicies/default.allow-dns")
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("stored allow-dns: %v", err)
			}
			texttest.Contains(t, "stored allow-dns", string(resp.Kvs[0].Value), `"tier":"default"`, `"projectcalico.org/tier":"default"`)
			resp, err = kv.Get(context.Background(), "/calico/resources/v3/projectcalico.org/globalnetworkpolicies/security.block-bad")
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("stored security.block-bad: %v", err)
			}
			texttest.Contains(t, "stored security.block-bad", string(resp.Kvs[0].Value),
				`"tier":"security"`, `"labels":{"owner":"secteam","projectcalico.org/tier":"security"}`)
		}

		// A policy in a tier that does not exist is refused; a tier with
		// policies cannot be deleted.
		missing := "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: audit.x}\nspec: {tier: audit, selector: all()}\n"
		if r := c.run(missing, "create", "-f", "-"); r.err == nil || !strings.Contains(r.stderr, `tier "audit" does not exist`) {
			t.Errorf("policy in a missing tier: %+v", r)
		}
		if stderr := c.fails("delete", "tier", "security"); !strings.Contains(stderr, "non-empty tier") {
			t.Errorf("delete of a tier with policies: %s", stderr)
		}
	})
}

// TestProfilesAsCalico: the built-in projectcalico-default-allow profile
// is listed and shown on both datastores, as Calico's calicoctl shows it,
// and cannot be deleted.
func TestProfilesAsCalico(t *testing.T) {
	onBothDatastores(t, func(t *testing.T, e *dsEnv) {
		c := e.c
		if out := c.ok("get", "profiles"); !strings.Contains(out, "NAME") || !strings.Contains(out, datastore.DefaultAllowProfileName) {
			t.Errorf("get profiles:\n%s", out)
		}
		p := decodeOne(t, c.ok("get", "profile", datastore.DefaultAllowProfileName, "-o", "yaml")).(*api.Profile)
		if p.ResourceVersion != "1" || len(p.Spec.Ingress) != 1 || p.Spec.Ingress[0].Action != api.Allow || len(p.Spec.Egress) != 1 {
			t.Errorf("default-allow profile: %+v", p)
		}
		if stderr := c.fails("delete", "profile", datastore.DefaultAllowProfileName); !strings.Contains(stderr, "not supported") {
			t.Errorf("delete default-allow: %s", stderr)
		}
	})
}

// TestOutputFormats: -o wide columns as calicoctl's, and the template and
// custom-column forms.
func TestOutputFormats(t *testing.T) {
	onBothDatastores(t, func(t *testing.T, e *dsEnv) {
		c := e.c
		pools := `apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: p1}
spec: {cidr: 10.80.0.0/16, natOutgoing: true, ipipMode: Always}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: p2}
spec: {cidr: 10.81.0.0/16, vxlanMode: CrossSubnet, disabled: true}
`
		if r := c.run(pools, "apply", "-f", "-"); r.err != nil {
			t.Fatalf("apply: %+v", r)
		}
		want := "NAME   CIDR           NAT     IPIPMODE   VXLANMODE     DISABLED   DISABLEBGPEXPORT   SELECTOR   ASSIGNMENTMODE   \n" +
			"p1     10.80.0.0/16   true    Always     Never         false      false              all()      Automatic        \n" +
			"p2     10.81.0.0/16   false   Never      CrossSubnet   true       false              all()      Automatic        \n\n"
		if got := c.ok("get", "ippools", "-o", "wide"); got != want {
			t.Errorf("get ippools -o wide:\n%q\nwant\n%q", got, want)
		}
		if got := c.ok("get", "ippools", "p1", "p2"); got != "NAME   CIDR           SELECTOR   \np1     10.80.0.0/16   all()      \n\nNAME   CIDR           SELECTOR   \np2     10.81.0.0/16   all()      \n\n" {
			t.Errorf("get ippools p1 p2 (one table each, as calicoctl):\n%q", got)
		}
		if got := c.ok("get", "ippools", "-o", "custom-columns=NAME,NAT,DISABLED"); got != "NAME   NAT     DISABLED   \np1     true    false      \np2     false   true       \n\n" {
			t.Errorf("custom-columns:\n%q", got)
		}
		if stderr := c.fails("get", "ippools", "-o", "custom-columns=NAME,FROB"); !strings.Contains(stderr, "unknown heading FROB, valid values are: ASSIGNMENTMODE, CIDR") {
			t.Errorf("unknown column: %s", stderr)
		}
		tmpl := `{{range .}}{{range .Items}}{{.ObjectMeta.Name}}={{.Spec.CIDR}};{{end}}{{end}}`
		if got := c.ok("get", "ippools", "-o", "go-template="+tmpl); got != "p1=10.80.0.0/16;p2=10.81.0.0/16;" {
			t.Errorf("go-template: %q", got)
		}
		file := filepath.Join(t.TempDir(), "t.tmpl")
		os.WriteFile(file, []byte(`{{range .}}{{.Name}} {{.Spec.NATOutgoing}}{{"\n"}}{{end}}`), 0o600)
		if got := c.ok("get", "ippool", "p1", "p2", "-o", "go-template-file="+file); got != "p1 true\np2 false\n" {
			t.Errorf("go-template-file: %q", got)
		}
		if stderr := c.fails("get", "ippools", "-o", "go-template="); !strings.Contains(stderr, "need to specify a template") {
			t.Errorf("empty template: %s", stderr)
		}

		if e.kdd {
			return // Nodes and endpoints come from Kubernetes objects there.
		}
		nodes := `apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: n1}
spec: {bgp: {ipv4Address: 192.0.2.1/24}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: n2}
spec: {bgp: {ipv4Address: 192.0.2.2/24, asNumber: 65001}}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: n1-k8s-web-eth0, namespace: shop}
spec: {orchestrator: k8s, node: n1, pod: web, endpoint: eth0, interfaceName: cali0123456789a, ipNetworks: [10.80.0.5/32],
  profiles: [kns.shop, ksa.shop.default], ipNATs: [{internalIP: 10.80.0.5, externalIP: 192.0.2.100}]}
`
		if r := c.run(nodes, "apply", "-f", "-"); r.err != nil {
			t.Fatalf("apply: %+v", r)
		}
		want = "NAME   ASN       IPV4           IPV6   \nn1     (64512)   192.0.2.1/24          \nn2     65001     192.0.2.2/24          \n\n"
		if got := c.ok("get", "nodes", "-o", "wide"); got != want {
			t.Errorf("get nodes -o wide:\n%q\nwant\n%q", got, want)
		}
		c.run("apiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: default}\nspec: {asNumber: 64600}\n", "apply", "-f", "-")
		if got := c.ok("get", "nodes", "-o", "wide"); !strings.Contains(got, "n1     (64600)") {
			t.Errorf("inherited ASN after BGPConfiguration: %s", got)
		}
		want = "NAMESPACE   NAME              WORKLOAD   NODE   NETWORKS       INTERFACE         PROFILES                    NATS                      \n" +
			"shop        n1-k8s-web-eth0   web        n1     10.80.0.5/32   cali0123456789a   kns.shop,ksa.shop.default   {10.80.0.5 192.0.2.100}   \n\n"
		if got := c.ok("get", "workloadendpoints", "-n", "shop", "-o", "wide"); got != want {
			t.Errorf("get weps -n shop -o wide:\n%q\nwant\n%q", got, want)
		}
		c.run("apiVersion: projectcalico.org/v3\nkind: WorkloadEndpoint\nmetadata: {name: n1-k8s-web-eth0, namespace: default}\nspec: {orchestrator: k8s, node: n1, pod: web, endpoint: eth0, interfaceName: cali0123456789b, ipNetworks: [10.80.0.6/32]}\n", "apply", "-f", "-")
		want = "WORKLOAD   NODE   NETWORKS       INTERFACE         \nweb        n1     10.80.0.6/32   cali0123456789b   \n\n"
		if got := c.ok("get", "weps"); got != want {
			t.Errorf("get weps:\n%q\nwant\n%q", got, want)
		}
	})
}
