package cniinstall

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// TestKubeconfigAuthenticates: the calico-kubeconfig written from a pod's
// service account lets the plugin in as that account, before and after
// the token rotates.
func TestKubeconfigAuthenticates(t *testing.T) {
	c := kubetest.Start(t)
	e := newEnv(t)
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(e.sa, "ca.crt"), ca, 0o644)
	os.WriteFile(filepath.Join(e.sa, "token"), []byte(c.Token(t, "default", "default", time.Hour)), 0o600)

	cfg := e.config(t)
	cfg.KubernetesHost, cfg.KubernetesPort = c.Host, c.Port
	in := mustNew(t, cfg)
	whoami := func() string {
		t.Helper()
		rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(e.conf, "calico-kubeconfig"))
		if err != nil {
			t.Fatalf("load written kubeconfig: %v", err)
		}
		k, err := kubernetes.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		r, err := k.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("API request with the written kubeconfig: %v", err)
		}
		return r.Status.UserInfo.Username
	}

	if _, err := in.Sync(); err != nil {
		t.Fatal(err)
	}
	if u := whoami(); u != "system:serviceaccount:default:default" {
		t.Errorf("authenticated as %q", u)
	}
	first, _ := os.ReadFile(filepath.Join(e.conf, "calico-kubeconfig"))

	// Kubelet rotates the projected token.
	os.WriteFile(filepath.Join(e.sa, "token"), []byte(c.Token(t, "default", "default", 2*time.Hour)), 0o600)
	changed, err := in.Sync()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(changed, " "), "calico-kubeconfig") {
		t.Errorf("token rotation rewrote %v, want the kubeconfig", changed)
	}
	second, _ := os.ReadFile(filepath.Join(e.conf, "calico-kubeconfig"))
	if string(first) == string(second) {
		t.Error("kubeconfig unchanged after the token rotated")
	}
	if u := whoami(); u != "system:serviceaccount:default:default" {
		t.Errorf("after rotation authenticated as %q", u)
	}
}
