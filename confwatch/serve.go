package confwatch

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The fan-out: one Watcher's cache served to many agents over stream
// connections, so that the datastore (the Kubernetes API server above all)
// carries one set of watches and one stream of events however many nodes
// read them — what Calico's Typha does for felix. Server is the serving
// side, Remote (remote.go) the Source an agent's Watcher reads instead of
// the datastore.
//
// Wire protocol (version 1): newline-delimited JSON frames, server to
// client only.
//
//	{"type":"snapshot","version":1,"updates":[U, ...]}   first frame: every object
//	{"type":"updates","updates":[U, ...]}                 later changes, in order
//	{"type":"ping"}                                       after a quiet heartbeat period
//
// where U is {"type":"set"|"delete","kind":K,"object":O} and O the
// object's projectcalico.org/v3 JSON (for a delete, its last value). A
// client that cannot keep up is disconnected rather than buffered without
// bound; it reconnects and starts from a fresh snapshot.

const (
	wireVersion = 1

	defaultMaxQueue     = 256 << 20
	defaultWriteTimeout = 30 * time.Second
	defaultHeartbeat    = 10 * time.Second
)

// ServerConfig tunes a Server; the zero value is usable.
type ServerConfig struct {
	// MaxQueue is how many bytes may wait for one client before it is
	// disconnected; default 256 MiB.
	MaxQueue int
	// WriteTimeout bounds one write to a client; default 30 s.
	WriteTimeout time.Duration
	// Heartbeat is how long a client may go without a frame before it
	// gets a ping, so that it can tell a quiet server from a dead
	// connection; default 10 s.
	Heartbeat time.Duration
	Logger    *slog.Logger
	// Registerer receives the server's metrics; nil for none.
	Registerer prometheus.Registerer
}

// Server serves a Watcher's cache to Remote clients on a listener. Each
// change is encoded once, whatever the number of clients; a new client's
// snapshot is the concatenation of the current encodings, shared by all
// clients that connect before the next change.
//
// Thread safety: Run owns the listener; the broadcaster goroutine and the
// client goroutines share the encodings and client set under mu.
type Server struct {
	w   *Watcher
	l   net.Listener
	cfg ServerConfig
	log *slog.Logger

	ready chan struct{} // closed once the first snapshot is encoded

	mu       sync.Mutex
	enc      map[Key][]byte // each object's current encoded update
	snapshot []byte         // the snapshot frame of enc; nil after a change
	clients  map[*serverClient]struct{}

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
		enc:     map[Key][]byte{},
		clients: map[*serverClient]struct{}{},
		clientsGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "calico_confwatch_server_clients", Help: "Agents connected to the confwatch fan-out.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "calico_confwatch_server_clients_dropped_total", Help: "Agents disconnected for falling behind or failed writes.",
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
// Watcher is in sync.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.broadcast(ctx) })
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
// every client.
func (s *Server) broadcast(ctx context.Context) {
	sub := s.w.Subscribe()
	first := true
	for {
		ups, err := sub.Next(ctx)
		if err != nil {
			return
		}
		encs := make([][]byte, 0, len(ups))
		keys := make([]Key, 0, len(ups))
		for _, u := range ups {
			b, err := encodeUpdate(u)
			if err != nil {
				s.log.Error("cannot encode object, not serving it", "key", u.Key, "err", err)
				continue
			}
			encs, keys = append(encs, b), append(keys, u.Key)
		}
		var frame []byte
		if !first {
			frame = frameOf("updates", encs)
		}
		s.mu.Lock()
		for i, k := range keys {
			if ups[i].Type == Delete {
				delete(s.enc, k)
			} else {
				s.enc[k] = encs[i]
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

// wireUpdate is U of the protocol.
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
func frameOf(typ string, encs [][]byte) []byte {
	n := 64
	for _, e := range encs {
		n += len(e) + 1
	}
	var b bytes.Buffer
	b.Grow(n)
	b.WriteString(`{"type":"` + typ + `"`)
	if typ == "snapshot" {
		fmt.Fprintf(&b, `,"version":%d`, wireVersion)
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

// snapshotLocked is the current snapshot frame, built once per change.
func (s *Server) snapshotLocked() []byte {
	if s.snapshot == nil {
		encs := make([][]byte, 0, len(s.enc))
		for _, e := range s.enc {
			encs = append(encs, e)
		}
		s.snapshot = frameOf("snapshot", encs)
	}
	return s.snapshot
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

// serve writes the snapshot and then every change to one client until it
// goes away, falls behind, or ctx ends.
func (s *Server) serve(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	remote := conn.RemoteAddr().String()
	select {
	case <-s.ready:
	case <-ctx.Done():
		return
	}
	c := &serverClient{notify: make(chan struct{}, 1)}
	s.mu.Lock()
	c.push(s.snapshotLocked(), max(s.cfg.MaxQueue, len(s.snapshot)))
	s.clients[c] = struct{}{}
	s.mu.Unlock()
	s.clientsGauge.Inc()
	defer func() {
		s.mu.Lock()
		delete(s.clients, c)
		s.mu.Unlock()
		s.clientsGauge.Dec()
	}()

	// Clients send nothing: a read returns when the client hangs up.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		var b [1]byte
		conn.Read(b[:])
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
