package confwatch

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/etcd"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
)

// Against a real etcd: the cache follows creates, updates and deletes made
// through the store by another client.
func TestFollowsRealEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	store, err := etcd.New(ctx, datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	p := &api.IPPool{}
	p.Kind, p.APIVersion, p.Name = "IPPool", api.GroupVersion, "before"
	p.Spec.CIDR = "10.1.0.0/16"
	if _, err := store.Create(ctx, p); err != nil {
		t.Fatal(err)
	}

	w, _ := start(t, store)
	s := w.Subscribe("IPPool")
	if got := names(next(t, s)); !slices.Equal(got, []string{"set:IPPool(before)"}) {
		t.Fatalf("snapshot = %v", got)
	}
	p2 := &api.IPPool{}
	p2.Kind, p2.APIVersion, p2.Name = "IPPool", api.GroupVersion, "after"
	p2.Spec.CIDR = "10.2.0.0/16"
	if _, err := store.Create(ctx, p2); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Delete(ctx, "IPPool", "", "before", ""); err != nil {
		t.Fatal(err)
	}
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		got = append(got, names(next(t, s))...)
	}
	if !slices.Equal(got, []string{"set:IPPool(after)", "delete:IPPool(before)"}) && !slices.Equal(got, []string{"delete:IPPool(before)", "set:IPPool(after)"}) {
		t.Errorf("updates = %v", got)
	}
}
