package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// etcdResource is one resource value captured from a real Calico v3.31
// etcd datastore (testdata/reference/calico-3.31-etcd-layout.txt).
type etcdResource struct {
	key, plural, namespace, name string
	value                        []byte
}

func loadEtcdResources(t *testing.T) []etcdResource {
	t.Helper()
	f, err := os.Open("testdata/reference/calico-3.31-etcd-layout.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []etcdResource
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var key string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "/"):
			key = line
		case strings.HasPrefix(key, "/calico/resources/v3/projectcalico.org/"):
			parts := strings.Split(strings.TrimPrefix(key, "/calico/resources/v3/projectcalico.org/"), "/")
			r := etcdResource{key: key, plural: parts[0], name: parts[len(parts)-1], value: []byte(line)}
			if len(parts) == 3 {
				r.namespace = parts[1]
			}
			out = append(out, r)
			key = ""
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found only %d resources in the reference", len(out))
	}
	return out
}

// TestEtcdValuesRoundTrip decodes every resource value real Calico wrote to
// etcd and checks that marshalling it again gives the identical bytes: field
// names, order, omitempty and the number/string forms all match.
func TestEtcdValuesRoundTrip(t *testing.T) {
	for _, r := range loadEtcdResources(t) {
		t.Run(r.key, func(t *testing.T) {
			docs, err := Decode(r.value)
			if err != nil || len(docs) != 1 || docs[0].Err != nil {
				t.Fatalf("Decode: %v %+v", err, docs)
			}
			d := docs[0]
			info, ok := LookupKind(r.plural)
			if !ok || info.Kind != d.Kind {
				t.Fatalf("kind %q does not match the key's plural %q", d.Kind, r.plural)
			}
			if d.Name != r.name || d.Namespace != r.namespace {
				t.Errorf("name %s/%s, key says %s/%s", d.Namespace, d.Name, r.namespace, r.name)
			}
			got, err := json.Marshal(d.Object)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, r.value) {
				t.Errorf("re-marshalled value differs:\n got: %s\nwant: %s", got, r.value)
			}
			// What Calico stored is already defaulted: defaulting again must
			// not change it.
			d.Object.Default()
			again, _ := json.Marshal(d.Object)
			if !bytes.Equal(again, r.value) {
				t.Errorf("Default changed a stored value:\n got: %s\nwant: %s", again, r.value)
			}
		})
	}
}

// decodeFile reads a YAML file, failing the test if it cannot, and
// decodes, defaults and validates its documents.
func decodeFile(t *testing.T, path string) ([]Document, error) {
	t.Helper()
	in, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return DecodeAndValidate(in)
}

// TestReferenceYAMLShapes applies the YAML documents that produced the
// reference etcd contents (decode, Default, Validate) and compares the
// resulting spec and status JSON byte for byte with what Calico stored.
func TestReferenceYAMLShapes(t *testing.T) {
	stored := map[string]etcdResource{}
	for _, r := range loadEtcdResources(t) {
		// Calico's etcd backend stores default-tier policies under
		// "default.<name>"; that prefix is the datastore's business.
		stored[r.plural+"/"+strings.TrimPrefix(r.name, "default.")] = r
	}
	files, err := filepath.Glob("testdata/reference/*.yaml")
	if err != nil || len(files) != 5 {
		t.Fatalf("reference YAML files: %v %v", files, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			docs, err := decodeFile(t, file)
			if err != nil || len(docs) != 1 || docs[0].Err != nil {
				t.Fatalf("DecodeAndValidate: %v %+v", err, docs)
			}
			info, _ := LookupKind(docs[0].Kind)
			ref, ok := stored[info.Plural+"/"+docs[0].Name]
			if !ok {
				t.Fatalf("no reference value for %s/%s", info.Plural, docs[0].Name)
			}
			got, err := json.Marshal(docs[0].Object)
			if err != nil {
				t.Fatal(err)
			}
			wantPrefix := `{"kind":"` + docs[0].Kind + `","apiVersion":"projectcalico.org/v3","metadata":{"name":"` + docs[0].Name + `"`
			if !bytes.HasPrefix(got, []byte(wantPrefix)) {
				t.Errorf("header %s, want prefix %s", got, wantPrefix)
			}
			var gotParts, refParts map[string]json.RawMessage
			if err := json.Unmarshal(got, &gotParts); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(ref.value, &refParts); err != nil {
				t.Fatal(err)
			}
			for _, part := range []string{"spec", "status"} {
				if !bytes.Equal(gotParts[part], refParts[part]) {
					t.Errorf("%s:\n got: %s\nwant: %s", part, gotParts[part], refParts[part])
				}
			}
		})
	}
}

