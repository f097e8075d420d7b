package agent

import (
	"context"
	"log/slog"
	"sync"

	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Gate says whether the dataplane may be programmed: changed is closed at
// the next change of open. DatastoreReady implements it; a nil Gate is
// always open.
type Gate interface {
	State() (open bool, changed <-chan struct{})
}

// gateState reads g; a nil Gate is open and never changes.
func gateState(g Gate) (bool, <-chan struct{}) {
	if g == nil {
		return true, nil
	}
	return g.State()
}

// DatastoreReady follows ClusterInformation "default"'s datastoreReady,
// the flag `calicoctl datastore migrate lock` clears. While it is false
// the dataplane actors program nothing: the kernel keeps what they last
// programmed, as under Felix, which restarts when the flag drops and then
// waits for it before touching the dataplane. When it is set again they
// program the current state in full. A ClusterInformation that is absent
// counts as not ready (Felix treats a missing ready flag so); one without
// the field as ready (Calico always writes it).
type DatastoreReady struct {
	watch Subscriber
	log   *slog.Logger

	mu      sync.Mutex
	ready   bool
	known   bool          // a ClusterInformation snapshot has been seen
	changed chan struct{} // closed and replaced when ready changes
	seen    chan struct{} // closed when known becomes true
}

// NewDatastoreReady builds the actor; the gate is closed until Run has
// seen confwatch's snapshot.
func NewDatastoreReady(watch Subscriber, logger *slog.Logger) *DatastoreReady {
	return &DatastoreReady{watch: watch, log: logger.With("component", "datastore-ready"),
		changed: make(chan struct{}), seen: make(chan struct{})}
}

// Known is closed once the gate reflects the datastore (confwatch is in
// sync and its ClusterInformation has been read): start the actors it
// gates after it, so that they do not take "not known yet" for "locked".
func (d *DatastoreReady) Known() <-chan struct{} { return d.seen }

// State implements Gate. Safe from any goroutine.
func (d *DatastoreReady) State() (bool, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ready, d.changed
}

// Run follows the ClusterInformation until ctx is done.
func (d *DatastoreReady) Run(ctx context.Context) error {
	sub := d.watch.Subscribe("ClusterInformation")
	var ci *api.ClusterInformation
	for {
		ups, err := sub.Next(ctx)
		if err != nil {
			return nil // ctx done
		}
		for _, u := range ups {
			if u.Key.Name != "default" {
				continue
			}
			ci = nil
			if c, ok := u.Object.(*api.ClusterInformation); ok && u.Type != confwatch.Delete {
				ci = c
			}
		}
		d.set(ci != nil && (ci.Spec.DatastoreReady == nil || *ci.Spec.DatastoreReady))
	}
}

func (d *DatastoreReady) set(ready bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	first := !d.known
	if first {
		d.known = true
		defer close(d.seen)
	}
	if ready == d.ready && !first {
		return
	}
	if ready != d.ready {
		d.ready = ready
		close(d.changed)
		d.changed = make(chan struct{})
	}
	if ready {
		d.log.Info("datastore ready: programming the dataplane")
	} else {
		d.log.Warn("datastore not ready (ClusterInformation datastoreReady is false or missing; a migration or upgrade is in progress): the dataplane keeps its current state until it is ready")
	}
}
