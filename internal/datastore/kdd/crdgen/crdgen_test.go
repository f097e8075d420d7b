package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/atomicfile"
	"github.com/projectcalico/calico-node/internal/testkit/errtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

var update = flag.Bool("update", false, "rewrite deploy/crds.yaml from the Go types")

func crdsPath() string { return filepath.Join(testbin.RepoRoot(), "deploy", "crds.yaml") }

// TestCRDsUpToDate: deploy/crds.yaml is what the generator makes from
// today's Go types.
func TestCRDsUpToDate(t *testing.T) {
	want, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := atomicfile.WriteFile(crdsPath(), want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(crdsPath())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
			i++
		}
		line := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "<end of file>"
		}
		t.Errorf("deploy/crds.yaml is stale; regenerate it with go test ./internal/datastore/kdd/crdgen -update\nline %d: have %q\n          want %q", i+1, line(gl), line(wl))
	}
}

// TestNamesAreCalicos: the 22 CRDs have exactly the names, kinds, list
// kinds, singulars, scopes and versions real Calico v3.31 serves
// (../testdata/calico-3.31-kdd/01-crds.txt, kubectl's listing of them).
func TestNamesAreCalicos(t *testing.T) {
	f, err := os.Open("../testdata/calico-3.31-kdd/01-crds.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 7 || !strings.HasSuffix(fs[0], "."+group) {
			continue
		}
		want[fs[0]] = strings.Join(fs[1:], " ")
	}
	if len(want) != 22 {
		t.Fatalf("reference lists %d CRDs, want 22", len(want))
	}
	ks, err := kinds()
	if err != nil {
		t.Fatal(err)
	}
	g := newGenerator(calicoRules())
	got := map[string]string{}
	for _, k := range ks {
		c, err := build(g, k)
		if err != nil {
			t.Fatal(err)
		}
		var versions []string
		var storage []string
		for _, v := range c.Spec.Versions {
			if v.Served {
				versions = append(versions, v.Name)
			}
			if v.Storage {
				storage = append(storage, v.Name)
			}
		}
		n := c.Spec.Names
		got[c.Metadata.Name] = strings.Join([]string{n.Kind, n.ListKind, n.Singular, c.Spec.Scope,
			strings.Join(versions, ","), "[" + strings.Join(storage, ",") + "]"}, " ")
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %q, want %q", name, got[name], w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: not a Calico CRD", name)
		}
	}
}

