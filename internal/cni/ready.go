package cni

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// errNotReady is Calico's refusal of ADD and DEL while the datastore is
// locked (ClusterInformation datastoreReady: false, set by `calicoctl
// datastore migrate lock`): an address handed out or released then would
// be missing from, or stale in, the migration's copy.
var errNotReady = types.NewError(types.ErrTryAgainLater, "Calico is currently not ready to process requests",
	"the datastore is locked (ClusterInformation default has datastoreReady: false): a datastore migration or upgrade is in progress")

// checkReady reads the lock flag. A datastore without ClusterInformation
// (no agent has started on it yet) is not locked: Calico's plugin fails
// there, ours works as it did before any agent ran.
func checkReady(ctx context.Context, store datastore.Store) error {
	obj, err := store.Get(ctx, "ClusterInformation", "", "default")
	if errors.Is(err, datastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return types.NewError(types.ErrTryAgainLater, "error getting ClusterInformation: "+err.Error(), "")
	}
	if ci, ok := obj.(*api.ClusterInformation); ok && ci.Spec.DatastoreReady != nil && !*ci.Spec.DatastoreReady {
		return errNotReady
	}
	return nil
}
