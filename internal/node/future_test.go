package node

import (
	"context"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/controllers"
	"github.com/projectcalico/calico-node/internal/datastore/guard"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

// TestStoreFutureEtcd: the controllers' compactor finds the etcd client
// through the future and the guard around the connection, once there is
// one.
func TestStoreFutureEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := storetest.Etcd(t, ctx, srv.Endpoints)

	f := newStoreFuture()
	var ec controllers.EtcdClienter = f
	if ec.Etcd() != nil {
		t.Fatal("an etcd client before the connection exists")
	}
	f.resolve(guard.New(store, nil))
	c := ec.Etcd()
	if c == nil {
		t.Fatal("no etcd client through the guard")
	}
	if _, err := c.Get(ctx, "compact_rev_key"); err != nil {
		t.Errorf("the client does not reach the test's etcd: %v", err)
	}
}
