package kdd

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Object names of IPAM keys, as libcalico-go names them (names.CIDRToName,
// blockAffinityClient.parseKey, ipamHandleClient.parseKey). The hashes of
// long affinity names are sha256("<node>+<block name>")[:11], computed
// independently.
func TestIPAMObjectNames(t *testing.T) {
	long := strings.Repeat("n", 240) + ".example"
	a235 := strings.Repeat("a", 235)
	a240 := strings.Repeat("a", 240)
	for _, tc := range []struct {
		key, resource, name string
	}{
		{"/calico/ipam/v2/assignment/ipv4/block/10.244.166.128-26", "ipamblocks", "10-244-166-128-26"},
		{"/calico/ipam/v2/assignment/ipv6/block/fd00:15::-122", "ipamblocks", "fd00-15---122"},
		{"/calico/ipam/v2/assignment/ipv6/block/2001:db8:1:2:3:4:5:0-122", "ipamblocks", "2001-db8-1-2-3-4-5-0-122"},
		{"/calico/ipam/v2/host/node1/ipv4/block/10.244.166.128-26", "blockaffinities", "node1-10-244-166-128-26"},
		{"/calico/ipam/v2/host/node1.example.com/ipv6/block/fd00:15::-122", "blockaffinities", "node1.example.com-fd00-15---122"},
		// 252 characters: kept whole.
		{"/calico/ipam/v2/host/" + a235[:234] + "/ipv4/block/10.244.166.128-26", "blockaffinities", a235[:234] + "-10-244-166-128-26"},
		// 253 and more: cut, and a hash for uniqueness.
		{"/calico/ipam/v2/host/" + a235 + "/ipv4/block/10.244.166.128-26", "blockaffinities", a235[:222] + "-10-244-166-128-26-2764dd92429"},
		{"/calico/ipam/v2/host/" + a235 + "/ipv6/block/fd00:15::-122", "blockaffinities", a235 + "-fd00-15---122"},
		{"/calico/ipam/v2/host/" + a240 + "/ipv6/block/fd00:15::-122", "blockaffinities", a240[:226] + "-fd00-15---122-01d6d8036c4"},
		{"/calico/ipam/v2/host/" + long + "/ipv4/block/10.244.166.128-26", "blockaffinities", long[:222] + "-10-244-166-128-26-92022893a8d"},
		{"/calico/ipam/v2/virtual/vm1/ipv4/block/10.0.0.0-26", "blockaffinities", "vm1-10-0-0-0-26"},
		{"/calico/ipam/v2/handle/k8s-pod-network.ABCdef", "ipamhandles", "k8s-pod-network.abcdef"},
		{"/calico/ipam/v2/config", "ipamconfigs", "default"},
	} {
		r, name, err := resourceOfKey(tc.key)
		if err != nil {
			t.Errorf("%s: %v", tc.key, err)
			continue
		}
		if r.plural != tc.resource || name != tc.name {
			t.Errorf("%s: %s/%s, want %s/%s", tc.key, r.plural, name, tc.resource, tc.name)
		}
		if len(name) > 252 {
			t.Errorf("%s: name of %d characters", tc.key, len(name))
		}
	}
	for _, key := range []string{
		"/calico/ipam/v2/assignment/ipv4/block/10.244.166.129-26", // not a network address
		"/calico/ipam/v2/assignment/ipv6/block/10.244.166.128-26", // wrong version
		"/calico/ipam/v2/host/node1/ipv4/block/",
		"/calico/ipam/v2/host//ipv4/block/10.0.0.0-26",
		"/calico/ipam/v2/handle/",
		"/calico/ipam/v2/handle/a/b",
		"/calico/ipam/v2/other",
		"/calico/resources/v3/projectcalico.org/ippools/p",
	} {
		if _, _, err := resourceOfKey(key); !errors.Is(err, errNotIPAMKey) {
			t.Errorf("%s: err = %v, want errNotIPAMKey", key, err)
		}
	}
}

// The hostname-hash label of node1 as real Calico v3.31 wrote it
// (04-blockaffinities.after-add.crd.yaml).
func TestHostnameHash(t *testing.T) {
	if got, want := hostnameHash("node1"), "7DS2CCNJGGLTHBDQLLFO6SX24SY2YDDEG3W2VN556FA2W4DLLV5A"; got != want {
		t.Errorf("hostnameHash(node1) = %s, want %s", got, want)
	}
	if got := hostnameHash(strings.Repeat("x", 253)); len(got) > 63 {
		t.Errorf("hash of a long name is %d characters, more than a label value takes", len(got))
	}
}

// Every value survives the trip etcd JSON -> custom resource -> etcd JSON
// byte for byte, so what a Get returns is what the etcd backend would
// store; and the objects carry what Calico writes.
func TestIPAMValueRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		labels     map[string]string
		spec       string
	}{
		{
			key:   "/calico/ipam/v2/assignment/ipv4/block/10.244.166.128-30",
			value: `{"cidr":"10.244.166.128/30","affinity":"host:node1","allocations":[null,0,null,1],"unallocated":[2,0],"attributes":[{"handle_id":"k8s-pod-network.a","secondary":{"namespace":"demo","node":"node1","pod":"web-0","timestamp":"2026-11-24 19:18:29.478440284 +0000 UTC"}},{"handle_id":null,"secondary":null}],"sequenceNumber":1795547902676564498,"sequenceNumberForAllocation":{"1":1795547902676564497,"3":1795547902676564495},"deleted":false}`,
			spec:  `{"cidr":"10.244.166.128/30","affinity":"host:node1","allocations":[null,0,null,1],"unallocated":[2,0],"attributes":[{"handle_id":"k8s-pod-network.a","secondary":{"namespace":"demo","node":"node1","pod":"web-0","timestamp":"2026-11-24 19:18:29.478440284 +0000 UTC"}},{}],"sequenceNumber":1795547902676564498,"sequenceNumberForAllocation":{"1":1795547902676564497,"3":1795547902676564495},"deleted":false,"strictAffinity":false}`,
		},
		{
			// No affinity, full: Calico omits the affinity in the spec.
			key:   "/calico/ipam/v2/assignment/ipv6/block/fd00:15::-127",
			value: `{"cidr":"fd00:15::/127","affinity":null,"allocations":[0,0],"unallocated":[],"attributes":[{"handle_id":"h","secondary":{"node":"n"}}],"sequenceNumber":3,"sequenceNumberForAllocation":{},"deleted":false}`,
			spec:  `{"cidr":"fd00:15::/127","allocations":[0,0],"unallocated":[],"attributes":[{"handle_id":"h","secondary":{"node":"n"}}],"sequenceNumber":3,"sequenceNumberForAllocation":{},"deleted":false,"strictAffinity":false}`,
		},
		{
			key:    "/calico/ipam/v2/host/node1/ipv4/block/10.244.166.128-26",
			value:  `{"state":"confirmed","deleted":false}`,
			labels: map[string]string{ipamLabelAffinityType: "host", ipamLabelHostnameHash: "7DS2CCNJGGLTHBDQLLFO6SX24SY2YDDEG3W2VN556FA2W4DLLV5A", ipamLabelIPVersion: "4"},
			spec:   `{"state":"confirmed","node":"node1","type":"host","cidr":"10.244.166.128/26","deleted":"false"}`,
		},
		{
			key:    "/calico/ipam/v2/host/node1/ipv6/block/fd00:15::-122",
			value:  `{"state":"pending","deleted":false}`,
			labels: map[string]string{ipamLabelAffinityType: "host", ipamLabelHostnameHash: "7DS2CCNJGGLTHBDQLLFO6SX24SY2YDDEG3W2VN556FA2W4DLLV5A", ipamLabelIPVersion: "6"},
			spec:   `{"state":"pending","node":"node1","type":"host","cidr":"fd00:15::/122","deleted":"false"}`,
		},
		{
			key:   "/calico/ipam/v2/handle/k8s-pod-network.ABC",
			value: `{"block":{"10.244.166.128/26":1,"fd00:15::/122":2},"deleted":false}`,
			spec:  `{"handleID":"k8s-pod-network.ABC","block":{"10.244.166.128/26":1,"fd00:15::/122":2},"deleted":false}`,
		},
		{
			key:   "/calico/ipam/v2/config",
			value: `{"auto_allocate_blocks":true}`,
			spec:  `{"strictAffinity":false,"autoAllocateBlocks":true}`,
		},
		{
			key:   "/calico/ipam/v2/config",
			value: `{"strict_affinity":true,"auto_allocate_blocks":true,"maxBlocksPerHost":4}`,
			spec:  `{"strictAffinity":true,"autoAllocateBlocks":true,"maxBlocksPerHost":4}`,
		},
	} {
		r, name, err := resourceOfKey(tc.key)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := r.encode(tc.key, []byte(tc.value))
		if err != nil {
			t.Errorf("%s: encode: %v", tc.key, err)
			continue
		}
		if obj.Kind != r.kind || obj.APIVersion != "crd.projectcalico.org/v1" || obj.Metadata.Name != name {
			t.Errorf("%s: object %s %s %s", tc.key, obj.APIVersion, obj.Kind, obj.Metadata.Name)
		}
		if got := string(obj.Spec); got != tc.spec {
			t.Errorf("%s: spec\n got %s\nwant %s", tc.key, got, tc.spec)
		}
		wantMeta := `{"creationTimestamp":null}`
		if tc.labels != nil {
			l, _ := json.Marshal(tc.labels)
			wantMeta = `{"creationTimestamp":null,"labels":` + string(l) + `}`
		}
		if got := obj.Metadata.Annotations[ipamMetadataAnnotation]; got != wantMeta || len(obj.Metadata.Annotations) != 1 {
			t.Errorf("%s: annotations %v, want only %s", tc.key, obj.Metadata.Annotations, wantMeta)
		}
		if l1, l2 := mustJSONString(obj.Metadata.Labels), mustJSONString(tc.labels); l1 != l2 {
			t.Errorf("%s: labels %s, want %s", tc.key, l1, l2)
		}
		key, value, deleted, err := r.decode(obj)
		if err != nil || deleted || key != tc.key || string(value) != tc.value {
			t.Errorf("%s: decode = %s %s %v %v, want the key and value back", tc.key, key, value, deleted, err)
		}
	}
}

