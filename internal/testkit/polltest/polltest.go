// Package polltest waits in tests for what happens asynchronously (an
// actor converging, a process reacting, a controller writing): it polls a
// check until it holds or the time is up, then fails the test saying what
// it waited for and, where the check says why, why it was still not so.
//
// Design: plain polling on the test goroutine, every Interval. The
// deadline is looked at only after a check fails, so the last check comes
// at or after it: a slow machine never fails a test whose condition holds
// by then.
//
// Thread safety: the functions run on the calling test's goroutine.
package polltest

import (
	"testing"
	"time"
)

// Interval is how often a check is called.
const Interval = 50 * time.Millisecond

// Eventually calls check until it returns nil. After timeout it fails the
// test with what and check's last error.
func Eventually(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(Interval)
	}
}

// Until calls cond until it is true. After timeout it fails the test with
// what.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(Interval)
	}
}
