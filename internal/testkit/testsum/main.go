// Command testsum turns the output of `go test -json` into what a person
// reads at the end of `make test`:
//
//	go test -json ./... | go run ./internal/testkit/testsum
//
// While the packages run it prints one line per package, as go test does
// (ok, FAIL, or no test files). At the end it prints every failure with
// its output (the test's own log lines, the framework's "=== RUN" and
// "--- FAIL" lines left out; a long one shortened to every message's first
// lines and then its last lines, about maxOutputLines in all), every
// skipped test with the reason it gave, and finally one totals line:
//
//	N passed, N failed, N skipped
//
// It exits 1 when anything failed, 0 otherwise. Tests and subtests (and
// examples) each count once. A package that failed without a failed test
// — it did not compile, its TestMain or test binary died, it timed out
// before reporting — counts as one failure under the package's name, as
// does a package that never reported a result (its go test was killed):
// go test's own exit status would have been non-zero for all of these.
// Lines on stdin that are not test events (go's own messages) are passed
// through. The Makefile also runs the pipe with pipefail, so a go test
// that failed without saying so in its events still fails `make test`.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// maxOutputLines is how much of a failed test's output is shown.
const maxOutputLines = 40

func main() {
	if !summarize(os.Stdin, os.Stdout) {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string // build-output and build-fail
	FailedBuild string
	Elapsed     float64
}

// result is one test's (or, with test "", one package's) outcome and
// output.
type result struct {
	pkg, test string
	action    string // pass, fail, skip; "" while running
	output    []string
}

type summary struct {
	w       io.Writer
	results map[string]*result // key: package + "\x00" + test
	order   []*result          // first seen first
	// build holds the compiler output per package import path
	// ("pkg [pkg.test]"), handed to the package's failure.
	build map[string][]string
}

// summarize reads go test -json from r, writes the report to w and
// reports whether everything passed.
func summarize(r io.Reader, w io.Writer) bool {
	s := &summary{w: w, results: map[string]*result{}, build: map[string][]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 64*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		var ev event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &ev) != nil || ev.Action == "" {
			fmt.Fprintln(w, line)
			continue
		}
		s.add(ev)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(w, "testsum: read go test output: %v\n", err)
		s.report()
		return false
	}
	return s.report()
}

func (s *summary) get(pkg, test string) *result {
	key := pkg + "\x00" + test
	r, ok := s.results[key]
	if !ok {
		r = &result{pkg: pkg, test: test}
		s.results[key] = r
		s.order = append(s.order, r)
	}
	return r
}

func (s *summary) add(ev event) {
	switch ev.Action {
	case "build-output":
		s.build[ev.ImportPath] = append(s.build[ev.ImportPath], strings.TrimRight(ev.Output, "\n"))
		return
	case "build-fail":
		return // the package's fail event (FailedBuild) follows
	}
	if ev.Package == "" {
		return
	}
	r := s.get(ev.Package, ev.Test)
	switch ev.Action {
	case "output":
		r.output = append(r.output, strings.TrimRight(ev.Output, "\n"))
	case "pass", "fail", "skip":
		r.action = ev.Action
		if ev.Test == "" {
			if ev.FailedBuild != "" {
				r.output = append(s.build[ev.FailedBuild], r.output...)
			}
			s.packageLine(r, ev)
		}
	}
}

// packageLine is go test's line for a finished package.
func (s *summary) packageLine(r *result, ev event) {
	switch {
	case r.action == "fail" && ev.FailedBuild != "":
		fmt.Fprintf(s.w, "FAIL\t%s [build failed]\n", r.pkg)
	case r.action == "fail":
		fmt.Fprintf(s.w, "FAIL\t%s\t%.1fs\n", r.pkg, ev.Elapsed)
	case r.action == "skip":
		fmt.Fprintf(s.w, "?   \t%s\t[no test files]\n", r.pkg)
	default:
		fmt.Fprintf(s.w, "ok  \t%s\t%.1fs\n", r.pkg, ev.Elapsed)
	}
}