func mustJSONString(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
}

// What Calico's Kubernetes backend writes and reads besides: objects it
// marked deleted, the string "deleted" of affinities, affinities of a
// long node name (whose key comes from the spec), an IPAMConfig that is
// not "default".
func TestIPAMDecode(t *testing.T) {
	a235 := strings.Repeat("a", 235)
	for _, tc := range []struct {
		r       *ipamResource
		name    string
		spec    string
		key     string
		value   string
		deleted bool
		err     bool
	}{
		{r: ipamAffinities, name: a235[:222] + "-10-244-166-128-26-2764dd92429",
			spec: `{"state":"confirmed","node":"` + a235 + `","type":"host","cidr":"10.244.166.128/26","deleted":"false"}`,
			key:  "/calico/ipam/v2/host/" + a235 + "/ipv4/block/10.244.166.128-26", value: `{"state":"confirmed","deleted":false}`},
		{r: ipamAffinities, name: "n-10-0-0-0-26", spec: `{"state":"confirmed","node":"n","cidr":"10.0.0.0/26","deleted":"true"}`,
			key: "/calico/ipam/v2/host/n/ipv4/block/10.0.0.0-26", value: `{"state":"confirmed","deleted":true}`, deleted: true},
		{r: ipamAffinities, name: "n-10-0-0-0-26", spec: `{"state":"confirmed","node":"n","cidr":"10.0.0.0/26","deleted":""}`,
			key: "/calico/ipam/v2/host/n/ipv4/block/10.0.0.0-26", value: `{"state":"confirmed","deleted":false}`},
		{r: ipamAffinities, name: "n-10-0-0-0-26", spec: `{"state":"confirmed","node":"n","cidr":"10.0.0.0/26","deleted":"maybe"}`, err: true},
		{r: ipamAffinities, name: "x", spec: `{"state":"confirmed","node":"","cidr":"10.0.0.0/26"}`, err: true},
		{r: ipamBlocks, name: "x", spec: `{"cidr":"bogus"}`, err: true},
		{r: ipamHandles, name: "h", spec: `{"handleID":"h","block":{},"deleted":true}`,
			key: "/calico/ipam/v2/handle/h", value: `{"block":{},"deleted":true}`, deleted: true},
		{r: ipamConfigs, name: "other", spec: `{"strictAffinity":true}`},
	} {
		key, value, deleted, err := tc.r.decode(ipamObject{Metadata: ipamObjectMeta{Name: tc.name}, Spec: json.RawMessage(tc.spec)})
		if (err != nil) != tc.err || key != tc.key || string(value) != tc.value || deleted != tc.deleted {
			t.Errorf("%s %s: decode = %q %s %v %v", tc.r.plural, tc.spec, key, value, deleted, err)
		}
	}
	// A value that is not Calico's JSON is refused, not stored.
	if _, err := ipamBlocks.encode("/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26", []byte("{not json")); err == nil {
		t.Error("encode accepted a block value that is not JSON")
	}
}

