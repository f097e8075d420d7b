package ctl_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/etcd"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// cli runs the binary as `calicoctl` against one etcd, as a user would.
type cli struct {
	t      *testing.T
	bin    string
	etcd   *etcdtest.Server
	extEnv []string
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	return &cli{t: t, bin: filepath.Join(testbin.Dir(t), "calicoctl"), etcd: etcdtest.Start(t)}
}

type result struct {
	stdout, stderr string
	err            error
}

func (c *cli) run(stdin string, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "ETCD_ENDPOINTS=" + strings.Join(c.etcd.Endpoints, ",")}, c.extEnv...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return result{out.String(), errOut.String(), err}
}

// ok runs a command that must succeed and returns its stdout.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	r := c.run("", args...)
	if r.err != nil {
		c.t.Fatalf("calicoctl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.err, r.stdout, r.stderr)
	}
	return r.stdout
}

// fails runs a command that must exit non-zero and returns its stderr.
func (c *cli) fails(args ...string) string {
	c.t.Helper()
	r := c.run("", args...)
	if r.err == nil {
		c.t.Fatalf("calicoctl %s succeeded, want failure\nstdout: %s", strings.Join(args, " "), r.stdout)
	}
	return r.stderr
}

func decodeOne(t *testing.T, data string) api.Object {
	t.Helper()
	docs, err := api.Decode([]byte(data))
	if err != nil || len(docs) != 1 || docs[0].Err != nil {
		t.Fatalf("decode output: %v %+v\n%s", err, docs, data)
	}
	return docs[0].Object
}

// asCalicoctlShows is obj as calicoctl shows it: a policy with its tier
// in spec.tier and in the projectcalico.org/tier label (libcalico-go's
// clientv3 adds both on every read).
func asCalicoctlShows(obj api.Object) api.Object {
	var tier *string
	switch p := obj.(type) {
	case *api.NetworkPolicy:
		tier = &p.Spec.Tier
	case *api.GlobalNetworkPolicy:
		tier = &p.Spec.Tier
	default:
		return obj
	}
	if *tier == "" {
		*tier = "default"
	}
	m := obj.Meta()
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	if m.Labels[api.LabelTier] == "" {
		m.Labels[api.LabelTier] = *tier
	}
	return obj
}

// specJSON is the comparable part of a resource: spec (and labels).
func specJSON(t *testing.T, o api.Object) string {
	t.Helper()
	raw, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(raw, &m)
	delete(m, "status")
	md, _ := m["metadata"].(map[string]any)
	for _, k := range []string{"uid", "creationTimestamp", "resourceVersion"} {
		delete(md, k)
	}
	out, _ := json.Marshal(m)
	return string(out)
}

