package overlay

import (
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Plan computes what the actor of cfg would want now (`calico-node
// plan`): objs are the resources of Kinds() (confwatch.Load), blocks the
// block affinities (ipam.WatchBlocks' first snapshot), k the node's
// namespace, only read (for the interfaces holding the node's
// addresses). It folds them with the actor's own code (apply, input) and
// computes with Compute; it writes nothing and allocates no tunnel
// address. The routes the actor would hand the route table are the
// result's Routes, and its IPIPRoutes when IP-in-IP can be set up.
func Plan(cfg Config, objs []api.Object, blocks ipam.BlockSnapshot, k Netlink) (Desired, error) {
	o := New(cfg, Deps{Kernel: k})
	ups := make([]confwatch.Update, 0, len(objs))
	for _, obj := range objs {
		ups = append(ups, confwatch.Update{Type: confwatch.Set, Key: confwatch.KeyOf(obj), Object: obj})
	}
	o.apply(ups)
	o.blocks = blocks
	in, err := o.input()
	if err != nil {
		return Desired{}, err
	}
	return Compute(in), nil
}
