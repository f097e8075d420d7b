package kdd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
)

// TestNewNeedsCRDs: without Calico's CRDs, or with some missing, the
// store refuses to start with an error that names what is missing and how
// to install it; with them it connects; a CRD deleted while it runs makes
// the reads of that kind fail naming it, not look empty.
func TestNewNeedsCRDs(t *testing.T) {
	c := kubetest.Start(t, kubetest.WithoutControllerManager())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{Kubeconfig: c.Kubeconfig}}
	// wantConfigError checks that err is a ConfigError naming each of want.
	wantConfigError := func(what string, err error, want ...string) error {
		var cfgErr *datastore.ConfigError
		if !errors.As(err, &cfgErr) {
			return fmt.Errorf("%s: got %v, want a ConfigError", what, err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				return fmt.Errorf("%s: %q does not name %q", what, err, w)
			}
		}
		return nil
	}
	deleteCRDs := func(names ...string) {
		t.Helper()
		if out, err := c.RunKubectl(nil, append([]string{"delete", "crd", "--wait=true"}, names...)...); err != nil {
			t.Fatalf("delete CRDs %v: %v\n%s", names, err, out)
		}
	}

	_, err := kdd.New(ctx, cfg)
	if err := wantConfigError("New without CRDs", err, "crd.projectcalico.org/v1", "kubectl apply -f deploy/crds.yaml"); err != nil {
		t.Fatal(err)
	}

	c.InstallCalicoCRDs(t)
	deleteCRDs("ippools.crd.projectcalico.org", "ipamblocks.crd.projectcalico.org")
	// Discovery drops a deleted CRD a moment after the delete returns.
	polltest.Eventually(t, time.Minute, "New to name the two missing CRDs", func() error {
		_, err := kdd.New(ctx, cfg)
		return wantConfigError("New with two CRDs missing", err,
			"ippools.crd.projectcalico.org", "ipamblocks.crd.projectcalico.org", "kubectl apply -f deploy/crds.yaml")
	})

	c.InstallCalicoCRDs(t)
	var s *kdd.Store
	polltest.Eventually(t, time.Minute, "New with every CRD", func() (err error) {
		s, err = kdd.New(ctx, cfg)
		return err
	})
	defer s.Close()
	if s.Type() != datastore.TypeKubernetes {
		t.Errorf("Type() = %q", s.Type())
	}

	deleteCRDs("ippools.crd.projectcalico.org")
	polltest.Eventually(t, time.Minute, "a list of IP pools to name their missing CRD", func() error {
		_, _, err := s.List(ctx, "IPPool", "")
		return wantConfigError("List IPPool after its CRD was deleted", err,
			"ippools.crd.projectcalico.org", "kubectl apply -f deploy/crds.yaml")
	})
}
