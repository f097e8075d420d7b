package ctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	networkingv1 "k8s.io/api/networking/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy/k8spolicy"
)

// k8sNetworkingVersion is the apiVersion of Kubernetes NetworkPolicy.
const k8sNetworkingVersion = "networking.k8s.io/v1"

// decodeInput is api.Decode that also accepts Kubernetes NetworkPolicies
// (networking.k8s.io/v1), converted to the Calico NetworkPolicy
// "knp.default.<name>" that Calico's policy controller would store for
// them, so `calicoctl apply -f` of a Kubernetes manifest does on an etcd
// datastore what the controllers do in a cluster.
//
// Input that does not mention networking.k8s.io goes to api.Decode
// untouched, keeping its line-numbered errors. Otherwise the input is
// split into values here; Calico values are decoded one by one by
// api.Decode, Kubernetes policies (alone or in a List) are converted.
func decodeInput(data []byte) ([]inputDoc, error) {
	calico := func(data []byte) ([]inputDoc, error) {
		parsed, err := api.Decode(data)
		docs := make([]inputDoc, len(parsed))
		for i, d := range parsed {
			docs[i] = inputDoc{Document: d}
		}
		return docs, err
	}
	if !bytes.Contains(data, []byte("networking.k8s.io")) {
		return calico(data)
	}
	values, err := splitValues(data)
	if err != nil {
		// Unreadable as a whole: let api.Decode report it with lines.
		return calico(data)
	}
	var docs []inputDoc
	add := func(d api.Document, k8s bool) {
		d.Index = len(docs)
		docs = append(docs, inputDoc{Document: d, k8s: k8s})
	}
	for _, v := range values {
		switch {
		case isK8sPolicy(v, "", ""):
			add(convertK8sPolicy(v, "", ""), true)
		case isK8sPolicyList(v):
			listVersion, _ := v["apiVersion"].(string)
			listKind, _ := v["kind"].(string)
			itemKind := ""
			if listKind == "NetworkPolicyList" {
				itemKind = "NetworkPolicy"
			}
			items, _ := v["items"].([]any)
			for _, it := range items {
				m, ok := it.(map[string]any)
				if !ok || !isK8sPolicy(m, listVersion, itemKind) {
					add(api.Document{Err: fmt.Errorf("%s %s: every item must be a %s NetworkPolicy", listVersion, listKind, k8sNetworkingVersion)}, false)
					continue
				}
				add(convertK8sPolicy(m, listVersion, itemKind), true)
			}
		default:
			js, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("encode document: %w", err)
			}
			sub, err := api.Decode(js)
			if err != nil {
				return nil, err
			}
			for _, d := range sub {
				add(d, false)
			}
		}
	}
	return docs, nil
}

// splitValues reads a YAML or JSON stream into its top-level objects.
func splitValues(data []byte) ([]map[string]any, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []map[string]any
	for {
		var v map[string]any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode input: %w", err)
		}
		if v != nil {
			out = append(out, v)
		}
	}
}

func isK8sPolicy(v map[string]any, listVersion, listItemKind string) bool {
	apiVersion, _ := v["apiVersion"].(string)
	kind, _ := v["kind"].(string)
	if apiVersion == "" {
		apiVersion = listVersion
	}
	if kind == "" {
		kind = listItemKind
	}
	return apiVersion == k8sNetworkingVersion && kind == "NetworkPolicy"
}

// isK8sPolicyList reports a List (v1 List or networking.k8s.io/v1
// NetworkPolicyList) holding at least one Kubernetes policy.
func isK8sPolicyList(v map[string]any) bool {
	apiVersion, _ := v["apiVersion"].(string)
	kind, _ := v["kind"].(string)
	if apiVersion == k8sNetworkingVersion && kind == "NetworkPolicyList" {
		return true
	}
	if kind != "List" {
		return false
	}
	items, _ := v["items"].([]any)
	for _, it := range items {
		if m, ok := it.(map[string]any); ok && isK8sPolicy(m, "", "") {
			return true
		}
	}
	return false
}

// convertK8sPolicy decodes one Kubernetes policy strictly (unknown fields
// are errors, as for Calico kinds) and converts it. A policy with a rule
// Convert cannot translate is refused rather than stored partially.
func convertK8sPolicy(v map[string]any, listVersion, listItemKind string) api.Document {
	doc := api.Document{Kind: "NetworkPolicy"}
	if md, ok := v["metadata"].(map[string]any); ok {
		name, _ := md["name"].(string)
		doc.Namespace, _ = md["namespace"].(string)
		if name != "" {
			doc.Name = k8spolicy.Name(name)
		}
	}
	if _, ok := v["apiVersion"]; !ok {
		v["apiVersion"] = listVersion
	}
	if _, ok := v["kind"]; !ok {
		v["kind"] = listItemKind
	}
	js, err := json.Marshal(v)
	if err != nil {
		doc.Err = fmt.Errorf("encode Kubernetes NetworkPolicy: %w", err)
		return doc
	}
	var np networkingv1.NetworkPolicy
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&np); err != nil {
		doc.Err = fmt.Errorf("decode %s NetworkPolicy: %w", k8sNetworkingVersion, err)
		return doc
	}
	if np.Name == "" {
		doc.Err = errors.New("metadata.name: a Kubernetes NetworkPolicy needs a name")
		return doc
	}
	p, err := k8spolicy.Convert(&np)
	if err != nil {
		doc.Err = fmt.Errorf("convert Kubernetes NetworkPolicy %s: %w", np.Name, err)
		return doc
	}
	doc.Object = p
	return doc
}
