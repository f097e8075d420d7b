package ctl

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/datastore"
)

// DefaultConfigFile is where calicoctl looks for its client config.
const DefaultConfigFile = "/etc/calico/calicoctl.cfg"

// DefaultEtcdEndpoint is calicoctl's default when nothing is configured.
const DefaultEtcdEndpoint = "http://127.0.0.1:2379"

// clientConfigFile is the union of the v3 CalicoAPIConfig and the v1
// calicoApiConfig documents; the spec field names are the same in both.
type clientConfigFile struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   any    `json:"metadata,omitempty"`
	Spec       struct {
		DatastoreType  string `json:"datastoreType"`
		EtcdEndpoints  string `json:"etcdEndpoints"`
		EtcdDiscovery  string `json:"etcdDiscoverySrv"`
		EtcdUsername   string `json:"etcdUsername"`
		EtcdPassword   string `json:"etcdPassword"`
		EtcdKeyFile    string `json:"etcdKeyFile"`
		EtcdCertFile   string `json:"etcdCertFile"`
		EtcdCACertFile string `json:"etcdCACertFile"`
		EtcdKey        string `json:"etcdKey"`
		EtcdCert       string `json:"etcdCert"`
		EtcdCACert     string `json:"etcdCACert"`
		// The Kubernetes datastore, as Calico's CalicoAPIConfig spells it.
		Kubeconfig               string `json:"kubeconfig"`
		K8sAPIEndpoint           string `json:"k8sAPIEndpoint"`
		K8sKeyFile               string `json:"k8sKeyFile"`
		K8sCertFile              string `json:"k8sCertFile"`
		K8sCAFile                string `json:"k8sCAFile"`
		K8sAPIToken              string `json:"k8sAPIToken"`
		K8sInsecureSkipTLSVerify bool   `json:"k8sInsecureSkipTLSVerify"`
		K8sDisableNodePoll       bool   `json:"k8sDisableNodePoll"`
	} `json:"spec"`
}

// ClientConfig is the resolved connection configuration.
type ClientConfig struct {
	DatastoreType string
	datastore.Config
}

// settings are the values that can come from each layer; empty = unset.
type settings struct {
	datastoreType, endpoints, keyFile, certFile, caFile, username, password            string
	kubeconfig, k8sEndpoint, k8sKeyFile, k8sCertFile, k8sCAFile, k8sToken, k8sInsecure string
}

func (s *settings) overlay(o settings) {
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&s.datastoreType, o.datastoreType)
	set(&s.endpoints, o.endpoints)
	set(&s.keyFile, o.keyFile)
	set(&s.certFile, o.certFile)
	set(&s.caFile, o.caFile)
	set(&s.username, o.username)
	set(&s.password, o.password)
	set(&s.kubeconfig, o.kubeconfig)
	set(&s.k8sEndpoint, o.k8sEndpoint)
	set(&s.k8sKeyFile, o.k8sKeyFile)
	set(&s.k8sCertFile, o.k8sCertFile)
	set(&s.k8sCAFile, o.k8sCAFile)
	set(&s.k8sToken, o.k8sToken)
	set(&s.k8sInsecure, o.k8sInsecure)
}

// loadConfigFile reads a client config file. A missing file at the default
// path is not an error (calicoctl works from env alone); a missing file the
// user named explicitly is.
func loadConfigFile(path string, explicit bool) (settings, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !explicit {
			return settings{}, nil
		}
		return settings{}, fmt.Errorf("read client config %s: %w", path, err)
	}
	return parseConfigFile(path, data)
}

