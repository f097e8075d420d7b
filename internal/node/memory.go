package node

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// trimThreshold is how much the agent may allocate between two looks
// without a trim: below it a forced collection costs more than the
// memory is worth. A node at rest still allocates now and then (metric
// scrapes, probes, resyncs), and what it allocated since the last trim
// stays resident as garbage until the next: at 4 MiB that was ~6 MiB of
// a loaded agent's 40 MiB of anonymous memory at rest. At 1 MiB a node
// at rest trims about once per metrics scrape (a collection of a ~20 MiB
// live heap, a few milliseconds of CPU); a busy node trims once per
// interval either way.
const trimThreshold = 1 << 20

// memoryTrimmer returns the heap's garbage to the kernel. A burst (the
// first full program of a large ruleset builds a payload of megabytes;
// every change rebuilds the snapshot) leaves garbage that the next
// collection would free and the runtime would then hand back only
// slowly; but a node at rest allocates too little to even start that
// collection, so its RSS stays near the burst's peak. Every interval the
// trimmer looks at how much the agent allocated since the last trim and,
// from trimThreshold on, collects and releases what is free
// (debug.FreeOSMemory): a collection of the live heap, some milliseconds
// of one core, at most once per interval and only while the agent
// allocates.
type memoryTrimmer struct {
	every time.Duration
	log   *slog.Logger
	// allocated is the bytes allocated since the process started; trim
	// collects and returns the free heap (tests fake both).
	allocated func() uint64
	trim      func()
}

func newMemoryTrimmer(every time.Duration, logger *slog.Logger) *memoryTrimmer {
	return &memoryTrimmer{every: every, log: logger.With("component", "memory"), allocated: heapAllocated, trim: debug.FreeOSMemory}
}

// Run trims until ctx is done.
func (m *memoryTrimmer) Run(ctx context.Context) error {
	t := time.NewTicker(m.every)
	defer t.Stop()
	last := m.allocated()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			since := m.allocated() - last
			if since < trimThreshold {
				continue
			}
			start := time.Now()
			m.trim()
			// The trim's own allocations do not count.
			last = m.allocated()
			m.log.Debug("returned free heap to the kernel", "allocated", since, "took", time.Since(start))
		}
	}
}

// heapAllocated is the runtime's cumulative count of bytes allocated on
// the heap.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
