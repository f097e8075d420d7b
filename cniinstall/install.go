package cniinstall

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Defaults, as in Calico's install-cni.
const (
	DefaultConfName          = "10-calico.conflist"
	DefaultConfDir           = "/etc/cni/net.d"
	DefaultBinDir            = "/opt/cni/bin"
	DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	DefaultMTU               = "1500"
	DefaultInterval          = 10 * time.Second
)

// Names of what the installer writes besides the config and the plugins
// (`calico-node cleanup` recognises them by these).
const (
	// KubeconfigName is the plugin's kubeconfig in the conf dir.
	KubeconfigName = "calico-kubeconfig"
	// KubeconfigHeader is the first line of every kubeconfig the installer
	// writes: what tells it apart from one stock Calico or an operator
	// wrote.
	KubeconfigHeader = "# Kubeconfig of the Calico CNI plugin, written by calico-node.\n"
	// TLSDirName holds the copies of the etcd TLS files in the conf dir.
	TLSDirName = "calico-tls"
)

// TLSFileNames are the copies of the etcd TLS files in TLSDirName (Sync's
// names).
func TLSFileNames() []string { return []string{"etcd-ca", "etcd-cert", "etcd-key"} }

// ChainedPlugins are the plugins Calico's manifests chain after calico
// (hostPort through portmap, the kubernetes.io/ingress- and
// egress-bandwidth annotations through bandwidth). They are the
// containernetworking/plugins binaries, built beside calico-node (`make
// build`, the image's /usr/bin): their packages are main packages, and
// linked into calico-node each chained call would pay that binary's
// package init (~15 ms) instead of their own (~0.5 ms).
var ChainedPlugins = []string{"portmap", "bandwidth"}

// DefaultTemplate is installed when no CNI_NETWORK_CONFIG is given: the
// Calico plugin on this etcd datastore, Kubernetes policy and Calico IPAM,
// then portmap and bandwidth, as Calico's manifests chain them.
const DefaultTemplate = `{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "calico",
      "log_level": "__LOG_LEVEL__",
      "datastore_type": "__DATASTORE_TYPE__",
      "nodename": "__KUBERNETES_NODE_NAME__",
      "etcd_endpoints": "__ETCD_ENDPOINTS__",
      "etcd_key_file": "__ETCD_KEY_FILE__",
      "etcd_cert_file": "__ETCD_CERT_FILE__",
      "etcd_ca_cert_file": "__ETCD_CA_CERT_FILE__",
      "mtu": __CNI_MTU__,
      "ipam": {
        "type": "calico-ipam"
      },
      "policy": {
        "type": "k8s"
      },
      "kubernetes": {
        "kubeconfig": "__KUBECONFIG_FILEPATH__"
      }
    },
    {
      "type": "portmap",
      "snat": true,
      "capabilities": {"portMappings": true}
    },
    {
      "type": "bandwidth",
      "capabilities": {"bandwidth": true}
    }
  ]
}`

// Config is what the installer is told by flags and environment.
type Config struct {
	// ConfDir and BinDir are the CNI directories as this process sees
	// them (--cni-conf-dir, --cni-bin-dir).
	ConfDir, BinDir string
	// HostConfDir is ConfDir as the host sees it (CNI_NET_DIR), used in
	// the paths written into the files; "" = ConfDir.
	HostConfDir string
	// ConfName is the config file name (CNI_CONF_NAME).
	ConfName string
	// Template is the CNI config template (CNI_NETWORK_CONFIG, or the
	// content of CNI_NETWORK_CONFIG_FILE); "" = DefaultTemplate.
	Template string
	// ServiceAccountDir holds the pod's token and ca.crt.
	ServiceAccountDir string
	// KubernetesHost, KubernetesPort and KubernetesProtocol locate the
	// API server (KUBERNETES_SERVICE_HOST, _PORT, _PROTOCOL).
	KubernetesHost, KubernetesPort, KubernetesProtocol string
	// SkipTLSVerify writes an insecure kubeconfig (SKIP_TLS_VERIFY).
	SkipTLSVerify bool
	// NodeName is __KUBERNETES_NODE_NAME__.
	NodeName string
	// MTU is __CNI_MTU__ (CNI_MTU); "" = 1500.
	MTU string
	// EtcdEndpoints is __ETCD_ENDPOINTS__; the Etcd*File are the agent's
	// own etcd TLS files, copied next to the config for the plugin.
	EtcdEndpoints                             string
	EtcdCACertFile, EtcdCertFile, EtcdKeyFile string
	// Getenv supplies the optional placeholders (LOG_LEVEL,
	// LOG_FILE_PATH, DATASTORE_TYPE, ...); nil = none set.
	Getenv func(string) string
	// Source is the binary installed as calico; "" = this executable.
	Source string
	// PluginDir holds the ChainedPlugins to install; "" = Source's
	// directory.
	PluginDir string
	// KeepBinaries leaves existing plugins in place
	// (UPDATE_CNI_BINARIES=false).
	KeepBinaries bool
	// Interval is how often Run re-checks; 0 = DefaultInterval.
	Interval time.Duration
	Logger   *slog.Logger
}