// TestExamplesDecodeAndValidate applies every user document of the project's
// examples (testdata/examples, copied from the shared examples).
func TestExamplesDecodeAndValidate(t *testing.T) {
	want := map[string][]string{
		"001-legacy-v1-ippool.yaml": {"IPPool/192-168-0-0-16"},
		"003-bgpconfiguration.yaml": {"BGPConfiguration/default"},
		"003-bgppeers.yaml":         {"BGPPeer/peer1", "BGPPeer/peer2"},
		"003-ippools.yaml":          {"IPPool/ippool1", "IPPool/ippool2"},
	}
	files, err := filepath.Glob("testdata/examples/*.yaml")
	if err != nil || len(files) != len(want) {
		t.Fatalf("example files: %v %v", files, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			docs, err := decodeFile(t, file)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, d := range docs {
				if d.Err != nil {
					t.Errorf("document %d: %v", i, d.Err)
				}
				if d.Index != i {
					t.Errorf("document %d has Index %d", i, d.Index)
				}
				if d.Object.Type().APIVersion != GroupVersion {
					t.Errorf("document %d apiVersion %q", i, d.Object.Type().APIVersion)
				}
				got = append(got, d.Kind+"/"+d.Name)
			}
			if w := want[filepath.Base(file)]; !slices.Equal(got, w) {
				t.Errorf("documents %q, want %q", got, w)
			}
		})
	}
}

// TestExampleContents pins what the examples mean once applied.
func TestExampleContents(t *testing.T) {
	read := func(name string) []Document {
		t.Helper()
		docs, err := decodeFile(t, "testdata/examples/"+name)
		if err != nil {
			t.Fatal(err)
		}
		return docs
	}
	legacy := read("001-legacy-v1-ippool.yaml")[0].Object.(*IPPool)
	if s := legacy.Spec; s.CIDR != "192.168.0.0/16" || s.IPIPMode != IPIPModeAlways || !s.NATOutgoing || s.Disabled {
		t.Errorf("legacy pool spec %+v", s)
	}
	pools := read("003-ippools.yaml")
	p1, p2 := pools[0].Object.(*IPPool), pools[1].Object.(*IPPool)
	if p1.Spec.IPIPMode != IPIPModeNever || p2.Spec.IPIPMode != IPIPModeAlways || p1.Spec.Disabled || p2.Spec.Disabled {
		t.Errorf("pools %+v %+v", p1.Spec, p2.Spec)
	}
	if p2.Spec.NodeSelector != `calico == "2"` {
		t.Errorf("pool 2 nodeSelector %q", p2.Spec.NodeSelector)
	}
	bgp := read("003-bgpconfiguration.yaml")[0].Object.(*BGPConfiguration)
	if bgp.Spec.NodeToNodeMeshEnabled == nil || *bgp.Spec.NodeToNodeMeshEnabled || bgp.Spec.ASNumber == nil || *bgp.Spec.ASNumber != 63400 {
		t.Errorf("bgp configuration %+v", bgp.Spec)
	}
}

// docSummary is what a test expects of one Document.
type docSummary struct {
	Index      int
	Kind, Name string
	Err        string // exact Err.Error(), "" for none
}