// report prints failures, skips and the totals line; true if nothing
// failed.
func (s *summary) report() bool {
	var passed, skipped int
	var failed, skips []*result
	// A package's tests that never finished, and whether it has a
	// failed test to blame.
	failedTests := map[string]bool{}
	for _, r := range s.order {
		if r.test != "" && r.action == "fail" {
			failedTests[r.pkg] = true
		}
	}
	for _, r := range s.order {
		switch {
		case r.test == "":
			// The package itself: a failure of its own only when no
			// test explains it (build failure, crash, TestMain), or when
			// it never finished.
			if (r.action == "fail" && !failedTests[r.pkg]) || r.action == "" {
				failed = append(failed, r)
			}
		case r.action == "pass":
			passed++
		case r.action == "skip":
			skipped++
			skips = append(skips, r)
		case r.action == "fail":
			failed = append(failed, r)
		default:
			// Started, never finished: the binary died or timed out
			// under it (its package failed too).
			failed = append(failed, r)
		}
	}

	if len(failed) > 0 {
		// A parent that failed only through its subtests has nothing of
		// its own to show.
		failedParent := map[string]bool{}
		for _, r := range failed {
			for t := r.test; strings.Contains(t, "/"); {
				t = t[:strings.LastIndex(t, "/")]
				failedParent[r.pkg+"\x00"+t] = true
			}
		}
		fmt.Fprintf(s.w, "\n=== Failures (%d)\n", len(failed))
		for _, r := range failed {
			if r.test != "" && failedParent[r.pkg+"\x00"+r.test] && len(ownLines(r.output)) == 0 {
				continue
			}
			s.printFailure(r)
		}
	}
	if len(skips) > 0 {
		sort.SliceStable(skips, func(i, j int) bool {
			if skips[i].pkg != skips[j].pkg {
				return skips[i].pkg < skips[j].pkg
			}
			return skips[i].test < skips[j].test
		})
		fmt.Fprintf(s.w, "\n=== Skipped (%d)\n", len(skips))
		for _, r := range skips {
			fmt.Fprintf(s.w, "SKIP %s %s: %s\n", shortPkg(r.pkg), r.test, skipReason(r.output))
		}
	}
	fmt.Fprintln(s.w)
	fmt.Fprintf(s.w, "%d passed, %d failed, %d skipped\n", passed, len(failed), skipped)
	return len(failed) == 0
}

func (s *summary) printFailure(r *result) {
	name := r.test
	switch {
	case r.test != "" && r.action == "":
		name += " (did not finish)"
	case r.test == "" && r.action == "":
		name = "(package did not report a result)"
	case r.test == "":
		name = "(package)"
	}
	fmt.Fprintf(s.w, "\n--- FAIL: %s %s\n", shortPkg(r.pkg), name)
	lines := ownLines(r.output)
	if r.test == "" {
		lines = r.output // build output, panics, TestMain: all of it
	}
	for _, l := range excerpt(lines, maxOutputLines) {
		fmt.Fprintln(s.w, l)
	}
}

// excerpt shortens a failed test's output to about max lines. A test's
// own messages (t.Log, t.Error: "    file_test.go:12: ...") are what says
// why it failed, and a process log dumped on failure can push them out of
// a plain tail; so every message's first lines are kept, wherever they
// are, and the rest of the room goes to the last lines. Gaps are marked
// "... N lines omitted".
func excerpt(lines []string, max int) []string {
	if len(lines) <= max {
		return lines
	}
	const perMessage = 4 // a message's line and its first continuation lines
	keep := make([]bool, len(lines))
	kept := 0
	for i := 0; i < len(lines) && kept < max; i++ {
		if !isMessage(lines[i]) {
			continue
		}
		for j := i; j < len(lines) && j < i+perMessage && (j == i || !isMessage(lines[j])); j++ {
			if !keep[j] {
				keep[j] = true
				kept++
			}
		}
	}
	for i := len(lines) - 1; i >= 0 && kept < max; i-- {
		if !keep[i] {
			keep[i] = true
			kept++
		}
	}
	var out []string
	for i := 0; i < len(lines); {
		if keep[i] {
			out = append(out, lines[i])
			i++
			continue
		}
		j := i
		for j < len(lines) && !keep[j] {
			j++
		}
		out = append(out, fmt.Sprintf("    ... %d lines omitted", j-i))
		i = j
	}
	return out
}

// isMessage reports whether a line starts a test's own message, as the
// testing package prints it: indented "name.go:line: ".
func isMessage(l string) bool {
	t := strings.TrimLeft(l, " ")
	if len(t) == len(l) {
		return false
	}
	file, rest, ok := strings.Cut(t, ":")
	if !ok || !strings.HasSuffix(file, ".go") || strings.ContainsAny(file, " \t") {
		return false
	}
	line, _, ok := strings.Cut(rest, ":")
	if !ok || line == "" {
		return false
	}
	for _, c := range line {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ownLines drops the testing framework's lines (=== RUN, --- FAIL: ...)
// from a test's output, keeping what the test logged.
func ownLines(output []string) []string {
	var out []string
	for _, l := range output {
		t := strings.TrimLeft(l, " \t")
		if strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- PASS") ||
			strings.HasPrefix(t, "--- FAIL") || strings.HasPrefix(t, "--- SKIP") || strings.TrimSpace(l) == "" {
			continue
		}
		out = append(out, l)
	}
	return out
}

// skipReason is what a skipped test logged (t.Skip's message, with its
// file:line), on one line.
func skipReason(output []string) string {
	lines := ownLines(output)
	if len(lines) == 0 {
		return "(no reason given)"
	}
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, " / ")
}

// shortPkg drops the module path, as a person reads package names here.
func shortPkg(pkg string) string {
	if rest, ok := strings.CutPrefix(pkg, "github.com/projectcalico/calico-node/"); ok {
		return rest
	}
	if pkg == "github.com/projectcalico/calico-node" {
		return "."
	}
	return pkg
}
