package kdd

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// stubMapper is a kind not stored yet: every call fails.
type stubMapper struct{ i api.KindInfo }

var errNotYet = errors.New("not supported on the Kubernetes datastore yet")

func (m stubMapper) info() api.KindInfo { return m.i }
func (m stubMapper) sources() []source  { return nil }
func (m stubMapper) convert(int, json.RawMessage) ([]api.Object, error) {
	return nil, errNotYet
}
func (m stubMapper) get(context.Context, string, string) (api.Object, error) { return nil, errNotYet }
func (m stubMapper) write(context.Context, writeMode, api.Object) (api.Object, error) {
	return nil, errNotYet
}
func (m stubMapper) remove(context.Context, string, string, string) (api.Object, error) {
	return nil, errNotYet
}
