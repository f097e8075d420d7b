package controllers

import (
	"context"
	"sync"
)

// kicker is a coalescing wake-up: a one-slot channel and a non-blocking
// send (kube-router's RequestFullSync), so that a burst of changes costs
// one pass.
type kicker chan struct{}

func newKicker() kicker { return make(kicker, 1) }

// poke asks for a pass soon; requests coalesce.
func (k kicker) poke() {
	select {
	case k <- struct{}{}:
	default:
	}
}

// pokeOnEvents pokes k on every event of the store's watches of kinds,
// from goroutines added to wg that end with ctx.
func (k kicker) pokeOnEvents(ctx context.Context, wg *sync.WaitGroup, store Store, kinds ...string) {
	for _, kind := range kinds {
		events := store.Watch(ctx, kind, 0)
		wg.Go(func() {
			for range events {
				k.poke()
			}
		})
	}
}
