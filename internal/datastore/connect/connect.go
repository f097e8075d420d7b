// Package connect opens the datastore a Config names: the etcd backend or
// the Kubernetes (KDD) backend, both behind datastore.Store and both
// wrapped in guard's cross-resource checks (overlapping IP pools, a pool's
// CIDR and block size, policy tiers), so that every writer passes them.
package connect

import (
	"context"
	"fmt"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/etcd"
	"github.com/projectcalico/calico-node/internal/datastore/guard"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
)

// Check returns the *datastore.ConfigError that New would return for cfg
// without connecting, where that can be told without connecting: an
// unknown type, or etcd endpoints or TLS files that cannot be used. The
// Kubernetes backend's configuration is checked when New connects.
func Check(cfg datastore.Config) error {
	switch t := cfg.EffectiveType(); t {
	case datastore.TypeEtcd:
		return etcd.Check(cfg)
	case datastore.TypeKubernetes:
		return nil
	default:
		return unsupported(t)
	}
}

func unsupported(t string) error {
	return &datastore.ConfigError{Err: fmt.Errorf("datastore type %q is not supported: use %q or %q", t, datastore.TypeEtcd, datastore.TypeKubernetes)}
}

// New connects to the datastore cfg names and checks that it answers.
// Configuration mistakes are *datastore.ConfigError. The Store is a
// *guard.Store.
func New(ctx context.Context, cfg datastore.Config) (datastore.Store, error) {
	s, err := open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return guard.New(s, cfg.Logger), nil
}

func open(ctx context.Context, cfg datastore.Config) (datastore.Store, error) {
	switch t := cfg.EffectiveType(); t {
	case datastore.TypeEtcd:
		s, err := etcd.New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return s, nil
	case datastore.TypeKubernetes:
		s, err := kdd.New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return s, nil
	default:
		return nil, unsupported(t)
	}
}