// Installer installs and maintains the CNI configuration and plugins.
type Installer struct {
	cfg Config
	log *slog.Logger
	// installed is the stat of each plugin binary as the last install
	// left it, so that an unchanged binary is not re-read every Interval.
	installed map[string]os.FileInfo
}

// placeholderSample is a value for each placeholder that keeps a valid
// template valid, for the start-up check.
var placeholders = []string{
	"__KUBERNETES_SERVICE_HOST__", "__KUBERNETES_SERVICE_PORT__", "__SERVICEACCOUNT_TOKEN__",
	"__KUBECONFIG_FILEPATH__", "__ETCD_ENDPOINTS__", "__ETCD_KEY_FILE__", "__ETCD_CERT_FILE__",
	"__ETCD_CA_CERT_FILE__", "__CNI_MTU__", "__KUBERNETES_NODE_NAME__", "__LOG_LEVEL__",
	"__LOG_FILE_PATH__", "__LOG_FILE_MAX_SIZE__", "__LOG_FILE_MAX_AGE__", "__LOG_FILE_MAX_COUNT__",
	"__DATASTORE_TYPE__", "__ETCD_DISCOVERY_SRV__", "__REQUIRE_MTU_FILE__", "__CALICO_API_GROUP__",
}

// New checks cfg and the template. A template that does not render to a
// JSON CNI configuration is an error naming the problem.
func New(cfg Config) (*Installer, error) {
	if cfg.ConfDir == "" {
		cfg.ConfDir = DefaultConfDir
	}
	if cfg.BinDir == "" {
		cfg.BinDir = DefaultBinDir
	}
	if cfg.HostConfDir == "" {
		cfg.HostConfDir = cfg.ConfDir
	}
	if cfg.ConfName == "" {
		cfg.ConfName = DefaultConfName
	}
	if strings.ContainsRune(cfg.ConfName, '/') {
		return nil, fmt.Errorf("CNI config name %q must be a file name", cfg.ConfName)
	}
	if cfg.Template == "" {
		cfg.Template = DefaultTemplate
	}
	if cfg.ServiceAccountDir == "" {
		cfg.ServiceAccountDir = DefaultServiceAccountDir
	}
	if cfg.KubernetesProtocol == "" {
		cfg.KubernetesProtocol = "https"
	}
	if cfg.MTU == "" {
		cfg.MTU = DefaultMTU
	}
	if cfg.Getenv == nil {
		cfg.Getenv = func(string) string { return "" }
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Source == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("locate this binary to install as the CNI plugin: %w", err)
		}
		cfg.Source = exe
	}
	if cfg.PluginDir == "" {
		cfg.PluginDir = filepath.Dir(cfg.Source)
	}
	in := &Installer{cfg: cfg, log: cfg.Logger.With("component", "install-cni"), installed: map[string]os.FileInfo{}}

	// Render with sample values: a template error shows now, not when
	// the first pod lands on the node.
	sample := map[string]string{}
	for _, p := range placeholders {
		sample[p] = "x"
	}
	sample["__CNI_MTU__"] = "1500"
	if _, err := in.render(sample); err != nil {
		return nil, err
	}
	return in, nil
}

