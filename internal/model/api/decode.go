package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Document is one resource parsed from user input. Index is the 0-based
// position of the resource in the input after List kinds are expanded;
// Kind/Name are whatever could be read even when Err != nil.
type Document struct {
	Index                 int
	Kind, Name, Namespace string
	Object                Object
	Err                   error
}

// Decode parses user input: YAML or JSON, several YAML documents separated
// by "---" lines, a JSON array or concatenated JSON objects, and List kinds
// (kind: List or kind: <Kind>List with items), expanded in place. Each
// resource may be written as projectcalico.org/v3, crd.projectcalico.org/v1
// (always returned as projectcalico.org/v3) or, for the kinds that can be
// converted, the calicoctl v1 form. Decoding is strict: unknown fields and
// values of the wrong type are reported with their path. Empty documents are
// skipped.
//
// The error is non-nil only when the input as a whole is unreadable;
// problems with one resource are in its Document.Err, and the other
// documents are still returned. Decode neither defaults nor validates; see
// DecodeAndValidate.
func Decode(data []byte) ([]Document, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("decode resources: input is not UTF-8 text")
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	d := decoder{}
	for _, c := range splitInput(data) {
		d.chunk(c)
	}
	return d.docs, nil
}

// DecodeAndValidate is Decode followed by Default and Validate on every
// object that decoded, with validation errors stored in Document.Err.
func DecodeAndValidate(data []byte) ([]Document, error) {
	docs, err := Decode(data)
	if err != nil {
		return nil, err
	}
	for i := range docs {
		d := &docs[i]
		if d.Err != nil || d.Object == nil {
			continue
		}
		d.Object.Default()
		d.Name = d.Object.Meta().Name
		d.Err = d.Object.Validate()
	}
	return docs, nil
}

// chunk is one YAML or JSON document of the input; line is its first line
// in the input (1-based), for error messages.
type chunk struct {
	text []byte
	line int
}

// splitInput cuts the input into documents. Input starting with '{' or '['
// is first read as a stream of JSON values; if that fails it is YAML (JSON
// that is not YAML is reported by the YAML parser).
func splitInput(data []byte) []chunk {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
		if chunks, ok := splitJSON(data); ok {
			return chunks
		}
	}
	return splitYAML(data)
}

func splitJSON(data []byte) ([]chunk, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var out []chunk
	for {
		start := dec.InputOffset()
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			return out, true
		}
		if err != nil {
			return nil, false
		}
		// InputOffset before Decode may sit before whitespace; count lines
		// up to the value itself.
		skip := len(data[start:]) - len(bytes.TrimLeft(data[start:], " \t\r\n"))
		out = append(out, chunk{text: raw, line: 1 + bytes.Count(data[:int(start)+skip], []byte("\n"))})
	}
}

// splitYAML splits on document separator lines: "---" alone or followed by
// a comment, as kubectl and calicoctl do.
func splitYAML(data []byte) []chunk {
	var out []chunk
	lines := bytes.SplitAfter(data, []byte("\n"))
	cur, curLine := []byte(nil), 1
	for i, l := range lines {
		t := bytes.TrimRight(l, "\r\n")
		if bytes.HasPrefix(t, []byte("---")) {
			rest := bytes.TrimSpace(t[3:])
			if len(rest) == 0 || rest[0] == '#' {
				out = append(out, chunk{text: cur, line: curLine})
				cur, curLine = nil, i+2
				continue
			}
		}
		cur = append(cur, l...)
	}
	return append(out, chunk{text: cur, line: curLine})
}

// decoder accumulates documents.
type decoder struct {
	docs []Document
}

func (d *decoder) add(doc Document) {
	doc.Index = len(d.docs)
	d.docs = append(d.docs, doc)
}

// Compiled on first use: only malformed input needs them, and package
// initialisation must stay free of work.
var (
	yamlLineRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`line (\d+)`) })
	yamlKindRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^kind:[ \t]*["']?([A-Za-z0-9]+)`) })
)

