package kdd

import (
	"context"

	"github.com/projectcalico/calico-node/internal/datastore"
)

// Placeholder until the IPAM mapping lands; replaced by ipam.go.
type ipamKV struct{ s *Store }

func newIPAMKV(s *Store) *ipamKV { return &ipamKV{s} }

func (k *ipamKV) Get(context.Context, ...string) ([]datastore.KeyValue, error) { return nil, errNotYet }
func (k *ipamKV) List(context.Context, string, bool) ([]datastore.KeyValue, int64, error) {
	return nil, 0, errNotYet
}
func (k *ipamKV) Snapshot(context.Context, ...string) ([][]datastore.KeyValue, error) {
	return nil, errNotYet
}
func (k *ipamKV) Txn(context.Context, datastore.Txn) (datastore.TxnResult, error) {
	return datastore.TxnResult{}, errNotYet
}
func (k *ipamKV) Watch(ctx context.Context, prefix string) <-chan datastore.KVEvent {
	ch := make(chan datastore.KVEvent)
	close(ch)
	return ch
}
func (k *ipamKV) String() string { return "Kubernetes API at " + k.s.c.base }
