package etcdscale

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"
)

// churner starts pods at a steady rate on random nodes and deletes each
// after its lifetime, through the CNI plugin's steps (package cni above),
// on a pool of workers: a pod's ADD runs while others' ADDs and DELs do,
// as on a cluster whose nodes start pods independently.
type churner struct {
	clients  []cni
	s        shape
	rate     float64       // pods started per second, cluster-wide
	lifetime time.Duration // from a pod's ADD to its DEL
	workers  int

	mu      sync.Mutex
	live    map[string]livePod // ns/name of the endpoint -> pod
	deleted map[string]pod
	t0s     map[string]time.Time // every pod's endpoint write
	started int                  // ADDs begun
	addLat  []time.Duration
	delLat  []time.Duration
	retries int
	failed  []string

	dueMu sync.Mutex
	due   []duePod // DELs in the order they fall due
}

type duePod struct {
	at time.Time
	p  pod
}

type livePod struct {
	pod
	ip netip.Addr
	t0 time.Time
}

type job struct {
	p   pod
	add bool
}

func newChurner(clients []cni, s shape, rate float64, lifetime time.Duration, workers int) *churner {
	return &churner{clients: clients, s: s, rate: rate, lifetime: lifetime, workers: workers,
		live: map[string]livePod{}, deleted: map[string]pod{}, t0s: map[string]time.Time{}}
}

func (p pod) key() string { return p.namespace + "/" + p.wepName() }

// run starts pods until ctx ends, then waits for the ADDs and DELs under
// way (not for the DELs not yet due: those pods stay, and must be found
// at the end). A job waits for a free worker: when the cluster cannot
// keep up, the achieved rate drops below the target and shows it.
func (c *churner) run(ctx context.Context) {
	jobs := make(chan job)
	var wg sync.WaitGroup
	for w := range c.workers {
		cl := c.clients[w%len(c.clients)]
		wg.Go(func() {
			for j := range jobs {
				c.do(cl, j)
			}
		})
	}
	interval := time.Duration(float64(time.Second) / c.rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	next := 0
	rng := rand.New(rand.NewPCG(1, uint64(c.s.nodes)))
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		// DELs fall due lifetime after their ADD finished; they go
		// first, then this tick's ADD.
		c.dueMu.Lock()
		var ready []pod
		now := time.Now()
		for len(c.due) > 0 && !c.due[0].at.After(now) {
			ready = append(ready, c.due[0].p)
			c.due = c.due[1:]
		}
		c.dueMu.Unlock()
		for _, p := range ready {
			select {
			case jobs <- job{p: p}:
			case <-ctx.Done():
				break loop
			}
		}
		p := pod{namespace: namespace(next % c.s.namespaces), name: fmt.Sprintf("churn-%06d", next),
			node: nodeName(rng.IntN(c.s.nodes)), app: next, probe: true}
		next++
		c.mu.Lock()
		c.started++
		c.mu.Unlock()
		select {
		case jobs <- job{p: p, add: true}:
		case <-ctx.Done():
			c.mu.Lock()
			c.started--
			c.mu.Unlock()
			break loop
		}
	}
	close(jobs)
	wg.Wait()
}

func (c *churner) do(cl cni, j job) {
	// Jobs under way finish even after the churn stops: a pod half set up
	// would be neither live nor deleted.
	ctx := context.Background()
	var (
		ip  netip.Addr
		t0  time.Time
		st  opStats
		err error
	)
	if j.add {
		ip, t0, st, err = cl.add(ctx, j.p)
	} else {
		st, err = cl.del(ctx, j.p)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.retries += st.retries
	switch {
	case err != nil:
		c.failed = append(c.failed, err.Error())
	case j.add:
		c.addLat = append(c.addLat, st.took)
		c.live[j.p.key()] = livePod{pod: j.p, ip: ip, t0: t0}
		c.t0s[j.p.key()] = t0
		c.dueMu.Lock()
		c.due = append(c.due, duePod{at: time.Now().Add(c.lifetime), p: j.p})
		c.dueMu.Unlock()
	default:
		c.delLat = append(c.delLat, st.took)
		delete(c.live, j.p.key())
		c.deleted[j.p.key()] = j.p
	}
}
