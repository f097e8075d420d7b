package kdd

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

func policyYAML(name, order string) []byte {
	return []byte(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: ` + name + `, namespace: default}
spec: {selector: all(), order: ` + order + `, types: [Ingress]}
`)
}

// awaitEvent waits for the first event keep accepts, failing on timeout;
// the events skipped are returned for the caller's checks.
func awaitEvent(t *testing.T, ch <-chan datastore.Event, timeout time.Duration, what string, keep func(datastore.Event) bool) []datastore.Event {
	t.Helper()
	var seen []datastore.Event
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("%s: watch closed", what)
			}
			seen = append(seen, ev)
			if keep(ev) {
				return seen
			}
		case <-deadline:
			t.Fatalf("%s: not within %s; saw %d other events %v", what, timeout, len(seen), seen)
		}
	}
}

func isPolicy(ev datastore.Event, typ datastore.EventType, name string) bool {
	return ev.Type == typ && ev.Object != nil && ev.Object.Meta().Name == name
}

// TestWatchAcrossAPIServerRestart: a watch of every kind outlives the API
// server's restart: while it is down the stream reports it unreachable
// (naming it) and sends nothing else, no Reset; changes made meanwhile
// (written into etcd behind its back, as another API server of the
// cluster would take them) arrive as ordinary events once it is back,
// before one InSync says the stream is current; writes made then arrive.
// So does a watch started during the outage from a List read before it
// (an agent restarted in the outage), and one started after the restart.
// The IPAM watch recovers with a fresh Reset.
func TestWatchAcrossAPIServerRestart(t *testing.T) {
	c, s := startKDD(t)
	ctx := testCtx(t)
	create := func(name, order string) {
		t.Helper()
		for _, o := range decodeDocs(t, policyYAML(name, order)) {
			if _, err := s.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	listRev := func() int64 {
		t.Helper()
		_, rev, err := s.List(ctx, "NetworkPolicy", "")
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	create("before", "10")
	create("gone", "10")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := s.Watch(wctx, "", listRev()+1)
	blocks := s.IPAM().Watch(wctx, "/calico/ipam/v2/assignment/")
	if ev := <-blocks; ev.Type != datastore.KVReset {
		t.Fatalf("first IPAM event %+v, want the Reset", ev)
	}
	// Every source of the watch is past its start once one of them
	// delivers a change.
	create("probe", "10")
	awaitEvent(t, events, 30*time.Second, "the watch to deliver a new policy", func(ev datastore.Event) bool {
		return isPolicy(ev, datastore.Added, "probe")
	})
	revBefore := listRev()

	c.StopAPIServer(t)
	unreachable := func(ch <-chan datastore.Event, name string) {
		t.Helper()
		seen := awaitEvent(t, ch, 20*time.Second, name+": an unreachable error", func(ev datastore.Event) bool {
			return ev.Err != nil && errors.Is(ev.Err, datastore.ErrUnavailable)
		})
		if err := seen[len(seen)-1].Err; !strings.Contains(err.Error(), "kubernetes API server "+c.URL) {
			t.Errorf("%s: unreachable error %q does not name the API server %s", name, err, c.URL)
		}
		for _, ev := range seen {
			if ev.Err == nil {
				t.Errorf("%s, while the API server is down: event %v %v, want only errors", name, ev.Type, ev.Object)
			}
		}
	}
	unreachable(events, "the watch")
	during := s.Watch(wctx, "", revBefore+1)
	unreachable(during, "a watch started in the outage")

	// Meanwhile another API server changes "before" and deletes "gone".
	behindTheBack(t, ctx, c.EtcdEndpoints, "networkpolicies", func(name string, obj map[string]any) (map[string]any, bool) {
		switch {
		case strings.HasSuffix(name, "before"):
			obj["spec"].(map[string]any)["order"] = 15
			return obj, true
		case strings.HasSuffix(name, "gone"):
			return nil, true
		}
		return nil, false
	})

	c.RestartAPIServer(t)
	watches := []struct {
		name string
		ch   <-chan datastore.Event
	}{{"the resumed watch", events}, {"a watch started in the outage", during}}
	for _, w := range watches {
		// Both changes arrive before the InSync: a consumer that counts
		// itself current on InSync is.
		var modified, deleted bool
		for _, ev := range awaitEvent(t, w.ch, 60*time.Second, w.name+": InSync after the restart", func(ev datastore.Event) bool {
			return ev.Type == datastore.InSync
		}) {
			switch {
			case ev.Type == datastore.Reset:
				t.Errorf("%s: a Reset after the restart; want the changes as ordinary events", w.name)
			case isPolicy(ev, datastore.Modified, "before"):
				o := ev.Object.(*api.NetworkPolicy)
				modified = o.Spec.Order != nil && *o.Spec.Order == 15
			case isPolicy(ev, datastore.Deleted, "gone"):
				deleted = true
			}
		}
		if !modified || !deleted {
			t.Errorf("%s: before InSync, policy before changed to order 15: %v, policy gone deleted: %v; want both",
				w.name, modified, deleted)
		}
	}
	// A fresh watch, as an agent started during the outage begins.
	fresh := s.Watch(wctx, "", listRev()+1)
	watches = append(watches, struct {
		name string
		ch   <-chan datastore.Event
	}{"a watch started after the restart", fresh})

	changed := decodeDocs(t, policyYAML("before", "20"))[0]
	if _, err := s.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	create("after", "30")
	for _, w := range watches {
		ev := awaitEvent(t, w.ch, 30*time.Second, w.name+": the changed policy", func(ev datastore.Event) bool {
			return isPolicy(ev, datastore.Modified, "before")
		})
		if o := ev[len(ev)-1].Object.(*api.NetworkPolicy); o.Spec.Order == nil || *o.Spec.Order != 20 {
			t.Errorf("%s: changed policy's order %v, want 20", w.name, o.Spec.Order)
		}
		awaitEvent(t, w.ch, 30*time.Second, w.name+": the new policy", func(ev datastore.Event) bool {
			return isPolicy(ev, datastore.Added, "after")
		})
	}
	awaitEvent(t, kvEvents(wctx, blocks), 30*time.Second, "the IPAM watch's Reset after the restart", func(ev datastore.Event) bool {
		return ev.Type == datastore.Reset
	})
}

// kvEvents adapts an IPAM watch for awaitEvent: a KV Reset is a Reset,
// an error an error.
func kvEvents(ctx context.Context, in <-chan datastore.KVEvent) <-chan datastore.Event {
	out := make(chan datastore.Event)
	go func() {
		defer close(out)
		for ev := range in {
			e := datastore.Event{Err: ev.Err}
			if ev.Type == datastore.KVReset {
				e.Type = datastore.Reset
			}
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// behindTheBack rewrites the custom resources of plural straight in etcd,
// as another API server of the cluster would store its writes: change
// returns the new object and true, or nil and true to delete it, or false
// to leave it.
func behindTheBack(t *testing.T, ctx context.Context, endpoints []string, plural string, change func(name string, obj map[string]any) (map[string]any, bool)) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	prefix := "/registry/crd.projectcalico.org/" + plural + "/"
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, kv := range resp.Kvs {
		var obj map[string]any
		if err := json.Unmarshal(kv.Value, &obj); err != nil {
			t.Fatalf("%s: %v", kv.Key, err)
		}
		name := string(kv.Key[strings.LastIndexByte(string(kv.Key), '/')+1:])
		out, ok := change(name, obj)
		switch {
		case !ok:
			continue
		case out == nil:
			_, err = cli.Delete(ctx, string(kv.Key))
		default:
			var b []byte
			if b, err = json.Marshal(out); err == nil {
				_, err = cli.Put(ctx, string(kv.Key), string(b))
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", kv.Key, err)
		}
		changed++
	}
	if changed == 0 {
		t.Fatalf("nothing under %s to change", prefix)
	}
}