// values computes every placeholder's value. token is "" outside a pod.
func (in *Installer) values(token string, tls map[string]string) map[string]string {
	c := in.cfg
	env := func(name, def string) string {
		if v := c.Getenv(name); v != "" {
			return v
		}
		return def
	}
	return map[string]string{
		"__KUBERNETES_SERVICE_HOST__": c.KubernetesHost,
		"__KUBERNETES_SERVICE_PORT__": c.KubernetesPort,
		"__SERVICEACCOUNT_TOKEN__":    token,
		"__KUBECONFIG_FILEPATH__":     filepath.Join(c.HostConfDir, KubeconfigName),
		"__ETCD_ENDPOINTS__":          c.EtcdEndpoints,
		"__ETCD_KEY_FILE__":           tls["etcd-key"],
		"__ETCD_CERT_FILE__":          tls["etcd-cert"],
		"__ETCD_CA_CERT_FILE__":       tls["etcd-ca"],
		"__CNI_MTU__":                 c.MTU,
		"__KUBERNETES_NODE_NAME__":    c.NodeName,
		"__LOG_LEVEL__":               env("LOG_LEVEL", "info"),
		"__LOG_FILE_PATH__":           env("LOG_FILE_PATH", "/var/log/calico/cni/cni.log"),
		"__LOG_FILE_MAX_SIZE__":       env("LOG_FILE_MAX_SIZE", "100"),
		"__LOG_FILE_MAX_AGE__":        env("LOG_FILE_MAX_AGE", "30"),
		"__LOG_FILE_MAX_COUNT__":      env("LOG_FILE_MAX_COUNT", "10"),
		// This Calico stores everything in etcd.
		"__DATASTORE_TYPE__":     env("DATASTORE_TYPE", "etcdv3"),
		"__ETCD_DISCOVERY_SRV__": env("ETCD_DISCOVERY_SRV", ""),
		"__REQUIRE_MTU_FILE__":   env("REQUIRE_MTU_FILE", "false"),
		"__CALICO_API_GROUP__":   env("CALICO_API_GROUP", "crd.projectcalico.org/v1"),
	}
}

// render substitutes vals into the template and returns the file content.
func (in *Installer) render(vals map[string]string) ([]byte, error) {
	out := in.cfg.Template
	for _, p := range placeholders {
		out = strings.ReplaceAll(out, p, jsonEscape(vals[p]))
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &top); err != nil {
		return nil, fmt.Errorf("CNI network config template (CNI_NETWORK_CONFIG) is not a JSON object after substituting placeholders: %w", err)
	}
	var name, version string
	json.Unmarshal(top["name"], &name)
	json.Unmarshal(top["cniVersion"], &version)
	plugins, isList := top["plugins"]
	if isList {
		var list []map[string]json.RawMessage
		if err := json.Unmarshal(plugins, &list); err != nil || len(list) == 0 {
			return nil, errors.New(`CNI network config template: "plugins" must be a non-empty list of plugin configurations`)
		}
		for i, p := range list {
			var typ string
			if json.Unmarshal(p["type"], &typ) != nil || typ == "" {
				return nil, fmt.Errorf(`CNI network config template: plugin %d has no "type"`, i)
			}
		}
	} else {
		var typ string
		if json.Unmarshal(top["type"], &typ) != nil || typ == "" {
			return nil, errors.New(`CNI network config template: neither "plugins" nor a plugin "type"`)
		}
	}
	if name == "" {
		return nil, errors.New(`CNI network config template: "name" is missing`)
	}
	if version == "" {
		return nil, errors.New(`CNI network config template: "cniVersion" is missing`)
	}
	if isList || !strings.HasSuffix(in.cfg.ConfName, ".conflist") {
		return []byte(out), nil
	}
	// A plugin configuration under a .conflist name: the list libcni
	// would build from it as a .conf.
	list := struct {
		Name       string            `json:"name"`
		CNIVersion string            `json:"cniVersion"`
		Plugins    []json.RawMessage `json:"plugins"`
	}{name, version, []json.RawMessage{json.RawMessage(out)}}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("wrap CNI config into a list: %w", err)
	}
	return append(data, '\n'), nil
}

// jsonEscape makes s safe inside a JSON string; ordinary values (paths,
// URLs, tokens) come out unchanged.
func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// Run installs everything, then keeps it up to date until ctx ends.
func (in *Installer) Run(ctx context.Context) error {
	changed, err := in.Sync()
	if err != nil {
		return fmt.Errorf("install CNI plugin: %w", err)
	}
	in.log.Info("CNI plugin installed", "conf", filepath.Join(in.cfg.ConfDir, in.cfg.ConfName), "bin", in.cfg.BinDir, "updated", changed)
	t := time.NewTicker(in.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		changed, err := in.Sync()
		if err != nil {
			if !failing {
				in.log.Warn("keeping CNI files up to date failed, will retry", "err", err)
			}
			failing = true
			continue
		}
		failing = false
		if len(changed) > 0 {
			in.log.Info("CNI files updated", "files", changed)
		}
	}
}

