// As in the calico-node binary (run.go): no MPTCP listeners, which cannot
// carry TCP MD5 signatures.
//go:debug multipathtcp=0

package bgp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/ipamkv"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

// fakeUpdates is a confwatch subscription fed by the test.
type fakeUpdates struct{ ch chan []confwatch.Update }

func (f *fakeUpdates) Updates(context.Context) <-chan []confwatch.Update { return f.ch }

func set(objs ...api.Object) []confwatch.Update {
	var ups []confwatch.Update
	for _, o := range objs {
		ups = append(ups, confwatch.Update{Type: confwatch.Set, Key: confwatch.KeyOf(o), Object: o})
	}
	return ups
}

func typed[T api.Object](o T, kind string) T {
	o.Type().Kind = kind
	return o
}

// fakeSink records what each source last wanted.
type fakeSink struct {
	mu      sync.Mutex
	rs      map[string][]routes.Route
	updates int // changes taken through Update
}

func (s *fakeSink) Set(source string, rs []routes.Route) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rs == nil {
		s.rs = map[string][]routes.Route{}
	}
	s.rs[source] = slices.Clone(rs)
}

// Update applies a change as the route table does: by destination
// (every route here is in the main table), kept in the order Set's are.
func (s *fakeSink) Update(source string, set, del []routes.Route) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rs == nil {
		s.rs = map[string][]routes.Route{}
	}
	gone := map[netip.Prefix]bool{}
	for _, r := range append(slices.Clone(del), set...) {
		gone[r.Dst] = true
	}
	rs := slices.DeleteFunc(slices.Clone(s.rs[source]), func(r routes.Route) bool { return gone[r.Dst] })
	rs = append(rs, set...)
	slices.SortFunc(rs, func(x, y routes.Route) int { return comparePrefix(x.Dst, y.Dst) })
	s.rs[source] = rs
	s.updates++
}

func (s *fakeSink) routes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return routeStrings(s.rs[routes.SourceBGP])
}

type fakeReporter struct {
	mu     sync.Mutex
	ready  bool
	detail string
}

func (r *fakeReporter) Report(live, ready bool, detail string) {
	r.mu.Lock()
	r.ready, r.detail = ready, detail
	r.mu.Unlock()
}

func (r *fakeReporter) get() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready, r.detail
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
}

func putJSON(t testing.TB, kv *clientv3.Client, key string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kv.Put(ctx, key, string(b)); err != nil {
		t.Fatal(err)
	}
}

func affinityKey(node, cidr string) string {
	return ipamkv.AffinityKey(ipamkv.AffinityHost, node, netip.MustParsePrefix(cidr))
}

func blockKey(cidr string) string { return ipamkv.BlockKey(netip.MustParsePrefix(cidr)) }

// blockJSON is an IPAM block in Calico's shape with the given ordinals
// allocated to holders (ordinal -> node).
func blockJSON(cidr, affinityNode string, holders map[int]string) map[string]any {
	p := netip.MustParsePrefix(cidr)
	n := 1 << (32 - p.Bits())
	allocs := make([]any, n)
	var attrs []any
	var unalloc []int
	for i := range n {
		if node, ok := holders[i]; ok {
			allocs[i] = len(attrs)
			attrs = append(attrs, map[string]any{"handle_id": fmt.Sprintf("h%d", i), "secondary": map[string]string{"node": node}})
		} else {
			unalloc = append(unalloc, i)
		}
	}
	return map[string]any{"cidr": cidr, "affinity": "host:" + affinityNode, "allocations": allocs,
		"unallocated": unalloc, "attributes": attrs, "sequenceNumber": 1, "deleted": false}
}

// defaultConfig is the tests' BGPConfiguration "default": a short restart
// time, and listeners on the node addresses only (loopback), not on every
// address of the machine.
func defaultConfig(f func(*api.BGPConfigurationSpec)) *api.BGPConfiguration {
	return bgpConfig("default", func(s *api.BGPConfigurationSpec) {
		s.NodeMeshMaxRestartTime = &api.Duration{Duration: 3 * time.Second}
		s.BindMode = ptr(api.BindModeNodeIP)
		if f != nil {
			f(s)
		}
	})
}

// testActor is one in-process speaker on a loopback address.
type testActor struct {
	a       *Actor
	updates *fakeUpdates
	sink    *fakeSink
	rep     *fakeReporter
	socket  string
	cancel  context.CancelFunc
	done    chan error
}