func summarize(docs []Document) []docSummary {
	out := make([]docSummary, len(docs))
	for i, d := range docs {
		out[i] = docSummary{Index: d.Index, Kind: d.Kind, Name: d.Name}
		if d.Err != nil {
			out[i].Err = d.Err.Error()
		}
	}
	return out
}

const pool = "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  name: %s\nspec:\n  cidr: %s\n"

func TestDecode(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []docSummary
	}{
		{"empty input", "", nil},
		{"only separators and comments", "---\n# nothing\n---\n\n--- # more\n", nil},
		{"yaml multi-document", "---\n" + fmt.Sprintf(pool, "a", "10.0.0.0/16") + "--- # second\n" + fmt.Sprintf(pool, "b", "10.1.0.0/16"), []docSummary{
			{0, "IPPool", "a", ""}, {1, "IPPool", "b", ""},
		}},
		{"crd version", "apiVersion: crd.projectcalico.org/v1\nkind: GlobalNetworkSet\nmetadata: {name: g}\nspec: {nets: [10.0.0.0/8]}", []docSummary{
			{0, "GlobalNetworkSet", "g", ""},
		}},
		{"json object", `{"apiVersion":"projectcalico.org/v3","kind":"Profile","metadata":{"name":"p"}}`, []docSummary{
			{0, "Profile", "p", ""},
		}},
		{"json array", `[{"apiVersion":"projectcalico.org/v3","kind":"Profile","metadata":{"name":"a"}},
			{"apiVersion":"projectcalico.org/v3","kind":"Tier","metadata":{"name":"b"}}]`, []docSummary{
			{0, "Profile", "a", ""}, {1, "Tier", "b", ""},
		}},
		{"concatenated json", `{"apiVersion":"projectcalico.org/v3","kind":"Profile","metadata":{"name":"a"}}
{"apiVersion":"projectcalico.org/v3","kind":"Profile","metadata":{"name":"b"}}`, []docSummary{
			{0, "Profile", "a", ""}, {1, "Profile", "b", ""},
		}},
		{"list expands in place", `
apiVersion: v1
kind: List
items:
- {apiVersion: projectcalico.org/v3, kind: Profile, metadata: {name: a}}
- {apiVersion: projectcalico.org/v3, kind: Nope, metadata: {name: b}}
- {apiVersion: projectcalico.org/v3, kind: Profile, metadata: {name: c}}
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: d}
`, []docSummary{
			{0, "Profile", "a", ""},
			{1, "Nope", "b", `unknown kind "Nope"`},
			{2, "Profile", "c", ""},
			{3, "Profile", "d", ""},
		}},
		{"typed list with bad item", `
apiVersion: projectcalico.org/v3
kind: IPPoolList
metadata: {resourceVersion: "12"}
items:
- metadata: {name: a}
  spec: {cidr: 10.0.0.0/16}
- metadata: {name: b}
  spec: {cidr: 10.1.0.0/16, natOutgoin: true}
- kind: BGPPeer
  metadata: {name: c}
`, []docSummary{
			{0, "IPPool", "a", ""},
			{1, "IPPool", "b", "spec.natOutgoin: unknown field"},
			{2, "BGPPeer", "c", "a IPPoolList can only hold IPPool items, not BGPPeer"},
		}},
		{"list with unknown field", "apiVersion: projectcalico.org/v3\nkind: IPPoolList\nitem: []\n", []docSummary{
			{0, "IPPoolList", "", "IPPoolList: item: unknown field"},
		}},
		{"nested list", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: projectcalico.org/v3, kind: IPPoolList, items: []}\n", []docSummary{
			{0, "IPPoolList", "", "kind IPPoolList: lists cannot be nested"},
		}},
		{"malformed yaml keeps later documents", "apiVersion: projectcalico.org/v3\nkind: Profile\nmetadata: {name: a}\n---\nkind: IPPool\nmetadata:\n  name: [x\n---\napiVersion: projectcalico.org/v3\nkind: Profile\nmetadata: {name: c}\n", []docSummary{
			{0, "Profile", "a", ""},
			{1, "IPPool", "", "parse document at line 5: yaml: line 7: did not find expected ',' or ']'"},
			{2, "Profile", "c", ""},
		}},
		{"unknown fields everywhere", `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: p, colour: red}
spec:
  ingress: [{action: Allow, sourc: {}}]
  selecter: all()
extra: 1
`, []docSummary{
			{0, "GlobalNetworkPolicy", "p", "extra: unknown field; metadata.colour: unknown field; spec.ingress[0].sourc: unknown field; spec.selecter: unknown field"},
		}},
		{"wrong types", `
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: p, labels: {a: 1}}
spec: {cidr: [10.0.0.0/8], blockSize: "26", natOutgoing: "yes", disabled: yes}
`, []docSummary{
			{0, "IPPool", "p", `metadata.labels[a]: "1" must be a string: quote it; spec.blockSize: "26" must be a number; spec.cidr: must be a string; spec.natOutgoing: "yes" must be true or false`},
		}},
		{"yaml booleans for names", "apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: no}\n", []docSummary{
			{0, "Node", "", "metadata.name: false must be a string: quote it"},
		}},
		{"bad custom values", `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: p}
spec:
  ingress:
  - action: Allow
    protocol: TCP
    destination: {ports: [80, "90:80", "a:b:c", 70000]}
`, []docSummary{
			{0, "GlobalNetworkPolicy", "p", `spec.ingress[0].destination.ports[1]: port range 90:80 is reversed: the first port must not exceed the second; ` +
				`spec.ingress[0].destination.ports[2]: "a:b:c" is not a port, a port range lo:hi or a port name; ` +
				`spec.ingress[0].destination.ports[3]: port 70000 is out of range: must be 0-65535`},
		}},
		{"bad duration and AS number", `
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: p}
spec: {asNumber: 1.10, maxRestartTime: 90}
`, []docSummary{
			{0, "BGPPeer", "p", `spec.asNumber: AS number 1.1 is not valid: quote the dotted form ("1.10"); spec.maxRestartTime: duration must be a string such as "90s" or "1m30s"`},
		}},
		{"unknown kind", "apiVersion: projectcalico.org/v3\nkind: IPPoll\nmetadata: {name: p}\n", []docSummary{
			{0, "IPPoll", "p", `unknown kind "IPPoll"`},
		}},
		{"kind in wrong case", "apiVersion: projectcalico.org/v3\nkind: ippool\nmetadata: {name: p}\n", []docSummary{
			{0, "ippool", "p", `unknown kind "ippool" (did you mean IPPool?)`},
		}},
		{"bad apiVersion", "apiVersion: projectcalico.org/v2\nkind: IPPool\nmetadata: {name: p}\n", []docSummary{
			{0, "IPPool", "p", `unsupported apiVersion "projectcalico.org/v2": use projectcalico.org/v3 (or crd.projectcalico.org/v1)`},
		}},
		{"missing apiVersion", "kind: IPPool\nmetadata: {name: p}\n", []docSummary{
			{0, "IPPool", "p", "apiVersion is missing: use projectcalico.org/v3"},
		}},
		{"missing kind", "apiVersion: projectcalico.org/v3\nmetadata: {name: p}\n", []docSummary{
			{0, "", "p", "kind is missing"},
		}},
		{"not an object", "- 1\n- 2\n", []docSummary{
			{0, "", "", "a resource must be an object with apiVersion, kind, metadata and spec"},
			{1, "", "", "a resource must be an object with apiVersion, kind, metadata and spec"},
		}},
		{"duplicate keys", "apiVersion: projectcalico.org/v3\nkind: IPPool\nkind: IPPool\n", []docSummary{
			{0, "IPPool", "", `parse document at line 1: yaml: unmarshal errors:
  line 3: key "kind" already set in map`},
		}},
		{"v3 kind with v1 apiVersion", "apiVersion: v1\nkind: IPPool\nmetadata: {name: p}\n", []docSummary{
			{0, "IPPool", "p", "apiVersion v1 is the calicoctl v1 format: write kind IPPool with apiVersion projectcalico.org/v3"},
		}},
		{"v1 policy", "apiVersion: v1\nkind: policy\nmetadata: {name: p}\nspec: {selector: all()}\n", []docSummary{
			{0, "policy", "p", "calicoctl v1 kind policy cannot be converted automatically: convert it to projectcalico.org/v3"},
		}},
		{"client config", "apiVersion: v1\nkind: calicoApiConfig\nmetadata:\nspec: {datastoreType: etcdv2}\n", []docSummary{
			{0, "calicoApiConfig", "", "kind calicoApiConfig is a calicoctl client configuration, not a resource: pass it with --config"},
		}},
		{"v1 pool list", `
apiVersion: v1
kind: ipPoolList
items:
- metadata: {cidr: 10.0.0.0/16}
- metadata: {cidr: "fd00::/64"}
  spec: {ipip: {enabled: true, mode: sometimes}}
`, []docSummary{
			{0, "IPPool", "10-0-0-0-16", ""},
			{1, "IPPool", "", `spec.ipip.mode: "sometimes" must be always or cross-subnet`},
		}},
		{"kubectl export metadata", `
apiVersion: crd.projectcalico.org/v1
kind: IPPool
metadata:
  annotations: {kubectl.kubernetes.io/last-applied-configuration: "{}"}
  creationTimestamp: 2026-11-21T22:19:18Z
  generation: 1
  name: default-ipv4-ippool
  resourceVersion: "1234"
  uid: 3f249d13-6a4d-4cad-94c4-37eed44e5aec
  managedFields: [{manager: kubectl, fieldsV1: {f:spec: {}}}]
spec: {cidr: 192.168.0.0/16}
`, []docSummary{{0, "IPPool", "default-ipv4-ippool", ""}}},
		{"crlf line endings", "apiVersion: projectcalico.org/v3\r\nkind: Profile\r\nmetadata: {name: a}\r\n---\r\napiVersion: projectcalico.org/v3\r\nkind: Profile\r\nmetadata: {name: b}\r\n", []docSummary{
			{0, "Profile", "a", ""}, {1, "Profile", "b", ""},
		}},
		{"not utf-8 is per input", "\xff\xfe", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := Decode([]byte(tc.in))
			if tc.name == "not utf-8 is per input" {
				if err == nil {
					t.Fatal("Decode accepted non-UTF-8 input")
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			got := summarize(docs)
			if !slices.Equal(got, tc.want) {
				t.Errorf("documents:\n got: %+v\nwant: %+v", got, tc.want)
			}
			for _, d := range docs {
				if (d.Object == nil) == (d.Err == nil) {
					t.Errorf("document %d: Object %v with Err %v", d.Index, d.Object, d.Err)
				}
			}
		})
	}
}

