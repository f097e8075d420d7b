package datastore

import (
	"context"
	"fmt"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// EventType says what an Event reports.
type EventType int

const (
	// Added: a resource was created.
	Added EventType = iota + 1
	// Modified: a resource changed.
	Modified
	// Deleted: a resource was removed; Object is its last value (or a stub
	// with kind, namespace and name when the value is gone).
	Deleted
	// Reset: the watch restarted; Objects is the complete current set of
	// what is watched, replacing everything seen before.
	Reset
	// InSync: the stream is current again after it reported errors: every
	// watch behind it is established and every change it missed meanwhile
	// has been sent. A backend whose recovery is a Reset sends no InSync.
	InSync
)

func (t EventType) String() string {
	switch t {
	case Added:
		return "Added"
	case Modified:
		return "Modified"
	case Deleted:
		return "Deleted"
	case Reset:
		return "Reset"
	case InSync:
		return "InSync"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is one item of a Watch stream. An event with Err set reports a
// problem the watcher is handling (its Type is 0); the stream goes on.
type Event struct {
	Type     EventType
	Object   api.Object   // Added, Modified, Deleted
	Objects  []api.Object // Reset
	Revision int64        // revision of the change, or of the list for Reset
	Err      error
}

// WatchBuffer is the capacity of the channel a backend's Watch returns.
const WatchBuffer = 256

// NextWatchBackoff is how long a backend waits before watching again
// after a failure, having waited prev before: doubling from 100ms up to
// 5s.
func NextWatchBackoff(prev time.Duration) time.Duration {
	return min(max(2*prev, 100*time.Millisecond), 5*time.Second)
}

// Send delivers e on out unless ctx ends first, and reports whether it
// delivered: a watcher whose consumer has gone never blocks on it.
func Send[E any](ctx context.Context, out chan<- E, e E) bool {
	select {
	case out <- e:
		return true
	case <-ctx.Done():
		return false
	}
}