func startActor(t *testing.T, node string, kv *clientv3.Client, snapshot []confwatch.Update, secrets string) *testActor {
	t.Helper()
	ta := &testActor{updates: &fakeUpdates{ch: make(chan []confwatch.Update, 16)}, sink: &fakeSink{}, rep: &fakeReporter{},
		socket: filepath.Join(t.TempDir(), "bgp.sock"), done: make(chan error, 1)}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", node)
	ta.a = New(Config{NodeName: node, StatusSocket: ta.socket, Logger: logger, ReadyThreshold: time.Hour, Secrets: SecretsDir(secrets)},
		ta.updates, ipamStoreOf(t, kv), ta.sink, ta.rep)
	ta.updates.ch <- snapshot
	ctx, cancel := context.WithCancel(context.Background())
	ta.cancel = cancel
	go func() { ta.done <- ta.a.Run(ctx) }()
	t.Cleanup(ta.stop)
	return ta
}

func (ta *testActor) stop() {
	if ta.cancel == nil {
		return
	}
	ta.cancel()
	<-ta.done
	ta.cancel = nil
}

func (ta *testActor) session(addr string) (PeerStatus, bool) {
	for _, p := range ta.a.Status().Peers {
		if p.Address == addr {
			return p, true
		}
	}
	return PeerStatus{}, false
}

