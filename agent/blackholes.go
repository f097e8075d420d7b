package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"sort"

	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/internal/ipam"
)

// Blackholes keeps a blackhole route for every IPAM block affine to this
// node, whatever the networking backend: a packet for an address of our
// block that no local pod holds is dropped here instead of following the
// default route back out (a routing loop between nodes). Local pods' /32s
// are more specific and win.
type Blackholes struct {
	// Gate, if set, holds the blackholes as they are while it is closed
	// (the datastore is locked). Set before Run.
	Gate Gate

	node   string
	blocks BlockWatch
	sink   RouteSink
	log    *slog.Logger
}

// BlockWatch streams the IPAM block affinities until ctx ends (an
// ipam.WatchBlocks on the datastore).
type BlockWatch func(ctx context.Context) <-chan ipam.BlockSnapshot

// NewBlackholes builds the actor; Run follows the stream blocks starts.
func NewBlackholes(node string, blocks BlockWatch, sink RouteSink, logger *slog.Logger) *Blackholes {
	return &Blackholes{node: node, blocks: blocks, sink: sink, log: logger.With("component", "blackholes")}
}

// Run publishes the blackhole set after every change of block affinity.
func (b *Blackholes) Run(ctx context.Context) error {
	blocks := b.blocks(ctx)
	open, gateC := gateState(b.Gate)
	var latest map[netip.Prefix]string
	have := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case snap, ok := <-blocks:
			if !ok {
				return nil
			}
			latest, have = snap.Affinity, true
		case <-gateC:
			open, gateC = gateState(b.Gate)
		}
		if !have || !open {
			continue
		}
		rs := BlackholeRoutes(b.node, latest)
		b.log.Debug("own blocks", "count", len(rs))
		b.sink.Set(routes.SourceBlackhole, rs)
	}
}

// BlackholeRoutes is the pure part: one blackhole per block affine to node.
func BlackholeRoutes(node string, affinity map[netip.Prefix]string) []routes.Route {
	var out []routes.Route
	for block, owner := range affinity {
		if owner == node {
			out = append(out, routes.Route{Dst: block, Type: routes.Blackhole})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dst.String() < out[j].Dst.String() })
	return out
}
