package ctl_test

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// TestLabel: calicoctl label's rules and messages, on both datastores.
func TestLabel(t *testing.T) {
	onBothDatastores(t, func(t *testing.T, e *dsEnv) {
		c := e.c
		if r := c.run(poolA, "create", "-f", "-"); r.err != nil {
			t.Fatalf("create: %+v", r)
		}
		steps := []struct {
			args    []string
			ok      bool
			message string
			labels  map[string]string
		}{
			{[]string{"label", "ippools", "pool-a", "team=blue"}, true, "Successfully set label team on ippools pool-a", map[string]string{"team": "blue"}},
			{[]string{"label", "ippools", "pool-a", "team=blue"}, true, "Successfully updated label team on ippools pool-a", map[string]string{"team": "blue"}},
			{[]string{"label", "ippools", "pool-a", "team=red"}, false, "failed to update label of ippools pool-a, key team is already present. please use '--overwrite' to set a new value", map[string]string{"team": "blue"}},
			{[]string{"label", "ippools", "pool-a", "team=red", "--overwrite"}, true, "Successfully updated label team on ippools pool-a", map[string]string{"team": "red"}},
			{[]string{"label", "ippool", "pool-a", "zone=a"}, true, "Successfully set label zone on ippool pool-a", map[string]string{"team": "red", "zone": "a"}},
			{[]string{"label", "ippools", "pool-a", "team", "--remove"}, true, "Successfully removed label team from ippools pool-a", map[string]string{"zone": "a"}},
			{[]string{"label", "ippools", "pool-a", "team", "--remove"}, false, "cannot remove label of ippools pool-a, key team does not exist", map[string]string{"zone": "a"}},
			{[]string{"label", "ippools", "pool-a", "team"}, false, "invalid label team", map[string]string{"zone": "a"}},
			{[]string{"label", "ippools", "pool-a", "Bad Key=x"}, false, "", map[string]string{"zone": "a"}},
			{[]string{"label", "ippools", "missing", "a=b"}, false, "failed to get ippools missing", map[string]string{"zone": "a"}},
		}
		for _, st := range steps {
			r := c.run("", st.args...)
			if (r.err == nil) != st.ok || !strings.Contains(r.stdout+r.stderr, st.message) {
				t.Errorf("%v: err=%v stdout=%q stderr=%q, want ok=%v and %q", st.args, r.err, r.stdout, r.stderr, st.ok, st.message)
			}
			p := decodeOne(t, c.ok("get", "ippool", "pool-a", "-o", "yaml"))
			if got, _ := json.Marshal(p.Meta().Labels); string(got) != string(must(json.Marshal(st.labels))) {
				t.Errorf("%v: labels %s, want %v", st.args, got, st.labels)
			}
		}
		// A namespaced kind, with -n.
		c.run("apiVersion: projectcalico.org/v3\nkind: NetworkSet\nmetadata: {name: ns1, namespace: default}\nspec: {nets: [192.0.2.0/24]}\n", "apply", "-f", "-")
		c.ok("label", "networkset", "ns1", "-n", "default", "role=db")
		if o := decodeOne(t, c.ok("get", "networkset", "ns1", "-n", "default", "-o", "yaml")); o.Meta().Labels["role"] != "db" {
			t.Errorf("networkset labels: %v", o.Meta().Labels)
		}
	})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestConvert: calicoctl convert turns calicoctl v1, crd.projectcalico.org/v1
// and Kubernetes NetworkPolicy documents into v3, without a datastore.
func TestConvert(t *testing.T) {
	c := newCLI(t)
	c.etcd.Stop() // convert needs none

	out := c.ok("convert", "-f", "testdata/examples/001-legacy-v1-ippool.yaml")
	p := decodeOne(t, out).(*api.IPPool)
	if p.APIVersion != api.GroupVersion || p.Name != "192-168-0-0-16" || p.Spec.CIDR != "192.168.0.0/16" || p.Spec.IPIPMode != api.IPIPModeAlways || !p.Spec.NATOutgoing {
		t.Errorf("v1 ipPool converted to:\n%s", out)
	}
	if !strings.HasPrefix(out, "apiVersion: projectcalico.org/v3\nkind: IPPool\n") {
		t.Errorf("not a v3 document:\n%s", out)
	}

	// Several documents: a v1 List of v3 resources, in JSON with -o json.
	out = c.ok("convert", "-f", "testdata/examples/003-bgppeers.yaml", "-o", "json")
	var list struct {
		APIVersion, Kind string
		Items            []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || list.APIVersion != "v1" || list.Kind != "List" || len(list.Items) != 2 ||
		list.Items[0]["apiVersion"] != api.GroupVersion || list.Items[1]["metadata"].(map[string]any)["name"] != "peer2" {
		t.Errorf("crd v1 BGPPeers converted to %v:\n%s", err, out)
	}

	// A Kubernetes policy keeps its own name.
	k8sOnly := strings.SplitN(k8sPolicyYAML, "---", 2)[0]
	r := c.run(k8sOnly, "convert", "-f", "-")
	if r.err != nil {
		t.Fatalf("convert k8s policy: %+v", r)
	}
	np := decodeOne(t, r.stdout).(*api.NetworkPolicy)
	if np.Name != "web-from-frontend" || np.Namespace != "shop" || !strings.Contains(np.Spec.Selector, "projectcalico.org/orchestrator == 'k8s'") {
		t.Errorf("k8s policy converted to:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "resourceVersion") || strings.Contains(r.stdout, "creationTimestamp") {
		t.Errorf("identity kept:\n%s", r.stdout)
	}

	// Invalid results are refused unless --ignore-validation.
	bad := "apiVersion: crd.projectcalico.org/v1\nkind: IPPool\nmetadata: {name: bad}\nspec: {cidr: 10.0.0.1/16}\n"
	if r := c.run(bad, "convert", "-f", "-"); r.err == nil || !strings.Contains(r.stderr, "--ignore-validation") {
		t.Errorf("invalid: %+v", r)
	}
	if r := c.run(bad, "convert", "-f", "-", "--ignore-validation"); r.err != nil || !strings.Contains(r.stdout, "cidr: 10.0.0.1/16") {
		t.Errorf("--ignore-validation: %+v", r)
	}
	if stderr := c.fails("convert", "-f", "testdata/examples/003-bgppeers.yaml", "-o", "wide"); !strings.Contains(stderr, "unrecognized output format 'wide'") {
		t.Errorf("-o wide: %s", stderr)
	}
}

// TestVersion: the client's version and commit, then the cluster's from
// ClusterInformation, on both datastores.
func TestVersion(t *testing.T) {
	onBothDatastores(t, func(t *testing.T, e *dsEnv) {
		c := e.c
		out := c.ok("version", "--client")
		if !strings.Contains(out, "Client Version:") || !strings.Contains(out, "Git commit:") || strings.Contains(out, "Cluster") {
			t.Errorf("version --client:\n%s", out)
		}
		checkCommit(t, out)
		if stderr := c.fails("version"); !strings.Contains(stderr, "unable to retrieve Cluster Version or Type") {
			t.Errorf("version without ClusterInformation: %s", stderr)
		}
		ci := &api.ClusterInformation{}
		ci.Kind, ci.APIVersion, ci.Name = "ClusterInformation", api.GroupVersion, "default"
		ci.Spec.CalicoVersion, ci.Spec.ClusterType = "v3.31.0", "k8s,bgp,kdd"
		if _, err := e.store.Create(e.ctx, ci); err != nil {
			t.Fatal(err)
		}
		out = c.ok("version")
		texttest.Contains(t, "version", out, "Client Version:", "Git commit:", "Cluster Version:   v3.31.0\n", "Cluster Type:      k8s,bgp,kdd\n")
	})
}

// checkCommit: "Git commit:" is followed by the commit the binary was
// built from (the build stamps it with -ldflags, as the Makefile does): a
// full hash, and one of this repository's commits where git can say.
func checkCommit(t *testing.T, out string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^Git commit:\s+(\S+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no Git commit line:\n%s", out)
	}
	commit := strings.TrimSuffix(m[1], "-dirty")
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(commit) {
		t.Fatalf("Git commit %q is not a commit hash", m[1])
	}
	if _, err := exec.LookPath("git"); err != nil {
		return
	}
	if out, err := exec.Command("git", "-C", testbin.RepoRoot(), "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Errorf("Git commit %s is not a commit of this repository: %v %s", commit, err, out)
	}
}
