package ctl

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// inputDoc is one resource read from the user's files, with where it came
// from so errors can point at it.
type inputDoc struct {
	api.Document
	source string
	// k8s says the document was a Kubernetes NetworkPolicy, converted.
	k8s bool
}

func (d inputDoc) label() string {
	name := d.Name
	if d.Namespace != "" {
		name = d.Namespace + "/" + name
	}
	kind := d.Kind
	if kind == "" {
		kind = "unknown kind"
	}
	if name == "" {
		name = "<no name>"
	}
	return fmt.Sprintf("%s: document %d (%s %s)", d.source, d.Index+1, kind, name)
}

// readInputs expands -f arguments (files, directories, "-") into documents.
func readInputs(args []string, stdin io.Reader) ([]inputDoc, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("no input: give -f FILE, -f DIR or -f -")
	}
	var docs []inputDoc
	for _, arg := range args {
		paths, err := expandPath(arg)
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			var data []byte
			if p == "-" {
				data, err = io.ReadAll(stdin)
			} else {
				data, err = os.ReadFile(p)
			}
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", p, err)
			}
			parsed, err := decodeInput(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", displayName(p), err)
			}
			for _, d := range parsed {
				d.source = displayName(p)
				docs = append(docs, d)
			}
		}
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("no resources found in %s", strings.Join(args, ", "))
	}
	return docs, nil
}

func displayName(p string) string {
	if p == "-" {
		return "<stdin>"
	}
	return p
}

// expandPath returns the YAML/JSON files of a directory (sorted, not
// recursive) or the path itself.
func expandPath(p string) ([]string, error) {
	if p == "-" {
		return []string{p}, nil
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if !fi.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, fmt.Errorf("read directory %s: %w", p, err)
	}
	var out []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				out = append(out, filepath.Join(p, e.Name()))
			}
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("directory %s has no .yaml, .yml or .json files", p)
	}
	return out, nil
}

// prepare sets namespaces, defaults and validates every document. It
// returns the objects when all are valid, else an error listing each bad
// document: nothing may be written in that case.
func prepare(docs []inputDoc, flagNS string, validate bool) ([]api.Object, error) {
	var bad []string
	objs := make([]api.Object, 0, len(docs))
	for i := range docs {
		d := &docs[i]
		if d.Err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", d.label(), d.Err))
			continue
		}
		if err := setNamespace(d.Object, flagNS); err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", d.label(), err))
			continue
		}
		d.Namespace = d.Object.Meta().Namespace
		if validate {
			d.Object.Default()
			if err := d.Object.Validate(); err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", d.label(), err))
				continue
			}
		}
		objs = append(objs, d.Object)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%d of %d documents are invalid, nothing was written:\n  %s", len(bad), len(docs), strings.Join(bad, "\n  "))
	}
	return objs, nil
}

// setNamespace applies calicoctl's rule: a namespaced kind without a
// namespace takes -n or "default"; -n must not contradict the document.
func setNamespace(obj api.Object, flagNS string) error {
	info, ok := api.LookupKind(obj.Type().Kind)
	if !ok {
		return fmt.Errorf("unknown kind %q", obj.Type().Kind)
	}
	m := obj.Meta()
	if !info.Namespaced {
		if m.Namespace != "" {
			return fmt.Errorf("metadata.namespace: %q must be empty for the non-namespaced kind %s", m.Namespace, info.Kind)
		}
		return nil
	}
	switch {
	case m.Namespace == "" && flagNS != "":
		m.Namespace = flagNS
	case m.Namespace == "":
		m.Namespace = "default"
	case flagNS != "" && flagNS != m.Namespace:
		return fmt.Errorf("metadata.namespace: %q does not match --namespace %q", m.Namespace, flagNS)
	}
	return nil
}
