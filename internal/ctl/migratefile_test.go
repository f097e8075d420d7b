package ctl

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/errtest"
)

var update = flag.Bool("update", false, "rewrite testdata/migrate/*.golden from the current output")

// calicoctlExport is a file in the exact layout real calicoctl v3.31's
// `datastore migrate export` writes (sections in its kind order, Calico's
// staged-policy and BGPFilter lists, creationTimestamp: null, the
// ClusterInformation and IPAM JSON as Go's MarshalIndent prints them).
const calicoctlExport = "testdata/migrate/calicoctl-v3.31.export"

func obj(t *testing.T, y string) api.Object {
	t.Helper()
	docs, err := api.Decode([]byte(y))
	if err != nil || len(docs) != 1 || docs[0].Err != nil {
		t.Fatalf("decode %q: %v %+v", y, err, docs)
	}
	return docs[0].Object
}

// TestExportLists: what an export keeps, drops and renames, from each
// datastore type.
func TestExportLists(t *testing.T) {
	etcdNode := `{"apiVersion":"projectcalico.org/v3","kind":"Node","metadata":{"name":"etcd-1","uid":"u1","resourceVersion":"7","creationTimestamp":"2026-01-01T00:00:00Z","labels":{"rack":"r1"}},
		"spec":{"orchRefs":[{"nodeName":"k8s-1","orchestrator":"k8s"}]}}`
	sameNode := `{"apiVersion":"projectcalico.org/v3","kind":"Node","metadata":{"name":"k8s-2"},"spec":{"orchRefs":[{"nodeName":"k8s-2","orchestrator":"k8s"}]}}`
	tests := []struct {
		name string
		src  string
		in   map[string][]string // kind -> objects (JSON)
		// want is each kept object as "Kind ns/name field=value", in order.
		want        []string
		wantRenames map[string]string
		wantErr     string
	}{{
		name: "etcd: nodes and what names them follow the Kubernetes name",
		src:  datastore.TypeEtcd,
		in: map[string][]string{
			"BGPPeer":            {`{"apiVersion":"projectcalico.org/v3","kind":"BGPPeer","metadata":{"name":"tor"},"spec":{"node":"etcd-1","peerIP":"10.0.0.254","asNumber":64600}}`},
			"HostEndpoint":       {`{"apiVersion":"projectcalico.org/v3","kind":"HostEndpoint","metadata":{"name":"h"},"spec":{"node":"etcd-1","interfaceName":"eth0"}}`},
			"Node":               {etcdNode, sameNode},
			"BGPConfiguration":   {`{"apiVersion":"projectcalico.org/v3","kind":"BGPConfiguration","metadata":{"name":"node.etcd-1"},"spec":{}}`, `{"apiVersion":"projectcalico.org/v3","kind":"BGPConfiguration","metadata":{"name":"default"},"spec":{}}`},
			"FelixConfiguration": {`{"apiVersion":"projectcalico.org/v3","kind":"FelixConfiguration","metadata":{"name":"node.etcd-1"},"spec":{}}`, `{"apiVersion":"projectcalico.org/v3","kind":"FelixConfiguration","metadata":{"name":"node.gone"},"spec":{}}`},
		},
		want: []string{
			"BGPPeer /tor node=k8s-1", "HostEndpoint /h node=k8s-1",
			"Node /k8s-1 labels=map[rack:r1]", "Node /k8s-2 labels=map[]",
			"BGPConfiguration /node.k8s-1", "BGPConfiguration /default",
			"FelixConfiguration /node.k8s-1", "FelixConfiguration /node.gone",
		},
		wantRenames: map[string]string{"etcd-1": "k8s-1", "k8s-2": "k8s-2"},
	}, {
		name: "etcd: a node without a k8s orchRef cannot be exported",
		src:  datastore.TypeEtcd,
		in: map[string][]string{
			"Node": {`{"apiVersion":"projectcalico.org/v3","kind":"Node","metadata":{"name":"bare"},"spec":{}}`},
		},
		wantErr: "node bare missing a 'k8s' orchestrator reference",
	}, {
		name: "mirrors of Kubernetes policies are left out",
		src:  datastore.TypeEtcd,
		in: map[string][]string{
			"NetworkPolicy": {
				`{"apiVersion":"projectcalico.org/v3","kind":"NetworkPolicy","metadata":{"name":"knp.default.web","namespace":"shop"},"spec":{"selector":"all()"}}`,
				`{"apiVersion":"projectcalico.org/v3","kind":"NetworkPolicy","metadata":{"name":"mine","namespace":"shop"},"spec":{"selector":"all()"}}`,
			},
			"GlobalNetworkPolicy": {
				`{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkPolicy","metadata":{"name":"kanp.adminnetworkpolicy.x"},"spec":{"tier":"adminnetworkpolicy"}}`,
				`{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkPolicy","metadata":{"name":"kbanp.baselineadminnetworkpolicy.y"},"spec":{"tier":"baselineadminnetworkpolicy"}}`,
				`{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkPolicy","metadata":{"name":"allow-dns"},"spec":{}}`,
			},
		},
		want:        []string{"GlobalNetworkPolicy /allow-dns", "NetworkPolicy shop/mine"},
		wantRenames: map[string]string{},
	}, {
		name: "kubernetes: computed annotation, default-allow profile and finished pods are left out",
		src:  datastore.TypeKubernetes,
		in: map[string][]string{
			"Node": {`{"apiVersion":"projectcalico.org/v3","kind":"Node","metadata":{"name":"k8s-1","labels":{"kubernetes.io/hostname":"k8s-1"},"annotations":{"projectcalico.org/kube-labels":"{\"kubernetes.io/hostname\":\"k8s-1\"}"}},"spec":{"orchRefs":[{"nodeName":"k8s-1","orchestrator":"k8s"}]}}`},
			"Profile": {
				`{"apiVersion":"projectcalico.org/v3","kind":"Profile","metadata":{"name":"projectcalico-default-allow"},"spec":{}}`,
				`{"apiVersion":"projectcalico.org/v3","kind":"Profile","metadata":{"name":"kns.shop"},"spec":{}}`,
			},
			"WorkloadEndpoint": {
				`{"apiVersion":"projectcalico.org/v3","kind":"WorkloadEndpoint","metadata":{"name":"k8s--1-k8s-done-eth0","namespace":"shop"},"spec":{"node":"k8s-1","pod":"done","endpoint":"eth0","orchestrator":"k8s","interfaceName":"cali1"}}`,
				`{"apiVersion":"projectcalico.org/v3","kind":"WorkloadEndpoint","metadata":{"name":"k8s--1-k8s-web-eth0","namespace":"shop"},"spec":{"node":"k8s-1","pod":"web","endpoint":"eth0","orchestrator":"k8s","interfaceName":"cali2","ipNetworks":["10.0.0.1/32"]}}`,
			},
		},
		want:        []string{"Node /k8s-1 labels=map[kubernetes.io/hostname:k8s-1] annotations=map[]", "Profile /kns.shop", "WorkloadEndpoint shop/k8s--1-k8s-web-eth0"},
		wantRenames: map[string]string{},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kinds := migrationKinds
			if tc.src == datastore.TypeKubernetes {
				kinds = append(append([]string{}, migrationKinds...), computedKinds...)
			}
			var lists []kindList
			for _, k := range kinds {
				var items []api.Object
				for _, y := range tc.in[k] {
					items = append(items, obj(t, y))
				}
				lists = append(lists, kindList{kind: k, revision: 9, items: items})
			}
			out, renames, err := exportLists(tc.src, lists)
			if !errtest.Want(t, err, tc.wantErr) {
				return
			}
			if len(out) != len(kinds) {
				t.Errorf("%d sections, want one per kind (%d)", len(out), len(kinds))
			}
			var got []string
			for _, l := range out {
				for _, o := range l.items {
					m := o.Meta()
					if m.UID != "" || m.ResourceVersion != "" || m.CreationTimestamp != "" {
						t.Errorf("%s %s keeps metadata the target assigns: %+v", l.kind, m.Name, m)
					}
					s := l.kind + " " + m.Namespace + "/" + m.Name
					switch o := o.(type) {
					case *api.BGPPeer:
						s += " node=" + o.Spec.Node
					case *api.HostEndpoint:
						s += " node=" + o.Spec.Node
					case *api.Node:
						s += " labels=" + strings.TrimSpace(fmtMap(o.Labels))
						if tc.src == datastore.TypeKubernetes {
							s += " annotations=" + fmtMap(o.Annotations)
						}
					}
					got = append(got, s)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("kept:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if fmtMap(renames) != fmtMap(tc.wantRenames) {
				t.Errorf("renames %v, want %v", renames, tc.wantRenames)
			}
		})
	}
}

func fmtMap(m map[string]string) string {
	b, _ := json.Marshal(m)
	s := string(b)
	s = strings.NewReplacer("{", "map[", "}", "]", `"`, "", ",", " ").Replace(s)
	if s == "null" {
		return "map[]"
	}
	return s
}

func TestTitleIptablesActions(t *testing.T) {
	s := api.FelixConfigurationSpec{DefaultEndpointToHostAction: "ACCEPT", IptablesFilterAllowAction: "return", IptablesFilterDenyAction: "Reject"}
	titleIptablesActions(&s)
	if s.DefaultEndpointToHostAction != "Accept" || s.IptablesFilterAllowAction != "Return" || s.IptablesFilterDenyAction != "Reject" || s.IptablesMangleAllowAction != "" {
		t.Errorf("got %+v", s)
	}
}

// TestMigrationFileLayout: what export writes, byte for byte, for a small
// datastore: calicoctl's layout (a <Kind>List per kind each ended by
// "---", "===", the ClusterInformation as indented JSON, "===", the IPAM
// sections with calicoctl's Key/Value/TTL fields).
func TestMigrationFileLayout(t *testing.T) {
	ready := false
	ci := &api.ClusterInformation{}
	ci.Kind, ci.APIVersion, ci.Name = "ClusterInformation", api.GroupVersion, "default"
	ci.Spec.ClusterGUID, ci.Spec.CalicoVersion, ci.Spec.DatastoreReady = "2f0a5c9d8e7b4a6c9d1e3f5a7b9c1d3e", "v3.31.0", &ready
	pool := obj(t, "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.65.0.0/16, blockSize: 26}\n")
	pool.Default()
	f := &migrationFile{
		lists:       []kindList{{kind: "IPPool", revision: 42, items: []api.Object{pool}}, {kind: "BGPPeer", revision: 42}},
		clusterInfo: ci,
		ipam: &ipam.Export{
			BlockAffinities: []ipam.ExportKV{{Key: "/calico/ipam/v2/host/n1/ipv4/block/10.65.0.0-26", Value: json.RawMessage(`{"state":"confirmed","deleted":false}`)}},
			Handles:         []ipam.ExportKV{{Key: "/calico/ipam/v2/handle/h1", Value: json.RawMessage(`{"block":{"10.65.0.0/26":1},"deleted":false}`)}},
			Config:          &ipam.ExportKV{Key: "/calico/ipam/v2/config", Value: json.RawMessage(`{"auto_allocate_blocks":true}`)},
		},
	}
	var b bytes.Buffer
	if err := f.write(&b); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "migrate", "layout.golden")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("export file:\n%s\nwant (%s):\n%s", b.String(), golden, want)
	}
	// It reads back as it was written.
	p, err := parseMigrationFile("layout", b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(p.docs) != 1 || p.docs[0].Kind != "IPPool" || p.clusterInfo.Spec.ClusterGUID != ci.Spec.ClusterGUID || p.ipam.Len() != 3 {
		t.Errorf("read back: %+v %+v %+v", p.docs, p.clusterInfo, p.ipam)
	}
}

