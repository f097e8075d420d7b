package confwatch

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// fanOut is a hub Watcher over a fake datastore, served on loopback.
type fanOut struct {
	src  *fakeSource
	hub  *Watcher
	cfg  ServerConfig
	addr string
	stop func() // stops the server (not the hub)
}

func startFanOut(t *testing.T, src *fakeSource, cfg ServerConfig, wrap func(net.Listener) net.Listener) *fanOut {
	t.Helper()
	hub, _ := start(t, src)
	fo := &fanOut{src: src, hub: hub, cfg: cfg}
	fo.serve(t, "127.0.0.1:0", cfg, wrap)
	return fo
}

// serve starts a server of the hub on addr.
func (fo *fanOut) serve(t *testing.T, addr string, cfg ServerConfig, wrap func(net.Listener) net.Listener) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		l = wrap(l)
	}
	if fo.addr == "" { // a restart keeps the address the agents dial
		fo.addr = l.Addr().String()
	}
	srv := NewServer(fo.hub, l, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once bool
	fo.stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server Run returned %v", err)
		}
	}
	t.Cleanup(fo.stop)
}

func (fo *fanOut) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", fo.addr)
}

// labelled is a Node with a label, so that content, not only names, is
// compared.
func labelled(name string, rev int64, v string) api.Object {
	n := node(name, rev).(*api.Node)
	n.Labels = map[string]string{"v": v}
	n.Spec.BGP = &api.NodeBGPSpec{IPv4Address: "192.0.2.1/24"}
	return n
}

func wep(ns, name string, rev int64) api.Object {
	w := &api.WorkloadEndpoint{}
	w.Kind, w.APIVersion, w.Namespace, w.Name = "WorkloadEndpoint", api.GroupVersion, ns, name
	w.ResourceVersion = strconv.FormatInt(rev, 10)
	w.Labels = map[string]string{"app": "web"}
	w.Spec = api.WorkloadEndpointSpec{Orchestrator: "k8s", Node: "n1", Pod: "p", Endpoint: "eth0",
		IPNetworks: []string{"10.0.0.1/32"}, Profiles: []string{"kns." + ns}, InterfaceName: "cali0123456789a"}
	return w
}