// TestDecodeErrorsAreFieldErrors checks that field-level decode problems can
// be inspected as a ValidationError.
func TestDecodeErrorsAreFieldErrors(t *testing.T) {
	docs, _ := Decode([]byte("apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/8, blocksize: x, bogus: 1}\n"))
	var ve ValidationError
	if len(docs) != 1 || !errors.As(docs[0].Err, &ve) {
		t.Fatalf("documents %+v", docs)
	}
	if len(ve) != 2 || ve[0].Path != "spec.blocksize" || ve[1].Path != "spec.bogus" {
		t.Errorf("field errors %+v", ve)
	}
}

func TestDecodeNormalises(t *testing.T) {
	docs, err := Decode([]byte(`
apiVersion: crd.projectcalico.org/v1
kind: IPPool
metadata: {name: p}
spec: {CIDR: 10.0.0.0/8, disable: true}
`))
	if err != nil || len(docs) != 1 || docs[0].Err != nil {
		t.Fatalf("Decode: %v %+v", err, docs)
	}
	p := docs[0].Object.(*IPPool)
	if p.APIVersion != GroupVersion || p.Kind != "IPPool" {
		t.Errorf("type %+v", p.TypeMeta)
	}
	// Field names match case-insensitively as in calicoctl, and "disable"
	// is read as "disabled".
	if p.Spec.CIDR != "10.0.0.0/8" || !p.Spec.Disabled {
		t.Errorf("spec %+v", p.Spec)
	}
}

