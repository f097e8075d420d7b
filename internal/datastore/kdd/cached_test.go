package kdd

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
)

// TestCachedReads: reads marked datastore.WithCachedReads ask the API
// server for its watch cache (resourceVersion=0); others ask for the
// current state (no resourceVersion), as every write's read does.
func TestCachedReads(t *testing.T) {
	var mu sync.Mutex
	asked := map[string][]string{} // path -> resourceVersion of each request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = append(asked[r.URL.Path], fmt.Sprintf("%q", r.URL.Query().Get("resourceVersion")))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/nodes/n1":
			fmt.Fprint(w, `{"metadata":{"name":"n1","uid":"6a1b6b0c-3f8d-4d0e-9c55-2f7a4c1e9b01","resourceVersion":"7"}}`)
		default:
			fmt.Fprint(w, `{"metadata":{"resourceVersion":"5"},"items":[]}`)
		}
	}))
	defer srv.Close()
	s := storeOn(t, srv, 5*time.Second)
	ctx := s.ctx

	for _, c := range []struct {
		ctx  context.Context
		want string
	}{{ctx, `""`}, {datastore.WithCachedReads(ctx), `"0"`}} {
		mu.Lock()
		clear(asked)
		mu.Unlock()
		if _, _, err := s.List(c.ctx, "IPPool", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(c.ctx, "Node", "", "n1"); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		for _, path := range []string{"/apis/crd.projectcalico.org/v1/ippools", "/api/v1/nodes/n1"} {
			if got := asked[path]; len(got) != 1 || got[0] != c.want {
				t.Errorf("cached=%v: %s asked with resourceVersion %v, want [%s]", datastore.CachedReads(c.ctx), path, got, c.want)
			}
		}
		mu.Unlock()
	}
}
