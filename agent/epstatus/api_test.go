package epstatus

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The status socket answers timelines; a socket nobody serves is
// ErrNoAgent.
func TestStatusSocket(t *testing.T) {
	c := newClock()
	tr := newTracker(c, nil, 0)
	tr.ADDReceived(Key{"default", "n1-k8s-web-eth0"}, "web", "c1", c.now())
	sock := filepath.Join(t.TempDir(), "status.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(sock, tr, slog.New(slog.DiscardHandler)).Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var a *Answer
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if a, err = Query(context.Background(), sock, "default", "web"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if a.Node != "n1" || len(a.Records) != 1 || a.Records[0].ContainerID != "c1" {
		t.Errorf("answer = %+v", a)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("socket mode %v (%v): want root only", fi.Mode(), err)
	}
	if a, err := Query(context.Background(), sock, "default", "nobody"); err != nil || len(a.Records) != 0 {
		t.Errorf("unknown pod: %+v, %v", a, err)
	}
	if _, err := Query(context.Background(), filepath.Join(t.TempDir(), "none.sock"), "default", "web"); !errors.Is(err, ErrNoAgent) {
		t.Errorf("no agent: %v, want ErrNoAgent", err)
	}
}
