package bgp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// DefaultStatusSocket is where the agent answers `calicoctl node status`.
const DefaultStatusSocket = "/var/run/calico/bgp.sock"

// BGP session states, spelled as BIRD prints them (calicoctl shows BIRD's
// words, and scripts grep for "Established").
const (
	StateIdle        = "Idle"
	StateConnect     = "Connect"
	StateActive      = "Active"
	StateOpenSent    = "OpenSent"
	StateOpenConfirm = "OpenConfirm"
	StateEstablished = "Established"
)

// PeerStatus is one session as the status socket reports it.
type PeerStatus struct {
	Name     string   `json:"name"`
	Address  string   `json:"peerAddress"`
	Port     uint16   `json:"port"`
	Type     PeerType `json:"peerType"`
	RRClient bool     `json:"routeReflectorClient,omitempty"`
	PeerAS   uint32   `json:"peerAS"`
	PeerNode string   `json:"peerNode,omitempty"`
	// BGPState is the session's FSM state; Since when it last changed.
	BGPState  string    `json:"bgpState"`
	Since     time.Time `json:"since"`
	LastError string    `json:"lastError,omitempty"`
}

// Status is the agent's BGP status.
type Status struct {
	Node     string       `json:"node"`
	Running  bool         `json:"running"`
	RouterID string       `json:"routerID,omitempty"`
	AS       uint32       `json:"asNumber,omitempty"`
	Port     uint16       `json:"listenPort,omitempty"`
	Peers    []PeerStatus `json:"peers"`
	Ready    bool         `json:"ready"`
	Detail   string       `json:"detail,omitempty"`
}

// statusBook is the shared record of sessions: written by the actor (the
// configured set), gobgp's event goroutine (states) and the log adapter
// (errors); read by the status socket and the readiness check.
type statusBook struct {
	now func() time.Time

	mu      sync.Mutex
	node    string
	running bool
	id      Identity
	order   []netip.Addr
	peers   map[netip.Addr]*PeerStatus
	errs    map[netip.Addr]string // errors seen before/while configured
	ready   bool
	detail  string
	changed chan struct{} // 1-slot
}

func newStatusBook(node string, now func() time.Time) *statusBook {
	return &statusBook{node: node, now: now, peers: map[netip.Addr]*PeerStatus{}, errs: map[netip.Addr]string{}, changed: make(chan struct{}, 1)}
}

func (b *statusBook) notify() {
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

func (b *statusBook) setIdentity(running bool, id Identity) {
	b.mu.Lock()
	b.running, b.id = running, id
	b.mu.Unlock()
}

// setPeers replaces the configured sessions, keeping the state of those
// that stay.
func (b *statusBook) setPeers(ss []Session) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.peers
	b.peers = map[netip.Addr]*PeerStatus{}
	b.order = b.order[:0]
	for _, s := range ss {
		ps := &PeerStatus{
			Name: s.Name, Address: s.Addr.String(), Port: s.RemotePort(), Type: s.Type, RRClient: s.RRClient,
			PeerAS: s.PeerAS, PeerNode: s.PeerNode, BGPState: StateIdle, Since: b.now(),
		}
		if o, ok := old[s.Addr]; ok {
			ps.BGPState, ps.Since, ps.LastError = o.BGPState, o.Since, o.LastError
		}
		b.peers[s.Addr] = ps
		b.order = append(b.order, s.Addr)
	}
	b.notify()
}

func (b *statusBook) setState(addr netip.Addr, state string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.peers[addr]
	if !ok || p.BGPState == state {
		return
	}
	p.BGPState, p.Since = state, b.now()
	if state == StateEstablished {
		p.LastError = ""
	}
	b.notify()
}

func (b *statusBook) setError(addr netip.Addr, msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.peers[addr]; ok {
		p.LastError = msg
	}
}

func (b *statusBook) established(addr netip.Addr) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.peers[addr]
	return ok && p.BGPState == StateEstablished
}

func (b *statusBook) setReady(ready bool, detail string) {
	b.mu.Lock()
	b.ready, b.detail = ready, detail
	b.mu.Unlock()
}

func (b *statusBook) snapshot() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Status{Node: b.node, Running: b.running, Ready: b.ready, Detail: b.detail, Peers: []PeerStatus{}}
	if b.running {
		st.RouterID, st.AS, st.Port = b.id.RouterID.String(), b.id.AS, b.id.Port()
	}
	for _, a := range b.order {
		st.Peers = append(st.Peers, *b.peers[a])
	}
	return st
}