// Sync makes the files equal to what they should be now and returns the
// paths it rewrote.
func (in *Installer) Sync() ([]string, error) {
	var changed []string
	note := func(path string, did bool, err error) error {
		if did {
			changed = append(changed, path)
		}
		return err
	}

	for _, dir := range []string{in.cfg.ConfDir, in.cfg.BinDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return changed, fmt.Errorf("create %s: %w", dir, err)
		}
	}

	// Binaries.
	calico := filepath.Join(in.cfg.BinDir, "calico")
	did, err := in.installBinary(calico, in.cfg.Source)
	if err := note(calico, did, err); err != nil {
		return changed, err
	}
	for _, name := range ChainedPlugins {
		src, dst := filepath.Join(in.cfg.PluginDir, name), filepath.Join(in.cfg.BinDir, name)
		if _, err := os.Stat(src); err != nil {
			continue // checked against the config below
		}
		did, err := in.installBinary(dst, src)
		if err := note(dst, did, err); err != nil {
			return changed, err
		}
	}
	ipam := filepath.Join(in.cfg.BinDir, "calico-ipam")
	did, err = in.installLink(ipam, "calico")
	if err := note(ipam, did, err); err != nil {
		return changed, err
	}

	// etcd TLS files, for the plugin running on the host.
	tls := map[string]string{}
	for _, f := range []struct{ name, src string }{
		{"etcd-ca", in.cfg.EtcdCACertFile}, {"etcd-cert", in.cfg.EtcdCertFile}, {"etcd-key", in.cfg.EtcdKeyFile},
	} {
		if f.src == "" {
			continue
		}
		data, err := os.ReadFile(f.src)
		if err != nil {
			return changed, fmt.Errorf("read etcd TLS file %s: %w", f.src, err)
		}
		dir := filepath.Join(in.cfg.ConfDir, TLSDirName)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return changed, fmt.Errorf("create %s: %w", dir, err)
		}
		dst := filepath.Join(dir, f.name)
		did, err := writeFile(dst, data, 0o600)
		if err := note(dst, did, err); err != nil {
			return changed, err
		}
		tls[f.name] = filepath.Join(in.cfg.HostConfDir, TLSDirName, f.name)
	}

	// The service account: token (rotated by kubelet) and CA.
	token, ca, err := in.serviceAccount()
	if err != nil {
		return changed, err
	}
	if token != "" {
		kc, err := in.kubeconfig(token, ca)
		if err != nil {
			return changed, err
		}
		path := filepath.Join(in.cfg.ConfDir, KubeconfigName)
		did, err := writeFile(path, kc, 0o600)
		if err := note(path, did, err); err != nil {
			return changed, err
		}
	}

	conf, err := in.render(in.values(token, tls))
	if err != nil {
		return changed, err
	}
	// A chained plugin the runtime cannot find fails every pod's ADD:
	// refuse to write such a config.
	for _, typ := range pluginTypes(conf) {
		if !slices.Contains(ChainedPlugins, typ) {
			continue
		}
		if _, err := os.Stat(filepath.Join(in.cfg.BinDir, typ)); err != nil {
			return changed, fmt.Errorf("the CNI config chains the %s plugin, but there is none in %s to install, nor in %s", typ, in.cfg.PluginDir, in.cfg.BinDir)
		}
	}
	path := filepath.Join(in.cfg.ConfDir, in.cfg.ConfName)
	did, err = writeFile(path, conf, 0o600)
	return changed, note(path, did, err)
}

