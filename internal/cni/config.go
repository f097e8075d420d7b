package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/projectcalico/calico-node/internal/datastore"
)

// Defaults Calico's CNI plugin uses when the network config is silent.
const (
	defaultMTU = 1500
	// defaultCalicoDir is where calico-node leaves the files the plugin
	// reads by default: nodename and mtu.
	defaultCalicoDir    = "/var/lib/calico"
	DefaultIPAMLockFile = "/var/run/calico/ipam.lock"
	defaultEtcdEndpoint = "http://127.0.0.1:2379"
	calicoIPAMType      = IPAMPlugin
	policyTypeK8s       = "k8s"
)

// netConf is the network configuration a runtime hands the plugin on stdin:
// the CNI-defined fields (types.PluginConf) plus every option Calico's own
// plugin reads. Field names are Calico's, so existing config files work.
type netConf struct {
	types.PluginConf

	// env is the invocation's environment (nil: the process's).
	env func(string) string `json:"-"`
	// kube hands out a (shared) API client for the config (nil: build
	// one for this invocation).
	kube func(*netConf) (*k8sAPI, error) `json:"-"`
	// calicoDir replaces defaultCalicoDir (tests: a directory of their
	// own, never the machine's).
	calicoDir string `json:"-"`

	EtcdEndpoints  string `json:"etcd_endpoints"`
	EtcdAuthority  string `json:"etcd_authority"` // deprecated: host:port
	EtcdScheme     string `json:"etcd_scheme"`    // deprecated: goes with etcd_authority
	EtcdKeyFile    string `json:"etcd_key_file"`
	EtcdCertFile   string `json:"etcd_cert_file"`
	EtcdCACertFile string `json:"etcd_ca_cert_file"`
	DatastoreType  string `json:"datastore_type"`

	LogLevel string `json:"log_level"`
	// MTU is a pointer so that "absent" (use the node's MTU file, then
	// 1500) differs from an explicit bad 0.
	MTU *int `json:"mtu"`

	Nodename     string `json:"nodename"`
	NodenameFile string `json:"nodename_file"`
	Hostname     string `json:"hostname"` // deprecated spelling of nodename
	IPAMLockFile string `json:"ipam_lock_file"`

	// PolicySetupTimeoutSeconds is how long ADD waits for the node's
	// agent to program the endpoint's policy and routes before failing;
	// 0: do not wait (Calico's meaning); absent: the agent's default
	// (CALICO_POLICY_SETUP_TIMEOUT) when it serves the ADD, else
	// defaultPolicySetupTimeout. A pointer so that absent differs from 0.
	PolicySetupTimeoutSeconds *float64 `json:"policy_setup_timeout_seconds"`
	// EndpointStatusDir is where the agent's status files are (felix's
	// endpointStatusPathPrefix + "/endpoint-status").
	EndpointStatusDir string `json:"endpoint_status_dir"`

	Policy            policyConf        `json:"policy"`
	Kubernetes        kubernetesConf    `json:"kubernetes"`
	ContainerSettings containerSettings `json:"container_settings"`

	// IncludeDefaultRoutes adds the default routes to routes a delegated
	// IPAM plugin (host-local "routes") asks for.
	IncludeDefaultRoutes bool `json:"include_default_routes"`

	// IPAMConf is the "ipam" section as Calico IPAM reads it.
	IPAMConf ipamConf `json:"-"`
}

type policyConf struct {
	Type                    string `json:"type"`
	K8sAPIRoot              string `json:"k8s_api_root"`
	K8sAuthToken            string `json:"k8s_auth_token"`
	K8sClientCertificate    string `json:"k8s_client_certificate"`
	K8sClientKey            string `json:"k8s_client_key"`
	K8sCertificateAuthority string `json:"k8s_certificate_authority"`
}

type kubernetesConf struct {
	Kubeconfig string `json:"kubeconfig"`
	K8sAPIRoot string `json:"k8s_api_root"`
	NodeName   string `json:"node_name"`
}

type containerSettings struct {
	AllowIPForwarding bool `json:"allow_ip_forwarding"`
}

// ipamConf is the "ipam" section for calico-ipam. assign_ipv4/assign_ipv6
// are strings ("true"/"false") in Calico's configs; JSON booleans are
// accepted too.
type ipamConf struct {
	Type       string    `json:"type"`
	AssignIPv4 *boolText `json:"assign_ipv4"`
	AssignIPv6 *boolText `json:"assign_ipv6"`
	IPv4Pools  []string  `json:"ipv4_pools"`
	IPv6Pools  []string  `json:"ipv6_pools"`
}