// TestSchemaRules: how Go shapes become schemas.
func TestSchemaRules(t *testing.T) {
	type ownJSON struct{ json.RawMessage }
	type inner struct {
		A string `json:"a"`
		B string `json:"b,omitempty"`
	}
	type embedded struct {
		E int32 `json:"e,omitempty"`
	}
	type outer struct {
		embedded
		Inner    inner             `json:"inner"`
		Opt      *inner            `json:"opt,omitempty"`
		Zero     inner             `json:"zero,omitzero"`
		List     []*int            `json:"list"`
		Map      map[string]uint16 `json:"map,omitempty"`
		Skipped  string            `json:"-"`
		unexport string
		Untagged bool
		Float    float64 `json:"float,omitempty"`
	}
	type hidden struct {
		embedded
		E string `json:"e"`
	}
	type recursive struct {
		Next *recursive `json:"next,omitempty"`
	}
	type badMap struct {
		M map[int]string `json:"m"`
	}
	_ = outer{}.unexport

	tests := []struct {
		name    string
		typ     reflect.Type
		rules   rules
		want    string // the schema as YAML
		wantErr string
	}{
		{
			name: "fields, embedding, required, nullable elements, maps",
			typ:  reflect.TypeFor[outer](),
			want: `
properties:
  Untagged: {type: boolean}
  e: {type: integer, format: int32}
  float: {type: number}
  inner:
    type: object
    properties: {a: {type: string}, b: {type: string}}
    required: [a]
  list: {type: array, items: {type: integer, nullable: true}}
  map: {type: object, additionalProperties: {type: integer, format: int32, minimum: 0, maximum: 65535}}
  opt:
    type: object
    properties: {a: {type: string}, b: {type: string}}
    required: [a]
  zero:
    type: object
    properties: {a: {type: string}, b: {type: string}}
    required: [a]
required: [Untagged, inner, list]
type: object
`,
		},
		{
			name: "a shallower field hides an embedded one",
			typ:  reflect.TypeFor[hidden](),
			want: `{type: object, properties: {e: {type: string}}, required: [e]}`,
		},
		{
			name: "field rules: enum, default, optional",
			typ:  reflect.TypeFor[inner](),
			rules: rules{fields: map[fieldKey]fieldRule{
				key(inner{}, "a"): {optional: true, adjust: all(enum("X", "Z"), defaultValue("X"))},
			}},
			want: `{type: object, properties: {a: {type: string, enum: [X, Z], default: X}, b: {type: string}}}`,
		},
		{
			name:  "type rules replace reflection",
			typ:   reflect.TypeFor[ownJSON](),
			rules: rules{types: map[reflect.Type]func() *schema{reflect.TypeFor[ownJSON](): intOrString}},
			want:  `{anyOf: [{type: integer}, {type: string}], x-kubernetes-int-or-string: true}`,
		},
		{name: "own JSON without a rule", typ: reflect.TypeFor[ownJSON](), wantErr: "own JSON encoding"},
		{name: "recursive", typ: reflect.TypeFor[recursive](), wantErr: "recursive"},
		{name: "non-string map keys", typ: reflect.TypeFor[badMap](), wantErr: "map keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rules
			if r.types == nil {
				r.types = map[reflect.Type]func() *schema{}
			}
			got, err := newGenerator(r).schemaOf(tt.typ)
			if !errtest.Want(t, err, tt.wantErr) {
				return
			}
			var want schema
			if err := yaml.UnmarshalStrict([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, &want) {
				gy, _ := yaml.Marshal(got)
				wy, _ := yaml.Marshal(&want)
				t.Errorf("got:\n%s\nwant:\n%s", gy, wy)
			}
		})
	}
}

// TestRulesNameRealFields: every field rule of calicoRules applies to a
// field that exists, so a rename cannot drop an enum or default.
func TestRulesNameRealFields(t *testing.T) {
	g := newGenerator(calicoRules())
	if err := g.checkRules(); err != nil {
		t.Fatal(err)
	}
	g.fields[key(ruleTarget{}, "nope")] = fieldRule{optional: true}
	if err := g.checkRules(); err == nil {
		t.Fatal("a rule for a missing field passed the check")
	}
}

type ruleTarget struct {
	A string `json:"a"`
}

// TestSchemasMatchCalicos compares the schemas with the three CRDs the
// reference cluster served (../testdata/calico-3.31-kdd/01-crd-*.yaml, Calico
// v3.31's): the same fields at every level, with the same types, required
// fields, enums, defaults, nullability and number-or-string. Descriptions,
// patterns and integer formats and bounds are Calico's alone (see
// calicoRules).
func TestSchemasMatchCalicos(t *testing.T) {
	files, err := filepath.Glob("../testdata/calico-3.31-kdd/01-crd-*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("reference CRDs: %v, %v", files, err)
	}
	ks, err := kinds()
	if err != nil {
		t.Fatal(err)
	}
	g := newGenerator(calicoRules())
	ours := map[string]*schema{}
	for _, k := range ks {
		c, err := build(g, k)
		if err != nil {
			t.Fatal(err)
		}
		ours[c.Metadata.Name] = c.Spec.Versions[0].Schema.OpenAPIV3Schema
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var ref crd
		if err := yaml.Unmarshal(data, &ref); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(ref.Spec.Versions) != 1 {
			t.Fatalf("%s: %d versions", f, len(ref.Spec.Versions))
		}
		got, ok := ours[ref.Metadata.Name]
		if !ok {
			t.Errorf("%s: no such CRD generated", ref.Metadata.Name)
			continue
		}
		for _, d := range schemaDiff(ref.Metadata.Name, ref.Spec.Versions[0].Schema.OpenAPIV3Schema, got) {
			t.Error(d)
		}
	}
}

