package api

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode checks that no input makes Decode, Default, Validate or Marshal
// panic, and that every document either has an object or an error.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.yaml")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`[{"apiVersion":"projectcalico.org/v3","kind":"IPPool","metadata":{"name":"p"},"spec":{"cidr":"10.0.0.0/8"}}]`))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: bgpPeer, metadata: {scope: node, node: x, peerIP: '::1'}}]"))
	f.Add([]byte("apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: p, namespace: n}\nspec: {ingress: [{action: Allow, protocol: TCP, destination: {ports: [1, 'a', '2:3']}}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := DecodeAndValidate(data)
		if err != nil {
			return
		}
		for i, d := range docs {
			if d.Index != i {
				t.Fatalf("document %d has Index %d", i, d.Index)
			}
			if d.Object == nil {
				if d.Err == nil {
					t.Fatalf("document %d has neither object nor error", i)
				}
				continue
			}
			if _, err := Marshal(d.Object, "yaml"); err != nil {
				t.Fatalf("Marshal: %v", err)
			}
		}
	})
}