// TestParseCalicoctlExport reads the file real calicoctl writes: every
// resource decodes and validates, the empty lists of kinds calico-node
// lacks are dropped, and the cluster's identity and IPAM data are there.
func TestParseCalicoctlExport(t *testing.T) {
	data, err := os.ReadFile(calicoctlExport)
	if err != nil {
		t.Fatal(err)
	}
	p, err := parseMigrationFile(calicoctlExport, data)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := prepare(p.docs, "", true)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, o := range objs {
		counts[o.Type().Kind]++
	}
	want := map[string]int{"IPPool": 1, "BGPPeer": 1, "Tier": 4, "GlobalNetworkPolicy": 2, "GlobalNetworkSet": 1,
		"KubeControllersConfiguration": 1, "NetworkPolicy": 1, "NetworkSet": 1, "Node": 2, "BGPConfiguration": 1, "FelixConfiguration": 2}
	if fmtCounts(counts) != fmtCounts(want) {
		t.Errorf("resources %v, want %v", counts, want)
	}
	if p.clusterInfo.Spec.ClusterGUID != "2f0a5c9d8e7b4a6c9d1e3f5a7b9c1d3e" || p.clusterInfo.Spec.CalicoVersion != "v3.31.0" {
		t.Errorf("cluster information: %+v", p.clusterInfo.Spec)
	}
	if len(p.ipam.BlockAffinities) != 2 || len(p.ipam.Blocks) != 2 || len(p.ipam.Handles) != 3 || p.ipam.Config == nil {
		t.Errorf("IPAM sections: %d affinities, %d blocks, %d handles, config %v", len(p.ipam.BlockAffinities), len(p.ipam.Blocks), len(p.ipam.Handles), p.ipam.Config)
	}
}

func fmtCounts(m map[string]int) string {
	b, _ := json.Marshal(m) // sorted keys
	return string(b)
}

func TestParseMigrationFileErrors(t *testing.T) {
	good, err := os.ReadFile(calicoctlExport)
	if err != nil {
		t.Fatal(err)
	}
	staged := strings.Replace(string(good), "items: []\nkind: StagedNetworkPolicyList",
		"items:\n- apiVersion: projectcalico.org/v3\n  kind: StagedNetworkPolicy\n  metadata: {name: s, namespace: shop}\n  spec: {}\nkind: StagedNetworkPolicyList", 1)
	tests := []struct {
		name, data, want string
	}{
		{"no separators", "apiVersion: projectcalico.org/v3\nkind: IPPoolList\nitems: []\n", "improperly formatted"},
		{"one separator", "items: []\n===\n{}\n", "improperly formatted"},
		{"bad cluster information", "---\n===\nnot json\n===\n{}\n", "cluster information"},
		{"bad IPAM", "---\n===\n{}\n===\n{\"blocks\": 3}\n", "IPAM data"},
		{"staged policies are not dropped silently", staged, "1 StagedNetworkPolicyList items"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseMigrationFile("f", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}