// schemaDiff lists where b differs from Calico's a in what a stored
// object must look like.
func schemaDiff(path string, a, b *schema) []string {
	switch {
	case a == nil && b == nil:
		return nil
	case a == nil || b == nil:
		return []string{fmt.Sprintf("%s: Calico has %v, we have %v", path, a != nil, b != nil)}
	}
	var out []string
	same := func(what string, x, y any) {
		if !reflect.DeepEqual(x, y) {
			out = append(out, fmt.Sprintf("%s: %s %v, Calico's %v", path, what, y, x))
		}
	}
	same("type", a.Type, b.Type)
	same("required", a.Required, b.Required)
	same("enum", a.Enum, b.Enum)
	same("default", string(a.Default), string(b.Default))
	same("nullable", a.Nullable, b.Nullable)
	same("int-or-string", a.IntOrString, b.IntOrString)
	for name := range a.Properties {
		out = append(out, schemaDiff(path+"."+name, a.Properties[name], b.Properties[name])...)
	}
	for name := range b.Properties {
		if _, ok := a.Properties[name]; !ok {
			out = append(out, fmt.Sprintf("%s.%s: not in Calico's CRD", path, name))
		}
	}
	out = append(out, schemaDiff(path+"[]", a.Items, b.Items)...)
	return append(out, schemaDiff(path+"{}", a.AdditionalProperties, b.AdditionalProperties)...)
}

// serverFields are the metadata the API server sets; the reference
// captures carry them, a client never sends them.
var serverFields = []string{"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink"}

func stripServerFields(o *unstructured.Unstructured) {
	for _, f := range serverFields {
		unstructured.RemoveNestedField(o.Object, "metadata", f)
	}
}

// readList reads the items of a `kubectl get -o yaml` capture.
func readList(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var list unstructured.UnstructuredList
	if err := list.UnmarshalJSON(j); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []*unstructured.Unstructured
	for i := range list.Items {
		stripServerFields(&list.Items[i])
		out = append(out, &list.Items[i])
	}
	return out
}

func parseObject(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	o := &unstructured.Unstructured{}
	if err := o.UnmarshalJSON(j); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return o
}

// crdCluster is an API server with deploy/crds.yaml applied and
// established.
type crdCluster struct {
	*kubetest.Cluster
	dyn dynamic.Interface
}

func startWithCRDs(t *testing.T) *crdCluster {
	c := kubetest.Start(t, kubetest.WithoutControllerManager())
	if out, err := c.RunKubectl(nil, "apply", "-f", crdsPath()); err != nil {
		t.Fatalf("apply deploy/crds.yaml: %v\n%s", err, out)
	}
	if out, err := c.RunKubectl(nil, "wait", "--for=condition=Established", "--timeout=90s", "crd", "--all"); err != nil {
		t.Fatalf("CRDs not established: %v\n%s", err, out)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &crdCluster{Cluster: c, dyn: dyn}
}

// resource is the client for o's kind.
func (c *crdCluster) resource(t *testing.T, o *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	ks, err := kinds()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if k.Kind == o.GetKind() {
			r := c.dyn.Resource(k8sschema.GroupVersionResource{Group: group, Version: "v1", Resource: k.Plural})
			if k.Namespaced {
				return r.Namespace(o.GetNamespace())
			}
			return r
		}
	}
	t.Fatalf("no CRD for kind %q", o.GetKind())
	return nil
}

