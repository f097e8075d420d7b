package kdd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
// (naming it) and sends nothing else, no Reset; once it is back one
// InSync says the stream is current, and writes made then arrive. A watch
// started right after the restart (an agent restarted during the outage)
// gets them too. The IPAM watch recovers with a fresh Reset.
func TestWatchAcrossAPIServerRestart(t *testing.T) {
	c, s := startKDD(t)
	ctx := testCtx(t)
	for _, y := range [][]byte{policyYAML("before", "10")} {
		for _, o := range decodeDocs(t, y) {
			if _, err := s.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, rev, err := s.List(ctx, "NetworkPolicy", "")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := s.Watch(wctx, "", rev+1)
	blocks := s.IPAM().Watch(wctx, "/calico/ipam/v2/assignment/")
	if ev := <-blocks; ev.Type != datastore.KVReset {
		t.Fatalf("first IPAM event %+v, want the Reset", ev)
	}

	c.StopAPIServer(t)
	seen := awaitEvent(t, events, 20*time.Second, "an unreachable error", func(ev datastore.Event) bool {
		return ev.Err != nil && errors.Is(ev.Err, datastore.ErrUnavailable)
	})
	if err := seen[len(seen)-1].Err; !strings.Contains(err.Error(), "kubernetes API server "+c.URL) {
		t.Errorf("unreachable error %q does not name the API server %s", err, c.URL)
	}
	for _, ev := range seen {
		if ev.Err == nil {
			t.Errorf("while the API server stops: event %v %v, want only errors", ev.Type, ev.Object)
		}
	}

	c.RestartAPIServer(t)
	seen = awaitEvent(t, events, 60*time.Second, "InSync after the restart", func(ev datastore.Event) bool { return ev.Type == datastore.InSync })
	for _, ev := range seen {
		if ev.Type == datastore.Reset || ev.Object != nil {
			t.Errorf("before InSync: event %v %v; nothing changed, want errors only", ev.Type, ev.Object)
		}
	}
	// A fresh watch, as an agent started during the outage begins.
	_, rev2, err := s.List(ctx, "NetworkPolicy", "")
	if err != nil {
		t.Fatal(err)
	}
	fresh := s.Watch(wctx, "", rev2+1)

	changed := decodeDocs(t, policyYAML("before", "20"))[0]
	if _, err := s.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	for _, o := range decodeDocs(t, policyYAML("after", "30")) {
		if _, err := s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for name, ch := range map[string]<-chan datastore.Event{"the resumed watch": events, "a watch started after the restart": fresh} {
		ev := awaitEvent(t, ch, 30*time.Second, name+": the changed policy", func(ev datastore.Event) bool {
			return isPolicy(ev, datastore.Modified, "before")
		})
		if o := ev[len(ev)-1].Object.(*api.NetworkPolicy); o.Spec.Order == nil || *o.Spec.Order != 20 {
			t.Errorf("%s: changed policy's order %v, want 20", name, o.Spec.Order)
		}
		awaitEvent(t, ch, 30*time.Second, name+": the new policy", func(ev datastore.Event) bool {
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
