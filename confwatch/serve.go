package confwatch

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projectcalico/calico-node/internal/datastore"
)

// The fan-out: one Watcher's cache (and, optionally, one KV watch: IPAM's
// blocks and affinities) served to many agents over stream connections, so
// that the datastore — the Kubernetes API server above all — carries one
// set of watches and one stream of events however many nodes read them:
// what Calico's Typha does for felix. Server is the serving side; Remote
// (remote.go) is the Source an agent's Watcher reads instead of the
// datastore, and Remote.KV the KV whose watches read the server.
//
// Wire protocol (version 1): newline-delimited JSON. The client sends one
// request line, then only reads:
//
//	{"want":"resources"}                 every Calico resource of the Watcher
//	{"want":"kv","prefix":P}             the KV keys under P
//
// and the server answers with frames:
//
//	{"type":"snapshot","version":1,"rev":R,"updates":[U, ...]}   first: everything
//	{"type":"updates","updates":[U, ...]}                        later changes, in order
//	{"type":"ping"}                                              after a quiet heartbeat period
//	{"type":"error","message":M}                                 the request cannot be served
//
// where, for resources, U is {"type":"set"|"delete","kind":K,"object":O},
// O the object's projectcalico.org/v3 JSON (for a delete, its last value),
// and, for KV, {"type":"put"|"delete","key":K,"value":V,"rev":N} with V
// the value's bytes (base64). A client that cannot keep up is disconnected
// rather than buffered without bound; it reconnects and starts from a fresh
// snapshot.

const (
	wireVersion = 1

	defaultMaxQueue     = 256 << 20
	defaultWriteTimeout = 30 * time.Second
	defaultHeartbeat    = 10 * time.Second
	requestTimeout      = 10 * time.Second
)

// ServerConfig tunes a Server; the zero value is usable.
type ServerConfig struct {
	// KV, when set, is served too: the keys under KVPrefix, which must
	// cover every prefix agents ask for ("/calico/ipam/v2/" for IPAM's
	// blocks and affinities).
	KV       datastore.KV
	KVPrefix string
	// MaxQueue is how many bytes may wait for one client before it is
	// disconnected; default 256 MiB.
	MaxQueue int
	// WriteTimeout bounds one write to a client; default 30 s.
	WriteTimeout time.Duration
	// Heartbeat is how long a client may go without a frame before it
	// gets a ping, so that it can tell a quiet server from a dead
	// connection; default 10 s. Keep it well under 30 s, the silence
	// after which a Remote drops the connection and reconnects.
	Heartbeat time.Duration
	Logger    *slog.Logger
	// Registerer receives the server's metrics; nil for none.
	Registerer prometheus.Registerer
}

// Server serves a Watcher's cache (and a KV prefix) to Remote clients on
// a listener. Each change is encoded once, whatever the number of
// clients; a new client's snapshot is the concatenation of the current
// encodings, shared by all clients that connect before the next change.
//
// Thread safety: Run owns the listener; the broadcaster goroutines and the
// client goroutines share the encodings and client sets under mu.
type Server struct {
	w   *Watcher
	l   net.Listener
	cfg ServerConfig
	log *slog.Logger

	ready   chan struct{} // closed once the resources' snapshot is encoded
	kvReady chan struct{} // closed once the KV snapshot is encoded

	mu       sync.Mutex
	enc      map[Key][]byte // each resource's current encoded update
	snapshot []byte         // the resources' snapshot frame; nil after a change
	clients  map[*serverClient]struct{}
	kvEnc    map[string][]byte // each KV key's current encoded put
	kvRev    int64
	kvSnaps  map[string][]byte // snapshot frame per prefix asked for; reset on change
	kvSubs   map[*serverClient]string

	clientsGauge prometheus.Gauge
	dropped      prometheus.Counter
	sent         prometheus.Counter
}