func TestDecodeAndValidate(t *testing.T) {
	docs, err := DecodeAndValidate([]byte(`
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {namespace: ns1}
spec: {orchestrator: k8s, node: n1, pod: web-0, endpoint: eth0, interfaceName: cali1}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: p}
spec: {cidr: 10.0.0.0/33}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []docSummary{
		{0, "WorkloadEndpoint", "n1-k8s-web--0-eth0", ""},
		{1, "IPPool", "p", `spec.cidr: "10.0.0.0/33" is not a valid CIDR`},
	}
	if got := summarize(docs); !slices.Equal(got, want) {
		t.Errorf("documents:\n got: %+v\nwant: %+v", got, want)
	}
	w := docs[0].Object.(*WorkloadEndpoint)
	if w.Labels[LabelNamespace] != "ns1" || w.Labels[LabelOrchestrator] != "k8s" {
		t.Errorf("labels %v", w.Labels)
	}
}

func TestLegacyConversions(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"pool cross-subnet, disabled", `
apiVersion: v1
kind: ipPool
metadata: {cidr: 10.1.2.3/16}
spec: {ipip: {enabled: true, mode: cross-subnet}, disabled: true}`,
			`{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"10-1-0-0-16"},"spec":{"cidr":"10.1.0.0/16","vxlanMode":"Never","ipipMode":"CrossSubnet","disabled":true,"blockSize":26,"nodeSelector":"all()","allowedUses":["Workload","Tunnel"],"assignmentMode":"Automatic"}}`},
		{"pool ipip disabled, ipv6", `
apiVersion: v1
kind: ipPool
metadata: {cidr: "fd00:0::/64"}
spec: {ipip: {enabled: false, mode: always}, nat-outgoing: true}`,
			`{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"fd00---64"},"spec":{"cidr":"fd00::/64","vxlanMode":"Never","ipipMode":"Never","natOutgoing":true,"blockSize":122,"nodeSelector":"all()","allowedUses":["Workload","Tunnel"],"assignmentMode":"Automatic"}}`},
		{"global peer", `
apiVersion: v1
kind: bgpPeer
metadata: {scope: global, peerIP: 192.168.1.1}
spec: {asNumber: 64567}`,
			`{"kind":"BGPPeer","apiVersion":"projectcalico.org/v3","metadata":{"name":"192-168-1-1"},"spec":{"peerIP":"192.168.1.1","asNumber":64567}}`},
		{"node peer", `
apiVersion: v1
kind: bgpPeer
metadata: {scope: node, node: Rack1.Host_A, peerIP: "fd00::1"}
spec: {asNumber: 64567}`,
			`{"kind":"BGPPeer","apiVersion":"projectcalico.org/v3","metadata":{"name":"rack1.host-a.fd00-0000-0000-0000-0000-0000-0000-0001"},"spec":{"node":"rack1.host-a","peerIP":"fd00::1","asNumber":64567}}`},
		{"node", `
apiVersion: v1
kind: node
metadata: {name: Node1}
spec: {bgp: {asNumber: 64512, ipv4Address: 10.0.0.5/24}}`,
			`{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"node1"},"spec":{"bgp":{"asNumber":64512,"ipv4Address":"10.0.0.5/24"}},"status":{}}`},
		{"host endpoint", `
