package ctl_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// dsEnv is the CLI on one datastore, with a direct (unguarded) store on
// the same data for fixtures and checks.
type dsEnv struct {
	c     *cli
	ctx   context.Context
	store datastore.Store
	ipam  *ipam.Client
	kdd   bool
	kube  *kubetest.Cluster // the API server on KDD; nil on etcd
}

// onBothDatastores runs fn against etcd and against a kube-apiserver with
// the project's CRDs (the latter skipped with -short).
func onBothDatastores(t *testing.T, fn func(t *testing.T, e *dsEnv)) {
	t.Run("etcd", func(t *testing.T) {
		c := newCLI(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s := storetest.Etcd(t, ctx, c.etcd.Endpoints)
		fn(t, &dsEnv{c: c, ctx: ctx, store: s, ipam: ipam.New(s.IPAM(), s, nil)})
	})
	t.Run("kdd", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short: no kube-apiserver")
		}
		k := kubetest.Start(t, kubetest.WithoutControllerManager())
		k.InstallCalicoCRDs(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s := storetest.KDD(t, ctx, k)
		c := &cli{t: t, bin: filepath.Join(testbin.Dir(t), "calicoctl"), etcd: &etcdtest.Server{},
			extEnv: []string{"DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + k.Kubeconfig}}
		fn(t, &dsEnv{c: c, ctx: ctx, store: s, ipam: ipam.New(s.IPAM(), s, nil), kdd: true, kube: k})
	})
}
