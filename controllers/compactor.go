package controllers

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// compactRevKey is the key through which compactors agree on what to
// compact, Kubernetes' (k8s.io/apiserver storage/etcd3) and so Calico
// kube-controllers': several compactors on one etcd compact once per
// period between them.
const compactRevKey = "compact_rev_key"

// EtcdClienter is a Store on etcd that hands out its client (etcd.Store
// does); the compactor needs it.
type EtcdClienter interface {
	Etcd() *clientv3.Client
}

// compactor compacts etcd every period of KubeControllersConfiguration's
// etcdV3CompactionPeriod, as Calico's kube-controllers does on etcd with
// Kubernetes' compactor: each round records the current revision in
// compact_rev_key and compacts to the one recorded the round before, so
// a watcher always has a whole period to catch up. A period of 0 stops it.
type compactor struct {
	client *clientv3.Client
	src    *kccSource
	log    *slog.Logger
}

func (k *compactor) run(ctx context.Context) {
	var version, rev int64 // compact_rev_key's version, and the revision recorded
	for {
		cfg, changed := k.src.current()
		if cfg.compaction <= 0 {
			k.log.Info("periodic etcd compaction disabled (etcdV3CompactionPeriod 0)")
			select {
			case <-ctx.Done():
				return
			case <-changed:
				continue
			}
		}
		k.log.Debug("next etcd compaction round", "in", cfg.compaction)
		select {
		case <-ctx.Done():
			return
		case <-changed:
			continue // a new period starts now
		case <-time.After(cfg.compaction):
		}
		var err error
		if version, rev, err = compactOnce(ctx, k.client, version, rev); err != nil && ctx.Err() == nil {
			k.log.Warn("etcd compaction failed; trying again next period", "err", err)
		} else if err == nil {
			k.log.Debug("etcd compaction round", "recordedRevision", rev)
		}
	}
}

// compactOnce is Kubernetes' compact: when compact_rev_key still has
// version t (nobody else compacted since we looked), it records rev and
// compacts to the revision recorded the round before; otherwise it adopts
// the other compactor's version. It returns the key's version and the
// current revision for the next round.
func compactOnce(ctx context.Context, c *clientv3.Client, t, rev int64) (int64, int64, error) {
	resp, err := c.KV.Txn(ctx).If(
		clientv3.Compare(clientv3.Version(compactRevKey), "=", t),
	).Then(
		clientv3.OpPut(compactRevKey, strconv.FormatInt(rev, 10)),
	).Else(
		clientv3.OpGet(compactRevKey),
	).Commit()
	if err != nil {
		return t, rev, fmt.Errorf("record compaction revision: %w", err)
	}
	cur := resp.Header.Revision
	if !resp.Succeeded {
		return resp.Responses[0].GetResponseRange().Kvs[0].Version, cur, nil
	}
	if rev == 0 {
		return t + 1, cur, nil // nothing recorded yet: no compaction at the first round
	}
	if _, err := c.Compact(ctx, rev); err != nil {
		return t + 1, cur, fmt.Errorf("compact to revision %d: %w", rev, err)
	}
	return t + 1, cur, nil
}
