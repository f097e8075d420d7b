package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// NamespaceProfile is the YAML document of the Profile the Kubernetes
// datastore makes of namespace ns, for tests that write it to the etcd
// datastore themselves: kns.<ns> allows all traffic both ways and gives
// the namespace's endpoints pcns.projectcalico.org/name: <ns> and, for
// each of the namespace's labels, pcns.<key>: <value>.
func NamespaceProfile(ns string, labels map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "---\napiVersion: projectcalico.org/v3\nkind: Profile\nmetadata: {name: kns.%s}\nspec:\n", ns)
	b.WriteString("  ingress: [{action: Allow}]\n  egress: [{action: Allow}]\n")
	fmt.Fprintf(&b, "  labelsToApply: {pcns.projectcalico.org/name: %s", ns)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fmt.Fprintf(&b, ", pcns.%s: %s", k, labels[k])
	}
	b.WriteString("}\n")
	return b.String()
}

// ServiceAccountProfile is the YAML document of the Profile the
// Kubernetes datastore makes of service account ns/name: ksa.<ns>.<name>
// has no rules and gives the account's endpoints
// pcsa.projectcalico.org/name: <name>.
func ServiceAccountProfile(ns, name string) string {
	return fmt.Sprintf("---\napiVersion: projectcalico.org/v3\nkind: Profile\nmetadata: {name: ksa.%s.%s}\nspec:\n  labelsToApply: {pcsa.projectcalico.org/name: %s}\n", ns, name, name)
}

// Objects decodes and validates a YAML or JSON document stream, as
// calicoctl apply reads a file, and fails the test on any document it
// cannot use.
func Objects(t testing.TB, docs string) []api.Object {
	t.Helper()
	ds, err := api.DecodeAndValidate([]byte(docs))
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, docs)
	}
	out := make([]api.Object, 0, len(ds))
	for _, d := range ds {
		if d.Err != nil {
			t.Fatalf("document %d (%s %s): %v", d.Index, d.Kind, d.Name, d.Err)
		}
		out = append(out, d.Object)
	}
	return out
}
