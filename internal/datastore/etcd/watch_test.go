package etcd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
)

func poolDoc(name, cidr string) string {
	return fmt.Sprintf(`{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":%q},"spec":{"cidr":%q}}`, name, cidr)
}

type seen struct {
	typ  datastore.EventType
	name string
}

func TestWatchFromRevision(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		s := openStore(t, srv)
		ctx := testCtx(t)
		a, err := s.Create(ctx, decodeDoc(t, poolDoc("a", "10.1.0.0/16")))
		if err != nil {
			t.Fatal(err)
		}
		from := rv(t, a)
		a.Meta().Labels = map[string]string{"v": "2"}
		if _, err := s.Update(ctx, a); err != nil {
			t.Fatal(err)
		}
		// A policy in between: only the all-kinds watch sees it.
		if _, err := s.Create(ctx, decodeDoc(t, crudDocs[3].doc)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Delete(ctx, "IPPool", "", "a", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(ctx, decodeDoc(t, poolDoc("b", "10.2.0.0/16"))); err != nil {
			t.Fatal(err)
		}

		tests := []struct {
			kind string
			want []seen
		}{
			{"IPPool", []seen{{datastore.Added, "a"}, {datastore.Modified, "a"}, {datastore.Deleted, "a"}, {datastore.Added, "b"}}},
			{"", []seen{{datastore.Added, "a"}, {datastore.Modified, "a"}, {datastore.Added, "allow-dns"}, {datastore.Deleted, "a"}, {datastore.Added, "b"}}},
		}
		for _, tc := range tests {
			t.Run("kind="+tc.kind, func(t *testing.T) {
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				ch := s.Watch(wctx, tc.kind, from)
				var got []seen
				var lastRev int64
				for range tc.want {
					ev := nextEvent(t, ch)
					got = append(got, seen{ev.Type, ev.Object.Meta().Name})
					if ev.Revision <= lastRev {
						t.Errorf("revision %d after %d: out of order", ev.Revision, lastRev)
					}
					lastRev = ev.Revision
					if ev.Type == datastore.Deleted && ev.Object.Meta().Labels["v"] != "2" {
						t.Errorf("Deleted event carries %s, want the last stored state", toJSON(t, ev.Object))
					}
					if ev.Type == datastore.Added && ev.Object.Meta().ResourceVersion != fmt.Sprint(ev.Revision) {
						t.Errorf("Added object resourceVersion %s, event revision %d", ev.Object.Meta().ResourceVersion, ev.Revision)
					}
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("events %v, want %v", got, tc.want)
				}
			})
		}

		t.Run("from now", func(t *testing.T) {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ch := s.Watch(wctx, "ippools", 0)
			// "Now" is when the watcher has read the current revision,
			// which the test cannot observe; so it keeps writing until
			// something arrives, and the first thing must be one of these
			// writes, never an older change.
			var created []string
			for i := 0; ; i++ {
				name := fmt.Sprintf("now%d", i)
				if _, err := s.Create(ctx, decodeDoc(t, poolDoc(name, fmt.Sprintf("10.%d.0.0/16", 100+i)))); err != nil {
					t.Fatal(err)
				}
				created = append(created, name)
				select {
				case ev := <-ch:
					if ev.Err != nil {
						t.Fatalf("error event: %v", ev.Err)
					}
					if ev.Type != datastore.Added || !slices.Contains(created, ev.Object.Meta().Name) {
						t.Errorf("first event %v %s, want datastore.Added of one of %v", ev.Type, ev.Object.Meta().Name, created)
					}
					return
				case <-time.After(50 * time.Millisecond):
				}
				if i > 100 {
					t.Fatal("no event after 100 writes")
				}
			}
		})

		t.Run("closed on cancel", func(t *testing.T) {
			wctx, cancel := context.WithCancel(ctx)
			ch := s.Watch(wctx, "ippools", 0)
			cancel()
			select {
			case <-drain(ch):
			case <-time.After(5 * time.Second):
				t.Fatal("channel not closed after cancel")
			}
		})
	})
}

// drain consumes ch and reports when it is closed.
func drain(ch <-chan datastore.Event) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range ch {
		}
		close(done)
	}()
	return done
}