// pluginTypes lists the "type" of every plugin of a rendered config.
func pluginTypes(conf []byte) []string {
	var c struct {
		Type    string `json:"type"`
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if json.Unmarshal(conf, &c) != nil {
		return nil
	}
	types := []string{c.Type}
	for _, p := range c.Plugins {
		types = append(types, p.Type)
	}
	return types
}

// serviceAccount reads the pod's token and CA; both "" when there is no
// token (not running in a pod).
func (in *Installer) serviceAccount() (token string, ca []byte, err error) {
	data, err := os.ReadFile(filepath.Join(in.cfg.ServiceAccountDir, "token"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("read service account token: %w", err)
	}
	token = strings.TrimSpace(string(data))
	if !in.cfg.SkipTLSVerify {
		ca, err = os.ReadFile(filepath.Join(in.cfg.ServiceAccountDir, "ca.crt"))
		if err != nil {
			return "", nil, fmt.Errorf("read service account CA: %w", err)
		}
	}
	return token, ca, nil
}

// kubeconfig is the plugin's kubeconfig: one cluster, one token user.
func (in *Installer) kubeconfig(token string, ca []byte) ([]byte, error) {
	c := in.cfg
	if c.KubernetesHost == "" || c.KubernetesPort == "" {
		return nil, errors.New("a service account token is mounted but KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set: cannot write the CNI kubeconfig")
	}
	tlsLine := "insecure-skip-tls-verify: true"
	if !c.SkipTLSVerify {
		tlsLine = "certificate-authority-data: " + base64.StdEncoding.EncodeToString(ca)
	}
	var b bytes.Buffer
	b.WriteString(KubeconfigHeader)
	fmt.Fprintf(&b, `apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: %s://%s
    %s
users:
- name: calico
  user:
    token: %s
contexts:
- name: calico-context
  context:
    cluster: local
    user: calico
current-context: calico-context
`, c.KubernetesProtocol, net.JoinHostPort(c.KubernetesHost, c.KubernetesPort), tlsLine, token)
	return b.Bytes(), nil
}

// writeFile replaces path with data and mode unless it already has both;
// it reports whether it wrote.
func writeFile(path string, data []byte, mode os.FileMode) (bool, error) {
	if st, err := os.Lstat(path); err == nil && st.Mode().IsRegular() && st.Mode().Perm() == mode {
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
			return false, nil
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return false, fmt.Errorf("write %s: %w", tmp, err)
	}
	// WriteFile keeps the mode of an existing temporary file.
	if err := os.Chmod(tmp, mode); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("install %s: %w", path, err)
	}
	return true, nil
}

// installBinary copies the binary source to path unless it is already
// there.
func (in *Installer) installBinary(path, source string) (bool, error) {
	st, err := os.Lstat(path)
	if err == nil && in.installed[path] != nil && sameFile(st, in.installed[path]) {
		return false, nil
	}
	if err == nil && in.cfg.KeepBinaries {
		in.installed[path] = st
		return false, nil
	}
	src, err := os.Open(source)
	if err != nil {
		return false, fmt.Errorf("open plugin binary: %w", err)
	}
	defer src.Close()
	srcSt, err := src.Stat()
	if err != nil {
		return false, fmt.Errorf("stat plugin binary: %w", err)
	}
	if st != nil && st.Mode().IsRegular() && st.Size() == srcSt.Size() && st.Mode().Perm() == 0o755 {
		same, err := sameContent(src, path)
		if err != nil {
			return false, err
		}
		if same {
			in.installed[path] = st
			return false, nil
		}
		if _, err := src.Seek(0, io.SeekStart); err != nil {
			return false, fmt.Errorf("rewind plugin binary: %w", err)
		}
	}
	tmp := path + ".tmp"
	dst, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return false, fmt.Errorf("create %s: %w", tmp, err)
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o755)
	}
	if err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("copy plugin binary to %s: %w", tmp, err)
	}
	// Rename, never overwrite in place: a running plugin keeps its inode
	// and writing to it would fail with ETXTBSY anyway.
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("install %s: %w", path, err)
	}
	st, err = os.Lstat(path)
	if err != nil {
		return true, fmt.Errorf("stat %s: %w", path, err)
	}
	in.installed[path] = st
	return true, nil
}

// sameFile reports whether two stats describe the same, unmodified file.
func sameFile(a, b os.FileInfo) bool {
	if a.Size() != b.Size() || a.Mode() != b.Mode() || !a.ModTime().Equal(b.ModTime()) {
		return false
	}
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Ino == sb.Ino && sa.Dev == sb.Dev
}

// sameContent compares r with the file at path.
func sameContent(r io.Reader, path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	const chunk = 1 << 20
	a, b := make([]byte, chunk), make([]byte, chunk)
	for {
		na, errA := io.ReadFull(r, a)
		nb, errB := io.ReadFull(f, b)
		if na != nb || !bytes.Equal(a[:na], b[:nb]) {
			return false, nil
		}
		endA := errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF)
		endB := errors.Is(errB, io.EOF) || errors.Is(errB, io.ErrUnexpectedEOF)
		switch {
		case endA && endB:
			return true, nil
		case endA != endB:
			return false, nil
		case errA != nil:
			return false, fmt.Errorf("read plugin binary: %w", errA)
		case errB != nil:
			return false, fmt.Errorf("read %s: %w", path, errB)
		}
	}
}

// installLink makes path a symlink to target (relative) unless it is one.
func (in *Installer) installLink(path, target string) (bool, error) {
	st, err := os.Lstat(path)
	if err == nil {
		if st.Mode()&os.ModeSymlink != 0 {
			if cur, err := os.Readlink(path); err == nil && cur == target {
				return false, nil
			}
		}
		if in.cfg.KeepBinaries {
			return false, nil
		}
	}
	tmp := path + ".tmp"
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return false, fmt.Errorf("link %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("install %s: %w", path, err)
	}
	return true, nil
}
