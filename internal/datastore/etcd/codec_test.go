package etcd

import (
	"testing"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// TestPolicyLookupKeys: whatever name the user gets back for a policy
// (datastore.PolicyNames, tested there) finds the key it is stored at.
func TestPolicyLookupKeys(t *testing.T) {
	k := newKindEntry(mustKind(t, "GlobalNetworkPolicy"))
	for _, p := range []struct{ name, tier string }{
		{"allow-web", "default"},
		{"default.allow-web", "default"},
		{"knp.default.deny", "default"},
		{"security.block", "security"},
		// Refused by Calico v3.31; stored under the full name, which is
		// then also the name the user sees and looks it up by.
		{"block", "security"},
		{"a.b", "default"},
	} {
		etcdName, userName := datastore.PolicyNames(p.name, p.tier)
		if got, want := k.keyForName("", userName), k.key("", etcdName); got != want {
			t.Errorf("%s in tier %s: lookup by returned name %q hits %s, stored at %s", p.name, p.tier, userName, got, want)
		}
	}
}

func mustKind(t *testing.T, name string) api.KindInfo {
	t.Helper()
	info, ok := api.LookupKind(name)
	if !ok {
		t.Fatalf("api has no kind %s", name)
	}
	return info
}

func TestPolicyRoundTrip(t *testing.T) {
	tests := []struct {
		name, doc, wantKey, wantStored string
	}{
		{
			name:       "default tier",
			doc:        `{"kind":"GlobalNetworkPolicy","metadata":{"name":"allow-dns"},"spec":{"selector":"all()"}}`,
			wantKey:    Prefix + "globalnetworkpolicies/default.allow-dns",
			wantStored: `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.allow-dns","annotations":{"projectcalico.org/metadata":"{\"name\":\"allow-dns\"}"}},"spec":{"selector":"all()"}}`,
		},
		{
			name:       "other tier keeps user annotations and gets the tier label",
			doc:        `{"kind":"NetworkPolicy","metadata":{"name":"security.block","namespace":"ns1","annotations":{"a":"b"}},"spec":{"tier":"security","selector":"all()"}}`,
			wantKey:    Prefix + "networkpolicies/ns1/security.block",
			wantStored: `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"security.block","namespace":"ns1","labels":{"projectcalico.org/tier":"security"},"annotations":{"a":"b","projectcalico.org/metadata":"{\"name\":\"security.block\"}"}},"spec":{"tier":"security","selector":"all()"}}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := decodeDoc(t, tc.doc)
			k := newKindEntry(mustKind(t, in.Type().Kind))
			userJSON := toJSON(t, in)
			key, err := k.toStorage(in)
			if err != nil {
				t.Fatal(err)
			}
			if key != tc.wantKey {
				t.Errorf("key %s, want %s", key, tc.wantKey)
			}
			stored := toJSON(t, in)
			if stored != tc.wantStored {
				t.Errorf("stored\n%s\nwant\n%s", stored, tc.wantStored)
			}
			out, err := k.decode([]byte(stored), 7)
			if err != nil {
				t.Fatal(err)
			}
			if out.Meta().ResourceVersion != "7" {
				t.Errorf("resourceVersion %q, want 7", out.Meta().ResourceVersion)
			}
			out.Meta().ResourceVersion = ""
			// The tier label is Calico's and stays; apart from it the user
			// gets back what they wrote.
			if m := out.Meta(); m.Labels != nil {
				delete(m.Labels, tierLabel)
				if len(m.Labels) == 0 {
					m.Labels = nil
				}
			}
			out.Type().APIVersion = in.Type().APIVersion
			if got := toJSON(t, out); got != withAPIVersion(t, userJSON) {
				t.Errorf("read back\n%s\nwant\n%s", got, withAPIVersion(t, userJSON))
			}
		})
	}
}

// withAPIVersion returns the document re-encoded with the apiVersion the
// store always sets.
func withAPIVersion(t *testing.T, doc string) string {
	t.Helper()
	obj := decodeDoc(t, doc)
	obj.Type().APIVersion = api.GroupVersion
	return toJSON(t, obj)
}

// TestReadLegacyPolicy covers values written by Calico <= 3.28, which had no
// name annotation: only the default tier's prefix is dropped.
func TestReadLegacyPolicy(t *testing.T) {
	k := newKindEntry(mustKind(t, "GlobalNetworkPolicy"))
	tests := []struct{ stored, want string }{
		{`{"kind":"GlobalNetworkPolicy","metadata":{"name":"default.old"},"spec":{}}`, "old"},
		{`{"kind":"GlobalNetworkPolicy","metadata":{"name":"sec.old"},"spec":{"tier":"sec"}}`, "sec.old"},
	}
	for _, tc := range tests {
		obj, err := k.decode([]byte(tc.stored), 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := obj.Meta().Name; got != tc.want {
			t.Errorf("decode(%s) name %q, want %q", tc.stored, got, tc.want)
		}
	}
}

func TestParseKey(t *testing.T) {
	r := newRegistry(api.Kinds(), api.LookupKind)
	tests := []struct {
		key            string
		kind, ns, name string
		known, wantErr bool
	}{
		{Prefix + "ippools/pool1", "IPPool", "", "pool1", true, false},
		{Prefix + "networkpolicies/default/default.allow-web", "NetworkPolicy", "default", "default.allow-web", true, false},
		{Prefix + "networkpolicies/no-namespace", "NetworkPolicy", "", "", true, true},
		{Prefix + "ippools/a/b", "IPPool", "", "", true, true},
		{Prefix + "bgpfilters/f1", "BGPFilter", "", "f1", true, false},
		{Prefix + "caliconodestatuses/s1", "", "", "", false, false},
	}
	for _, tc := range tests {
		k, ns, name, known, err := r.parseKey(tc.key)
		if known != tc.known || (err != nil) != tc.wantErr {
			t.Errorf("parseKey(%s): known %v err %v", tc.key, known, err)
			continue
		}
		if !known || err != nil {
			continue
		}
		if k.info.Kind != tc.kind || ns != tc.ns || name != tc.name {
			t.Errorf("parseKey(%s) = %s %q %q", tc.key, k.info.Kind, ns, name)
		}
	}
}

// BenchmarkDecodeWorkloadEndpoint measures the per-event cost of a watch on
// the busiest kind.
func BenchmarkDecodeWorkloadEndpoint(b *testing.B) {
	info, ok := api.LookupKind("WorkloadEndpoint")
	if !ok {
		b.Fatal("no WorkloadEndpoint kind")
	}
	k := newKindEntry(info)
	value := []byte(`{"kind":"WorkloadEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":"node1-cni-probecontainer000-eth0","namespace":"default","uid":"5a0eb6bb-b6a3-4850-8e85-84ac11cba63c","creationTimestamp":"2026-11-21T22:19:32Z","labels":{"projectcalico.org/namespace":"default","projectcalico.org/orchestrator":"cni"}},"spec":{"orchestrator":"cni","node":"node1","containerID":"probecontainer000","endpoint":"eth0","ipNetworks":["10.244.166.128/32"],"profiles":["k8s-pod-network"],"interfaceName":"caliprobecontai","mac":"f6:b0:f3:38:94:1f"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.decode(value, 42); err != nil {
			b.Fatal(err)
		}
	}
}
