package agentlock

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestAgentsShareCleanupExcludes(t *testing.T) {
	path := Path(t.TempDir())
	a1, err := Shared(path)
	if err != nil {
		t.Fatal(err)
	}
	// Two agents of one data directory do not stop each other (the lock
	// is only cleanup's signal).
	a2, err := Shared(path)
	if err != nil {
		t.Fatalf("second agent: %v", err)
	}
	if _, err := Exclusive(path); !errors.Is(err, ErrAgentRunning) || !strings.Contains(err.Error(), path) {
		t.Errorf("cleanup while agents run: %v, want ErrAgentRunning naming %s", err, path)
	}
	if held, err := Held(path); err != nil || !held {
		t.Errorf("Held while agents run: %v %v", held, err)
	}
	pids, err := Holders(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(pids, os.Getpid()); n != 2 {
		t.Errorf("holders %v: want this process twice", pids)
	}
	a1.Release()
	if _, err := Exclusive(path); !errors.Is(err, ErrAgentRunning) {
		t.Errorf("cleanup while one agent still runs: %v", err)
	}
	a2.Release()
	if held, err := Held(path); err != nil || held {
		t.Errorf("Held after the agents stopped: %v %v", held, err)
	}

	c, err := Exclusive(path)
	if err != nil {
		t.Fatalf("cleanup after the agents stopped: %v", err)
	}
	if _, err := Shared(path); !errors.Is(err, ErrCleanupRunning) {
		t.Errorf("agent start during cleanup: %v, want ErrCleanupRunning", err)
	}
	// Cleanup removes the file while it holds it.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	c.Release()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file after Remove: %v", err)
	}
	a3, err := Shared(path)
	if err != nil {
		t.Fatalf("agent after cleanup: %v", err)
	}
	a3.Release()
}

// An agent that opened the file just before cleanup removed it must not
// keep a lock on the nameless inode: cleanup would not see it.
func TestLockOnRemovedFileIsNotKept(t *testing.T) {
	path := Path(t.TempDir())
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if same, err := namesFile(path, f); err != nil || !same {
		t.Fatalf("fresh file: %v %v", same, err)
	}
	os.Remove(path)
	if same, err := namesFile(path, f); err != nil || same {
		t.Errorf("removed file still counts as the lock: %v %v", same, err)
	}
	os.WriteFile(path, nil, 0o644)
	if same, err := namesFile(path, f); err != nil || same {
		t.Errorf("a new file at the path counts as the old lock: %v %v", same, err)
	}
}

func TestExclusiveCreatesNothing(t *testing.T) {
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "never-ran")} {
		l, err := Exclusive(Path(dir))
		if err != nil || l != nil {
			t.Fatalf("Exclusive without a lock file: %v %v", l, err)
		}
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(Path(dir)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("lock file created in %s: %v", dir, err)
		}
	}
	dir := filepath.Join(t.TempDir(), "never-ran")
	if held, err := Held(Path(dir)); held || err != nil {
		t.Errorf("Held without a file: %v %v", held, err)
	}
}

func TestParseLocks(t *testing.T) {
	in := `1: POSIX  ADVISORY  WRITE 10 00:2d:131 0 EOF
2: FLOCK  ADVISORY  READ 4242 00:2d:131 0 EOF
2: -> FLOCK  ADVISORY  WRITE 99 00:2d:131 0 EOF
3: FLOCK  ADVISORY  WRITE 7 00:2d:132 0 EOF
4: FLOCK  ADVISORY  READ 4343 fd:01:131 0 EOF
5: FLOCK  ADVISORY  READ 4444 00:2d:131 0 EOF
`
	// dev 0x2d is major 0, minor 0x2d.
	pids, err := parseLocks(strings.NewReader(in), 0x2d, 131)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pids, []int{4242, 4444}) {
		t.Errorf("pids %v, want [4242 4444]", pids)
	}
}

func count(s []int, v int) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
