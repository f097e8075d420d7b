package ctl

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/testkit/errtest"
)

func TestParseConfigFile(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		want    settings
		wantErr string
	}{
		{
			name: "v3",
			file: `apiVersion: projectcalico.org/v3
kind: CalicoAPIConfig
metadata:
spec:
  datastoreType: etcdv3
  etcdEndpoints: https://127.0.0.1:2379,https://127.0.0.2:2379
  etcdKeyFile: /k
  etcdCertFile: /c
  etcdCACertFile: /ca
`,
			want: settings{datastoreType: "etcdv3", endpoints: "https://127.0.0.1:2379,https://127.0.0.2:2379", keyFile: "/k", certFile: "/c", caFile: "/ca"},
		},
		{
			name: "v1 etcdv3",
			file: `apiVersion: v1
kind: calicoApiConfig
metadata:
spec:
  datastoreType: "etcdv3"
  etcdEndpoints: "http://127.0.0.1:2379"
`,
			want: settings{datastoreType: "etcdv3", endpoints: "http://127.0.0.1:2379"},
		},
		{name: "wrong kind", file: "apiVersion: v1\nkind: Pod\n", wantErr: `unsupported apiVersion "v1" / kind "Pod"`},
		{name: "unknown field", file: "apiVersion: v1\nkind: calicoApiConfig\nspec:\n  etcdEndpoint: x\n", wantErr: "etcdEndpoint"},
		{name: "not yaml", file: "apiVersion: [", wantErr: "parse client config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseConfigFile("test.cfg", []byte(tt.file))
			if !errtest.Want(t, err, tt.wantErr) {
				return
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The seed document's v1 config asks for etcdv2, which Calico v3 dropped.
func TestSeedConfigEtcdv2IsRejectedClearly(t *testing.T) {
	s, err := loadConfigFile(filepath.Join("testdata", "v1-etcdv2.cfg"), true)
	if err != nil {
		t.Fatal(err)
	}
	if s.endpoints != "https://10.142.232.21:2379,https://10.142.232.22:2379,https://10.142.232.23:2379" || s.caFile != "/etc/calico/certs/ca_cert.crt" {
		t.Errorf("seed config fields not read: %+v", s)
	}
	_, err = s.resolve()
	if err == nil || !strings.Contains(err.Error(), "etcdv2 is not supported, use etcdv3") {
		t.Fatalf("resolve: %v, want the etcdv2 error", err)
	}
}

func TestMissingConfigFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.cfg")
	if _, err := loadConfigFile(missing, false); err != nil {
		t.Errorf("missing default config file must be ignored: %v", err)
	}
	if _, err := loadConfigFile(missing, true); err == nil || !strings.Contains(err.Error(), "nope.cfg") {
		t.Errorf("missing explicit config file: %v, want an error naming it", err)
	}
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "calicoctl.cfg")
	os.WriteFile(cfgPath, []byte("apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nspec:\n  etcdEndpoints: http://127.0.0.1:1111\n  etcdCACertFile: /file-ca\n"), 0o600)
	file, err := loadConfigFile(cfgPath, true)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ETCD_ENDPOINTS": "http://127.0.0.1:2222", "ETCD_KEY_FILE": "/env-key"}
	var s settings
	s.overlay(file)
	s.overlay(envSettings(func(k string) string { return env[k] }))
	s.overlay(settings{endpoints: "http://127.0.0.1:3333,http://127.0.0.1:4444"})
	cfg, err := s.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://127.0.0.1:3333", "http://127.0.0.1:4444"}; !reflect.DeepEqual(cfg.Endpoints, want) {
		t.Errorf("endpoints = %v, want flag value %v", cfg.Endpoints, want)
	}
	if cfg.CACertFile != "/file-ca" || cfg.KeyFile != "/env-key" {
		t.Errorf("CA %q key %q: want file CA and env key", cfg.CACertFile, cfg.KeyFile)
	}

	var none settings
	cfg, err = none.resolve()
	if err != nil || !reflect.DeepEqual(cfg.Endpoints, []string{DefaultEtcdEndpoint}) {
		t.Errorf("default endpoints = %v, %v", cfg.Endpoints, err)
	}
	legacy := envSettings(func(k string) string {
		return map[string]string{"ETCD_AUTHORITY": "127.0.0.1:4001"}[k]
	})
	if legacy.endpoints != "http://127.0.0.1:4001" {
		t.Errorf("ETCD_AUTHORITY -> %q", legacy.endpoints)
	}
	for _, bad := range []string{"etcdv2", "consul"} {
		if _, err := (settings{datastoreType: bad}).resolve(); err == nil {
			t.Errorf("datastoreType %s accepted", bad)
		}
	}
}

// TestKubernetesConfig: calicoctl.cfg's datastoreType kubernetes and its
// k8s fields, with the environment (DATASTORE_TYPE, KUBECONFIG, ...)
// over the file, as calicoctl layers them.
func TestKubernetesConfig(t *testing.T) {
	file, err := parseConfigFile("calicoctl.cfg", []byte(`apiVersion: projectcalico.org/v3
kind: CalicoAPIConfig
metadata: {}
spec:
  datastoreType: kubernetes
  kubeconfig: /file/kubeconfig
  k8sAPIEndpoint: https://10.0.0.1:6443
  k8sCAFile: /file/ca.crt
  k8sInsecureSkipTLSVerify: true
`))
	if err != nil {
		t.Fatal(err)
	}
	var s settings
	s.overlay(file)
	s.overlay(envSettings(func(k string) string {
		return map[string]string{"KUBECONFIG": "/env/kubeconfig", "K8S_API_TOKEN": "tok"}[k]
	}))
	cfg, err := s.resolve()
	if err != nil {
		t.Fatal(err)
	}
	want := datastore.KubeConfig{Kubeconfig: "/env/kubeconfig", APIEndpoint: "https://10.0.0.1:6443",
		CAFile: "/file/ca.crt", Token: "tok", InsecureSkipTLSVerify: true}
	if cfg.Type != datastore.TypeKubernetes || cfg.DatastoreType != datastore.TypeKubernetes || cfg.Kube != want {
		t.Errorf("resolved %+v / %+v, want kubernetes with %+v", cfg.Config, cfg.Kube, want)
	}
	env := envSettings(func(k string) string { return map[string]string{"DATASTORE_TYPE": "kubernetes"}[k] })
	if cfg, err := env.resolve(); err != nil || cfg.Type != datastore.TypeKubernetes {
		t.Errorf("DATASTORE_TYPE=kubernetes resolves to %q (%v)", cfg.Type, err)
	}
}
