package kdd

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"
)

// storeOn is a Store talking to srv, a fake API server that fails or
// answers in ways a real one cannot be made to: built as New builds one,
// without New's checks, with requestTimeout per request. Its context
// (s.ctx) ends at cleanup or with s.cancel.
func storeOn(t *testing.T, srv *httptest.Server, requestTimeout time.Duration) *Store {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := &Store{c: &client{base: srv.URL, http: srv.Client(), watchHTTP: srv.Client()}, requestTimeout: requestTimeout,
		logger: slog.New(slog.DiscardHandler), ctx: ctx, cancel: cancel}
	s.mappers = newMappers(s)
	s.kv = newIPAMKV(s)
	return s
}