// Every kind goes in through apply and comes back out of get unchanged.
// ClusterInformation is read-only to calicoctl, as to Calico's: it is
// written here behind the CLI's back and only read through it.
func TestRoundTripEveryKind(t *testing.T) {
	c := newCLI(t)
	r := c.run("", "apply", "-f", "testdata/allkinds.yaml")
	if !strings.Contains(r.stdout, "Successfully applied 16 resource(s)") || r.err == nil ||
		!strings.Contains(r.stderr, "apply ClusterInformation(default): operation not supported: resource is readonly") {
		t.Errorf("apply: %+v", r)
	}
	data, _ := os.ReadFile("testdata/allkinds.yaml")
	docs, err := api.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := etcd.New(ctx, datastore.Config{Endpoints: c.etcd.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, d := range docs {
		if d.Kind == "ClusterInformation" {
			if _, err := store.Create(ctx, d.Object); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, args := range [][]string{{"delete", "clusterinformation", "default"}, {"patch", "clusterinfo", "default", "-p", `{"spec":{"datastoreReady":false}}`},
		{"label", "clusterinformations", "default", "a=b"}} {
		if stderr := c.fails(args...); !strings.Contains(stderr, "resource is readonly") {
			t.Errorf("%v: %s", args, stderr)
		}
	}
	seen := map[string]bool{}
	for _, d := range docs {
		want := d.Object
		want.Default()
		asCalicoctlShows(want)
		seen[d.Kind] = true
		t.Run(d.Kind, func(t *testing.T) {
			args := []string{"get", d.Kind, d.Name, "-o", "yaml"}
			if d.Namespace != "" {
				args = append(args, "-n", d.Namespace)
			}
			got := decodeOne(t, c.ok(args...))
			if g, w := specJSON(t, got), specJSON(t, want); g != w {
				t.Errorf("round trip changed the resource\n got: %s\nwant: %s", g, w)
			}
			if got.Meta().ResourceVersion == "" || got.Meta().UID == "" || got.Meta().CreationTimestamp == "" {
				t.Errorf("metadata not filled: %+v", got.Meta())
			}
			// JSON output decodes to the same thing.
			args[len(args)-3] = "json"
			if d.Namespace != "" {
				args[len(args)-3] = "json"
			}
			jargs := []string{"get", d.Kind, d.Name, "-o", "json"}
			if d.Namespace != "" {
				jargs = append(jargs, "-n", d.Namespace)
			}
			if g, w := specJSON(t, decodeOne(t, c.ok(jargs...))), specJSON(t, want); g != w {
				t.Errorf("json output differs\n got: %s\nwant: %s", g, w)
			}
		})
	}
	for _, k := range api.Kinds() {
		if !seen[k.Kind] {
			t.Errorf("testdata/allkinds.yaml has no %s", k.Kind)
		}
	}
}

// A file with invalid documents writes nothing and names every bad one.
func TestInvalidFileWritesNothing(t *testing.T) {
	c := newCLI(t)
	for _, verb := range []string{"create", "apply", "replace"} {
		stderr := c.fails(verb, "-f", "testdata/invalid.yaml")
		for _, want := range []string{
			"3 of 4 documents are invalid, nothing was written",
			`document 2 (IPPool bad-pool): spec.cidr: "10.0.0.0/33" is not a valid CIDR`,
			"document 3 (GlobalNetworkPolicy bad-selector): spec.selector",
			"document 4 (BGPPeer typo)",
			"peerAddress",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", verb, want, stderr)
			}
		}
	}
	if out := c.ok("get", "ippools", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("something was written: %q", out)
	}
	for _, bad := range []struct{ name, doc, want string }{
		{"malformed yaml", "kind: IPPool\n  bad: [\n", "yaml"},
		{"unknown kind", "apiVersion: projectcalico.org/v3\nkind: Frob\nmetadata: {name: x}\n", "Frob"},
		{"bad apiVersion", "apiVersion: v9\nkind: IPPool\nmetadata: {name: x}\n", "v9"},
		{"namespace on global kind", "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: x, namespace: y}\nspec: {cidr: 10.0.0.0/24}\n", "namespace"},
	} {
		r := c.run(bad.doc, "apply", "-f", "-")
		if r.err == nil || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("%s: err=%v stderr=%q, want failure mentioning %q", bad.name, r.err, r.stderr, bad.want)
		}
	}
}

// Every resource file from the seed documents applies, including the
// calicoctl v1 ipPool and the crd.projectcalico.org/v1 List documents;
// the seed's ippool1 has the v1 pool's CIDR, so it is refused as Calico
// refuses it, naming the pool it overlaps, and the rest is written.
func TestSeedExamplesApply(t *testing.T) {
	c := newCLI(t)
	stderr := c.fails("apply", "-f", "testdata/examples")
	if want := "IPPool(ippool1) CIDR overlaps with IPPool(192-168-0-0-16) CIDR 192.168.0.0/16"; !strings.Contains(stderr, want) {
		t.Errorf("apply of two pools on 192.168.0.0/16: stderr lacks %q:\n%s", want, stderr)
	}
	out := c.ok("get", "ippools", "-o", "wide")
	texttest.Contains(t, "ippools table", out, "192-168-0-0-16", "192.168.0.0/16", "ippool2", "172.10.0.0/16", "Always", `calico == "2"`)
	if strings.Contains(out, "ippool1") {
		t.Errorf("the overlapping pool was written:\n%s", out)
	}
	legacy := decodeOne(t, c.ok("get", "ippool", "192-168-0-0-16", "-o", "yaml")).(*api.IPPool)
	if legacy.Spec.CIDR != "192.168.0.0/16" || legacy.Spec.IPIPMode != "Always" || !legacy.Spec.NATOutgoing {
		t.Errorf("legacy v1 ipPool converted to %+v", legacy.Spec)
	}
	bgp := decodeOne(t, c.ok("get", "bgpconfiguration", "default", "-o", "yaml")).(*api.BGPConfiguration)
	if bgp.Spec.ASNumber == nil || *bgp.Spec.ASNumber != 63400 || bgp.Spec.NodeToNodeMeshEnabled == nil || *bgp.Spec.NodeToNodeMeshEnabled {
		t.Errorf("BGPConfiguration: %+v", bgp.Spec)
	}
	peers := c.ok("get", "bgppeers", "-o", "name")
	if peers != "bgppeer/peer1\nbgppeer/peer2\n" {
		t.Errorf("bgppeers: %q", peers)
	}
}

// Data real Calico v3.31 wrote reads back through our CLI as the user wrote
// it, and what our CLI writes is what Calico writes.
func TestCalicoWrittenDatastore(t *testing.T) {
	c := newCLI(t)
	kv := c.etcd.Client(t)
	f, err := os.Open("testdata/reference/calico-3.31-etcd-layout.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	ref := map[string]string{}
	var key string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#") || line == "":
		case strings.HasPrefix(line, "/calico/"):
			key = line
		default:
			ref[key] = line
			if _, err := kv.Put(context.Background(), key, line); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		file string
	}{
		{[]string{"get", "node", "node1"}, "01-node.yaml"},
		{[]string{"get", "ippool", "pool1"}, "02-ippool.yaml"},
		{[]string{"get", "bgppeer", "peer1"}, "03-bgppeer.yaml"},
		{[]string{"get", "globalnetworkpolicy", "allow-dns"}, "04-gnp.yaml"},
		{[]string{"get", "networkpolicy", "allow-web", "-n", "default"}, "05-np.yaml"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got := decodeOne(t, c.ok(append(tc.args, "-o", "yaml")...))
			data, _ := os.ReadFile(filepath.Join("testdata/reference", tc.file))
			want := decodeOne(t, string(data))
			want.Default()
			asCalicoctlShows(want)
			if g, w := specJSON(t, got), specJSON(t, want); g != w {
				t.Errorf("Calico-written resource reads back differently\n got: %s\nwant: %s", g, w)
			}
		})
	}
	if out := c.ok("get", "workloadendpoints", "-A", "-o", "wide"); !strings.Contains(out, "node1-cni-probecontainer000-eth0") || !strings.Contains(out, "10.244.166.128/32") {
		t.Errorf("wep listing: %s", out)
	}

	// Vice versa: delete and re-apply the user YAML through our CLI; etcd
	// holds Calico's bytes again (uid and timestamp aside).
	for _, tc := range []struct{ kind, name, file, key string }{
		{"ippool", "pool1", "02-ippool.yaml", "/calico/resources/v3/projectcalico.org/ippools/pool1"},
		{"globalnetworkpolicy", "allow-dns", "04-gnp.yaml", "/calico/resources/v3/projectcalico.org/globalnetworkpolicies/default.allow-dns"},
	} {
		c.ok("delete", tc.kind, tc.name)
		c.ok("create", "-f", filepath.Join("testdata/reference", tc.file))
		resp, err := kv.Get(context.Background(), tc.key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("%s: key %s missing after create: %v", tc.name, tc.key, err)
		}
		if g, w := normaliseIdentity(t, string(resp.Kvs[0].Value)), normaliseIdentity(t, ref[tc.key]); g != w {
			t.Errorf("%s stored differently from Calico\n got: %s\nwant: %s", tc.name, g, w)
		}
	}
}

func normaliseIdentity(t *testing.T, raw string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("stored value is not JSON: %v", err)
	}
	md := m["metadata"].(map[string]any)
	md["uid"], md["creationTimestamp"] = "UID", "TS"
	out, _ := json.Marshal(m)
	return string(out)
}

