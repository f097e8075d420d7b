package node

import (
	"context"
	"io"
	"log/slog"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"
)

// TestMemoryTrimmer: a burst of allocation is followed by a trim, a
// quiet agent is left alone, and the trimmer stops with its context.
func TestMemoryTrimmer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		perLook   uint64 // allocated between two looks
		wantTrims bool
	}{
		{"quiet agent left alone", trimThreshold / 100, false},
		{"a burst trimmed", 40 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var trims atomic.Int32
			var allocated atomic.Uint64
			m := newMemoryTrimmer(time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
			m.allocated = func() uint64 { return allocated.Add(tc.perLook) }
			m.trim = func() { trims.Add(1) }
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := m.Run(ctx); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := trims.Load() > 0; got != tc.wantTrims {
				t.Errorf("trimmed %d times, want trims: %v", trims.Load(), tc.wantTrims)
			}
		})
	}
}

// TestHeapAllocatedAndTrim: the runtime's figure counts an allocation,
// and the real trim gives a dropped one back to the kernel.
func TestHeapAllocatedAndTrim(t *testing.T) {
	m := newMemoryTrimmer(time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	before := m.allocated()
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = 1 // resident
	}
	if got := m.allocated() - before; got < 64<<20 {
		t.Fatalf("allocated %d bytes, counted %d", 64<<20, got)
	}
	buf = nil
	released := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	r0 := released()
	m.trim()
	if got := int64(released()) - int64(r0); got < 32<<20 {
		t.Errorf("the trim returned %d bytes of a dropped 64 MiB, want at least 32 MiB", got)
	}
}
