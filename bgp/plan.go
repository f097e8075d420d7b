package bgp

import (
	"context"
	"log/slog"

	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/datastore"
	calicoapi "github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// Planned is what the speaker on a node would do with the datastore as it
// is: whether it runs at all, and the routes it originates.
type Planned struct {
	// OK is false when the node has no BGP address (no speaker runs).
	OK       bool
	Identity Identity
	Adverts  []Advert
	// Problems are the configuration problems the actor would log.
	Problems []string
}

// Plan computes, for `calico-node plan`, what the actor on node would
// advertise: objs are the resources of Kinds() (confwatch.Load), kv the
// IPAM store, read once. It folds them in with the actor's own code
// (state.apply, the IPAM watch's fold) and computes as reconcile does
// (Compute, then Adverts); it changes nothing.
func Plan(ctx context.Context, node string, objs []calicoapi.Object, kv datastore.KV, secrets Secrets, logger *slog.Logger) (Planned, error) {
	st := &state{nodes: map[string]*calicoapi.Node{}, peers: map[string]*calicoapi.BGPPeer{},
		configs: map[string]*calicoapi.BGPConfiguration{}, pools: map[string]calicoapi.Pool{}}
	ups := make([]confwatch.Update, 0, len(objs))
	for _, o := range objs {
		ups = append(ups, confwatch.Update{Type: confwatch.Set, Key: confwatch.KeyOf(o), Object: o})
	}
	st.apply(ups, logger)
	kvs, _, err := kv.List(ctx, ipamkv.Prefix, false)
	if err != nil {
		return Planned{}, err
	}
	var ipam IPAMState
	w := newIPAMWatch(nil, node, logger, func(s IPAMState) { ipam = s })
	w.handle(datastore.KVEvent{Type: datastore.KVReset, Snapshot: kvs})
	w.emit()
	d := Compute(Snapshot{NodeName: node, Nodes: st.nodes, Peers: st.peers, BGPConfigs: st.configs, Secrets: secrets})
	out := Planned{OK: d.OK, Identity: d.Identity, Problems: d.Problems}
	if !d.OK {
		return out, nil
	}
	pools := make([]calicoapi.Pool, 0, len(st.pools))
	for _, p := range st.pools {
		pools = append(pools, p)
	}
	out.Adverts = Adverts(RoutingInput{
		Identity: d.Identity, Pools: pools,
		Global: st.configs["default"], NodeConfig: st.configs["node."+node],
		IPAM: ipam,
	})
	return out, nil
}
