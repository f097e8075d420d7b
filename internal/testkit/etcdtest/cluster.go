package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/projectcalico/calico-node/internal/testkit/proctest"
)

// Cluster is a running multi-member etcd cluster: Debian's etcd binary,
// one process per member, every member on its own loopback client and
// peer ports with its data in t.TempDir(). Endpoints lists every member's
// client URL, as a node's etcd_endpoints lists a real cluster's.
type Cluster struct {
	// Endpoints are the members' client URLs, in member order.
	Endpoints []string
	// Members are the members, named etcd0, etcd1, ...
	Members []*Member
}

// Member is one member of a Cluster. Its ports and data directory are
// fixed for its life, so that Restart brings "the same" member back and
// clients that know its URL reconnect to it.
type Member struct {
	// Name is the member's name in the cluster (--name).
	Name string
	// ClientURL and PeerURL are where it serves clients and its peers.
	ClientURL, PeerURL string
	// DataDir is its data directory; it survives Kill and Restart.
	DataDir string

	binary       string
	logPath      string
	initialClust string
	heartbeat    time.Duration
	election     time.Duration

	mu   sync.Mutex
	proc *proctest.Proc
}

// ClusterOption configures StartCluster.
type ClusterOption func(*clusterOptions)

type clusterOptions struct {
	heartbeat, election time.Duration
}

// WithTimeouts sets the members' heartbeat interval and election timeout
// (etcd's --heartbeat-interval and --election-timeout). The default is
// etcd's own, 100 ms and 1 s, which tolerates the CPU starvation of a
// loaded test machine; shorter values make a killed leader replaced
// sooner.
func WithTimeouts(heartbeat, election time.Duration) ClusterOption {
	return func(o *clusterOptions) { o.heartbeat, o.election = heartbeat, election }
}

// StartCluster starts a cluster of size members and waits until every
// member serves linearizable reads (the cluster has a leader and each
// member has joined it). Everything is stopped in t.Cleanup.
func StartCluster(t testing.TB, size int, opts ...ClusterOption) *Cluster {
	t.Helper()
	if size < 1 {
		t.Fatalf("etcdtest: cluster of %d members", size)
	}
	bin, err := findBinary()
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	o := clusterOptions{heartbeat: 100 * time.Millisecond, election: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	dir := t.TempDir()
	c := &Cluster{}
	t.Cleanup(c.Stop)
	for attempt := 0; ; attempt++ {
		err = c.start(bin, filepath.Join(dir, strconv.Itoa(attempt)), size, o)
		if err == nil {
			return c
		}
		c.Stop()
		if !errors.Is(err, errPortInUse) || attempt+1 == startAttempts {
			t.Fatalf("etcdtest: start %d-member cluster: %v", size, err)
		}
	}
}

// start picks ports, writes nothing but the log directory, and starts
// every member at once: each waits for a quorum of the others.
func (c *Cluster) start(bin, dir string, size int, o clusterOptions) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	ports, err := freePorts(2 * size)
	if err != nil {
		return err
	}
	c.Members, c.Endpoints = nil, nil
	var initial []string
	for i := range size {
		m := &Member{
			Name:      "etcd" + strconv.Itoa(i),
			ClientURL: "http://127.0.0.1:" + strconv.Itoa(ports[2*i]),
			PeerURL:   "http://127.0.0.1:" + strconv.Itoa(ports[2*i+1]),
			DataDir:   filepath.Join(dir, "etcd"+strconv.Itoa(i)),
			binary:    bin,
			logPath:   filepath.Join(dir, "etcd"+strconv.Itoa(i)+".log"),
			heartbeat: o.heartbeat,
			election:  o.election,
		}
		c.Members = append(c.Members, m)
		c.Endpoints = append(c.Endpoints, m.ClientURL)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		m.initialClust = strings.Join(initial, ",")
		if err := m.launch(); err != nil {
			return err
		}
	}
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i, m := range c.Members {
		wg.Go(func() { errs[i] = m.waitReady() })
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		if strings.Contains(c.Members[i].logTail(), "address already in use") {
			return fmt.Errorf("%s: %w: %v", c.Members[i].Name, errPortInUse, err)
		}
		return fmt.Errorf("%s: %w; log %s:\n%s", c.Members[i].Name, err, c.Members[i].logPath, c.Members[i].logTail())
	}
	return nil
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	// Held open together so that the n ports are distinct.
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// launch starts the member's process without waiting for it.
func (m *Member) launch() error {
	args := []string{
		"--name", m.Name,
		"--data-dir", m.DataDir,
		"--listen-client-urls", m.ClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		// Ignored by etcd once the data directory holds a member: a
		// restarted member rejoins from its own WAL.
		"--initial-cluster", m.initialClust,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", "etcdtest",
		"--heartbeat-interval", strconv.FormatInt(m.heartbeat.Milliseconds(), 10),
		"--election-timeout", strconv.FormatInt(m.election.Milliseconds(), 10),
		"--logger", "zap",
		"--log-outputs", "stderr",
		"--log-level", "warn",
	}
	cmd := exec.Command(m.binary, args...)
	cmd.Env = etcdEnv()
	p, err := proctest.LaunchLogged(m.Name, cmd, m.logPath)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.proc = p
	m.mu.Unlock()
	return nil
}

// waitReady waits until a linearizable read through this member alone
// succeeds: it has joined a cluster that has a leader.
func (m *Member) waitReady() error {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		return errors.New("not running")
	}
	deadline := time.Now().Add(readyTimeout)
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{m.ClientURL},
		DialTimeout: time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return fmt.Errorf("client for %s: %w", m.ClientURL, err)
	}
	defer c.Close()
	return waitRead(c, m.ClientURL, p.Done(), deadline)
}

