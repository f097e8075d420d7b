package confwatch

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

// view is what one reader (an agent, or the hub itself) holds: the
// resources its subscription delivered and the IPAM keys its KV watch
// delivered, as JSON, kept up to date by two goroutines.
type view struct {
	mu  sync.Mutex
	res map[string]string // Key.String() -> object JSON
	kv  map[string]string // key -> value
}

// newView follows sub and kv's watch of the IPAM keys; either may be nil.
func newView(ctx context.Context, t *testing.T, sub *Subscription, kv datastore.KV) *view {
	v := &view{res: map[string]string{}, kv: map[string]string{}}
	if sub == nil {
		return v.followKV(ctx, kv)
	}
	go func() {
		for {
			ups, err := sub.Next(ctx)
			if err != nil {
				return
			}
			v.mu.Lock()
			for _, u := range ups {
				if u.Type == Delete {
					delete(v.res, u.Key.String())
					continue
				}
				b, err := json.Marshal(u.Object)
				if err != nil {
					t.Errorf("encode %s: %v", u.Key, err)
				}
				v.res[u.Key.String()] = string(b)
			}
			v.mu.Unlock()
		}
	}()
	return v.followKV(ctx, kv)
}

func (v *view) followKV(ctx context.Context, kv datastore.KV) *view {
	if kv != nil {
		go func() {
			for ev := range kv.Watch(ctx, ipam.Prefix) {
				v.mu.Lock()
				switch ev.Type {
				case datastore.KVReset:
					clear(v.kv)
					for _, e := range ev.Snapshot {
						v.kv[e.Key] = string(e.Value)
					}
				case datastore.KVPut:
					v.kv[ev.KV.Key] = string(ev.KV.Value)
				case datastore.KVDelete:
					delete(v.kv, ev.KV.Key)
				}
				v.mu.Unlock()
			}
		}()
	}
	return v
}

func (v *view) get(key string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.res[key]
}

