package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/vishvananda/netlink"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/connect"
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
// storeFuture implements confwatch.Source, overlay.Store,
// controllers.Store and EtcdClienter and ipam.PoolSource; ipam gives the IPAM storage of
// the same connection.
type storeFuture struct {
	ready chan struct{}
	store datastore.Store // set before ready is closed
}

func newStoreFuture() *storeFuture { return &storeFuture{ready: make(chan struct{})} }

// Ready is closed once the datastore is connected and the node registered.
func (f *storeFuture) Ready() <-chan struct{} { return f.ready }

// resolve hands store to everyone waiting; called once.
func (f *storeFuture) resolve(store datastore.Store) {
	f.store = store
	close(f.ready)
}

func (f *storeFuture) wait(ctx context.Context) (datastore.Store, error) {
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

// Etcd is the etcd client of an etcd datastore (controllers.EtcdClienter,
// for the controllers' compaction), nil on the Kubernetes datastore or
// before the connection exists.
func (f *storeFuture) Etcd() *clientv3.Client {
	select {
	case <-f.ready:
	default:
		return nil
	}
	s := f.store
	for {
		if ec, ok := s.(interface{ Etcd() *clientv3.Client }); ok {
			return ec.Etcd()
		}
		w, ok := s.(interface{ Unwrap() datastore.Store }) // guard.Store
		if !ok {
			return nil
		}
		s = w.Unwrap()
	}
}

// ipam is the IPAM storage of the connection (datastore.KV): the IPAM
// clients, the block watches and the BGP speaker read the IPAM keys
// through it.
func (f *storeFuture) ipam() futureKV { return futureKV{f} }

type futureKV struct{ f *storeFuture }

func (k futureKV) kv(ctx context.Context) (datastore.KV, error) {
	s, err := k.f.wait(ctx)
	if err != nil {
		return nil, err
	}
	return s.IPAM(), nil
}

func (k futureKV) Get(ctx context.Context, keys ...string) ([]datastore.KeyValue, error) {
	kv, err := k.kv(ctx)
	if err != nil {
		return nil, err
	}
	return kv.Get(ctx, keys...)
}

func (k futureKV) List(ctx context.Context, prefix string, keysOnly bool) ([]datastore.KeyValue, int64, error) {
	kv, err := k.kv(ctx)
	if err != nil {
		return nil, 0, err
	}
	return kv.List(ctx, prefix, keysOnly)
}

func (k futureKV) Snapshot(ctx context.Context, prefixes ...string) ([][]datastore.KeyValue, error) {
	kv, err := k.kv(ctx)
	if err != nil {
		return nil, err
	}
	return kv.Snapshot(ctx, prefixes...)
}

func (k futureKV) Txn(ctx context.Context, t datastore.Txn) (datastore.TxnResult, error) {
	kv, err := k.kv(ctx)
	if err != nil {
		return datastore.TxnResult{}, err
	}
	return kv.Txn(ctx, t)
}

// Watch is closed at once when ctx ends before the datastore is there.
func (k futureKV) Watch(ctx context.Context, prefix string) <-chan datastore.KVEvent {
	kv, err := k.kv(ctx)
	if err != nil {
		ch := make(chan datastore.KVEvent)
		close(ch)
		return ch
	}
	return kv.Watch(ctx, prefix)
}

func (k futureKV) String() string {
	select {
	case <-k.f.ready:
		return k.f.store.IPAM().String()
	default:
		return "the datastore (not connected yet)"
	}
}

// startupActor connects to the datastore, registers this node, resolves
// the future, then holds the connection for the other actors until the
// group stops.
type startupActor struct {
	datastore datastore.Config
	node      startup.Config
	future    *storeFuture
	health    *health.Reporter
	log       *slog.Logger
}

func (s *startupActor) Run(ctx context.Context) error {
	store, err := connectRetrying(ctx, s.datastore, s.log)
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

// connectRetrying retries until the datastore answers: at start-up etcd
// may still be coming up (embedded, or a pod on the same node).
func connectRetrying(ctx context.Context, cfg datastore.Config, logger *slog.Logger) (datastore.Store, error) {
	backoff := 200 * time.Millisecond
	for {
		store, err := connect.New(ctx, cfg)
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