// TestServerAcceptsCalicosObjects applies deploy/crds.yaml to a real API
// server and creates every object real Calico v3.31 wrote
// (../testdata/calico-3.31-kdd/*.crd.yaml: IPAM blocks with null allocations,
// affinities with "deleted":"false", policies, configurations, ...) plus
// values calico-node writes that the captures lack; each is stored exactly
// as sent: nothing pruned, nothing defaulted away. Then objects of the
// wrong shape are refused.
func TestServerAcceptsCalicosObjects(t *testing.T) {
	c := startWithCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, ns := range []string{"demo"} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	files, err := filepath.Glob("../testdata/calico-3.31-kdd/*.crd.yaml")
	if err != nil || len(files) < 20 {
		t.Fatalf("reference captures: %v, %v", files, err)
	}
	kindsSeen := map[string]bool{}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		// after-add and after-del capture the same objects twice.
		if strings.Contains(f, ".after-del.") {
			continue
		}
		objs = append(objs, readList(t, f)...)
	}
	objs = append(objs, parseObject(t, calicoNodeStatus))
	for _, doc := range strings.Split(calicoNodeWrites, "\n---\n") {
		objs = append(objs, parseObject(t, doc))
	}
	for _, o := range objs {
		kindsSeen[o.GetKind()] = true
		created, err := c.resource(t, o).Create(ctx, o, metav1.CreateOptions{})
		if err != nil {
			t.Errorf("create %s %s: %v", o.GetKind(), o.GetName(), err)
			continue
		}
		stripServerFields(created)
		if !reflect.DeepEqual(created.Object, o.Object) {
			sent, _ := yaml.Marshal(o.Object)
			stored, _ := yaml.Marshal(created.Object)
			t.Errorf("%s %s stored differently from what was sent:\nsent:\n%s\nstored:\n%s", o.GetKind(), o.GetName(), sent, stored)
		}
	}
	ks, _ := kinds()
	for _, k := range ks {
		if !kindsSeen[k.Kind] {
			t.Errorf("no object of kind %s was tried", k.Kind)
		}
	}

	for _, tt := range []struct {
		name, doc string
		field     string // the path the server's error names
	}{
		{"IPPool cidr a number", `
apiVersion: crd.projectcalico.org/v1
kind: IPPool
metadata: {name: bad-cidr}
spec: {cidr: 10}`, "spec.cidr"},
		{"IPPool without cidr", `
apiVersion: crd.projectcalico.org/v1
kind: IPPool
metadata: {name: no-cidr}
spec: {natOutgoing: true}`, "spec.cidr"},
		{"IPPool natOutgoing a string", `
apiVersion: crd.projectcalico.org/v1
kind: IPPool
metadata: {name: bad-nat}
spec: {cidr: 10.0.0.0/16, natOutgoing: "yes"}`, "spec.natOutgoing"},
		{"IPPool assignmentMode outside its enum", `
apiVersion: crd.projectcalico.org/v1
kind: IPPool
metadata: {name: bad-mode}
spec: {cidr: 10.0.0.0/16, assignmentMode: Sometimes}`, "spec.assignmentMode"},
		{"BlockAffinity deleted a boolean", `
apiVersion: crd.projectcalico.org/v1
kind: BlockAffinity
metadata: {name: node1-10-0-0-0-26}
spec: {cidr: 10.0.0.0/26, node: node1, state: confirmed, deleted: false}`, "spec.deleted"},
		{"IPAMBlock allocations of strings", `
apiVersion: crd.projectcalico.org/v1
kind: IPAMBlock
metadata: {name: 10-0-0-0-30}
spec: {cidr: 10.0.0.0/30, allocations: ["a", null, null, null], unallocated: [1, 2, 3], attributes: [], strictAffinity: false}`, "spec.allocations[0]"},
		{"IPAMHandle block counts as strings", `
apiVersion: crd.projectcalico.org/v1
kind: IPAMHandle
metadata: {name: h1}
spec: {handleID: h1, block: {10.0.0.0/26: "one"}}`, "spec.block.10.0.0.0/26"},
		{"BGPPeer asNumber a word", `
apiVersion: crd.projectcalico.org/v1
kind: BGPPeer
metadata: {name: bad-as}
spec: {peerIP: 10.0.0.1, asNumber: "sixty-four"}`, "spec.asNumber"},
		{"GlobalNetworkPolicy rule without action", `
apiVersion: crd.projectcalico.org/v1
kind: GlobalNetworkPolicy
metadata: {name: default.no-action}
spec: {ingress: [{protocol: TCP}]}`, "spec.ingress[0].action"},
		{"NetworkPolicy port an object", `
apiVersion: crd.projectcalico.org/v1
kind: NetworkPolicy
metadata: {name: default.bad-port, namespace: default}
spec: {ingress: [{action: Allow, destination: {ports: [{port: 80}]}}]}`, "spec.ingress[0].destination.ports[0]"},
		{"Tier defaultAction Allow", `
apiVersion: crd.projectcalico.org/v1
kind: Tier
metadata: {name: bad-tier}
spec: {order: 100, defaultAction: Allow}`, "spec.defaultAction"},
		{"FelixConfiguration ipForwarding outside its enum", `
apiVersion: crd.projectcalico.org/v1
kind: FelixConfiguration
metadata: {name: node.bad}
spec: {ipForwarding: Maybe}`, "spec.ipForwarding"},
		{"KubeControllersConfiguration without controllers", `
apiVersion: crd.projectcalico.org/v1
kind: KubeControllersConfiguration
metadata: {name: other}
spec: {logSeverityScreen: Info}`, "spec.controllers"},
		{"HostEndpoint port out of range", `
apiVersion: crd.projectcalico.org/v1
kind: HostEndpoint
metadata: {name: bad-port}
spec: {node: n1, ports: [{name: web, protocol: TCP, port: 70000}]}`, "spec.ports[0].port"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := parseObject(t, tt.doc)
			_, err := c.resource(t, o).Create(ctx, o, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("err = %v, want Invalid", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error does not name %s: %v", tt.field, err)
			}
		})
	}
}