func (d *decoder) chunk(c chunk) {
	js, err := yaml.YAMLToJSONStrict(c.text)
	if err != nil {
		// Report the line within the whole input, not within the document.
		msg := yamlLineRe().ReplaceAllStringFunc(err.Error(), func(s string) string {
			n, _ := strconv.Atoi(s[len("line "):])
			return "line " + strconv.Itoa(n+c.line-1)
		})
		doc := Document{Err: fmt.Errorf("parse document at line %d: %s", c.line, strings.TrimPrefix(msg, "error converting YAML to JSON: "))}
		if m := yamlKindRe().FindSubmatch(c.text); m != nil {
			doc.Kind = string(m[1])
		}
		d.add(doc)
		return
	}
	v, err := parseJSON(js)
	if err != nil {
		d.add(Document{Err: fmt.Errorf("parse document at line %d: %w", c.line, err)})
		return
	}
	switch v := v.(type) {
	case nil:
		// An empty document (only comments or whitespace).
	case []any:
		for _, item := range v {
			d.value(item, "", "", false)
		}
	default:
		d.value(v, "", "", false)
	}
}

// parseJSON decodes JSON keeping numbers exact.
func parseJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// value decodes one resource or list. listVersion/listKind are inherited
// from an enclosing list by items that omit them.
func (d *decoder) value(v any, listVersion, listKind string, inList bool) {
	m, ok := v.(map[string]any)
	if !ok {
		d.add(Document{Err: errors.New("a resource must be an object with apiVersion, kind, metadata and spec")})
		return
	}
	doc := Document{}
	apiVersion, okV := stringField(m, "apiVersion")
	kind, okK := stringField(m, "kind")
	if md, ok := m["metadata"].(map[string]any); ok {
		doc.Name, _ = stringField(md, "name")
		doc.Namespace, _ = stringField(md, "namespace")
	}
	if !okV || !okK {
		doc.Kind = kind
		doc.Err = errors.New("apiVersion and kind must be strings")
		d.add(doc)
		return
	}
	if apiVersion == "" {
		apiVersion = listVersion
	}
	if kind == "" {
		kind = listKind
	}
	doc.Kind = kind

	if isListKind(apiVersion, kind) {
		if inList {
			doc.Err = fmt.Errorf("kind %s: lists cannot be nested", kind)
			d.add(doc)
			return
		}
		d.list(m, apiVersion, kind)
		return
	}

	switch {
	case kind == "":
		doc.Err = errors.New("kind is missing")
	case apiVersion == "":
		doc.Err = fmt.Errorf("apiVersion is missing: use %s", GroupVersion)
	case apiVersion == legacyVersion:
		doc = decodeLegacy(m, kind, doc)
	case apiVersion != GroupVersion && apiVersion != CRDVersion:
		doc.Err = fmt.Errorf("unsupported apiVersion %q: use %s (or %s)", apiVersion, GroupVersion, CRDVersion)
	default:
		doc = decodeV3(m, kind, doc)
	}
	d.add(doc)
}

func stringField(m map[string]any, k string) (string, bool) {
	v, ok := m[k]
	if !ok || v == nil {
		return "", true
	}
	s, ok := v.(string)
	return s, ok
}

// isListKind reports whether kind names a list: "List", "<Kind>List" of a
// v3 kind, or a calicoctl v1 list ("ipPoolList").
func isListKind(apiVersion, kind string) bool {
	if kind == "List" {
		return true
	}
	base, ok := strings.CutSuffix(kind, "List")
	if !ok {
		return false
	}
	if apiVersion == legacyVersion {
		_, ok := legacyKinds[base]
		return ok
	}
	_, ok = kindInfo(base)
	return ok
}

// list expands the items of a List or <Kind>List.
func (d *decoder) list(m map[string]any, apiVersion, kind string) {
	var f fieldErrors
	for _, k := range sortedKeys(m) {
		switch k {
		case "apiVersion", "kind", "items":
		case "metadata":
			checkShape(&f, "metadata", m[k], listMetaType)
		default:
			f.add(k, nil, "unknown field")
		}
	}
	items, ok := m["items"].([]any)
	if m["items"] != nil && !ok {
		f.add("items", nil, "must be a list")
	}
	if err := f.err(); err != nil {
		d.add(Document{Kind: kind, Err: fmt.Errorf("%s: %w", kind, err)})
		return
	}
	itemKind := strings.TrimSuffix(kind, "List")
	for _, it := range items {
		if kind != "List" {
			if im, ok := it.(map[string]any); ok {
				if k, _ := stringField(im, "kind"); k != "" && k != itemKind {
					name := ""
					if md, ok := im["metadata"].(map[string]any); ok {
						name, _ = stringField(md, "name")
					}
					d.add(Document{Kind: k, Name: name, Err: fmt.Errorf("a %s can only hold %s items, not %s", kind, itemKind, k)})
					continue
				}
			}
			d.value(it, apiVersion, itemKind, true)
		} else {
			// A generic List ("apiVersion: v1, kind: List") says nothing
			// about its items' versions.
			itemVersion := ""
			if apiVersion == GroupVersion || apiVersion == CRDVersion {
				itemVersion = apiVersion
			}
			d.value(it, itemVersion, "", true)
		}
	}
}