func TestVerbs(t *testing.T) {
	c := newCLI(t)
	pool := "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  name: p1\nspec:\n  cidr: 10.1.0.0/16\n"
	if r := c.run(pool, "create", "-f", "-"); r.err != nil || !strings.Contains(r.stdout, "Successfully created 1 'IPPool' resource(s)") {
		t.Fatalf("create from stdin: %+v", r)
	}
	if r := c.run(pool, "create", "-f", "-"); r.err == nil || !strings.Contains(r.stderr, "resource already exists: IPPool(p1)") {
		t.Errorf("second create: %+v", r)
	}
	if r := c.run(pool, "create", "--skip-exists", "-f", "-"); r.err != nil {
		t.Errorf("create --skip-exists: %+v", r)
	}

	// replace needs the resource to exist, and a stale resourceVersion is a conflict.
	got := decodeOne(t, c.ok("get", "ippool", "p1", "-o", "yaml"))
	stale := strings.Replace(pool, "  name: p1\n", "  name: p1\n  resourceVersion: \"1\"\n", 1)
	if r := c.run(stale, "replace", "-f", "-"); r.err == nil || !strings.Contains(r.stderr, "conflict") {
		t.Errorf("replace with stale resourceVersion: %+v", r)
	}
	fresh := strings.Replace(pool, "  name: p1\n", "  name: p1\n  resourceVersion: \""+got.Meta().ResourceVersion+"\"\n", 1)
	fresh = strings.Replace(fresh, "cidr: 10.1.0.0/16", "cidr: 10.1.0.0/16\n  natOutgoing: true", 1)
	if r := c.run(fresh, "replace", "-f", "-"); r.err != nil {
		t.Errorf("replace with current resourceVersion: %+v", r)
	}
	if r := c.run(strings.Replace(pool, "p1", "p2", 1), "replace", "-f", "-"); r.err == nil || !strings.Contains(r.stderr, "resource does not exist: IPPool(p2)") {
		t.Errorf("replace of a missing resource: %+v", r)
	}

	// patch
	c.ok("patch", "ippool", "p1", "-p", `{"spec":{"disabled":true}}`)
	p := decodeOne(t, c.ok("get", "ippool", "p1", "-o", "json")).(*api.IPPool)
	if !p.Spec.Disabled || !p.Spec.NATOutgoing {
		t.Errorf("after patch: %+v", p.Spec)
	}
	if stderr := c.fails("patch", "ippool", "p1", "-p", `{"spec":{"cidr":"10.0.0.0/33"}}`); !strings.Contains(stderr, "not a valid CIDR") {
		t.Errorf("invalid patch: %s", stderr)
	}

	// namespaces: -n, default namespace, -A
	set := func(ns, name string) string {
		return "apiVersion: projectcalico.org/v3\nkind: NetworkSet\nmetadata:\n  name: " + name + "\n" + ns + "spec:\n  nets: [192.0.2.0/24]\n"
	}
	c.run(set("", "in-default"), "apply", "-f", "-")
	c.run(set("", "in-shop"), "apply", "-n", "shop", "-f", "-")
	if r := c.run(set("  namespace: other\n", "x"), "apply", "-n", "shop", "-f", "-"); r.err == nil {
		t.Errorf("-n contradicting the document must fail")
	}
	if out := c.ok("get", "networksets", "-o", "name"); out != "networkset/in-default\n" {
		t.Errorf("default namespace listing: %q", out)
	}
	if out := c.ok("get", "networksets", "-n", "shop", "-o", "name"); out != "networkset/in-shop\n" {
		t.Errorf("-n shop listing: %q", out)
	}
	out := c.ok("get", "networksets", "-A")
	if !strings.Contains(out, "NAMESPACE") || !strings.Contains(out, "shop") || !strings.Contains(out, "in-default") {
		t.Errorf("-A table: %q", out)
	}

	// delete by name and by file; --skip-not-exists
	c.ok("delete", "networkset", "in-shop", "-n", "shop")
	if stderr := c.fails("delete", "networkset", "in-shop", "-n", "shop"); !strings.Contains(stderr, "resource does not exist: NetworkSet(shop/in-shop)") {
		t.Errorf("delete of missing: %s", stderr)
	}
	c.ok("delete", "--skip-not-exists", "networkset", "in-shop", "-n", "shop")
	if r := c.run(pool, "delete", "-f", "-"); r.err != nil || !strings.Contains(r.stdout, "Successfully deleted 1 'IPPool' resource(s)") {
		t.Errorf("delete -f: %+v", r)
	}

	// output formats and kind aliases
	if stderr := c.fails("get", "ippools", "-o", "xml"); !strings.Contains(stderr, "unrecognized output format 'xml'") {
		t.Errorf("bad -o: %s", stderr)
	}
	if stderr := c.fails("get", "frobs"); !strings.Contains(stderr, `unknown resource kind "frobs"`) {
		t.Errorf("bad kind: %s", stderr)
	}
	for _, alias := range []string{"ippool", "ippools", "IPPool", "pool"} {
		c.ok("get", alias)
	}
	list := c.ok("get", "networksets", "-o", "yaml")
	if !strings.Contains(list, "kind: NetworkSetList") || !strings.Contains(list, "name: in-default") {
		t.Errorf("list yaml: %s", list)
	}
}