// calicoNodeStatus is a CalicoNodeStatus as Calico's node agent fills it
// (the captures have none: the reference cluster ran no agent).
const calicoNodeStatus = `
apiVersion: crd.projectcalico.org/v1
kind: CalicoNodeStatus
metadata: {name: node1-status}
spec:
  node: node1
  classes: [Agent, BGP, Routes]
  updatePeriodSeconds: 10
status:
  lastUpdated: "2026-11-24T19:20:00Z"
  agent:
    birdV4: {state: Ready, version: v0.3.3, routerID: 10.0.0.1, lastBootTime: "2026-11-24 19:18:00", lastReconfigurationTime: "2026-11-24 19:18:01"}
    birdV6: {}
  bgp:
    numberEstablishedV4: 1
    numberNotEstablishedV4: 0
    numberEstablishedV6: 0
    numberNotEstablishedV6: 0
    peersV4: [{peerIP: 10.0.0.2, type: NodeMesh, state: Established, since: "19:18:05"}]
  routes:
    routesV4: [{type: FIB, destination: 10.244.1.0/26, gateway: 10.0.0.2, interface: eth0, learnedFrom: {sourceType: NodeMesh, peerIP: 10.0.0.2}}]
`

// calicoNodeWrites are values of the shared kinds that calico-node's Go
// types write and the captures happen not to hold: 4-byte AS numbers,
// protocols and ports as numbers, names and ranges, a 32-bit mark mask.
const calicoNodeWrites = `
apiVersion: crd.projectcalico.org/v1
kind: BGPPeer
metadata: {name: four-byte-as}
spec:
  peerIP: 10.0.0.9
  asNumber: 4200000000
  localASNumber: 65000
  ttlSecurity: 1
  password: {secretKeyRef: {name: bgp, key: peer}}
---
apiVersion: crd.projectcalico.org/v1
kind: GlobalNetworkPolicy
metadata: {name: default.ports}
spec:
  order: 10.5
  selector: all()
  types: [Ingress, Egress]
  ingress:
  - action: Allow
    protocol: 6
    source: {nets: [10.0.0.0/8], notPorts: [22]}
    destination: {ports: [80, http, "8080:8090"]}
  - action: Deny
    protocol: ICMP
    icmp: {type: 8, code: 0}
    notProtocol: UDPLite
    metadata: {annotations: {why: test}}
  egress:
  - action: Pass
    destination: {services: {name: kube-dns, namespace: kube-system}, serviceAccounts: {names: [a], selector: x == 'y'}}
---
apiVersion: crd.projectcalico.org/v1
kind: FelixConfiguration
metadata: {name: node.node1}
spec:
  iptablesMarkMask: 4294901760
  failsafeInboundHostPorts: [{protocol: TCP, port: 22}, {protocol: UDP, port: 68, net: 0.0.0.0/0}]
  kubeNodePortRanges: ["30000:32767", 40000]
  natPortRange: "32768:65535"
  routeTableRanges: [{min: 1, max: 250}]
  healthTimeoutOverrides: [{name: InternalDataplaneMainLoop, timeout: 1m30s}]
  bpfLogFilters: {all: "tcp"}
  ipForwarding: Enabled
  bpfLogLevel: ""
---
apiVersion: crd.projectcalico.org/v1
kind: HostEndpoint
metadata: {name: node1-eth1}
spec:
  node: node1
  interfaceName: eth0
  expectedIPs: [10.0.0.1]
  ports: [{name: web, protocol: 6, port: 80}]
`
