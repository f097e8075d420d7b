package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// goTestJSON runs `go test -json ./...` on a throwaway module made of
// files (path: content) and returns its output and whether go test
// itself succeeded.
func goTestJSON(t *testing.T, files map[string]string) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module sample\n\ngo 1.26\n"
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	out, err := cmd.Output()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("go test: %v", err)
	}
	return string(out), err == nil
}

// The report of real `go test -json` runs: the exit status follows go
// test's, every skip is listed with its reason, failures show their own
// output, and the last line is the totals.
func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		// want are lines the report must have, last its closing line.
		want    []string
		notWant []string
		last    string
		ok      bool
	}{
		{
			name: "all pass",
			files: map[string]string{
				"a/a_test.go": "package a\nimport \"testing\"\nfunc TestA(t *testing.T) { t.Run(\"sub\", func(t *testing.T) {}) }\nfunc Example() {\n\t// Output:\n}\n",
				"b/b.go":      "package b\n",
			},
			want: []string{"ok  \tsample/a\t", "?   \tsample/b\t[no test files]"},
			last: "3 passed, 0 failed, 0 skipped",
			ok:   true,
		},
		{
			name: "failures and skips",
			files: map[string]string{
				"a/a_test.go": `package a
import "testing"
func TestPass(t *testing.T) {}
func TestFail(t *testing.T) { t.Log("context line"); t.Error("boom") }
func TestSkip(t *testing.T) { t.Skip("CALICO_KUBE_TESTS=skip") }
func TestParent(t *testing.T) {
	t.Run("ok", func(t *testing.T) {})
	t.Run("skipped", func(t *testing.T) { t.Skipf("needs %s", "root") })
	t.Run("failed", func(t *testing.T) { t.Fatal("sub broke") })
}
func TestSilentSkip(t *testing.T) { t.SkipNow() }
`,
			},
			want: []string{
				"FAIL\tsample/a\t",
				"--- FAIL: sample/a TestFail", "    a_test.go:4: context line", "    a_test.go:4: boom",
				"--- FAIL: sample/a TestParent/failed", "    a_test.go:9: sub broke",
				"SKIP sample/a TestParent/skipped: a_test.go:8: needs root",
				"SKIP sample/a TestSilentSkip: (no reason given)",
				"SKIP sample/a TestSkip: a_test.go:5: CALICO_KUBE_TESTS=skip",
			},
			// The parent failed only through its subtest: not shown apart.
			notWant: []string{"--- FAIL: sample/a TestParent\n", "=== RUN"},
			last:    "2 passed, 3 failed, 3 skipped",
		},
		{
			name: "build failure",
			files: map[string]string{
				"a/a_test.go": "package a\nimport \"testing\"\nfunc TestA(t *testing.T) { undefined() }\n",
				"b/b_test.go": "package b\nimport \"testing\"\nfunc TestB(t *testing.T) {}\n",
			},
			want: []string{"FAIL\tsample/a [build failed]", "--- FAIL: sample/a (package)", "a_test.go:3:28: undefined: undefined"},
			last: "1 passed, 1 failed, 0 skipped",
		},
		{
			name: "test binary dies",
			files: map[string]string{
				"a/a_test.go": "package a\nimport (\"os\"; \"testing\")\nfunc TestExit(t *testing.T) { os.Exit(0) }\n",
			},
			want: []string{"FAIL\tsample/a\t", "--- FAIL: sample/a TestExit"},
			last: "0 passed, 1 failed, 0 skipped",
		},
		{
			name: "TestMain fails without a test failing",
			files: map[string]string{
				"a/a_test.go": "package a\nimport (\"fmt\"; \"os\"; \"testing\")\nfunc TestMain(m *testing.M) { m.Run(); fmt.Println(\"leak check: 1 goroutine left\"); os.Exit(1) }\nfunc TestA(t *testing.T) {}\n",
			},
			want: []string{"--- FAIL: sample/a (package)", "leak check: 1 goroutine left"},
			last: "1 passed, 1 failed, 0 skipped",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream, goOK := goTestJSON(t, tc.files)
			if goOK != tc.ok {
				t.Fatalf("go test succeeded: %v, want %v (the case is wrong)", goOK, tc.ok)
			}
			var out strings.Builder
			if got := summarize(strings.NewReader(stream), &out); got != tc.ok {
				t.Errorf("summarize = %v, want %v (go test's status)", got, tc.ok)
			}
			report := out.String()
			lines := strings.Split(strings.TrimRight(report, "\n"), "\n")
			if last := lines[len(lines)-1]; last != tc.last {
				t.Errorf("last line %q, want %q", last, tc.last)
			}
			for _, w := range tc.want {
				if !strings.Contains(report, w) {
					t.Errorf("report lacks %q", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(report, w) {
					t.Errorf("report has %q", w)
				}
			}
			if t.Failed() {
				t.Logf("report:\n%s", report)
			}
		})
	}
}

