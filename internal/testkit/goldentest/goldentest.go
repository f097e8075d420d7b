// Package goldentest compares a test's output with a golden file kept
// under testdata/, and rewrites the file instead when the test runs with
// -update (go test ./pkg -update): a reviewer then sees the change of
// behaviour as the diff of the golden file.
//
// Design: the -update flag is registered here, once per test binary, so a
// package that imports goldentest must not declare its own.
//
// Thread safety: Check may be called from parallel tests on distinct
// files.
package goldentest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files from the current output")

// Update reports whether the test binary runs with -update.
func Update() bool { return *update }

// Check compares got with the golden file at path, or writes got there
// with -update.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test with -update to create it): %v", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs from the output (run go test with -update to accept it):\n%s", path, Diff(string(want), string(got)))
	}
}

// Diff shows the first ten differing lines of want and got: enough to see
// what changed.
func Diff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			fmt.Fprintf(&b, "line %d:\n  want: %s\n  got:  %s\n", i+1, w, g)
			if shown++; shown == 10 {
				break
			}
		}
	}
	return b.String()
}
