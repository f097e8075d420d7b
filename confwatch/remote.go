package confwatch

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

const (
	// remoteReadTimeout is how long a client waits for any frame: three
	// server heartbeats.
	remoteReadTimeout = 3 * defaultHeartbeat
	// remoteSnapshotTimeout bounds the first frame, which carries the
	// whole cache.
	remoteSnapshotTimeout = 2 * time.Minute
	remoteBuffer          = 256
)

// Remote is a Source that reads a Server instead of the datastore: a
// Watcher over it holds one connection to the fan-out and no datastore
// watches at all (and KV gives IPAM's watches the same).
//
// List connects and answers every kind from the server's snapshot; Watch
// continues on that connection. When the connection breaks, Watch
// reconnects (with backoff) and delivers the new snapshot as a Reset, which
// the Watcher turns into ordinary updates.
//
// Revisions: the server delivers every change in order and a connection
// has no gap to replay, so a change must always apply. Events carry a
// sequence of their connection that starts above the highest
// resourceVersion of its snapshot: the Watcher's "newer than what I hold"
// check then passes for every change, even for objects whose
// resourceVersion is no number (the Kubernetes datastore's profiles) or
// whose number is not the datastore's revision.
//
// Thread safety: List and Watch may be called from any goroutine.
type Remote struct {
	dial func(ctx context.Context) (net.Conn, error)
	log  *slog.Logger

	mu   sync.Mutex
	conn *remoteConn // connected by List, not yet handed to Watch
}

// NewRemote reads the server that dial connects to (a TCP or TLS dialer).
func NewRemote(dial func(ctx context.Context) (net.Conn, error), logger *slog.Logger) *Remote {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Remote{dial: dial, log: logger.With("component", "confwatch-remote")}
}

// remoteConn is a connection whose snapshot has been read.
type remoteConn struct {
	conn     net.Conn
	dec      *json.Decoder
	snapshot []api.Object
	rev      int64 // the snapshot's highest resourceVersion
	seq      int64 // the last event's revision; starts at rev
}

// wireFrame is a frame of either stream; U is T, a wireUpdate or a
// wireKV.
type wireFrame[T any] struct {
	Type    string `json:"type"`
	Version int    `json:"version"`
	Rev     int64  `json:"rev"`
	Message string `json:"message"`
	Updates []T    `json:"updates"`
}

// open dials, sends the request and reads the snapshot frame.
func open[T any](ctx context.Context, dial func(context.Context) (net.Conn, error), req request) (net.Conn, *json.Decoder, *wireFrame[T], error) {
	conn, err := dial(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connect to confwatch server: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	line, _ := json.Marshal(req)
	conn.SetWriteDeadline(time.Now().Add(requestTimeout))
	if _, err := conn.Write(append(line, '\n')); err != nil {
		conn.Close()
		return nil, nil, nil, fmt.Errorf("confwatch server at %s: send request: %w", conn.RemoteAddr(), err)
	}
	dec := json.NewDecoder(bufio.NewReaderSize(conn, 64<<10))
	var f wireFrame[T]
	if err := readFrame(conn, dec, &f, remoteSnapshotTimeout); err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	if f.Type != "snapshot" || f.Version != wireVersion {
		conn.Close()
		if f.Type == "error" {
			return nil, nil, nil, fmt.Errorf("confwatch server at %s: %s", conn.RemoteAddr(), f.Message)
		}
		return nil, nil, nil, fmt.Errorf("confwatch server at %s: first frame %q version %d, want a version %d snapshot", conn.RemoteAddr(), f.Type, f.Version, wireVersion)
	}
	return conn, dec, &f, nil
}

func readFrame[T any](conn net.Conn, dec *json.Decoder, f *wireFrame[T], timeout time.Duration) error {
	conn.SetReadDeadline(time.Now().Add(timeout))
	if err := dec.Decode(f); err != nil {
		return fmt.Errorf("read from confwatch server at %s: %w", conn.RemoteAddr(), err)
	}
	return nil
}

// connect dials and reads the resources' snapshot.
func (r *Remote) connect(ctx context.Context) (*remoteConn, error) {
	conn, dec, f, err := open[wireUpdate](ctx, r.dial, request{Want: "resources"})
	if err != nil {
		return nil, err
	}
	rc := &remoteConn{conn: conn, dec: dec}
	for _, u := range f.Updates {
		obj, err := decodeObject(u)
		if err != nil {
			conn.Close()
			return nil, err
		}
		rc.snapshot = append(rc.snapshot, obj)
		rc.rev = max(rc.rev, revisionOf(obj))
	}
	rc.seq = rc.rev
	return rc, nil
}

func decodeObject(u wireUpdate) (api.Object, error) {
	info, ok := api.LookupKind(u.Kind)
	if !ok {
		return nil, fmt.Errorf("confwatch server sent an object of unknown kind %q", u.Kind)
	}
	obj := info.New()
	if err := json.Unmarshal(u.Object, obj); err != nil {
		return nil, fmt.Errorf("decode %s from confwatch server: %w", u.Kind, err)
	}
	return obj, nil
}

// List returns the snapshot's objects of kind (in namespace, when set),
// connecting first if no connection is waiting for Watch.
func (r *Remote) List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error) {
	info, ok := api.LookupKind(kind)
	if !ok {
		return nil, 0, &datastore.Error{Op: "list", Kind: kind, Err: datastore.ErrUnknownKind}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		rc, err := r.connect(ctx)
		if err != nil {
			return nil, 0, err
		}
		r.conn = rc
	}
	var out []api.Object
	for _, o := range r.conn.snapshot {
		if o.Type().Kind == info.Kind && (namespace == "" || o.Meta().Namespace == namespace) {
			out = append(out, o)
		}
	}
	return out, r.conn.rev, nil
}