// A stream cut off (go test killed) leaves packages and tests without a
// result: that is a failure, not a pass.
func TestSummarizeCutOff(t *testing.T) {
	stream := `{"Action":"start","Package":"sample/a"}
{"Action":"run","Package":"sample/a","Test":"TestSlow"}
{"Action":"output","Package":"sample/a","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}
{"Action":"output","Package":"sample/a","Test":"TestSlow","Output":"    a_test.go:9: waiting for the node\n"}
go: some message that is not an event
`
	var out strings.Builder
	if summarize(strings.NewReader(stream), &out) {
		t.Error("summarize = true for a stream without results")
	}
	report := out.String()
	texttest.Contains(t, "report", report, "go: some message that is not an event", "--- FAIL: sample/a TestSlow (did not finish)",
		"waiting for the node", "--- FAIL: sample/a (package did not report a result)", "\n0 passed, 2 failed, 0 skipped\n")
}

// A long failure keeps the test's own messages (why it failed) even when
// a process log dumped after them fills the tail.
func TestExcerpt(t *testing.T) {
	var long []string
	long = append(long, "    node_test.go:105: ten pods at once", "    node_test.go:231: every probe reached its peer:", "        map[a:Succeeded]")
	for i := range 300 {
		long = append(long, fmt.Sprintf("        agent log %d", i))
	}
	long = append(long, "    proctest.go:148: --- agent log (last 200 lines):")
	for i := range 200 {
		long = append(long, fmt.Sprintf("        tail %d", i))
	}
	tests := []struct {
		name       string
		lines      []string
		want, lack []string
		maxLen     int
	}{
		{name: "short output whole", lines: []string{"    a_test.go:1: x", "y"}, want: []string{"    a_test.go:1: x", "y"}, maxLen: 2},
		{name: "messages and tail kept", lines: long,
			want: []string{"    node_test.go:105: ten pods at once", "    node_test.go:231: every probe reached its peer:", "        map[a:Succeeded]",
				"        agent log 0", "    proctest.go:148: --- agent log (last 200 lines):", "        tail 199", "    ... "},
			lack: []string{"        agent log 150"}, maxLen: 40 + 3},
		{name: "not a message", lines: append([]string{"x.go:1: at column 0", "    a b.go:1: spaced"}, long[3:50]...),
			want: []string{"        agent log 46"}, lack: []string{"x.go:1: at column 0", "    a b.go:1: spaced"}, maxLen: 41},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := excerpt(tt.lines, 40)
			joined := strings.Join(got, "\n")
			texttest.Contains(t, "excerpt", joined, tt.want...)
			for _, l := range tt.lack {
				if strings.Contains(joined, l+"\n") {
					t.Errorf("excerpt has %q:\n%s", l, joined)
				}
			}
			if len(got) > tt.maxLen {
				t.Errorf("excerpt has %d lines, want at most %d", len(got), tt.maxLen)
			}
		})
	}
}