// Readiness is calico-node's -bird-ready check: ready when no session is
// configured; while the agent is young (threshold) every session must be
// Established, so that a rolling update waits for BGP to be back; after
// that one Established session is enough, so that a node going down does
// not make the whole mesh unready.
func Readiness(peers []PeerStatus, age, threshold time.Duration) (bool, string) {
	if len(peers) == 0 {
		return true, "no BGP peers configured"
	}
	var down []string
	for _, p := range peers {
		if p.BGPState != StateEstablished {
			down = append(down, p.Address)
		}
	}
	up := len(peers) - len(down)
	switch {
	case len(down) == 0:
		return true, fmt.Sprintf("BGP established with %d peer(s)", up)
	case age < threshold:
		return false, "BGP not established with " + strings.Join(down, ",")
	case up > 0:
		return true, fmt.Sprintf("BGP established with %d of %d peers", up, len(peers))
	default:
		return false, "BGP not established with " + strings.Join(down, ",")
	}
}

// The status socket's protocol: the client sends one request line,
// {"query":"status"|"routes"|"why","prefix":"..."}, and reads one JSON
// document: the Status for "status", a queryReply for the others. A
// client that sends nothing (the first version of the protocol) gets the
// status after requestWait.
type queryRequest struct {
	Query  string `json:"query"`
	Prefix string `json:"prefix,omitempty"`
}

type queryReply struct {
	Error  string        `json:"error,omitempty"`
	Routes *RoutesReport `json:"routes,omitempty"`
	Why    *WhyReport    `json:"why,omitempty"`
}

const (
	requestWait = time.Second
	// queryTimeout bounds the gobgp and kernel reads of one answer.
	queryTimeout = 10 * time.Second
	// maxQueries answered at once; more wait for a slot.
	maxQueries = 4
)

// serveQueries answers every connection on l until l is closed, a few at
// a time, and returns once the answers under way are written.
func (a *Actor) serveQueries(ctx context.Context, l net.Listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, maxQueries)
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			a.answer(ctx, c)
		})
	}
}

func (a *Actor) answer(ctx context.Context, c net.Conn) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(requestWait))
	var req queryRequest
	line, err := bufio.NewReader(io.LimitReader(c, 4096)).ReadBytes('\n')
	if len(line) > 0 {
		if jerr := json.Unmarshal(line, &req); jerr != nil {
			req.Query = "invalid"
		}
	} else if err == nil {
		req.Query = "invalid"
	}
	var out any
	switch req.Query {
	case "", "status":
		out = a.book.snapshot()
	case "routes":
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		rep, err := a.Routes(qctx)
		cancel()
		out = replyOf(queryReply{Routes: rep}, err)
	case "why":
		p, perr := parsePrefixArg(req.Prefix)
		if perr != nil {
			out = replyOf(queryReply{}, perr)
			break
		}
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		rep, err := a.Why(qctx, p)
		cancel()
		out = replyOf(queryReply{Why: rep}, err)
	default:
		out = queryReply{Error: fmt.Sprintf("unknown query %q", req.Query)}
	}
	c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	json.NewEncoder(c).Encode(out)
}

func replyOf(r queryReply, err error) queryReply {
	if err != nil {
		return queryReply{Error: err.Error()}
	}
	return r
}

// parsePrefixArg reads a prefix, or an address as its host prefix.
func parsePrefixArg(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a prefix (10.244.1.0/26) or an address", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// listenStatus creates the status socket, replacing a stale one left by a
// previous run.
func listenStatus(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create status socket directory: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale status socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on status socket %s: %w", path, err)
	}
	os.Chmod(path, 0o600)
	return l, nil
}

// ErrNotRunning is returned by QueryStatus when no agent answers.
var ErrNotRunning = errors.New("Calico process is not running.") //nolint:staticcheck // the message calicoctl prints