// Watch streams changes of kind ("" for all). With fromRevision > 0 it
// continues the connection List read; otherwise, or when there is none,
// it starts with a Reset of the complete current set.
func (r *Remote) Watch(ctx context.Context, kind string, fromRevision int64) <-chan datastore.Event {
	out := make(chan datastore.Event, remoteBuffer)
	var want string
	if kind != "" {
		if info, ok := api.LookupKind(kind); ok {
			want = info.Kind
		} else {
			want = kind // matches nothing
		}
	}
	r.mu.Lock()
	rc := r.conn
	r.conn = nil
	r.mu.Unlock()
	go func() {
		defer close(out)
		if rc != nil && fromRevision <= 0 {
			rc.conn.Close()
			rc = nil
		}
		backoff := backoffStart
		for ctx.Err() == nil {
			if rc == nil {
				var err error
				rc, err = r.connect(ctx)
				if err != nil {
					if ctx.Err() != nil || !send(ctx, out, datastore.Event{Err: err}) || !sleep(ctx, backoff) {
						return
					}
					backoff = min(2*backoff, backoffMax)
					continue
				}
				var objs []api.Object
				for _, o := range rc.snapshot {
					if want == "" || o.Type().Kind == want {
						objs = append(objs, o)
					}
				}
				if !send(ctx, out, datastore.Event{Type: datastore.Reset, Objects: objs, Revision: rc.rev}) {
					rc.conn.Close()
					return
				}
			}
			backoff = backoffStart
			rc.snapshot = nil // the Watcher holds the objects now
			err := r.stream(ctx, rc, want, out)
			rc.conn.Close()
			rc = nil
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("confwatch server connection lost, reconnecting", "err", err)
			if !send(ctx, out, datastore.Event{Err: err}) {
				return
			}
		}
	}()
	return out
}

const (
	backoffStart = 100 * time.Millisecond
	backoffMax   = 5 * time.Second
)

// stream turns frames into events until the connection fails or ctx ends.
func (r *Remote) stream(ctx context.Context, rc *remoteConn, want string, out chan<- datastore.Event) error {
	stop := context.AfterFunc(ctx, func() { rc.conn.Close() })
	defer stop()
	for {
		var f wireFrame[wireUpdate]
		if err := readFrame(rc.conn, rc.dec, &f, remoteReadTimeout); err != nil {
			return err
		}
		for _, u := range f.Updates {
			if want != "" && u.Kind != want {
				continue
			}
			obj, err := decodeObject(u)
			if err != nil {
				return err
			}
			rc.seq++
			ev := datastore.Event{Type: datastore.Modified, Object: obj, Revision: rc.seq}
			if u.Type == Delete.String() {
				ev.Type = datastore.Deleted
			}
			if !send(ctx, out, ev) {
				return ctx.Err()
			}
		}
	}
}

// send delivers ev on out unless ctx ends first (false).
func send[T any](ctx context.Context, out chan<- T, ev T) bool {
	select {
	case out <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// sleep waits d unless ctx ends first (false): a reconnection's backoff.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

var _ Source = (*Remote)(nil)

// KV returns base with its Watch served by the server: an agent's IPAM
// watches (BGP's, the overlay's) then hold no datastore watch either. Every
// other method is base's: reads and writes go to the datastore.
func (r *Remote) KV(base datastore.KV) datastore.KV { return remoteKV{KV: base, r: r} }

type remoteKV struct {
	datastore.KV
	r *Remote
}

// Watch follows the keys under prefix through the server, with the KV
// contract: a Reset first and after every reconnection, then Puts and
// Deletes.
func (k remoteKV) Watch(ctx context.Context, prefix string) <-chan datastore.KVEvent {
	out := make(chan datastore.KVEvent, remoteBuffer)
	go func() {
		defer close(out)
		backoff := backoffStart
		for ctx.Err() == nil {
			err := k.stream(ctx, prefix, out, func() { backoff = backoffStart })
			if ctx.Err() != nil || !send(ctx, out, datastore.KVEvent{Err: err}) || !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, backoffMax)
		}
	}()
	return out
}

// stream connects, sends the Reset and the changes until the connection
// fails or ctx ends.
func (k remoteKV) stream(ctx context.Context, prefix string, out chan<- datastore.KVEvent, connected func()) error {
	conn, dec, f, err := open[wireKV](ctx, k.r.dial, request{Want: "kv", Prefix: prefix})
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	connected()
	snap := make([]datastore.KeyValue, 0, len(f.Updates))
	for _, u := range f.Updates {
		snap = append(snap, datastore.KeyValue{Key: u.Key, Value: u.Value, Rev: u.Rev})
	}
	if !send(ctx, out, datastore.KVEvent{Type: datastore.KVReset, Snapshot: snap, Rev: f.Rev}) {
		return ctx.Err()
	}
	for {
		var f wireFrame[wireKV]
		if err := readFrame(conn, dec, &f, remoteReadTimeout); err != nil {
			return err
		}
		for _, u := range f.Updates {
			ev := datastore.KVEvent{Type: datastore.KVPut, KV: datastore.KeyValue{Key: u.Key, Value: u.Value, Rev: u.Rev}, Rev: u.Rev}
			if u.Type == "delete" {
				ev.Type = datastore.KVDelete
			}
			if !send(ctx, out, ev) {
				return ctx.Err()
			}
		}
	}
}
