package main

import (
	"encoding"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
)

// schema is the subset of OpenAPI v3 (apiextensions.k8s.io/v1
// JSONSchemaProps) the CRDs use. Field order is irrelevant: the YAML is
// written with sorted keys.
type schema struct {
	Type                 string             `json:"type,omitempty"`
	Format               string             `json:"format,omitempty"`
	Description          string             `json:"description,omitempty"`
	Enum                 []string           `json:"enum,omitempty"`
	Default              json.RawMessage    `json:"default,omitempty"`
	Minimum              *int64             `json:"minimum,omitempty"`
	Maximum              *int64             `json:"maximum,omitempty"`
	MaxLength            *int64             `json:"maxLength,omitempty"`
	Nullable             bool               `json:"nullable,omitempty"`
	AnyOf                []*schema          `json:"anyOf,omitempty"`
	Properties           map[string]*schema `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	Items                *schema            `json:"items,omitempty"`
	AdditionalProperties *schema            `json:"additionalProperties,omitempty"`
	IntOrString          bool               `json:"x-kubernetes-int-or-string,omitempty"`
	ListType             string             `json:"x-kubernetes-list-type,omitempty"`
	MapType              string             `json:"x-kubernetes-map-type,omitempty"`
}

// fieldKey names one JSON field of one Go struct type.
type fieldKey struct {
	owner reflect.Type
	field string
}

func key(owner any, field string) fieldKey {
	return fieldKey{reflect.TypeOf(owner), field}
}

// rules is what reflection cannot see: how types with their own JSON
// encoding appear, and the per-field details Calico's CRDs carry (enums,
// defaults, bounds) that Go types do not express.
type rules struct {
	// types maps a Go type (with its own MarshalJSON) to its schema.
	types map[reflect.Type]func() *schema
	// fields adjusts the schema of one field; optional marks a field
	// without omitempty that Calico's CRD does not require.
	fields map[fieldKey]fieldRule
}

type fieldRule struct {
	optional bool
	adjust   func(*schema)
}

// generator turns Go types into structural schemas, following
// encoding/json's rules for field names, embedding and omission: a field
// without omitempty (or omitzero) is required, a pointer element of a
// slice or map is nullable, integers carry their width's format and, when
// unsigned, its range.
type generator struct {
	rules
	// visiting guards against recursive types, which a structural schema
	// cannot express.
	visiting map[reflect.Type]bool
}

func newGenerator(r rules) *generator {
	return &generator{rules: r, visiting: map[reflect.Type]bool{}}
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshal = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// hasOwnJSON reports whether t (or *t) encodes or decodes itself, so its
// Go shape says nothing about its JSON.
func hasOwnJSON(t reflect.Type) bool {
	for _, x := range []reflect.Type{t, reflect.PointerTo(t)} {
		if x.Implements(jsonMarshaler) || x.Implements(jsonUnmarshal) || x.Implements(textMarshaler) {
			return true
		}
	}
	return false
}

func (g *generator) schemaOf(t reflect.Type) (*schema, error) {
	if f, ok := g.types[t]; ok {
		return f(), nil
	}
	if t.Kind() == reflect.Pointer {
		return g.schemaOf(t.Elem())
	}
	if hasOwnJSON(t) {
		return nil, fmt.Errorf("%v has its own JSON encoding and no schema rule", t)
	}
	switch t.Kind() {
	case reflect.String:
		return &schema{Type: "string"}, nil
	case reflect.Bool:
		return &schema{Type: "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return integer(t.Kind()), nil
	case reflect.Float32, reflect.Float64:
		return &schema{Type: "number"}, nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return &schema{Type: "string", Format: "byte"}, nil
		}
		items, err := g.schemaOf(t.Elem())
		if err != nil {
			return nil, fmt.Errorf("[]: %w", err)
		}
		items.Nullable = items.Nullable || t.Elem().Kind() == reflect.Pointer
		return &schema{Type: "array", Items: items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%v: map keys must be strings", t)
		}
		values, err := g.schemaOf(t.Elem())
		if err != nil {
			return nil, fmt.Errorf("{}: %w", err)
		}
		values.Nullable = values.Nullable || t.Elem().Kind() == reflect.Pointer
		return &schema{Type: "object", AdditionalProperties: values}, nil
	case reflect.Struct:
		return g.structSchema(t)
	}
	return nil, fmt.Errorf("%v: no schema for kind %v", t, t.Kind())
}

// integer is the schema of a Go integer kind: the format of its width,
// and the range of an unsigned one (a value outside it would not decode).
func integer(k reflect.Kind) *schema {
	s := &schema{Type: "integer"}
	var maxU uint64
	switch k {
	case reflect.Int8, reflect.Int16, reflect.Int32:
		s.Format = "int32"
	case reflect.Int64:
		s.Format = "int64"
	case reflect.Uint8:
		s.Format, maxU = "int32", math.MaxUint8
	case reflect.Uint16:
		s.Format, maxU = "int32", math.MaxUint16
	case reflect.Uint32:
		s.Format, maxU = "int64", math.MaxUint32
	case reflect.Uint, reflect.Uint64:
		s.Format = "int64"
	}
	switch k {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		s.Minimum = ptr(int64(0))
	}
	if maxU != 0 {
		s.Maximum = ptr(int64(maxU))
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// jsonField is one field as encoding/json sees it.
type jsonField struct {
	name     string
	optional bool
	typ      reflect.Type
	owner    reflect.Type // the struct that declares it
	depth    int
}

// jsonFields lists t's fields with encoding/json's names, flattening
// embedded structs without a JSON name; a shallower field hides a deeper
// one of the same name, two at the same depth are an error (encoding/json
// would drop both silently).
func jsonFields(t reflect.Type, depth int) ([]jsonField, error) {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				inner, err := jsonFields(et, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, inner...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if !hasTag || name == "" {
			name = f.Name
		}
		optional := false
		for o := range strings.SplitSeq(opts, ",") {
			if o == "omitempty" || o == "omitzero" {
				optional = true
			}
		}
		out = append(out, jsonField{name: name, optional: optional, typ: ft, owner: t, depth: depth})
	}
	// Resolve name collisions as encoding/json does.
	byName := map[string][]jsonField{}
	for _, f := range out {
		byName[f.name] = append(byName[f.name], f)
	}
	var res []jsonField
	for _, f := range out {
		fs := byName[f.name]
		minDepth := slices.MinFunc(fs, func(a, b jsonField) int { return a.depth - b.depth }).depth
		if f.depth != minDepth {
			continue
		}
		n := 0
		for _, o := range fs {
			if o.depth == minDepth {
				n++
			}
		}
		if n > 1 {
			return nil, fmt.Errorf("%v: JSON field %q is ambiguous", t, f.name)
		}
		res = append(res, f)
	}
	return res, nil
}

func (g *generator) structSchema(t reflect.Type) (*schema, error) {
	if g.visiting[t] {
		return nil, fmt.Errorf("%v is recursive", t)
	}
	g.visiting[t] = true
	defer delete(g.visiting, t)

	fields, err := jsonFields(t, 0)
	if err != nil {
		return nil, err
	}
	s := &schema{Type: "object", Properties: map[string]*schema{}}
	for _, f := range fields {
		fs, err := g.schemaOf(f.typ)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", t.Name(), f.name, err)
		}
		optional := f.optional
		if r, ok := g.fields[fieldKey{f.owner, f.name}]; ok {
			optional = optional || r.optional
			if r.adjust != nil {
				r.adjust(fs)
			}
		}
		s.Properties[f.name] = fs
		if !optional {
			s.Required = append(s.Required, f.name)
		}
	}
	slices.Sort(s.Required)
	return s, nil
}

// checkRules fails when a rule names a field that does not exist, so a
// renamed field cannot silently lose its enum or default.
func (g *generator) checkRules() error {
	for k := range g.fields {
		fields, err := jsonFields(k.owner, 0)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(fields, func(f jsonField) bool { return f.name == k.field && f.owner == k.owner }) {
			return fmt.Errorf("rule for %v.%s: no such field", k.owner, k.field)
		}
	}
	return nil
}