// QueryStatus asks the agent listening on the socket at path.
func QueryStatus(ctx context.Context, path string) (*Status, error) {
	var st Status
	if err := query(ctx, path, queryRequest{Query: "status"}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// QueryRoutes asks the agent for its paths (`calicoctl node routes`).
func QueryRoutes(ctx context.Context, path string) (*RoutesReport, error) {
	var r queryReply
	if err := query(ctx, path, queryRequest{Query: "routes"}, &r); err != nil {
		return nil, err
	}
	if r.Error != "" || r.Routes == nil {
		return nil, replyError(r)
	}
	return r.Routes, nil
}

// QueryWhy asks the agent to explain prefix (`calicoctl node bgp why`).
func QueryWhy(ctx context.Context, path, prefix string) (*WhyReport, error) {
	var r queryReply
	if err := query(ctx, path, queryRequest{Query: "why", Prefix: prefix}, &r); err != nil {
		return nil, err
	}
	if r.Error != "" || r.Why == nil {
		return nil, replyError(r)
	}
	return r.Why, nil
}

// ErrAgent is an error the agent answered with.
var ErrAgent = errors.New("the agent answered")

func replyError(r queryReply) error {
	if r.Error == "" {
		// An agent that predates the query answers with its status.
		return fmt.Errorf("%w with no answer to the query: it may be older than this client", ErrAgent)
	}
	return fmt.Errorf("%w: %s", ErrAgent, r.Error)
}

func query(ctx context.Context, path string, req queryRequest, out any) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("%w (%v)", ErrNotRunning, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	b, _ := json.Marshal(req)
	// An agent of the first protocol writes its status without reading:
	// a failed write is no reason not to read that.
	c.Write(append(b, '\n'))
	if err := json.NewDecoder(c).Decode(out); err != nil {
		return fmt.Errorf("read %s answer from %s: %w", req.Query, path, err)
	}
	return nil
}

// WriteStatus prints st the way `calicoctl node status` does.
func WriteStatus(w io.Writer, st *Status, now time.Time) error {
	var b strings.Builder
	b.WriteString("Calico process is running.\n")
	if !st.Running {
		b.WriteString("\nThe BGP speaker is not running")
		if st.Detail != "" {
			b.WriteString(" (" + st.Detail + ")")
		}
		b.WriteString(".\n")
	}
	for _, fam := range []string{"4", "6"} {
		if !st.Running {
			break
		}
		var rows [][]string
		for _, p := range st.Peers {
			a, err := netip.ParseAddr(p.Address)
			if err != nil || a.Is4() != (fam == "4") {
				continue
			}
			typ := string(p.Type)
			if p.RRClient {
				typ += " (RR client)"
			}
			state := "start"
			info := p.BGPState
			if p.BGPState == StateEstablished {
				state = "up"
			} else if p.LastError != "" {
				info += " " + p.LastError
			}
			rows = append(rows, []string{p.Address, typ, state, formatSince(p.Since, now), info})
		}
		fmt.Fprintf(&b, "\nIPv%s BGP status\n", fam)
		if len(rows) == 0 {
			fmt.Fprintf(&b, "No IPv%s peers found.\n", fam)
			continue
		}
		writeTable(&b, []string{"Peer address", "Peer type", "State", "Since", "Info"}, rows)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// formatSince is BIRD's protocol time format: the time of day for today,
// the date otherwise.
func formatSince(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	t = t.Local()
	if y, m, d := t.Date(); func() bool { y2, m2, d2 := now.Local().Date(); return y == y2 && m == m2 && d == d2 }() {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02")
}

// writeTable draws the ASCII table calicoctl's tablewriter draws:
// upper-case centred headings, left-aligned cells, one space of padding.
func writeTable(b *strings.Builder, head []string, rows [][]string) {
	width := make([]int, len(head))
	for i, h := range head {
		width[i] = len(h)
	}
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	sep := func() {
		b.WriteString("+")
		for _, w := range width {
			b.WriteString(strings.Repeat("-", w+2) + "+")
		}
		b.WriteString("\n")
	}
	sep()
	b.WriteString("|")
	for i, h := range head {
		h = strings.ToUpper(h)
		gap := width[i] - len(h)
		left := gap / 2
		b.WriteString(" " + strings.Repeat(" ", left) + h + strings.Repeat(" ", gap-left) + " |")
	}
	b.WriteString("\n")
	sep()
	for _, r := range rows {
		b.WriteString("|")
		for i, c := range r {
			b.WriteString(" " + c + strings.Repeat(" ", width[i]-len(c)) + " |")
		}
		b.WriteString("\n")
	}
	sep()
}
