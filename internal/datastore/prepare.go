package datastore

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// Prepare is what every backend does before a write: a private copy of in
// as the kind's own Go type (callers' objects are never modified), the
// namespace dropped for global kinds (Calico ignores it), Calico's
// defaults, validation, and a name (and namespace) present. Errors are
// *Error naming op and the resource as the caller wrote it.
func Prepare(op string, info api.KindInfo, in api.Object) (api.Object, error) {
	m := in.Meta()
	fail := func(err error) (api.Object, error) {
		return nil, &Error{Op: op, Kind: info.Kind, Namespace: m.Namespace, Name: m.Name, Err: err}
	}
	data, err := json.Marshal(in)
	if err != nil {
		return fail(fmt.Errorf("encode: %w", err))
	}
	obj := info.New()
	if err := json.Unmarshal(data, obj); err != nil {
		return fail(fmt.Errorf("decode: %w", err))
	}
	om := obj.Meta()
	if !info.Namespaced {
		om.Namespace = ""
	}
	obj.Default()
	if err := obj.Validate(); err != nil {
		return fail(err)
	}
	if om.Name == "" {
		return fail(errors.New("metadata.name must be set"))
	}
	if info.Namespaced && om.Namespace == "" {
		return fail(errors.New("metadata.namespace must be set"))
	}
	return obj, nil
}
