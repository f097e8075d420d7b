package kdd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// TestNewNeedsCRDs: without Calico's CRDs the store refuses to start with
// an error that says what to install; with them it connects.
func TestNewNeedsCRDs(t *testing.T) {
	c := kubetest.Start(t, kubetest.WithoutControllerManager())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{Kubeconfig: c.Kubeconfig}}

	_, err := kdd.New(ctx, cfg)
	var cfgErr *datastore.ConfigError
	if !errors.As(err, &cfgErr) || !strings.Contains(err.Error(), "deploy/crds.yaml") {
		t.Fatalf("New without CRDs: got %v, want a ConfigError naming deploy/crds.yaml", err)
	}

	c.InstallCalicoCRDs(t)
	s, err := kdd.New(ctx, cfg)
	if err != nil {
		t.Fatalf("New with CRDs: %v", err)
	}
	defer s.Close()
	if s.Type() != datastore.TypeKubernetes {
		t.Errorf("Type() = %q", s.Type())
	}
}
