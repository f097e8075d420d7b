// Package storetest opens the Calico datastores tests run against: the
// etcd one on an etcdtest server, the Kubernetes one on a kubetest API
// server with Calico's CRDs installed. Each store is closed when the test
// ends. It also writes and reads the resources tests store: the Profiles
// the Kubernetes datastore makes of namespaces and service accounts, and
// a document stream decoded as calicoctl apply decodes it.
//
// Design: the stores are the product's (internal/datastore/etcd and kdd),
// opened with the configuration a node would give them; the datastore
// packages' own tests cannot use this package (it imports them).
//
// Thread safety: a store is safe for concurrent use, as in the product.
package storetest

import (
	"context"
	"testing"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/etcd"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// Etcd opens the etcd datastore on endpoints; ctx bounds the connecting.
func Etcd(t testing.TB, ctx context.Context, endpoints []string) *etcd.Store {
	t.Helper()
	store, err := etcd.New(ctx, datastore.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatalf("open the etcd datastore: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// KDD opens the Kubernetes datastore on c as its admin; c has Calico's
// CRDs (kubetest's InstallCalicoCRDs). ctx bounds the connecting.
func KDD(t testing.TB, ctx context.Context, c *kubetest.Cluster) *kdd.Store {
	t.Helper()
	store, err := kdd.New(ctx, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{Kubeconfig: c.Kubeconfig}})
	if err != nil {
		t.Fatalf("open the Kubernetes datastore: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}