// NewServer builds a server of w's cache on l; Run serves it.
func NewServer(w *Watcher, l net.Listener, cfg ServerConfig) *Server {
	cfg.MaxQueue = cmp.Or(cfg.MaxQueue, defaultMaxQueue)
	cfg.WriteTimeout = cmp.Or(cfg.WriteTimeout, defaultWriteTimeout)
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, defaultHeartbeat)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		w: w, l: l, cfg: cfg, log: logger.With("component", "confwatch-server"),
		ready:   make(chan struct{}),
		kvReady: make(chan struct{}),
		enc:     map[Key][]byte{},
		clients: map[*serverClient]struct{}{},
		kvEnc:   map[string][]byte{},
		kvSnaps: map[string][]byte{},
		kvSubs:  map[*serverClient]string{},
		clientsGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "calico_confwatch_server_clients", Help: "Connections to the confwatch fan-out.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "calico_confwatch_server_clients_dropped_total", Help: "Connections closed for falling behind or failed writes.",
		}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "calico_confwatch_server_sent_bytes_total", Help: "Bytes written to agents.",
		}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.clientsGauge, s.dropped, s.sent)
	}
	return s
}

// Addr is the address clients dial.
func (s *Server) Addr() net.Addr { return s.l.Addr() }

// Run serves until ctx ends, then closes the listener and every client.
// Clients are accepted at once but get their snapshot only when the
// Watcher (or the KV watch) is in sync.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.broadcast(ctx) })
	if s.cfg.KV != nil {
		wg.Go(func() { s.broadcastKV(ctx) })
	}
	stop := context.AfterFunc(ctx, func() { s.l.Close() })
	defer stop()
	backoff := 5 * time.Millisecond
	for {
		conn, err := s.l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("confwatch server on %s: %w", s.l.Addr(), err)
			}
			// Out of descriptors and the like: wait, as net/http does.
			s.log.Warn("accept failed, retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		wg.Go(func() { s.serve(ctx, conn) })
	}
}

// broadcast encodes the Watcher's updates once each and queues them for
// every resources client.
func (s *Server) broadcast(ctx context.Context) {
	sub := s.w.Subscribe()
	first := true
	for {
		ups, err := sub.Next(ctx)
		if err != nil {
			return
		}
		type change struct {
			key Key
			del bool
			enc []byte
		}
		changes := make([]change, 0, len(ups))
		encs := make([][]byte, 0, len(ups))
		for _, u := range ups {
			b, err := encodeUpdate(u)
			if err != nil {
				s.log.Error("cannot encode object, not serving it", "key", u.Key, "err", err)
				continue
			}
			changes = append(changes, change{key: u.Key, del: u.Type == Delete, enc: b})
			encs = append(encs, b)
		}
		var frame []byte
		if !first {
			frame = frameOf("updates", 0, encs)
		}
		s.mu.Lock()
		for _, c := range changes {
			if c.del {
				delete(s.enc, c.key)
			} else {
				s.enc[c.key] = c.enc
			}
		}
		s.snapshot = nil
		if first {
			first = false
			close(s.ready)
		} else {
			for c := range s.clients {
				c.push(frame, s.cfg.MaxQueue)
			}
		}
		s.mu.Unlock()
	}
}

// broadcastKV follows the KV prefix and queues each change, encoded once,
// for the KV clients whose prefix holds its key. A Reset of the KV watch
// (after a failure upstream) reaches clients as the puts and deletes that
// make up the difference.
func (s *Server) broadcastKV(ctx context.Context) {
	state := map[string]datastore.KeyValue{}
	first := true
	events := s.cfg.KV.Watch(ctx, s.cfg.KVPrefix)
	for {
		var ev datastore.KVEvent
		select {
		case <-ctx.Done():
			return
		case e, ok := <-events:
			if !ok {
				return
			}
			ev = e
		}
		if ev.Err != nil {
			s.log.Warn("KV watch", "prefix", s.cfg.KVPrefix, "err", ev.Err)
			continue
		}
		var puts []datastore.KeyValue
		var dels []datastore.KeyValue
		switch ev.Type {
		case datastore.KVReset:
			next := make(map[string]datastore.KeyValue, len(ev.Snapshot))
			for _, kv := range ev.Snapshot {
				next[kv.Key] = kv
				if cur, ok := state[kv.Key]; !ok || cur.Rev != kv.Rev || !bytes.Equal(cur.Value, kv.Value) {
					puts = append(puts, kv)
				}
			}
			for k, kv := range state {
				if _, ok := next[k]; !ok {
					dels = append(dels, kv)
				}
			}
			state = next
		case datastore.KVPut:
			state[ev.KV.Key] = ev.KV
			puts = append(puts, ev.KV)
		case datastore.KVDelete:
			delete(state, ev.KV.Key)
			dels = append(dels, ev.KV)
		}
		s.applyKV(puts, dels, ev.Rev, first)
		if ev.Type == datastore.KVReset {
			first = false
		}
	}
}