// listMeta is the metadata of a Kubernetes list.
type listMeta struct {
	ResourceVersion    string `json:"resourceVersion,omitempty"`
	Continue           string `json:"continue,omitempty"`
	SelfLink           string `json:"selfLink,omitempty"`
	RemainingItemCount *int64 `json:"remainingItemCount,omitempty"`
}

var listMetaType = typeOf[listMeta]()

// decodeV3 decodes a projectcalico.org/v3 or crd.projectcalico.org/v1
// resource.
func decodeV3(m map[string]any, kind string, doc Document) Document {
	info, ok := kindInfo(kind)
	if !ok {
		if alt, found := LookupKind(kind); found {
			doc.Err = fmt.Errorf("unknown kind %q (did you mean %s?)", kind, alt.Kind)
		} else {
			doc.Err = fmt.Errorf("unknown kind %q", kind)
		}
		return doc
	}
	if kind == "IPPool" {
		acceptDisableAlias(m)
	}
	obj := info.New()
	if err := decodeStrict(m, obj); err != nil {
		doc.Err = err
		return doc
	}
	*obj.Type() = typeMeta(kind)
	doc.Object = obj
	doc.Name, doc.Namespace = obj.Meta().Name, obj.Meta().Namespace
	return doc
}

// acceptDisableAlias reads an IPPool's "spec.disable" as "spec.disabled".
// No Calico version has a "disable" field, but the manifests this project
// is built from use it (the CRD API server silently pruned it); refusing
// them would break documents that users have applied for years, and reading
// them as intended is safer than dropping the value.
func acceptDisableAlias(m map[string]any) {
	spec, ok := m["spec"].(map[string]any)
	if !ok {
		return
	}
	if v, ok := spec["disable"]; ok {
		if _, dup := spec["disabled"]; !dup {
			spec["disabled"] = v
			delete(spec, "disable")
		}
	}
}

// decodeStrict checks the generic value against obj's type (reporting every
// unknown field and wrongly typed value with its path) and then decodes it.
func decodeStrict(v any, obj any) error {
	var f fieldErrors
	checkShape(&f, "", v, typeOfValue(obj).Elem())
	if err := f.err(); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("re-encode document: %w", err)
	}
	if err := json.Unmarshal(b, obj); err != nil {
		// checkShape accepts exactly what encoding/json accepts; reaching
		// here is a bug, but report it rather than lose the document.
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}

// Marshal renders obj as "yaml" or "json" (indented), with apiVersion
// projectcalico.org/v3 and its kind. obj is not modified.
func Marshal(obj Object, format string) ([]byte, error) {
	// Set the header on a shallow copy so that obj stays untouched (and
	// safe to share with readers).
	cp := reflect.New(reflect.TypeOf(obj).Elem())
	cp.Elem().Set(reflect.ValueOf(obj).Elem())
	c := cp.Interface().(Object)
	tm := c.Type()
	if tm.Kind == "" {
		if k, ok := kindOf(obj); ok {
			tm.Kind = k
		}
	}
	tm.APIVersion = GroupVersion
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", tm.Kind, err)
	}
	switch format {
	case "json":
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return nil, fmt.Errorf("marshal %s: %w", tm.Kind, err)
		}
		out.WriteByte('\n')
		return out.Bytes(), nil
	case "yaml":
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", tm.Kind, err)
		}
		return y, nil
	default:
		return nil, fmt.Errorf("marshal %s: unknown format %q: want yaml or json", tm.Kind, format)
	}
}

// kindOf finds obj's kind in the registry by its Go type.
func kindOf(obj Object) (string, bool) {
	t := typeOfValue(obj)
	for _, k := range kinds {
		if typeOfValue(k.New()) == t {
			return k.Kind, true
		}
	}
	return "", false
}
