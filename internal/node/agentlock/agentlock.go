// Package agentlock tells `calico-node cleanup` whether an agent is
// running on this node.
//
// Model: `calico-node run` holds a shared flock(2) on <data-dir>/agent.lock
// for its whole life; cleanup takes the same lock exclusively, so it fails
// while any agent of this data directory runs, and an agent cannot start
// while a cleanup is under way. The kernel drops a flock when its holder
// exits, however it exits, so a crashed agent never leaves a stale "running"
// mark behind. The lock lives in the data directory rather than in
// /var/run/calico because every agent has its own data directory even when
// several simulated nodes share one machine (the demo, the tests), so each
// cleanup sees exactly the agents of its own node.
//
// Design: cleanup deletes the lock file while it holds it exclusively. An
// agent that opened the file just before may then lock an inode that no
// longer has a name, so every acquisition checks after locking that the path
// still names the locked inode, and starts over with a fresh file if not
// (the usual protocol for removable lock files).
//
// Thread safety: a Lock is used by one goroutine.
package agentlock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// FileName is the lock file's name inside the data directory.
const FileName = "agent.lock"

// Path is the lock file of the agent whose data directory is dataDir.
func Path(dataDir string) string { return filepath.Join(dataDir, FileName) }

var (
	// ErrAgentRunning: an agent holds the lock (cleanup's Exclusive).
	ErrAgentRunning = errors.New("calico-node run is running on this node")
	// ErrCleanupRunning: a cleanup holds the lock (the agent's Shared).
	ErrCleanupRunning = errors.New("calico-node cleanup is running on this node")
)

// Lock is a held lock.
type Lock struct {
	f *os.File
}

// Shared takes the agent's lock, creating the file (and its directory)
// when missing. It does not wait: while a cleanup holds the lock it returns
// ErrCleanupRunning.
func Shared(path string) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("agent lock directory: %w", err)
	}
	return acquire(path, os.O_CREATE, syscall.LOCK_SH, ErrCleanupRunning)
}

// Exclusive takes cleanup's lock. It does not wait: while an agent holds
// the lock it returns ErrAgentRunning. Without a lock file no agent has run
// since the last cleanup: Exclusive then returns a nil Lock and creates
// nothing, so that a cleanup leaves no file of its own behind.
func Exclusive(path string) (*Lock, error) {
	l, err := acquire(path, 0, syscall.LOCK_EX, ErrAgentRunning)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return l, err
}

// Held reports whether an agent holds the lock at path, creating and
// changing nothing (for a dry run).
func Held(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open agent lock %s: %w", path, err)
	}
	defer f.Close()
	err = flock(f, syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	return false, nil // closing f releases it
}

func acquire(path string, create, how int, busy error) (*Lock, error) {
	for {
		f, err := os.OpenFile(path, create|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open agent lock %s: %w", path, err)
		}
		err = flock(f, how|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("%w (%s is locked)", busy, path)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// A cleanup may have removed the file between our open and flock:
		// then we hold a lock nobody else can see.
		same, err := namesFile(path, f)
		if err != nil {
			f.Close()
			return nil, err
		}
		if same {
			return &Lock{f: f}, nil
		}
		f.Close()
	}
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// namesFile reports whether path is (still) the open file f.
func namesFile(path string, f *os.File) (bool, error) {
	held, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat agent lock %s: %w", path, err)
	}
	cur, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat agent lock %s: %w", path, err)
	}
	return os.SameFile(held, cur), nil
}

// Release lets go of the lock; the file stays (cleanup removes it while
// holding it). A nil Lock is fine.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}

// Holders returns the PIDs holding a flock on the file at path, from
// /proc/locks (empty when none or when the file does not exist). The PIDs
// are as this process's PID namespace sees them, or 0 for a holder outside
// it.
func Holders(path string) ([]int, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, nil
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil, fmt.Errorf("read lock holders: %w", err)
	}
	defer f.Close()
	return parseLocks(f, uint64(sys.Dev), sys.Ino)
}

// parseLocks reads /proc/locks lines such as
//
//	1: FLOCK  ADVISORY  READ 4242 00:2d:131 0 EOF
//
// (the device as hex major:minor, the inode in decimal) and returns the
// PIDs of FLOCK locks on dev/ino. Blocked waiters ("->") are skipped.
func parseLocks(r io.Reader, dev, ino uint64) ([]int, error) {
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), ino)
	var pids []int
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		if fields[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(fields[4]); err == nil {
			pids = append(pids, pid)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/locks: %w", err)
	}
	return pids, nil
}
