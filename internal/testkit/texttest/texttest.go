// Package texttest checks what a command or a test double printed: that
// the text holds each of the lines or phrases a user would look for.
//
// Design: every missing phrase is its own error, with the whole text, so
// that one run shows all that is missing and what there was instead.
//
// Thread safety: Contains reports through t, which may be shared.
package texttest

import (
	"strings"
	"testing"
)

// Contains fails t for each of wants that got does not contain; what
// names got in the message ("ipam show", "IPv4 plan").
func Contains(t testing.TB, what, got string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, got)
		}
	}
}
