package bgp

import (
	"context"
	"log/slog"
)

// WatchIPAM runs the speaker's IPAM watch on its own, outside an Actor:
// one watch of every IPAM key, from which it hands publish a complete
// IPAMState (this node's confirmed blocks and the addresses its workloads
// borrowed from other nodes' blocks) after the initial list and after
// every batch of changes that alters it, exactly as the Actor's export
// follows it. It returns when ctx ends. publish is called from WatchIPAM's
// goroutine. The etcd scale harness (integration/etcdscale) runs it for
// each simulated node, so that a simulated node's datastore load and
// decoding work are the speaker's own.
func WatchIPAM(ctx context.Context, kv IPAMStore, node string, logger *slog.Logger, publish func(IPAMState)) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	newIPAMWatch(kv, node, logger, publish).Run(ctx)
}
