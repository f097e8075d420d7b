package node

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/node/agentlock"
)

// An agent does not start while `calico-node cleanup` holds its data
// directory's lock: it would program what the cleanup is removing.
func TestRunRefusesDuringCleanup(t *testing.T) {
	dir := t.TempDir()
	path := agentlock.Path(dir)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := agentlock.Exclusive(path)
	if err != nil || l == nil {
		t.Fatalf("take the cleanup lock: %v", err)
	}
	defer l.Release()
	a := startAgent(t, []string{"--data-dir", dir, "--etcd-endpoints", "http://127.0.0.1:1"}, "NODENAME=n1")
	select {
	case <-a.Done():
		if a.Err() == nil || !strings.Contains(a.logs.String(), "calico-node cleanup is running on this node") {
			t.Errorf("agent during cleanup: exit %v, output:\n%s", a.Err(), a.logs)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("agent kept running during cleanup:\n%s", a.logs)
	}
}
