// Package errtest checks a table test's expected error in one line.
//
// API model: a case names the error it expects by a part of its message
// (wantErr, "" for none); Want fails the test unless err is that, and says
// whether the test goes on to check the result:
//
//	got, err := Parse(tt.in)
//	if !errtest.Want(t, err, tt.wantErr) {
//		return // the error wanted; there is no result to check
//	}
//
// Thread safety: Want follows testing.TB's rules (from the test's
// goroutine).
package errtest

import (
	"strings"
	"testing"
)

// Want checks err against want: "" wants no error, anything else an error
// whose message contains it. Another outcome fails t at once. Want reports
// whether the test should check the result: true when no error was
// wanted (and none came).
func Want(t testing.TB, err error, want string) bool {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one containing %q", err, want)
	}
	return want == ""
}