// boolText is a boolean written either as a JSON bool or as the string
// "true"/"false".
type boolText bool

func (b *boolText) UnmarshalJSON(data []byte) error {
	s := string(bytes.TrimSpace(data))
	if uq, err := strconv.Unquote(s); err == nil {
		s = uq
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%s is not true or false", data)
	}
	*b = boolText(v)
	return nil
}

// configError is a CNI "invalid network config" error (code 7) naming the
// offending field.
func configError(field, format string, args ...any) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig,
		"invalid network config: "+field+": "+fmt.Sprintf(format, args...), "")
}

// parseConf decodes and validates the network config. Syntax errors are
// code 6 (decoding failure); well-formed JSON with a bad value is code 7
// naming the field.
func parseConf(data []byte) (*netConf, error) {
	var c netConf
	if err := json.Unmarshal(data, &c); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, configError(typeErr.Field, "has the wrong type (%s, want %s)", typeErr.Value, typeErr.Type)
		}
		return nil, types.NewError(types.ErrDecodingFailure, "decode network config: "+err.Error(), "")
	}
	var raw struct {
		IPAM json.RawMessage `json:"ipam"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "decode network config: "+err.Error(), "")
	}
	if len(raw.IPAM) > 0 {
		if err := json.Unmarshal(raw.IPAM, &c.IPAMConf); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) {
				return nil, configError("ipam."+typeErr.Field, "has the wrong type (%s, want %s)", typeErr.Value, typeErr.Type)
			}
			return nil, configError("ipam", "%v", err)
		}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *netConf) validate() error {
	if c.Name == "" {
		return configError("name", "is required")
	}
	for _, r := range c.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return configError("name", "%q has invalid characters: use letters, digits, '_', '.' and '-'", c.Name)
		}
	}
	switch dt := c.datastoreType(); dt {
	case datastore.TypeEtcd, datastore.TypeKubernetes:
	default:
		field := "datastore_type"
		if c.DatastoreType == "" {
			field = "DATASTORE_TYPE"
		}
		return configError(field, "%q is not supported: use %q or %q", dt, datastore.TypeEtcd, datastore.TypeKubernetes)
	}
	if c.MTU != nil && (*c.MTU < 68 || *c.MTU > 65535) {
		return configError("mtu", "%d is out of range: must be 68-65535", *c.MTU)
	}
	if c.IPAMConf.Type == "" {
		return configError("ipam.type", "is required")
	}
	if t := c.PolicySetupTimeoutSeconds; t != nil && (*t < 0 || *t > 3600) {
		return configError("policy_setup_timeout_seconds", "%v is out of range: 0 (do not wait) to 3600", *t)
	}
	if _, err := parseLogLevel(c.LogLevel); err != nil {
		return configError("log_level", "%v", err)
	}
	switch strings.ToLower(c.Policy.Type) {
	case "", policyTypeK8s:
	default:
		return configError("policy.type", "%q is not supported: use %q or leave it out", c.Policy.Type, policyTypeK8s)
	}
	if c.datastoreType() == datastore.TypeEtcd {
		if _, err := c.etcdEndpoints(); err != nil {
			return err
		}
	}
	if c.IPAMConf.Type == calicoIPAMType {
		if _, err := normalizePools(c.IPAMConf.IPv4Pools, true); err != nil {
			return configError("ipam.ipv4_pools", "%v", err)
		}
		if _, err := normalizePools(c.IPAMConf.IPv6Pools, false); err != nil {
			return configError("ipam.ipv6_pools", "%v", err)
		}
		if c.assignV4() == 0 && c.assignV6() == 0 {
			return configError("ipam", "assign_ipv4 and assign_ipv6 are both false: no address to assign")
		}
	}
	return nil
}

// assignV4 and assignV6 are Calico IPAM's defaults: one IPv4 address
// unless assign_ipv4 is false, an IPv6 address only when assign_ipv6 is
// true.
func (c *netConf) assignV4() int {
	if c.IPAMConf.AssignIPv4 != nil && !bool(*c.IPAMConf.AssignIPv4) {
		return 0
	}
	return 1
}

func (c *netConf) assignV6() int {
	if c.IPAMConf.AssignIPv6 != nil && bool(*c.IPAMConf.AssignIPv6) {
		return 1
	}
	return 0
}

// normalizePools turns CIDRs into their canonical form (Calico accepts
// "2001:db8::1/120" for 2001:db8::/120) and keeps pool names as given.
// A CIDR of the wrong family is an error.
func normalizePools(pools []string, v4 bool) ([]string, error) {
	out := make([]string, 0, len(pools))
	for _, p := range pools {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, errors.New("empty pool entry")
		}
		if !strings.Contains(p, "/") {
			if _, err := netip.ParseAddr(p); err == nil {
				return nil, fmt.Errorf("%q is an address, not a pool CIDR or name", p)
			}
			out = append(out, p) // a pool name
			continue
		}
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR: %v", p, err)
		}
		if pfx.Addr().Is4() != v4 {
			want := "IPv4"
			if !v4 {
				want = "IPv6"
			}
			return nil, fmt.Errorf("%q is not an %s CIDR", p, want)
		}
		out = append(out, pfx.Masked().String())
	}
	return out, nil
}

// etcdEndpoints resolves where etcd is as Calico does: etcd_endpoints,
// then the old etcd_authority (host:port, scheme from etcd_scheme or
// http), then the ETCD_ENDPOINTS and ETCD_AUTHORITY environment variables,
// then http://127.0.0.1:2379.
func (c *netConf) etcdEndpoints() ([]string, error) {
	field, list := "etcd_endpoints", c.EtcdEndpoints
	switch {
	case list != "":
	case c.EtcdAuthority != "":
		field, list = "etcd_authority", authorityURL(c.EtcdAuthority, c.EtcdScheme)
	case c.getenv("ETCD_ENDPOINTS") != "":
		field, list = "ETCD_ENDPOINTS", c.getenv("ETCD_ENDPOINTS")
	case c.getenv("ETCD_AUTHORITY") != "":
		field, list = "ETCD_AUTHORITY", authorityURL(c.getenv("ETCD_AUTHORITY"), c.getenv("ETCD_SCHEME"))
	default:
		list = defaultEtcdEndpoint
	}
	var out []string
	for ep := range strings.SplitSeq(list, ",") {
		ep = strings.TrimSpace(ep)
		if ep == "" {
			continue
		}
		u, err := url.Parse(ep)
		if err != nil {
			return nil, configError(field, "%q is not a URL: %v", ep, err)
		}
		switch u.Scheme {
		case "http", "https":
			if u.Host == "" {
				return nil, configError(field, "%q has no host", ep)
			}
		case "unix", "unixs":
		default:
			return nil, configError(field, "%q must be an http:// or https:// URL", ep)
		}
		out = append(out, ep)
	}
	if len(out) == 0 {
		return nil, configError(field, "lists no endpoint")
	}
	return out, nil
}

func authorityURL(authority, scheme string) string {
	if scheme == "" {
		scheme = "http"
	}
	var urls []string
	for a := range strings.SplitSeq(authority, ",") {
		if a = strings.TrimSpace(a); a != "" {
			urls = append(urls, scheme+"://"+a)
		}
	}
	return strings.Join(urls, ",")
}

// datastoreType is the config's datastore_type, else DATASTORE_TYPE from
// the environment (as Calico's plugin loads its client configuration),
// else etcd.
func (c *netConf) datastoreType() string {
	if c.DatastoreType != "" {
		return c.DatastoreType
	}
	if t := c.getenv("DATASTORE_TYPE"); t != "" {
		return t
	}
	return datastore.TypeEtcd
}

// datastoreConfig is the datastore connection the config describes. For
// etcd, TLS file settings fall back to ETCD_KEY_FILE, ETCD_CERT_FILE,
// ETCD_CA_CERT_FILE; for the Kubernetes datastore, the API is reached as
// for pod reads (kubernetes.kubeconfig, the API root and the policy
// section's credentials).
func (c *netConf) datastoreConfig(logger *slog.Logger) (datastore.Config, error) {
	if c.datastoreType() == datastore.TypeKubernetes {
		kc := datastore.KubeConfig{
			Kubeconfig: c.Kubernetes.Kubeconfig,
			CAFile:     c.Policy.K8sCertificateAuthority,
			CertFile:   c.Policy.K8sClientCertificate,
			KeyFile:    c.Policy.K8sClientKey,
			Token:      c.Policy.K8sAuthToken,
		}
		if root, _, _ := strings.Cut(c.Policy.K8sAPIRoot, "/api/"); root != "" {
			kc.APIEndpoint = root
		}
		if c.Kubernetes.K8sAPIRoot != "" {
			kc.APIEndpoint = c.Kubernetes.K8sAPIRoot
		}
		return datastore.Config{
			Type:        datastore.TypeKubernetes,
			Kube:        kc,
			DialTimeout: etcdDialTimeout,
			// The API server queues requests under load (priority and
			// fairness) where etcd answers at once; the runtime's own
			// timeout is the real bound.
			RequestTimeout: kddRequestTimeout,
			Logger:         logger,
			// A missing CRD is named by the first request that needs it.
			NoProbe: true,
		}, nil
	}
	eps, err := c.etcdEndpoints()
	if err != nil {
		return datastore.Config{}, err
	}
	pick := func(v, env string) string {
		if v != "" {
			return v
		}
		return c.getenv(env)
	}
	return datastore.Config{
		Type:           datastore.TypeEtcd,
		Endpoints:      eps,
		CACertFile:     pick(c.EtcdCACertFile, "ETCD_CA_CERT_FILE"),
		CertFile:       pick(c.EtcdCertFile, "ETCD_CERT_FILE"),
		KeyFile:        pick(c.EtcdKeyFile, "ETCD_KEY_FILE"),
		DialTimeout:    etcdDialTimeout,
		RequestTimeout: etcdRequestTimeout,
		Logger:         logger,
	}, nil
}

// nodename is this node's name, as Calico's plugin finds it: the nodename
// option, else the file calico-node writes (nodename_file, default
// /var/lib/calico/nodename), else the deprecated hostname option, else the
// host name.
func (c *netConf) nodename() (string, error) {
	if c.Nodename != "" {
		return c.Nodename, nil
	}
	file := c.NodenameFile
	if file == "" {
		file = filepath.Join(c.calicoDirectory(), "nodename")
	}
	data, err := os.ReadFile(file)
	switch {
	case err == nil:
		if name := strings.TrimSpace(string(data)); name != "" {
			return name, nil
		}
	case c.NodenameFile != "":
		// An explicitly configured file must exist: it is how a user says
		// "wait for calico-node".
		return "", configError("nodename_file", "%v", err)
	}
	if c.Hostname != "" {
		return c.Hostname, nil
	}
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("determine node name: %w", err)
	}
	return strings.ToLower(strings.TrimSpace(name)), nil
}

// mtu is the configured MTU, else the one calico-node computed for this
// node (/var/lib/calico/mtu), else 1500.
func (c *netConf) mtu() int {
	if c.MTU != nil {
		return *c.MTU
	}
	if data, err := os.ReadFile(filepath.Join(c.calicoDirectory(), "mtu")); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && v >= 68 && v <= 65535 {
			return v
		}
	}
	return defaultMTU
}

func (c *netConf) calicoDirectory() string {
	if c.calicoDir != "" {
		return c.calicoDir
	}
	return defaultCalicoDir
}

func (c *netConf) ipamLockFile() string {
	if c.IPAMLockFile != "" {
		return c.IPAMLockFile
	}
	return DefaultIPAMLockFile
}

// k8sAPIConfigured reports whether the config says how to reach the
// Kubernetes API, so that pods can be read (labels, service account,
// annotations).
func (c *netConf) k8sAPIConfigured() bool {
	return c.Kubernetes.Kubeconfig != "" || c.Kubernetes.K8sAPIRoot != "" || c.Policy.K8sAPIRoot != "" ||
		strings.EqualFold(c.Policy.Type, policyTypeK8s)
}

// parseLogLevel maps Calico's log_level values (case-insensitive) to slog
// levels; the empty string is info, as in Calico.
func parseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "", "info":
		return slog.LevelInfo, nil
	case "debug", "trace":
		return slog.LevelDebug, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error", "fatal", "panic":
		return slog.LevelError, nil
	case "none":
		return slog.LevelError + 4, nil
	}
	return 0, fmt.Errorf("%q is not a log level: use debug, info, warning or error", s)
}

// newLogger logs to w (stderr for a plugin process: stdout carries the
// CNI result) at the config's level.
func newLogger(c *netConf, plugin string, w io.Writer) *slog.Logger {
	level, _ := parseLogLevel(c.LogLevel)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})).With("plugin", plugin)
}

// getenv reads the invocation's environment: the process's own, or the
// one a plugin process forwarded to the agent with its request.
func (c *netConf) getenv(key string) string {
	if c.env != nil {
		return c.env(key)
	}
	return os.Getenv(key)
}