// diff describes how v's resources differ from res's and its IPAM keys
// from kv's ("" when they do not).
func (v *view) diff(res, kv *view) string {
	var out []string
	cmp := func(what string, got, want map[string]string) {
		for k, w := range want {
			if g, ok := got[k]; !ok {
				out = append(out, what+" "+k+" missing")
			} else if g != w {
				out = append(out, what+" "+k+" differs")
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				out = append(out, what+" "+k+" extra")
			}
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	res.mu.Lock()
	cmp("resource", v.res, res.res)
	res.mu.Unlock()
	kv.mu.Lock()
	cmp("IPAM key", v.kv, kv.kv)
	kv.mu.Unlock()
	return strings.Join(out, ", ")
}

// TestFanOutKubernetesDatastore: agents reading a fan-out over a real
// kube-apiserver hold what the fan-out's own Watcher holds — Calico
// resources, resources computed from Kubernetes objects (a Namespace's
// profile, whose resourceVersion is no number) and the IPAM blocks and
// affinities — follow every change, and catch up with what changed
// while the server was down once it is back on the same address.
func TestFanOutKubernetesDatastore(t *testing.T) {
	kc := kubetest.Start(t, kubetest.WithoutControllerManager())
	kc.InstallCalicoCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store := storetest.KDD(t, ctx, kc)
	cs := kc.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "ns-a", Labels: map[string]string{"env": "dev"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create := func(doc string) {
		t.Helper()
		for _, o := range storetest.Objects(t, doc) {
			if _, err := store.Create(ctx, o); err != nil {
				t.Fatalf("create %s: %v", doc, err)
			}
		}
	}
	create(`{"apiVersion":"projectcalico.org/v3","kind":"IPPool","metadata":{"name":"p1"},"spec":{"cidr":"10.65.0.0/16","blockSize":26}}`)
	create(`{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkPolicy","metadata":{"name":"g1"},"spec":{"order":10,"selector":"all()","types":["Ingress"]}}`)

	// The fan-out: one Watcher and one IPAM watch on the API server.
	hub, _ := start(t, store)
	hubView := newView(ctx, t, hub.Subscribe(), nil)
	hubKV := newView(ctx, t, nil, store.IPAM()) // the datastore's IPAM keys
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	stopServer := serveOn(t, hub, l, store)
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}

	const agents = 3
	var views []*view
	for range agents {
		r := NewRemote(dial, quiet())
		w, _ := start(t, r)
		views = append(views, newView(ctx, t, w.Subscribe(), r.KV(store.IPAM())))
	}
	// waitAll waits until cond holds for every agent and every agent
	// has exactly the hub's resources and the datastore's IPAM keys.
	waitAll := func(what string, cond func(v *view) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var bad []string
			for i, v := range views {
				if !cond(v) {
					bad = append(bad, fmt.Sprintf("agent %d: not yet", i))
				} else if d := v.diff(hubView, hubKV); d != "" {
					bad = append(bad, fmt.Sprintf("agent %d: %s", i, d))
				}
			}
			if len(bad) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: after 30 s, %s", what, strings.Join(bad, "; "))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	has := func(key, fragment string) func(v *view) bool {
		return func(v *view) bool { return strings.Contains(v.get(key), fragment) }
	}
	waitAll("agents in sync with the GlobalNetworkPolicy and the namespace's profile",
		func(v *view) bool {
			return has("GlobalNetworkPolicy(g1)", `"order":10`)(v) && has("Profile(kns.ns-a)", `"pcns.env":"dev"`)(v)
		})

	// A namespace's label is a profile change (resourceVersion "<n>/").
	patch := []byte(`{"metadata":{"labels":{"env":"prod"}}}`)
	if _, err := cs.CoreV1().Namespaces().Patch(ctx, "ns-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAll("the namespace's new label on every agent", has("Profile(kns.ns-a)", `"pcns.env":"prod"`))

	// An address from IPAM: a block and its affinity reach every agent's
	// IPAM watch.
	ipc := ipam.New(store.IPAM(), store, nil)
	if _, _, err := ipc.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "h1", Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	blockKey := ipam.Prefix + "assignment/ipv4/block/10.65.0.0-26"
	waitAll("the block on every agent's IPAM watch", func(v *view) bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.kv[blockKey] != ""
	})

	// The server goes away. Meanwhile a policy changes, another appears,
	// the namespace changes and the address is released; then a server
	// on the same address again: every agent catches up.
	stopServer()
	create(`{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkPolicy","metadata":{"name":"g2"},"spec":{"order":20,"selector":"all()","types":["Egress"]}}`)
	if _, err := store.Delete(ctx, "GlobalNetworkPolicy", "", "g1", ""); err != nil {
		t.Fatal(err)
	}
	patch = []byte(`{"metadata":{"labels":{"env":"staging"}}}`)
	if _, err := cs.CoreV1().Namespaces().Patch(ctx, "ns-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ipc.ReleaseByHandle(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 30*time.Second, "the hub following the datastore meanwhile", func() bool {
		return hubView.get("GlobalNetworkPolicy(g1)") == "" && strings.Contains(hubView.get("Profile(kns.ns-a)"), `"pcns.env":"staging"`)
	})
	for _, v := range views {
		if v.get("GlobalNetworkPolicy(g1)") == "" {
			t.Fatal("an agent lost GlobalNetworkPolicy g1 while the server was down: it must keep what it had")
		}
	}
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, hub, l, store)
	waitAll("every agent caught up after the server came back", func(v *view) bool {
		return v.get("GlobalNetworkPolicy(g1)") == "" && has("GlobalNetworkPolicy(g2)", `"order":20`)(v) &&
			has("Profile(kns.ns-a)", `"pcns.env":"staging"`)(v)
	})
	waitAll("the released address on every agent's IPAM watch", func(v *view) bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.kv[blockKey] != "" && !strings.Contains(v.kv[blockKey], `"h1"`)
	})
}

// serveOn serves hub (and store's IPAM keys) on l until the returned
// function (or the test's end) stops it.
func serveOn(t *testing.T, hub *Watcher, l net.Listener, store interface{ IPAM() datastore.KV }) func() {
	t.Helper()
	srv := NewServer(hub, l, ServerConfig{KV: store.IPAM(), KVPrefix: ipam.Prefix, Logger: quiet()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server on %s: %v", l.Addr(), err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
