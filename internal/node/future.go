package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/node/autodetect"
	"github.com/projectcalico/calico-node/internal/node/health"
	"github.com/projectcalico/calico-node/internal/node/startup"
)

// storeFuture is the datastore connection as the actors built before it
// exists see it (Prometheus's readyStorage plays the same part): the
// startup actor resolves it once the node is registered, and every call
// waits for that. Actors that must not start before it are added to the
// group after Ready; confwatch is added at once and its first List waits.
//
// storeFuture implements confwatch.Source, overlay.Store and
// controllers.Store; etcd and ipam give the etcd client and the IPAM
// client on the same connection.
type storeFuture struct {
	ready chan struct{}
	store *datastore.Store // set before ready is closed
}

func newStoreFuture() *storeFuture { return &storeFuture{ready: make(chan struct{})} }

// Ready is closed once the datastore is connected and the node registered.
func (f *storeFuture) Ready() <-chan struct{} { return f.ready }

// resolve hands store to everyone waiting; called once.
func (f *storeFuture) resolve(store *datastore.Store) {
	f.store = store
	close(f.ready)
}

func (f *storeFuture) wait(ctx context.Context) (*datastore.Store, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-f.ready:
		return f.store, nil
	}
}

func (f *storeFuture) Get(ctx context.Context, kind, namespace, name string) (api.Object, error) {
	s, err := f.wait(ctx)
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, kind, namespace, name)
}

func (f *storeFuture) List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error) {
	s, err := f.wait(ctx)
	if err != nil {
		return nil, 0, err
	}
	return s.List(ctx, kind, namespace)
}

func (f *storeFuture) Create(ctx context.Context, obj api.Object) (api.Object, error) {
	s, err := f.wait(ctx)
	if err != nil {
		return nil, err
	}
	return s.Create(ctx, obj)
}

func (f *storeFuture) Update(ctx context.Context, obj api.Object) (api.Object, error) {
	s, err := f.wait(ctx)
	if err != nil {
		return nil, err
	}
	return s.Update(ctx, obj)
}

func (f *storeFuture) Delete(ctx context.Context, kind, namespace, name, resourceVersion string) (api.Object, error) {
	s, err := f.wait(ctx)
	if err != nil {
		return nil, err
	}
	return s.Delete(ctx, kind, namespace, name, resourceVersion)
}

// Watch is closed at once when ctx ends before the datastore is there.
func (f *storeFuture) Watch(ctx context.Context, kind string, fromRevision int64) <-chan datastore.Event {
	s, err := f.wait(ctx)
	if err != nil {
		ch := make(chan datastore.Event)
		close(ch)
		return ch
	}
	return s.Watch(ctx, kind, fromRevision)
}

// blocks is ipam.WatchBlocks on the connection (overlay.BlockWatch and
// the blackholes actor's block stream); closed at once when ctx ends
// before the datastore is there.
func (f *storeFuture) blocks(logger *slog.Logger) func(ctx context.Context) <-chan ipam.BlockSnapshot {
	return func(ctx context.Context) <-chan ipam.BlockSnapshot {
		s, err := f.wait(ctx)
		if err != nil {
			ch := make(chan ipam.BlockSnapshot)
			close(ch)
			return ch
		}
		return ipam.WatchBlocks(ctx, s.Etcd(), logger)
	}
}

// etcd is the etcd client of the connection, as the BGP speaker reads
// the IPAM keys (bgp.Etcd).
func (f *storeFuture) etcd() futureEtcd { return futureEtcd{f} }

type futureEtcd struct{ f *storeFuture }

func (e futureEtcd) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	s, err := e.f.wait(ctx)
	if err != nil {
		return nil, err
	}
	return s.Etcd().Get(ctx, key, opts...)
}

// Watch is closed at once when ctx ends before the datastore is there.
func (e futureEtcd) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	s, err := e.f.wait(ctx)
	if err != nil {
		ch := make(chan clientv3.WatchResponse)
		close(ch)
		return ch
	}
	return s.Etcd().Watch(ctx, key, opts...)
}