func parseConfigFile(path string, data []byte) (settings, error) {
	var f clientConfigFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return settings{}, fmt.Errorf("parse client config %s: %w", path, err)
	}
	switch {
	case f.APIVersion == "projectcalico.org/v3" && f.Kind == "CalicoAPIConfig":
	case f.APIVersion == "v1" && f.Kind == "calicoApiConfig":
	default:
		return settings{}, fmt.Errorf("client config %s: unsupported apiVersion %q / kind %q (want projectcalico.org/v3 CalicoAPIConfig or v1 calicoApiConfig)", path, f.APIVersion, f.Kind)
	}
	if f.Spec.EtcdKey != "" || f.Spec.EtcdCert != "" || f.Spec.EtcdCACert != "" {
		return settings{}, fmt.Errorf("client config %s: inline etcdKey/etcdCert/etcdCACert are not supported; use etcdKeyFile/etcdCertFile/etcdCACertFile", path)
	}
	if f.Spec.EtcdDiscovery != "" {
		return settings{}, fmt.Errorf("client config %s: etcdDiscoverySrv is not supported; list etcdEndpoints", path)
	}
	out := settings{
		datastoreType: f.Spec.DatastoreType,
		endpoints:     f.Spec.EtcdEndpoints,
		keyFile:       f.Spec.EtcdKeyFile,
		certFile:      f.Spec.EtcdCertFile,
		caFile:        f.Spec.EtcdCACertFile,
		username:      f.Spec.EtcdUsername,
		password:      f.Spec.EtcdPassword,
		kubeconfig:    f.Spec.Kubeconfig,
		k8sEndpoint:   f.Spec.K8sAPIEndpoint,
		k8sKeyFile:    f.Spec.K8sKeyFile,
		k8sCertFile:   f.Spec.K8sCertFile,
		k8sCAFile:     f.Spec.K8sCAFile,
		k8sToken:      f.Spec.K8sAPIToken,
	}
	if f.Spec.K8sInsecureSkipTLSVerify {
		out.k8sInsecure = "true"
	}
	return out, nil
}

// envSettings reads the variables calicoctl and calico-node honour.
func envSettings(getenv func(string) string) settings {
	s := settings{
		datastoreType: getenv("DATASTORE_TYPE"),
		endpoints:     getenv("ETCD_ENDPOINTS"),
		keyFile:       getenv("ETCD_KEY_FILE"),
		certFile:      getenv("ETCD_CERT_FILE"),
		caFile:        getenv("ETCD_CA_CERT_FILE"),
		username:      getenv("ETCD_USERNAME"),
		password:      getenv("ETCD_PASSWORD"),
		kubeconfig:    getenv("KUBECONFIG"),
		k8sEndpoint:   getenv("K8S_API_ENDPOINT"),
		k8sKeyFile:    getenv("K8S_KEY_FILE"),
		k8sCertFile:   getenv("K8S_CERT_FILE"),
		k8sCAFile:     getenv("K8S_CA_FILE"),
		k8sToken:      getenv("K8S_API_TOKEN"),
		k8sInsecure:   getenv("K8S_INSECURE_SKIP_TLS_VERIFY"),
	}
	if s.endpoints == "" {
		// Calico 2.x manifests set ETCD_AUTHORITY (host:port) instead.
		if a := getenv("ETCD_AUTHORITY"); a != "" {
			scheme := getenv("ETCD_SCHEME")
			if scheme == "" {
				scheme = "http"
			}
			s.endpoints = scheme + "://" + a
		}
	}
	return s
}

// resolve turns the layered settings into a store config.
func (s settings) resolve() (ClientConfig, error) {
	switch strings.ToLower(s.datastoreType) {
	case "", "etcdv3":
	case "etcdv2":
		return ClientConfig{}, errors.New("datastoreType etcdv2 is not supported, use etcdv3 (etcd v3 API; Calico v3 data lives under /calico/resources/v3)")
	case "kubernetes":
		return ClientConfig{
			DatastoreType: datastore.TypeKubernetes,
			Config: datastore.Config{
				Type: datastore.TypeKubernetes,
				Kube: datastore.KubeConfig{
					Kubeconfig:            s.kubeconfig,
					APIEndpoint:           s.k8sEndpoint,
					CAFile:                s.k8sCAFile,
					CertFile:              s.k8sCertFile,
					KeyFile:               s.k8sKeyFile,
					Token:                 s.k8sToken,
					InsecureSkipTLSVerify: strings.EqualFold(s.k8sInsecure, "true"),
				},
				DialTimeout: 5 * time.Second,
			},
		}, nil
	default:
		return ClientConfig{}, fmt.Errorf("unknown datastoreType %q, use etcdv3 or kubernetes", s.datastoreType)
	}
	eps := s.endpoints
	if eps == "" {
		eps = DefaultEtcdEndpoint
	}
	var list []string
	for _, e := range strings.Split(eps, ",") {
		if e = strings.TrimSpace(e); e != "" {
			list = append(list, e)
		}
	}
	return ClientConfig{
		DatastoreType: datastore.TypeEtcd,
		Config: datastore.Config{
			Type:        datastore.TypeEtcd,
			Endpoints:   list,
			CACertFile:  s.caFile,
			CertFile:    s.certFile,
			KeyFile:     s.keyFile,
			Username:    s.username,
			Password:    s.password,
			DialTimeout: 5 * time.Second,
		},
	}, nil
}
