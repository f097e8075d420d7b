package ipam_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// The kdd backend's scenarios share one kube-apiserver with Calico's CRDs
// (deploy/crds.yaml): starting one takes seconds, and every fixture wipes
// the IPAM objects first. It is started by the first test that needs it
// and stopped when the package's tests are done.
func TestMain(m *testing.M) {
	code := m.Run()
	sharedKube.stop()
	os.Exit(code)
}

var sharedKube kubeOnce

// kubeOnce starts the shared cluster once.
type kubeOnce struct {
	once    sync.Once
	tb      *mainTB
	cluster *kubetest.Cluster
	failure string
	skipped bool
}

// kube returns the shared cluster, starting it on first use.
func kube(t testing.TB) *kubetest.Cluster {
	t.Helper()
	k := &sharedKube
	k.once.Do(k.start)
	switch {
	case k.skipped:
		t.Skip(k.failure)
	case k.cluster == nil:
		t.Fatalf("shared kube-apiserver: %s", k.failure)
	}
	return k.cluster
}

func (k *kubeOnce) start() {
	k.tb = &mainTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := kubetest.Start(k.tb, kubetest.WithoutControllerManager())
		c.InstallCalicoCRDs(k.tb)
		k.cluster = c
	}()
	<-done
	k.failure, k.skipped = k.tb.failure, k.tb.skipped
}

func (k *kubeOnce) stop() {
	if k.tb != nil {
		k.tb.runCleanups()
	}
}

// mainTB is the testing.TB the shared cluster is started with: it outlives
// the test that starts it, so its cleanups run at the end of TestMain, and
// a fatal error ends only the starting goroutine (kube reports it to every
// test that needs the cluster). Only the methods kubetest and etcdtest
// call are implemented; the embedded nil TB panics on any other.
type mainTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	failure  string
	skipped  bool
}

func (m *mainTB) Helper() {}

func (m *mainTB) Cleanup(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cleanups = append(m.cleanups, f)
}

func (m *mainTB) runCleanups() {
	m.mu.Lock()
	fs := slices.Clone(m.cleanups)
	m.cleanups = nil
	m.mu.Unlock()
	for _, f := range slices.Backward(fs) {
		f()
	}
}

func (m *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "ipam-kube-")
	if err != nil {
		m.Fatalf("temp dir: %v", err)
	}
	m.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (m *mainTB) Errorf(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failure == "" {
		m.failure = fmt.Sprintf(format, args...)
	}
}

func (m *mainTB) Fatalf(format string, args ...any) {
	m.Errorf(format, args...)
	runtime.Goexit()
}

func (m *mainTB) Skip(args ...any) {
	m.mu.Lock()
	m.failure, m.skipped = fmt.Sprint(args...), true
	m.mu.Unlock()
	runtime.Goexit()
}

// wipeIPAMObjects deletes every object of Calico's IPAM resources.
func wipeIPAMObjects(t testing.TB, ctx context.Context, c *kubetest.Cluster) {
	t.Helper()
	for _, plural := range []string{"ipamblocks", "blockaffinities", "ipamhandles", "ipamconfigs"} {
		err := c.Client.CoreV1().RESTClient().Delete().AbsPath("/apis/crd.projectcalico.org/v1/" + plural).Do(ctx).Error()
		if err != nil {
			t.Fatalf("delete all %s: %v", plural, err)
		}
	}
}
