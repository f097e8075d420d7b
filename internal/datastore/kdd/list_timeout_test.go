package kdd

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// A list of many pages may take longer than one request may: each page is
// bounded by the request timeout, not the whole list, so that a slow API
// server (many agents listing every pod at once) still gets every agent
// its list instead of timing them all out and having them start over.
func TestListPagesBoundedOneByOne(t *testing.T) {
	const pages, delay, timeout = 5, 60 * time.Millisecond, 150 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/crd.projectcalico.org/v1/ippools" {
			http.NotFound(w, r)
			return
		}
		page, _ := strconv.Atoi(r.URL.Query().Get("continue"))
		time.Sleep(delay)
		next := ""
		if page+1 < pages {
			next = strconv.Itoa(page + 1)
		}
		fmt.Fprintf(w, `{"metadata":{"resourceVersion":"100","continue":%q},"items":[{"apiVersion":"crd.projectcalico.org/v1","kind":"IPPool","metadata":{"name":"pool-%d","resourceVersion":"%d"},"spec":{"cidr":"10.%d.0.0/24"}}]}`,
			next, page, 10+page, page)
	}))
	defer srv.Close()
	s := storeOn(t, srv, timeout)
	hc := *srv.Client()
	hc.Timeout = timeout // as newClient sets it
	s.c.http = &hc
	start := time.Now()
	objs, rev, err := s.List(s.ctx, "IPPool", "")
	if err != nil {
		t.Fatalf("list of %d pages of %s each, %s per request: %v", pages, delay, timeout, err)
	}
	if took := time.Since(start); took < timeout {
		t.Fatalf("the list took %s, less than the request timeout %s: the test proves nothing", took, timeout)
	}
	if len(objs) != pages || rev != 100 {
		t.Errorf("listed %d pools at revision %d, want %d at 100", len(objs), rev, pages)
	}
}