func TestEtcdDown(t *testing.T) {
	c := newCLI(t)
	c.etcd.Stop()
	start := time.Now()
	stderr := c.fails("get", "ippools")
	if !strings.Contains(stderr, "127.0.0.1") {
		t.Errorf("etcd down: error should name the endpoint: %s", stderr)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("etcd down: took %v to fail", d)
	}
	c.extEnv = []string{"DATASTORE_TYPE=etcdv2"}
	if stderr := c.fails("get", "ippools"); !strings.Contains(stderr, "etcdv2 is not supported, use etcdv3") {
		t.Errorf("etcdv2: %s", stderr)
	}
}

// TLS etcd through each way of configuring calicoctl: flags, ETCD_* env and
// the v3 and v1 client config files.
func TestTLSConfigurations(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithTLS())
	bin := filepath.Join(testbin.Dir(t), "calicoctl")
	ep := strings.Join(srv.Endpoints, ",")
	dir := t.TempDir()
	v3 := filepath.Join(dir, "v3.cfg")
	os.WriteFile(v3, []byte("apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nmetadata:\nspec:\n  datastoreType: etcdv3\n  etcdEndpoints: "+ep+
		"\n  etcdKeyFile: "+srv.KeyFile+"\n  etcdCertFile: "+srv.CertFile+"\n  etcdCACertFile: "+srv.CACertFile+"\n"), 0o600)
	v1 := filepath.Join(dir, "v1.cfg")
	os.WriteFile(v1, []byte("apiVersion: v1\nkind: calicoApiConfig\nmetadata:\nspec:\n  datastoreType: \"etcdv3\"\n  etcdEndpoints: \""+ep+
		"\"\n  etcdKeyFile: \""+srv.KeyFile+"\"\n  etcdCertFile: \""+srv.CertFile+"\"\n  etcdCACertFile: \""+srv.CACertFile+"\"\n"), 0o600)
	tlsEnv := []string{"ETCD_ENDPOINTS=" + ep, "ETCD_KEY_FILE=" + srv.KeyFile, "ETCD_CERT_FILE=" + srv.CertFile, "ETCD_CA_CERT_FILE=" + srv.CACertFile}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flags", nil, []string{"--etcd-endpoints", ep, "--etcd-key-file", srv.KeyFile, "--etcd-cert-file", srv.CertFile, "--etcd-ca-cert-file", srv.CACertFile}},
		{"env", tlsEnv, nil},
		{"v3 config", nil, []string{"--config", v3}},
		{"v1 config", nil, []string{"-c", v1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"get", "ippools", "-o", "name"}, tc.args...)
			cmd := exec.Command(bin, args...)
			cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, tc.env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("calicoctl %v: %v\n%s", args, err, out)
			}
		})
	}
	// Without the CA the server's certificate is not trusted: a clear error.
	cmd := exec.Command(bin, "get", "ippools", "--etcd-endpoints", ep)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "certificate") {
		t.Errorf("no CA: %v %s", err, out)
	}
}
