// Package refresh is the periodic full-resync tick of an actor whose period
// FelixConfiguration may change while the actor runs (routeRefreshInterval
// and the like).
//
// API model: the actor's Run goroutine calls Start to get the tick channel
// (nil when the period is 0, so that a select on it never fires), selects
// on it and on Changed, and calls Start again when Changed fires; it calls
// Stop when it returns. Any other goroutine may call Set and Period.
//
// Design: the period sits behind a mutex; a change is announced on a
// 1-slot channel with a non-blocking send, so that changes coalesce and
// Set never blocks on a busy actor. Restarting the ticker on a change makes
// the next tick one full new period away, as Felix does.
//
// Thread safety: Set and Period are safe from any goroutine; Start, Stop
// and the channels they hand out belong to the one goroutine that runs the
// actor.
package refresh

import (
	"sync"
	"time"
)

// Ticker is a ticker whose period may change at runtime; 0 turns it off.
type Ticker struct {
	mu      sync.Mutex
	period  time.Duration
	changed chan struct{} // 1-slot: period changed since the last Start

	tick *time.Ticker // owned by the actor's goroutine
}

// NewTicker returns a stopped Ticker with period d (0 or less: off).
func NewTicker(d time.Duration) *Ticker {
	return &Ticker{period: max(d, 0), changed: make(chan struct{}, 1)}
}

// Set changes the period (0 or less: off). It never blocks; the actor sees
// the change on Changed.
func (t *Ticker) Set(d time.Duration) {
	t.mu.Lock()
	t.period = max(d, 0)
	t.mu.Unlock()
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// Period returns the current period; 0 means off.
func (t *Ticker) Period() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.period
}

// Changed fires after Set; the actor then calls Start again.
func (t *Ticker) Changed() <-chan struct{} { return t.changed }

// Start (re)starts the ticker at the current period and returns its
// channel, or nil when the period is 0.
func (t *Ticker) Start() <-chan time.Time {
	t.Stop()
	if d := t.Period(); d > 0 {
		t.tick = time.NewTicker(d)
		return t.tick.C
	}
	return nil
}

// Stop stops the ticker; Start may start it again.
func (t *Ticker) Stop() {
	if t.tick != nil {
		t.tick.Stop()
		t.tick = nil
	}
}
