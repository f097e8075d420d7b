package api

import (
	"encoding/json"
	"reflect"
	"time"
)

func reflectValue(v any) reflect.Value { return reflect.ValueOf(v) }

// fill sets every field reachable from v to a non-zero value of its type,
// using values the custom types read back unchanged.
func fill(v reflect.Value, depth int) {
	if depth > 12 {
		return
	}
	switch v.Addr().Interface().(type) {
	case *Port:
		v.Set(reflect.ValueOf(SinglePort(8080)))
		return
	case *Protocol:
		v.Set(reflect.ValueOf(ProtocolFromString(ProtocolTCP)))
		return
	case *DSCP:
		v.Set(reflect.ValueOf(DSCP{Type: NumOrStringString, StrVal: "AF11"}))
		return
	case *Uint8OrString:
		v.Set(reflect.ValueOf(Uint8OrString{Type: NumOrStringNum, NumVal: 7}))
		return
	case *Duration:
		v.Set(reflect.ValueOf(Duration{90 * time.Second}))
		return
	case *json.RawMessage:
		v.Set(reflect.ValueOf(json.RawMessage(`{"manager":"kubectl"}`)))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), depth+1)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, depth+1)
		m.SetMapIndex(reflect.ValueOf("key"), e)
		v.Set(m)
	case reflect.String:
		v.SetString("text")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(3)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(4)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(2.5)
	}
}