// ipam is an IPAM client on the connection (overlay.IPAM,
// controllers.IPAM), logging to logger.
func (f *storeFuture) ipam(logger *slog.Logger) futureIPAM { return futureIPAM{f, logger} }

type futureIPAM struct {
	f      *storeFuture
	logger *slog.Logger
}

func (i futureIPAM) client(ctx context.Context) (*ipam.Client, error) {
	s, err := i.f.wait(ctx)
	if err != nil {
		return nil, err
	}
	// A Client is only the connection and a logger: one per call is free.
	return ipam.New(s.Etcd(), s, i.logger), nil
}

func (i futureIPAM) AutoAssign(ctx context.Context, args ipam.AutoAssignArgs) (v4, v6 []netip.Prefix, err error) {
	c, err := i.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c.AutoAssign(ctx, args)
}

func (i futureIPAM) AssignIP(ctx context.Context, args ipam.AssignIPArgs) error {
	c, err := i.client(ctx)
	if err != nil {
		return err
	}
	return c.AssignIP(ctx, args)
}

func (i futureIPAM) ReleaseByHandle(ctx context.Context, handleID string) error {
	c, err := i.client(ctx)
	if err != nil {
		return err
	}
	return c.ReleaseByHandle(ctx, handleID)
}

func (i futureIPAM) Release(ctx context.Context, opts ...ipam.ReleaseOptions) ([]netip.Addr, error) {
	c, err := i.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Release(ctx, opts...)
}

func (i futureIPAM) IPsByHandle(ctx context.Context, handleID string) ([]netip.Addr, error) {
	c, err := i.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.IPsByHandle(ctx, handleID)
}

func (i futureIPAM) Lookup(ctx context.Context, ip netip.Addr) (ipam.Holder, error) {
	c, err := i.client(ctx)
	if err != nil {
		return ipam.Holder{}, err
	}
	return c.Lookup(ctx, ip)
}

func (i futureIPAM) Check(ctx context.Context, liveNodes ...string) (*ipam.CheckReport, error) {
	c, err := i.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Check(ctx, liveNodes...)
}

func (i futureIPAM) ReleaseHostAffinities(ctx context.Context, node string, mustBeEmpty bool) ([]netip.Prefix, error) {
	c, err := i.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.ReleaseHostAffinities(ctx, node, mustBeEmpty)
}

// startupActor connects to the datastore, registers this node, resolves
// the future, then holds the connection for the other actors until the
// group stops.
type startupActor struct {
	etcd   datastore.Config
	node   startup.Config
	future *storeFuture
	health *health.Reporter
	log    *slog.Logger
}

func (s *startupActor) Run(ctx context.Context) error {
	store, err := connect(ctx, s.etcd, s.log)
	if err != nil {
		return err
	}
	defer store.Close()
	s.health.Report(true, false, "registering node")
	node, err := startup.Run(ctx, store, autodetect.NetlinkSource{Handle: &netlink.Handle{}}, s.node, s.log)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("node startup: %w", err)
	}
	s.health.Report(true, true, "node "+node.Name+" registered")
	s.future.resolve(store)
	<-ctx.Done()
	s.log.Info("datastore connection closing")
	return nil
}

// connect retries until the datastore answers: at start-up etcd may still
// be coming up (embedded, or a pod on the same node).
func connect(ctx context.Context, cfg datastore.Config, logger *slog.Logger) (*datastore.Store, error) {
	backoff := 200 * time.Millisecond
	for {
		store, err := datastore.New(ctx, cfg)
		if err == nil {
			return store, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var cfgErr *datastore.ConfigError
		if errors.As(err, &cfgErr) {
			return nil, err // bad TLS files etc.: retrying won't help
		}
		logger.Warn("datastore not reachable, retrying", "endpoints", cfg.Endpoints, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
