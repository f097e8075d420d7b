package ctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/model/api"
)

func cmdPatch(s *session) error {
	info, refs, err := s.refsFromArgs(false)
	if err != nil {
		return err
	}
	if len(refs) != 1 {
		return fmt.Errorf("patch takes exactly one %s name", info.Kind)
	}
	r := refs[0]
	if err := readOnly("patch", r.kind.Kind, r.namespace, r.name); err != nil {
		return err
	}
	patch, err := yaml.YAMLToJSON([]byte(s.c.String("patch")))
	if err != nil {
		return fmt.Errorf("parse --patch: %w", err)
	}
	cur, err := s.store.Get(s.ctx, r.kind.Kind, r.namespace, r.name)
	if err != nil {
		return err
	}
	// Patched as calicoctl patches: what clientv3 reads, written back.
	clientView(cur)
	next, err := applyMergePatch(info, cur, patch)
	if err != nil {
		return fmt.Errorf("patch %s: %w", r, err)
	}
	// resourceVersion is carried over, so a concurrent writer makes this a
	// conflict rather than a lost update.
	if _, err := s.store.Update(s.ctx, next); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "Successfully patched 1 '%s' resource\n", info.Kind)
	return nil
}

// applyMergePatch applies an RFC 7386 JSON merge patch to obj and decodes
// the result strictly as a new object of the same kind.
func applyMergePatch(info api.KindInfo, obj api.Object, patch []byte) (api.Object, error) {
	var p any
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("patch is not JSON: %w", err)
	}
	if _, ok := p.(map[string]any); !ok {
		return nil, errors.New("patch must be a JSON object")
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	merged, err := json.Marshal(mergePatch(doc, p))
	if err != nil {
		return nil, err
	}
	next := info.New()
	dec := json.NewDecoder(bytes.NewReader(merged))
	dec.DisallowUnknownFields()
	if err := dec.Decode(next); err != nil {
		return nil, fmt.Errorf("patched resource: %w", err)
	}
	m, om := next.Meta(), obj.Meta()
	if m.Name != om.Name || m.Namespace != om.Namespace || next.Type().Kind != obj.Type().Kind {
		return nil, errors.New("a patch may not change kind, metadata.name or metadata.namespace")
	}
	m.ResourceVersion = om.ResourceVersion
	next.Default()
	if err := next.Validate(); err != nil {
		return nil, err
	}
	return next, nil
}

// mergePatch is RFC 7386: objects merge recursively, null deletes, anything
// else replaces.
func mergePatch(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
			continue
		}
		tm[k] = mergePatch(tm[k], v)
	}
	return tm
}