// wireKV is a KV change on the wire.
type wireKV struct {
	Type  string `json:"type"` // "put", "delete"
	Key   string `json:"key"`
	Value []byte `json:"value,omitempty"`
	Rev   int64  `json:"rev"`
}

func (s *Server) applyKV(puts, dels []datastore.KeyValue, rev int64, first bool) {
	type change struct {
		key string
		enc []byte
		del bool
	}
	var changes []change
	for _, kv := range puts {
		b, _ := json.Marshal(wireKV{Type: "put", Key: kv.Key, Value: kv.Value, Rev: kv.Rev})
		changes = append(changes, change{key: kv.Key, enc: b})
	}
	for _, kv := range dels {
		b, _ := json.Marshal(wireKV{Type: "delete", Key: kv.Key, Value: kv.Value, Rev: rev})
		changes = append(changes, change{key: kv.Key, enc: b, del: true})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range changes {
		if c.del {
			delete(s.kvEnc, c.key)
		} else {
			s.kvEnc[c.key] = c.enc
		}
	}
	s.kvRev = max(s.kvRev, rev)
	clear(s.kvSnaps)
	if first {
		close(s.kvReady)
		return
	}
	for c, prefix := range s.kvSubs {
		var encs [][]byte
		for _, ch := range changes {
			if strings.HasPrefix(ch.key, prefix) {
				encs = append(encs, ch.enc)
			}
		}
		if len(encs) > 0 {
			c.push(frameOf("updates", 0, encs), s.cfg.MaxQueue)
		}
	}
}

// wireUpdate is U of the protocol for resources.
type wireUpdate struct {
	Type   string          `json:"type"`
	Kind   string          `json:"kind"`
	Object json.RawMessage `json:"object"`
}

func encodeUpdate(u Update) ([]byte, error) {
	obj, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", u.Key, err)
	}
	return json.Marshal(wireUpdate{Type: u.Type.String(), Kind: u.Key.Kind, Object: obj})
}

// frameOf assembles a frame from encoded updates without re-encoding them.
func frameOf(typ string, rev int64, encs [][]byte) []byte {
	n := 96
	for _, e := range encs {
		n += len(e) + 1
	}
	var b bytes.Buffer
	b.Grow(n)
	b.WriteString(`{"type":"` + typ + `"`)
	if typ == "snapshot" {
		fmt.Fprintf(&b, `,"version":%d,"rev":%d`, wireVersion, rev)
	}
	b.WriteString(`,"updates":[`)
	for i, e := range encs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(e)
	}
	b.WriteString("]}\n")
	return b.Bytes()
}

var pingFrame = []byte(`{"type":"ping"}` + "\n")

func errorFrame(msg string) []byte {
	b, _ := json.Marshal(struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}{"error", msg})
	return append(b, '\n')
}

// snapshotLocked is the current resources snapshot frame, built once per
// change.
func (s *Server) snapshotLocked() []byte {
	if s.snapshot == nil {
		encs := make([][]byte, 0, len(s.enc))
		for _, e := range s.enc {
			encs = append(encs, e)
		}
		s.snapshot = frameOf("snapshot", 0, encs)
	}
	return s.snapshot
}

// kvSnapshotLocked is the current KV snapshot frame of prefix.
func (s *Server) kvSnapshotLocked(prefix string) []byte {
	if f, ok := s.kvSnaps[prefix]; ok {
		return f
	}
	var encs [][]byte
	for k, e := range s.kvEnc {
		if strings.HasPrefix(k, prefix) {
			encs = append(encs, e)
		}
	}
	f := frameOf("snapshot", s.kvRev, encs)
	s.kvSnaps[prefix] = f
	return f
}