// TestActorsOnLoopback runs two speakers in this process, meshed over
// 127.0.0.1 and 127.0.0.2, with IPAM in a real etcd: blocks and borrowed
// addresses travel, sessions survive unrelated configuration changes, and a
// stopped speaker's routes outlive it for the graceful-restart time only.
func TestActorsOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and BGP sessions")
	}
	etcd := etcdtest.Start(t)
	kv := etcd.Client(t)
	portA, portB := proctest.FreePort(t), proctest.FreePort(t)
	snapshot := set(
		typed(node("a", "127.0.0.1/8"), "Node"), typed(node("b", "127.0.0.2/8"), "Node"),
		typed(ippool("pool", "10.244.0.0/16", nil), "IPPool"),
		typed(defaultConfig(nil), "BGPConfiguration"),
		typed(bgpConfig("node.a", func(s *api.BGPConfigurationSpec) { s.ListenPort = uint16(portA) }), "BGPConfiguration"),
		typed(bgpConfig("node.b", func(s *api.BGPConfigurationSpec) { s.ListenPort = uint16(portB) }), "BGPConfiguration"),
	)
	putJSON(t, kv, affinityKey("a", "10.244.1.0/26"), map[string]any{"state": "confirmed", "deleted": false})
	putJSON(t, kv, affinityKey("b", "10.244.2.0/26"), map[string]any{"state": "confirmed", "deleted": false})
	putJSON(t, kv, affinityKey("b", "10.244.3.0/26"), map[string]any{"state": "pending", "deleted": false})

	secretsA, secretsB := t.TempDir(), t.TempDir()
	a := startActor(t, "a", kv, snapshot, secretsA)
	b := startActor(t, "b", kv, snapshot, secretsB)

	eventually(t, 30*time.Second, "a to learn b's block", func() (bool, string) {
		got := a.sink.routes()
		return slices.Equal(got, []string{"10.244.1.0/26 blackhole", "10.244.2.0/26 via 127.0.0.2"}), fmt.Sprint(got)
	})
	eventually(t, 10*time.Second, "b to learn a's block", func() (bool, string) {
		got := b.sink.routes()
		return slices.Contains(got, "10.244.1.0/26 via 127.0.0.1"), fmt.Sprint(got)
	})
	est, _ := a.session("127.0.0.2")
	if est.BGPState != StateEstablished || est.Type != PeerMesh || est.Name != "Mesh_127_0_0_2" {
		t.Fatalf("a's session to b: %+v", est)
	}
	eventually(t, 5*time.Second, "readiness", func() (bool, string) {
		ok, detail := a.rep.get()
		return ok, detail
	})

	// The status socket answers with the same sessions.
	st, err := QueryStatus(context.Background(), a.socket)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Peers) != 1 || st.Peers[0].BGPState != StateEstablished || st.AS != DefaultASNumber || st.RouterID != "127.0.0.1" {
		t.Errorf("status over the socket: %+v", st)
	}
	// So does bgp why, while the actor runs (the kernel part reads this
	// machine's routes: not checked here).
	why, err := QueryWhy(context.Background(), a.socket, "10.244.2.0/26")
	if err != nil {
		t.Fatal(err)
	}
	if len(why.Peers) != 1 || !strings.Contains(why.Peers[0].Received, "accepted, best path") || why.Peers[0].Sent != SentNotSent ||
		!strings.Contains(why.Kernel.Reason, "best path from 127.0.0.2 via 127.0.0.2") {
		t.Errorf("bgp why 10.244.2.0/26 on a: %+v", why)
	}

	t.Run("borrowed address", func(t *testing.T) {
		// b's workload holds ordinal 5 of a's block.
		putJSON(t, kv, blockKey("10.244.1.0/26"), blockJSON("10.244.1.0/26", "a", map[int]string{0: "a", 5: "b"}))
		eventually(t, 10*time.Second, "a to learn b's /32", func() (bool, string) {
			got := a.sink.routes()
			return slices.Contains(got, "10.244.1.5/32 via 127.0.0.2"), fmt.Sprint(got)
		})
		putJSON(t, kv, blockKey("10.244.1.0/26"), blockJSON("10.244.1.0/26", "a", map[int]string{0: "a"}))
		eventually(t, 10*time.Second, "the /32 to be withdrawn", func() (bool, string) {
			got := a.sink.routes()
			return !slices.Contains(got, "10.244.1.5/32 via 127.0.0.2"), fmt.Sprint(got)
		})
		// Both went to the table as changes, not as whole sets.
		a.sink.mu.Lock()
		n := a.sink.updates
		a.sink.mu.Unlock()
		if n == 0 {
			t.Error("a learned and lost a route without a single Update")
		}
	})

	t.Run("adding a peer leaves the other sessions alone", func(t *testing.T) {
		before, _ := a.session("127.0.0.2")
		a.updates.ch <- set(typed(bgpPeer("tor", api.BGPPeerSpec{PeerIP: "127.0.0.3", ASNumber: 65000}), "BGPPeer"))
		eventually(t, 5*time.Second, "the new session", func() (bool, string) {
			p, ok := a.session("127.0.0.3")
			return ok && p.Type == PeerGlobal, fmt.Sprintf("%+v", a.a.Status().Peers)
		})
		after, _ := a.session("127.0.0.2")
		if after.BGPState != StateEstablished || !after.Since.Equal(before.Since) {
			t.Errorf("session to b changed: before %+v, after %+v", before, after)
		}
		// Nobody listens on 127.0.0.3: the reason shows in the status.
		eventually(t, 20*time.Second, "a connection error for 127.0.0.3", func() (bool, string) {
			p, _ := a.session("127.0.0.3")
			return strings.Contains(p.LastError, "Socket:"), p.LastError
		})
	})

	t.Run("mesh password: TCP MD5, and a missing secret is reported", func(t *testing.T) {
		writeSecret(t, secretsA, "bgp", "mesh", "s3cret")
		withPassword := defaultConfig(func(s *api.BGPConfigurationSpec) {
			s.NodeMeshPassword = &api.BGPPassword{SecretKeyRef: &api.SecretKeySelector{Name: "bgp", Key: "mesh"}}
		})
		a.updates.ch <- set(typed(withPassword, "BGPConfiguration"))
		b.updates.ch <- set(typed(withPassword, "BGPConfiguration"))
		// b cannot read the secret: it says so, and a (signing) and b (not)
		// cannot talk.
		eventually(t, 10*time.Second, "b to report the missing secret", func() (bool, string) {
			p, _ := b.session("127.0.0.1")
			return strings.Contains(p.LastError, "nodeMeshPassword secret bgp/mesh"), fmt.Sprintf("%+v", p)
		})
		time.Sleep(3 * time.Second)
		if p, _ := a.session("127.0.0.2"); p.BGPState == StateEstablished {
			t.Fatalf("session up although only one side signs: %+v", p)
		}
		// The secret appears on b; the next periodic re-read picks it up.
		writeSecret(t, secretsB, "bgp", "mesh", "s3cret")
		eventually(t, 30*time.Second, "the signed session", func() (bool, string) {
			p, _ := a.session("127.0.0.2")
			return p.BGPState == StateEstablished, fmt.Sprintf("%+v", p)
		})
		eventually(t, 10*time.Second, "b's route back on a", func() (bool, string) {
			got := a.sink.routes()
			return slices.Contains(got, "10.244.2.0/26 via 127.0.0.2"), fmt.Sprint(got)
		})
	})

	t.Run("stopped speaker: routes kept for the restart time, then withdrawn", func(t *testing.T) {
		b.stop()
		stopped := time.Now()
		time.Sleep(500 * time.Millisecond)
		if got := a.sink.routes(); !slices.Contains(got, "10.244.2.0/26 via 127.0.0.2") {
			t.Fatalf("b's route gone at once after a graceful stop: %q", got)
		}
		eventually(t, 15*time.Second, "b's route to age out", func() (bool, string) {
			got := a.sink.routes()
			return !slices.Contains(got, "10.244.2.0/26 via 127.0.0.2"), fmt.Sprint(got)
		})
		if held := time.Since(stopped); held < 2*time.Second {
			t.Errorf("route withdrawn after %s, before the 3s restart time", held)
		}
	})
}

func writeSecret(t *testing.T, dir, name, key, value string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name, key), []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ipamStoreOf is the IPAM store of the etcd kv talks to.
func ipamStoreOf(t testing.TB, kv *clientv3.Client) IPAMStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := storetest.Etcd(t, ctx, kv.Endpoints())
	return store.IPAM()
}