apiVersion: v1
kind: hostEndpoint
metadata: {name: eth0, node: host1, labels: {role: edge}}
spec:
  interfaceName: eth0
  expectedIPs: ["fd00::5", 10.0.0.5]
  profiles: [k8s_ns.default, Web]
  ports: [{name: http, protocol: tcp, port: 80}]`,
			`{"kind":"HostEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":"host1.eth0","labels":{"role":"edge"}},"spec":{"node":"host1","interfaceName":"eth0","expectedIPs":["10.0.0.5","fd00::5"],"profiles":["kns.default","web-a8323a2a"],"ports":[{"name":"http","protocol":"TCP","port":80}]}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := Decode([]byte(tc.in))
			if err != nil || len(docs) != 1 || docs[0].Err != nil {
				t.Fatalf("Decode: %v %+v", err, docs)
			}
			got, err := json.Marshal(docs[0].Object)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("converted:\n got: %s\nwant: %s", got, tc.want)
			}
			if docs[0].Name != docs[0].Object.Meta().Name {
				t.Errorf("Document.Name %q, object name %q", docs[0].Name, docs[0].Object.Meta().Name)
			}
		})
	}
}

func TestMarshal(t *testing.T) {
	p := &IPPool{ObjectMeta: ObjectMeta{Name: "pool1"}, Spec: IPPoolSpec{CIDR: "10.244.0.0/16", NATOutgoing: true}}
	p.Default()
	y, err := Marshal(p, "yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantYAML := `apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  name: pool1
spec:
  allowedUses:
  - Workload
  - Tunnel
  assignmentMode: Automatic
  blockSize: 26
  cidr: 10.244.0.0/16
  ipipMode: Never
  natOutgoing: true
  nodeSelector: all()
  vxlanMode: Never
`
	if string(y) != wantYAML {
		t.Errorf("yaml:\n%s\nwant:\n%s", y, wantYAML)
	}
	if p.Kind != "" || p.APIVersion != "" {
		t.Errorf("Marshal changed the object's TypeMeta to %+v", p.TypeMeta)
	}
	j, err := Marshal(&Tier{ObjectMeta: ObjectMeta{Name: "t"}}, "json")
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := "{\n  \"kind\": \"Tier\",\n  \"apiVersion\": \"projectcalico.org/v3\",\n  \"metadata\": {\n    \"name\": \"t\"\n  },\n  \"spec\": {}\n}\n"
	if string(j) != wantJSON {
		t.Errorf("json:\n%s\nwant:\n%s", j, wantJSON)
	}
	// What Marshal writes decodes back to the same object.
	docs, err := DecodeAndValidate(y)
	if err != nil || len(docs) != 1 || docs[0].Err != nil {
		t.Fatalf("decode marshalled yaml: %v %+v", err, docs)
	}
	if _, err := Marshal(p, "xml"); err == nil {
		t.Error("Marshal accepted format xml")
	}
}

// TestEveryKindRoundTrips marshals a populated object of every kind and
// decodes it again, checking that nothing is lost and that the strict
// decoder knows every field the types write.
func TestEveryKindRoundTrips(t *testing.T) {
	for _, k := range Kinds() {
		t.Run(k.Kind, func(t *testing.T) {
			obj := k.New()
			fill(reflectValue(obj).Elem(), 0)
			obj.Type().APIVersion, obj.Type().Kind = GroupVersion, k.Kind
			b, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			docs, err := Decode(b)
			if err != nil || len(docs) != 1 || docs[0].Err != nil {
				t.Fatalf("Decode(%s): %v %+v", b, err, docs)
			}
			again, err := json.Marshal(docs[0].Object)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, again) {
				t.Errorf("round trip differs:\n got: %s\nwant: %s", again, b)
			}
		})
	}
}