// TestAffinitySelector: listing one host's or one virtual host's
// affinities asks the API server for Calico's labels
// (model.CalculateBlockAffinityLabelSelector), not for every affinity.
func TestAffinitySelector(t *testing.T) {
	for _, tc := range []struct{ prefix, want string }{
		{"/calico/ipam/v2/host/node1/", "projectcalico.org/hostname-hash=" + hostnameHash("node1") + ",projectcalico.org/affinity-type=host"},
		{"/calico/ipam/v2/host/node1/ipv4/block/", "projectcalico.org/hostname-hash=" + hostnameHash("node1") + ",projectcalico.org/affinity-type=host,projectcalico.org/ip-version=4"},
		{"/calico/ipam/v2/virtual/load-balancer/", "projectcalico.org/hostname-hash=" + hostnameHash("load-balancer") + ",projectcalico.org/affinity-type=virtual"},
		{"/calico/ipam/v2/virtual/load-balancer/ipv6/block/", "projectcalico.org/hostname-hash=" + hostnameHash("load-balancer") + ",projectcalico.org/affinity-type=virtual,projectcalico.org/ip-version=6"},
		{"/calico/ipam/v2/host/", ""},
		{"/calico/ipam/v2/virtual/", ""},
	} {
		if got := affinitySelector(ipamAffinities, tc.prefix); got != tc.want {
			t.Errorf("affinitySelector(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
}
