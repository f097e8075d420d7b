package felixenv

import (
	"reflect"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// Merge layers FelixConfiguration specs field by field, lowest precedence
// first: each field takes the value of the last layer that sets it. A
// field is set when it is not its zero value (a non-nil pointer, a
// non-empty string or list), which is what the API's pointer fields are
// for: an explicit false or 0 in a later layer still wins.
//
// Felix's order is Merge(default, node.<name>, environment); nil layers
// are skipped. The result shares pointers with the layers: treat it as
// read-only.
//
// This is the one merge of FelixConfiguration in calico-node: everything
// that honours a field reads it from Merge's result, so precedence is the
// same for every field.
func Merge(layers ...*api.FelixConfigurationSpec) api.FelixConfigurationSpec {
	var out api.FelixConfigurationSpec
	dst := reflect.ValueOf(&out).Elem()
	for _, l := range layers {
		if l == nil {
			continue
		}
		src := reflect.ValueOf(l).Elem()
		for i := range src.NumField() {
			if f := src.Field(i); !f.IsZero() {
				dst.Field(i).Set(f)
			}
		}
	}
	return out
}

// ForNode is the FelixConfiguration in effect on node:
// Merge(default, node.<node>, env). lookup returns the FelixConfiguration
// of a name, nil when there is none; env is the FELIX_* environment's spec
// (nil for none). Every actor that reads FelixConfiguration goes through
// here, so that the resource names and the order of layers are written
// once.
func ForNode(node string, lookup func(name string) *api.FelixConfiguration, env *api.FelixConfigurationSpec) api.FelixConfigurationSpec {
	spec := func(name string) *api.FelixConfigurationSpec {
		if c := lookup(name); c != nil {
			return &c.Spec
		}
		return nil
	}
	return Merge(spec("default"), spec("node."+node), env)
}