// serverClient is one connection's queue of frames.
type serverClient struct {
	notify chan struct{}

	mu       sync.Mutex
	frames   [][]byte
	queued   int
	overflow bool
}

func (c *serverClient) push(frame []byte, limit int) {
	c.mu.Lock()
	if c.queued+len(frame) > limit {
		c.overflow = true
	} else {
		c.frames = append(c.frames, frame)
		c.queued += len(frame)
	}
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *serverClient) take() ([][]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	frames, overflow := c.frames, c.overflow
	c.frames, c.queued = nil, 0
	return frames, overflow
}

// request is the client's first line.
type request struct {
	Want   string `json:"want"` // "resources", "kv"
	Prefix string `json:"prefix,omitempty"`
}

// serve reads the client's request, then writes the snapshot and every
// change until the client goes away, falls behind, or ctx ends.
func (s *Server) serve(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	remote := conn.RemoteAddr().String()
	conn.SetReadDeadline(time.Now().Add(requestTimeout))
	rd := bufio.NewReader(conn)
	line, err := rd.ReadBytes('\n')
	var req request
	if err == nil {
		err = json.Unmarshal(line, &req)
	}
	if err != nil {
		s.log.Warn("bad request, closing", "client", remote, "err", err)
		return
	}
	conn.SetReadDeadline(time.Time{})

	c := &serverClient{notify: make(chan struct{}, 1)}
	var unregister func()
	switch {
	case req.Want == "resources":
		select {
		case <-s.ready:
		case <-ctx.Done():
			return
		}
		s.mu.Lock()
		c.push(s.snapshotLocked(), max(s.cfg.MaxQueue, len(s.snapshot)))
		s.clients[c] = struct{}{}
		s.mu.Unlock()
		unregister = func() { delete(s.clients, c) }
	case req.Want == "kv" && s.cfg.KV != nil && strings.HasPrefix(req.Prefix, s.cfg.KVPrefix):
		select {
		case <-s.kvReady:
		case <-ctx.Done():
			return
		}
		s.mu.Lock()
		snap := s.kvSnapshotLocked(req.Prefix)
		c.push(snap, max(s.cfg.MaxQueue, len(snap)))
		s.kvSubs[c] = req.Prefix
		s.mu.Unlock()
		unregister = func() { delete(s.kvSubs, c) }
	default:
		msg := fmt.Sprintf("this server serves resources and the KV prefix %q, not %q %q", s.cfg.KVPrefix, req.Want, req.Prefix)
		if s.cfg.KV == nil {
			msg = fmt.Sprintf("this server serves resources only, not %q %q", req.Want, req.Prefix)
		}
		s.write(conn, [][]byte{errorFrame(msg)})
		return
	}
	s.clientsGauge.Inc()
	defer func() {
		s.mu.Lock()
		unregister()
		s.mu.Unlock()
		s.clientsGauge.Dec()
	}()

	// Clients send nothing more: a read returns when the client hangs up.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		var b [1]byte
		rd.Read(b[:])
		cancel()
	}()
	stop := context.AfterFunc(cctx, func() { conn.Close() })
	defer stop()

	heartbeat := time.NewTicker(s.cfg.Heartbeat)
	defer heartbeat.Stop()
	for {
		frames, overflow := c.take()
		if overflow {
			s.dropped.Inc()
			s.log.Warn("client fell behind, disconnecting it", "client", remote, "limit", s.cfg.MaxQueue)
			return
		}
		if len(frames) > 0 {
			if !s.write(conn, frames) {
				return
			}
			heartbeat.Reset(s.cfg.Heartbeat)
		}
		select {
		case <-cctx.Done():
			return
		case <-c.notify:
		case <-heartbeat.C:
			if !s.write(conn, [][]byte{pingFrame}) {
				return
			}
		}
	}
}

func (s *Server) write(conn net.Conn, frames [][]byte) bool {
	conn.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	bufs := net.Buffers(frames)
	n, err := bufs.WriteTo(conn)
	s.sent.Add(float64(n))
	if err != nil {
		if !errors.Is(err, net.ErrClosed) {
			s.dropped.Inc()
			s.log.Warn("write to client failed, disconnecting it", "client", conn.RemoteAddr(), "err", err)
		}
		return false
	}
	return true
}