func TestWatchRelistAfterCompaction(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		s := openStore(t, srv)
		ctx := testCtx(t)
		first, err := s.Create(ctx, decodeDoc(t, poolDoc("p1", "10.1.0.0/16")))
		if err != nil {
			t.Fatal(err)
		}
		from := rv(t, first) + 1
		if _, err := s.Create(ctx, decodeDoc(t, poolDoc("p2", "10.2.0.0/16"))); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(ctx, decodeDoc(t, poolDoc("p3", "10.3.0.0/16"))); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Delete(ctx, "IPPool", "", "p2", ""); err != nil {
			t.Fatal(err)
		}
		_, lastRev, err := s.List(ctx, "IPPool", "")
		if err != nil {
			t.Fatal(err)
		}
		srv.Compact(t, lastRev)

		ch := s.Watch(ctx, "IPPool", from)
		ev := nextEvent(t, ch)
		if ev.Type != datastore.Reset {
			t.Fatalf("first event %v, want Reset", ev.Type)
		}
		if got := names(ev.Objects); !slices.Equal(got, []string{"p1", "p3"}) {
			t.Errorf("Reset objects %v, want [p1 p3]", got)
		}
		if ev.Revision < lastRev {
			t.Errorf("Reset revision %d, want >= %d", ev.Revision, lastRev)
		}
		if _, err := s.Create(ctx, decodeDoc(t, poolDoc("p4", "10.4.0.0/16"))); err != nil {
			t.Fatal(err)
		}
		live := nextEvent(t, ch)
		if live.Type != datastore.Added || live.Object.Meta().Name != "p4" || live.Revision <= ev.Revision {
			t.Errorf("after datastore.Reset got %v %s at %d, want datastore.Added p4 after %d", live.Type, live.Object.Meta().Name, live.Revision, ev.Revision)
		}
	})
}

// TestWatchBadValue checks that an undecodable value is reported with its key
// and that the stream goes on.
func TestWatchBadValue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		s := openStore(t, srv)
		ctx := testCtx(t)
		_, rev, err := s.List(ctx, "IPPool", "")
		if err != nil {
			t.Fatal(err)
		}
		ch := s.Watch(ctx, "", rev+1)
		badKey := Prefix + "ippools/broken"
		if _, err := s.Etcd().Put(ctx, badKey, "{not json"); err != nil {
			t.Fatal(err)
		}
		// Kinds this build does not model are skipped silently.
		if _, err := s.Etcd().Put(ctx, Prefix+"caliconodestatuses/s1", "{}"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(ctx, decodeDoc(t, poolDoc("good", "10.9.0.0/16"))); err != nil {
			t.Fatal(err)
		}
		var sawErr bool
		for {
			select {
			case ev := <-ch:
				if ev.Err != nil {
					if !strings.Contains(ev.Err.Error(), badKey) {
						t.Errorf("error event %q does not name the key %s", ev.Err, badKey)
					}
					sawErr = true
					continue
				}
				if ev.Type != datastore.Added || ev.Object.Meta().Name != "good" {
					t.Fatalf("event %v %s, want datastore.Added good", ev.Type, ev.Object.Meta().Name)
				}
				if !sawErr {
					t.Error("no error event for the undecodable value")
				}
				return
			case <-time.After(20 * time.Second):
				t.Fatal("no event")
			}
		}
	})
}

// TestWatchSurvivesRestart checks that a watch keeps delivering after etcd
// goes away and comes back, and never closes its channel meanwhile.
func TestWatchSurvivesRestart(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		s := openStore(t, srv)
		ctx := testCtx(t)
		before, err := s.Create(ctx, decodeDoc(t, poolDoc("before", "10.1.0.0/16")))
		if err != nil {
			t.Fatal(err)
		}
		ch := s.Watch(ctx, "IPPool", rv(t, before)+1)
		srv.Restart(t)
		deadline := time.Now().Add(15 * time.Second)
		for {
			if _, err := s.Create(ctx, decodeDoc(t, poolDoc("after", "10.2.0.0/16"))); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("create after restart: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Either the live event or a Reset that contains the new pool.
		for {
			ev := nextEvent(t, ch)
			if ev.Type == datastore.Added && ev.Object.Meta().Name == "after" {
				return
			}
			if ev.Type == datastore.Reset && slices.Contains(names(ev.Objects), "after") {
				return
			}
		}
	})
}

func TestWatchUnknownKind(t *testing.T) {
	// No etcd needed: the kind is rejected before anything is read.
	s := &Store{kinds: newRegistry(nil, func(string) (api.KindInfo, bool) { return api.KindInfo{}, false })}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	defer s.cancel()
	ctx, cancel := context.WithCancel(context.Background())
	ch := s.Watch(ctx, "widgets", 0)
	ev := <-ch
	if ev.Err == nil || !strings.Contains(ev.Err.Error(), "unknown resource kind") {
		t.Errorf("first event %+v, want an unknown-kind error", ev)
	}
	select {
	case <-ch:
		t.Fatal("channel closed or sent again before ctx was done")
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if _, ok := <-ch; ok {
		t.Fatal("channel not closed after cancel")
	}
}

func TestCloseEndsWatch(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	s, err := New(testCtx(t), configFor(srv))
	if err != nil {
		t.Fatal(err)
	}
	ch := s.Watch(testCtx(t), "", 0)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-drain(ch):
	case <-time.After(5 * time.Second):
		t.Fatal("watch channel still open after Close")
	}
}