// PID is the member's process ID, or 0 while it is not running.
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil || !m.proc.Running() {
		return 0
	}
	return m.proc.Cmd.Process.Pid
}

// Kill ends the member's process by its PID with SIGKILL, as a crash or
// an OOM kill would: no clean shutdown, no leadership transfer. Its data
// directory is kept. Kill on a stopped member does nothing.
func (m *Member) Kill() {
	m.mu.Lock()
	p := m.proc
	m.proc = nil
	m.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// Stop ends the member's process by its PID: SIGTERM, then SIGKILL after
// a grace period.
func (m *Member) Stop() {
	m.mu.Lock()
	p := m.proc
	m.proc = nil
	m.mu.Unlock()
	if p != nil {
		p.Stop(stopGrace)
	}
}

// Restart starts a stopped (or killed) member again on its ports and data
// directory and waits until it serves linearizable reads, i.e. it has
// rejoined the cluster and caught up with the leader's log. A running
// member is stopped first.
func (m *Member) Restart(t testing.TB) {
	t.Helper()
	if err := m.restart(); err != nil {
		t.Fatalf("etcdtest: restart %s: %v", m.Name, err)
	}
}

func (m *Member) restart() error {
	m.Stop()
	var err error
	// The ports may still be held briefly by the old process's sockets.
	for range startAttempts {
		if err = m.launch(); err != nil {
			return err
		}
		if err = m.waitReady(); err == nil {
			return nil
		}
		inUse := strings.Contains(m.logTail(), "address already in use")
		m.Stop()
		if !inUse {
			return fmt.Errorf("%w; log %s:\n%s", err, m.logPath, m.logTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

// Stop stops every member. It is idempotent.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Go(m.Stop)
	}
	wg.Wait()
}

// Client returns a client of every member, closed in t.Cleanup.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   append([]string(nil), c.Endpoints...),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcdtest: client for %v: %v", c.Endpoints, err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Leader returns the member that is leader now, asking the running
// members; nil if none of them knows one.
func (c *Cluster) Leader(ctx context.Context, cl *clientv3.Client) *Member {
	for _, m := range c.Members {
		if m.PID() == 0 {
			continue
		}
		st, err := cl.Status(ctx, m.ClientURL)
		if err != nil || st.Leader == 0 {
			continue
		}
		for _, other := range c.Members {
			if other.PID() == 0 {
				continue
			}
			ost, err := cl.Status(ctx, other.ClientURL)
			if err == nil && ost.Header.MemberId == st.Leader {
				return other
			}
		}
	}
	return nil
}

func (m *Member) logTail() string { return fileTail(m.logPath) }
