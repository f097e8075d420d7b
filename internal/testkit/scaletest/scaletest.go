// Package scaletest is what the scale harnesses share: confwatch's KDD
// harness (confwatch/kddscale_test.go, hundreds of agents against one
// kube-apiserver) and integration/etcdscale (a thousand simulated nodes
// against a 3-member etcd cluster).
//
// API model: a harness runs its simulated agents in child processes, the
// test binary re-executed, each child reporting one line per fact on its
// stdout and reading commands on its stdin. In the parent, a Fleet starts
// the children, reads their lines into the harness's own state (its report
// function, called under the Fleet's lock) and waits on that state; in a
// child, LineWriter writes the lines, Connect retries the datastore
// connection as `calico-node run` does, and CountingKV and CountingLogger
// count what the agent receives and warns about. The measurements (ProcCPU,
// ProcRSS, LoadAverage, Pct, ParseProm) read /proc and Prometheus text.
//
// Design: nothing here knows a harness's protocol or imports confwatch
// (confwatch's own tests use this package), so the lines, the fan-out and
// the agents' work stay with each harness.
//
// Thread safety: a Fleet's methods may be called from any goroutine; its
// report function and Wait's conditions run under its lock, which Lock and
// Unlock take for the harness's reads of its state. LineWriter, CountingKV
// and CountingLogger are safe for concurrent use.
package scaletest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
)

// LineWriter serialises a child's report lines onto its stdout, one
// flushed line each, so that the parent reads every fact as it happens.
type LineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// Stdout is a LineWriter on os.Stdout.
func Stdout() *LineWriter { return &LineWriter{w: bufio.NewWriter(os.Stdout)} }

// Printf writes one line (format without its newline).
func (l *LineWriter) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
	l.w.Flush()
}

// CountingKV adds to N one for each put and delete its watches deliver.
type CountingKV struct {
	datastore.KV
	N *atomic.Int64
}

// Watch is the KV's watch, counted.
func (k CountingKV) Watch(ctx context.Context, prefix string) <-chan datastore.KVEvent {
	in := k.KV.Watch(ctx, prefix)
	out := make(chan datastore.KVEvent)
	go func() {
		defer close(out)
		for ev := range in {
			if ev.Type == datastore.KVPut || ev.Type == datastore.KVDelete {
				k.N.Add(1)
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// CountingLogger logs warnings and above to stderr and adds one to n for
// each: a watch that fails or relists logs a warning, which the harnesses
// report.
func CountingLogger(n *atomic.Int64) *slog.Logger {
	return slog.New(countingHandler{next: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), n: n})
}

// countingHandler counts the records it passes on.
type countingHandler struct {
	next slog.Handler
	n    *atomic.Int64
}

func (h countingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.n.Add(1)
	return h.next.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return countingHandler{next: h.next.WithAttrs(attrs), n: h.n}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{next: h.next.WithGroup(name), n: h.n}
}

// Connect calls open until it succeeds, as `calico-node run` retries its
// datastore at start (a hundred agents starting at once on two cores can
// miss a server's first deadline), backing off from 200ms to 5s and
// logging each failure as a warning naming what (the server). A
// *datastore.ConfigError, or ctx ending, ends it.
func Connect[S any](ctx context.Context, logger *slog.Logger, what string, open func(context.Context) (S, error)) (S, error) {
	backoff := 200 * time.Millisecond
	for {
		store, err := open(ctx)
		var cfgErr *datastore.ConfigError
		if err == nil || errors.As(err, &cfgErr) || ctx.Err() != nil {
			return store, err
		}
		logger.Warn(what+" not reachable, retrying", "err", err, "backoff", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			var zero S
			return zero, ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// Parallel runs fn(0..n-1) on up to workers goroutines and returns the
// first error; every fn runs even after one failed.
func Parallel(workers, n int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}
