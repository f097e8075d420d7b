package api

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// checkShape walks a generic JSON value (as parsed with UseNumber) against
// the Go type it will be decoded into and reports, with full paths, what
// encoding/json would reject or silently drop: unknown fields, values of the
// wrong JSON type, out-of-range numbers and values the custom types
// (Port, Protocol, ASNumber, Duration ...) cannot parse. encoding/json
// itself names no path for the last two, and strict decoding stops at the
// first unknown field; this reports them all.
func checkShape(f *fieldErrors, path string, v any, t reflect.Type) {
	if v == nil {
		// null leaves the field at its zero value, as encoding/json does.
		return
	}
	if t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(unmarshalerType) {
		b, err := json.Marshal(v)
		if err == nil {
			err = reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(b)
		}
		if err != nil {
			f.add(path, nil, err.Error())
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		checkShape(f, path, v, t.Elem())
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			f.add(path, nil, "must be an object")
			return
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(m) {
			ft, ok := lookupField(fields, k)
			if !ok {
				f.add(field(path, k), nil, "unknown field")
				continue
			}
			checkShape(f, field(path, k), m[k], ft)
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			f.add(path, nil, "must be an object")
			return
		}
		for _, k := range sortedKeys(m) {
			checkShape(f, key(path, k), m[k], t.Elem())
		}
	case reflect.Slice, reflect.Array:
		l, ok := v.([]any)
		if !ok {
			f.add(path, nil, "must be a list")
			return
		}
		for i, e := range l {
			checkShape(f, index(path, i), e, t.Elem())
		}
	case reflect.String:
		switch v.(type) {
		case string:
		case bool, json.Number:
			// YAML reads unquoted yes/no/on/off/y/n as booleans and digits
			// as numbers; the fix is almost always to quote the value.
			f.add(path, shapeValue(v), "must be a string: quote it")
		default:
			f.add(path, nil, "must be a string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			f.add(path, shapeValue(v), "must be true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			f.add(path, shapeValue(v), "must be a number")
			return
		}
		if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
			f.add(path, shapeValue(v), "must be an integer in range")
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			f.add(path, shapeValue(v), "must be a number")
			return
		}
		if _, err := strconv.ParseUint(string(n), 10, t.Bits()); err != nil {
			f.add(path, shapeValue(v), "must be a non-negative integer in range")
		}
	case reflect.Float32, reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			f.add(path, shapeValue(v), "must be a number")
			return
		}
		if _, err := strconv.ParseFloat(string(n), t.Bits()); err != nil {
			f.add(path, shapeValue(v), "must be a number in range")
		}
	case reflect.Interface:
		// Anything goes.
	default:
		f.add(path, nil, "cannot be decoded")
	}
}

var unmarshalerType = typeOf[json.Unmarshaler]()

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

func typeOfValue(v any) reflect.Type { return reflect.TypeOf(v) }

// shapeValue renders a generic value for an error message.
func shapeValue(v any) any {
	switch v := v.(type) {
	case string, bool:
		return v
	case json.Number:
		return string(v)
	case map[string]any:
		return nil
	case []any:
		return nil
	}
	return nil
}

// jsonFields maps the JSON names of t's fields to their types, flattening
// embedded structs without a name as encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			et := sf.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for k, v := range jsonFields(et) {
					if _, dup := out[k]; !dup {
						out[k] = v
					}
				}
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out[name] = sf.Type
	}
	return out
}

// lookupField finds a JSON key's field, exactly or, as encoding/json (and so
// calicoctl) does, case-insensitively.
func lookupField(fields map[string]reflect.Type, k string) (reflect.Type, bool) {
	if t, ok := fields[k]; ok {
		return t, true
	}
	for name, t := range fields {
		if strings.EqualFold(name, k) {
			return t, true
		}
	}
	return nil, false
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