func jsonOf(t *testing.T, o api.Object) string {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// contents maps "kind/ns/name" to the object's JSON.
func contents(t *testing.T, ups []Update) map[string]string {
	out := map[string]string{}
	for _, u := range ups {
		out[u.Key.String()] = jsonOf(t, u.Object)
	}
	return out
}

// collect reads s until it has n updates.
func collect(t *testing.T, s *Subscription, n int) []Update {
	t.Helper()
	var got []Update
	for len(got) < n {
		got = append(got, next(t, s)...)
	}
	return got
}

// Agents reading the fan-out see what the hub sees: the same snapshot,
// object for object, then every change; after the server goes away and
// comes back they catch up with what changed meanwhile.
func TestFanOutServesSnapshotAndUpdates(t *testing.T) {
	f := newFake()
	f.objs["IPPool"] = []api.Object{pool("a", 5), pool("b", 6)}
	f.objs["Node"] = []api.Object{labelled("n1", 7, "x")}
	f.objs["WorkloadEndpoint"] = []api.Object{wep("ns1", "w1", 8)}
	fo := startFanOut(t, f, ServerConfig{}, nil)

	var agents []*Subscription
	for range 2 {
		a, _ := start(t, NewRemote(fo.dial, quiet()))
		agents = append(agents, a.Subscribe())
	}
	want := contents(t, next(t, fo.hub.Subscribe()))
	for i, s := range agents {
		got := contents(t, next(t, s))
		if len(got) != 4 || len(got) != len(want) {
			t.Fatalf("agent %d snapshot has %d objects, hub %d", i, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("agent %d: %s = %s, hub has %s", i, k, got[k], v)
			}
		}
	}

	f.events <- datastore.Event{Type: datastore.Modified, Object: labelled("n1", 12, "y"), Revision: 12}
	f.events <- datastore.Event{Type: datastore.Deleted, Object: pool("a", 5), Revision: 13}
	f.events <- datastore.Event{Type: datastore.Added, Object: wep("ns1", "w2", 14), Revision: 14}
	for i, s := range agents {
		ups := collect(t, s, 3)
		if got := names(ups); !slices.Equal(got, []string{"delete:IPPool(a)", "set:Node(n1)", "set:WorkloadEndpoint(ns1/w2)"}) {
			t.Errorf("agent %d updates = %v", i, got)
		}
		for _, u := range ups {
			if u.Key.Name == "n1" && u.Object.Meta().Labels["v"] != "y" {
				t.Errorf("agent %d: Node n1 labels %v, want v=y", i, u.Object.Meta().Labels)
			}
		}
	}

	// The server stops; the hub keeps following the datastore; a server
	// on the same address again: the agents reconnect and receive the
	// difference.
	addr := fo.addr
	hubSub := fo.hub.Subscribe()
	next(t, hubSub)
	fo.stop()
	f.events <- datastore.Event{Type: datastore.Deleted, Object: wep("ns1", "w1", 8), Revision: 20}
	f.events <- datastore.Event{Type: datastore.Modified, Object: pool("b", 21), Revision: 21}
	collect(t, hubSub, 2) // the hub has both changes before any agent can reconnect
	fo.serve(t, addr, ServerConfig{}, nil)
	for i, s := range agents {
		if got := names(collect(t, s, 2)); !slices.Equal(got, []string{"delete:WorkloadEndpoint(ns1/w1)", "set:IPPool(b)"}) {
			t.Errorf("agent %d after reconnecting = %v", i, got)
		}
	}
}

// smallBuffers makes accepted connections' send buffers tiny, so that a
// client that does not read blocks the server's writes at once.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// A client that stops reading is disconnected once its queue passes the
// limit; the others keep receiving everything. A quiet connection gets
// pings.
func TestFanOutDropsSlowClient(t *testing.T) {
	f := newFake()
	fo := startFanOut(t, f, ServerConfig{MaxQueue: 32 << 10, Heartbeat: 50 * time.Millisecond},
		func(l net.Listener) net.Listener { return smallBuffers{l} })

	// A raw client: reads the snapshot and a ping, then stops reading.
	raw, err := net.Dial("tcp", fo.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := io.WriteString(raw, `{"want":"resources"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(raw)
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, want := range []string{`{"type":"snapshot","version":1,"rev":0,"updates":[]}`, `{"type":"ping"}`} {
		line, err := rd.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != want {
			t.Fatalf("raw client read %q, %v; want %s", line, err, want)
		}
	}

	good, _ := start(t, NewRemote(fo.dial, quiet()))
	s := good.Subscribe("Node")
	next(t, s)
	const n = 400
	big := strings.Repeat("x", 1000)
	for i := range n {
		o := labelled("n"+strconv.Itoa(i), int64(100+i), big)
		f.events <- datastore.Event{Type: datastore.Added, Object: o, Revision: int64(100 + i)}
	}
	if got := len(collect(t, s, n)); got != n {
		t.Errorf("reading agent received %d of %d updates", got, n)
	}
	// The server closed the raw client: reading what was sent ends in EOF.
	raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, rd); err != nil {
		t.Errorf("slow client: %v, want the server to have closed the connection", err)
	}
}

// fakeKV is a KV whose Watch the test feeds; nothing else is used.
type fakeKV struct {
	datastore.KV // nil: any other method panics
	events       chan datastore.KVEvent
	prefix       string
}

func (f *fakeKV) Watch(ctx context.Context, prefix string) <-chan datastore.KVEvent {
	f.prefix = prefix
	return f.events
}

func kv(key string, rev int64) datastore.KeyValue {
	return datastore.KeyValue{Key: key, Value: []byte(`{"rev":` + strconv.FormatInt(rev, 10) + `}`), Rev: rev}
}

func nextKV(t *testing.T, ch <-chan datastore.KVEvent) datastore.KVEvent {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no KV event within 5 s")
		return datastore.KVEvent{}
	}
}

func describe(ev datastore.KVEvent) string {
	switch ev.Type {
	case datastore.KVReset:
		var keys []string
		for _, kv := range ev.Snapshot {
			keys = append(keys, kv.Key+"@"+strconv.FormatInt(kv.Rev, 10)+"="+string(kv.Value))
		}
		slices.Sort(keys)
		return "reset " + strings.Join(keys, " ")
	case datastore.KVPut:
		return "put " + ev.KV.Key + "@" + strconv.FormatInt(ev.KV.Rev, 10) + "=" + string(ev.KV.Value)
	case datastore.KVDelete:
		return "delete " + ev.KV.Key
	}
	return fmt.Sprintf("error %v", ev.Err)
}

// An agent's KV watch through the fan-out gets the KV contract: a Reset of
// the keys under its prefix, then only their changes; an upstream Reset
// arrives as the difference; a lost connection ends in a fresh Reset.
func TestFanOutServesKV(t *testing.T) {
	const (
		blocks = "/calico/ipam/v2/assignment/"
		a, b   = blocks + "ipv4/block/10.0.0.0-26", blocks + "ipv4/block/10.0.0.64-26"
		c      = blocks + "ipv4/block/10.0.0.128-26"
		x, y   = "/calico/ipam/v2/host/n1/ipv4/block/10.0.0.0-26", "/calico/ipam/v2/host/n2/ipv4/block/10.0.0.64-26"
	)
	upstream := &fakeKV{events: make(chan datastore.KVEvent, 10)}
	fo := startFanOut(t, newFake(), ServerConfig{KV: upstream, KVPrefix: "/calico/ipam/v2/"}, nil)
	upstream.events <- datastore.KVEvent{Type: datastore.KVReset, Snapshot: []datastore.KeyValue{kv(a, 5), kv(x, 6)}, Rev: 6}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agentKV := NewRemote(fo.dial, quiet()).KV(nil)
	evs := agentKV.Watch(ctx, blocks)
	step := func(want string) {
		t.Helper()
		if got := describe(nextKV(t, evs)); got != want {
			t.Errorf("got %s\nwant %s", got, want)
		}
	}
	step(`reset ` + a + `@5={"rev":5}`)
	upstream.events <- datastore.KVEvent{Type: datastore.KVPut, KV: kv(b, 7), Rev: 7}
	upstream.events <- datastore.KVEvent{Type: datastore.KVPut, KV: kv(y, 8), Rev: 8} // not under the prefix
	upstream.events <- datastore.KVEvent{Type: datastore.KVDelete, KV: kv(a, 5), Rev: 9}
	step(`put ` + b + `@7={"rev":7}`)
	step(`delete ` + a)
	upstream.events <- datastore.KVEvent{Type: datastore.KVReset, Snapshot: []datastore.KeyValue{kv(b, 10), kv(c, 11), kv(x, 6), kv(y, 8)}, Rev: 11}
	got := []string{describe(nextKV(t, evs)), describe(nextKV(t, evs))}
	slices.Sort(got)
	want := []string{`put ` + b + `@10={"rev":10}`, `put ` + c + `@11={"rev":11}`}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("after an upstream reset: %v, want %v", got, want)
	}

	addr := fo.addr
	fo.stop()
	if ev := nextKV(t, evs); ev.Err == nil {
		t.Errorf("server gone: got %s, want an error event", describe(ev))
	}
	fo.serve(t, addr, fo.cfg, nil) // the same KV: the new server's watch starts with its state
	upstream.events <- datastore.KVEvent{Type: datastore.KVReset, Snapshot: []datastore.KeyValue{kv(b, 10), kv(c, 11), kv(x, 6)}, Rev: 12}
	for {
		ev := nextKV(t, evs)
		if ev.Err != nil {
			continue // reconnect attempts before the server was back
		}
		want := `reset ` + c + `@11={"rev":11} ` + b + `@10={"rev":10}` // sorted keys
		if got := describe(ev); got != want {
			t.Errorf("after reconnecting: %s, want %s", got, want)
		}
		break
	}

	// A prefix the server does not serve is refused with a reason.
	other := NewRemote(fo.dial, quiet()).KV(nil).Watch(ctx, "/calico/resources/")
	if ev := nextKV(t, other); ev.Err == nil || !strings.Contains(ev.Err.Error(), "/calico/ipam/v2/") {
		t.Errorf("watch of another prefix: %s, want an error naming the served prefix", describe(ev))
	}
}

// Changes to objects whose resourceVersion is not a number (KDD's
// profiles: "<namespace's>/") reach agents through the fan-out, live and
// after a reconnection.
func TestFanOutNonNumericVersions(t *testing.T) {
	f := newFake()
	f.objs["Profile"] = []api.Object{profile("kns.a", "10/", "dev")}
	fo := startFanOut(t, f, ServerConfig{}, nil)
	a, _ := start(t, NewRemote(fo.dial, quiet()))
	s := a.Subscribe("Profile")
	next(t, s)
	env := func(ups []Update) string {
		t.Helper()
		if len(ups) != 1 || ups[0].Type != Set {
			t.Fatalf("updates %v, want one set", names(ups))
		}
		return ups[0].Object.(*api.Profile).Spec.LabelsToApply["env"]
	}
	f.events <- datastore.Event{Type: datastore.Modified, Object: profile("kns.a", "12/", "test"), Revision: 12}
	if got := env(next(t, s)); got != "test" {
		t.Errorf("agent's kns.a env = %q, want test", got)
	}
	f.events <- datastore.Event{Type: datastore.Modified, Object: profile("kns.a", "13/", "prod"), Revision: 13}
	if got := env(next(t, s)); got != "prod" {
		t.Errorf("agent's kns.a env = %q, want prod", got)
	}

	hubSub := fo.hub.Subscribe("Profile")
	next(t, hubSub)
	addr := fo.addr
	fo.stop()
	f.events <- datastore.Event{Type: datastore.Modified, Object: profile("kns.a", "14/", "staging"), Revision: 14}
	next(t, hubSub)
	fo.serve(t, addr, ServerConfig{}, nil)
	if got := env(next(t, s)); got != "staging" {
		t.Errorf("agent's kns.a env after reconnecting = %q, want staging", got)
	}
}
