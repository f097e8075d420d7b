package kdd

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
)

// A watch whose revision has expired (410 Gone) or that fails starts over
// with a fresh Reset carrying everything under the prefix, and a watch the
// server merely ends is resumed from the last revision seen, without one.
// The API server here fails on purpose, which a real one cannot be made to.
func TestIPAMWatchStartsOver(t *testing.T) {
	block := func(cidr, name string, rv int) string {
		return fmt.Sprintf(`{"apiVersion":"crd.projectcalico.org/v1","kind":"IPAMBlock","metadata":{"name":%q,"resourceVersion":"%d"},"spec":{"cidr":%q,"allocations":[null,null,null,null],"unallocated":[0,1,2,3],"attributes":[],"sequenceNumber":1,"sequenceNumberForAllocation":{},"deleted":false,"strictAffinity":false}}`, name, rv, cidr)
	}
	var lists, watches atomic.Int32
	watchRVs := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/crd.projectcalico.org/v1/ipamblocks" {
			http.NotFound(w, r)
			return
		}
		if r.URL.Query().Get("watch") == "" {
			// First list: block A at revision 10; second: block B at 20.
			switch lists.Add(1) {
			case 1:
				fmt.Fprintf(w, `{"metadata":{"resourceVersion":"10"},"items":[%s]}`, block("10.0.0.0/30", "10-0-0-0-30", 9))
			default:
				fmt.Fprintf(w, `{"metadata":{"resourceVersion":"20"},"items":[%s]}`, block("10.0.0.4/30", "10-0-0-4-30", 19))
			}
			return
		}
		watchRVs <- r.URL.Query().Get("resourceVersion")
		w.Header().Set("Content-Type", "application/json")
		switch watches.Add(1) {
		case 1:
			// The stream ends after one event: resume from its revision.
			fmt.Fprintf(w, `{"type":"MODIFIED","object":%s}`+"\n", block("10.0.0.0/30", "10-0-0-0-30", 11))
		case 2:
			fmt.Fprint(w, `{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version"}}`+"\n")
		default:
			fmt.Fprintf(w, `{"type":"ADDED","object":%s}`+"\n", block("10.0.0.8/30", "10-0-0-8-30", 21))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}))
	defer srv.Close()
	s := storeOn(t, srv, 5*time.Second)

	ch := s.kv.Watch(s.ctx, "/calico/ipam/v2/assignment/")
	var got []string
	for len(got) < 5 {
		select {
		case ev := <-ch:
			switch {
			case ev.Err != nil:
				got = append(got, "error")
			case ev.Type == datastore.KVReset:
				e := fmt.Sprintf("reset@%d", ev.Rev)
				for _, kv := range ev.Snapshot {
					e += " " + kv.Key
				}
				got = append(got, e)
			default:
				got = append(got, fmt.Sprintf("%d %s@%d", ev.Type, ev.KV.Key, ev.KV.Rev))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("events so far %q; no more within 10s", got)
		}
	}
	want := []string{
		"reset@10 /calico/ipam/v2/assignment/ipv4/block/10.0.0.0-30",
		fmt.Sprintf("%d /calico/ipam/v2/assignment/ipv4/block/10.0.0.0-30@11", datastore.KVPut),
		"error",
		"reset@20 /calico/ipam/v2/assignment/ipv4/block/10.0.0.4-30",
		fmt.Sprintf("%d /calico/ipam/v2/assignment/ipv4/block/10.0.0.8-30@21", datastore.KVPut),
	}
	if data, _ := json.Marshal(got); string(data) != mustJSONString(want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
	for i, want := range []string{"10", "11", "20"} {
		if rv := <-watchRVs; rv != want {
			t.Errorf("watch %d from revision %s, want %s", i+1, rv, want)
		}
	}
	s.cancel()
	for range ch {
	}
}
