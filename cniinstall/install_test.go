package cniinstall

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/projectcalico/calico-node/internal/testkit/goldentest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// env is a test node: CNI directories, a service account and etcd TLS
// files in temporary directories.
type env struct {
	conf, bin, sa, secrets string
	source                 string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	root := t.TempDir()
	e := &env{
		conf:    filepath.Join(root, "etc/cni/net.d"),
		bin:     filepath.Join(root, "opt/cni/bin"),
		sa:      filepath.Join(root, "serviceaccount"),
		secrets: filepath.Join(root, "calico-secrets"),
		source:  filepath.Join(root, "calico-node"),
	}
	for _, d := range []string{e.sa, e.secrets} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.write(t, filepath.Join(e.sa, "token"), "token-one\n")
	e.write(t, filepath.Join(e.sa, "ca.crt"), "-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n")
	for _, f := range []string{"etcd-ca", "etcd-cert", "etcd-key"} {
		e.write(t, filepath.Join(e.secrets, f), f+" content\n")
	}
	// A stand-in for this binary: big enough to need more than one read.
	bin := bytes.Repeat([]byte("calico-node plugin binary "), 100000)
	if err := os.WriteFile(e.source, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// Stand-ins for the chained plugins beside it, as `make build` and
	// the image have them.
	for _, p := range ChainedPlugins {
		if err := os.WriteFile(filepath.Join(root, p), []byte(p+" plugin binary"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *env) write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// config is the seed DaemonSet's setup: the ConfigMap template, etcd with
// TLS, running in a pod.
func (e *env) config(t *testing.T) Config {
	t.Helper()
	tmpl, err := os.ReadFile("testdata/seed-template.conf")
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		ConfDir:           e.conf,
		BinDir:            e.bin,
		HostConfDir:       "/etc/cni/net.d",
		Template:          string(tmpl),
		ServiceAccountDir: e.sa,
		KubernetesHost:    "10.96.0.1",
		KubernetesPort:    "443",
		NodeName:          "node-1",
		EtcdEndpoints:     "https://10.142.21.21:2379",
		EtcdCACertFile:    filepath.Join(e.secrets, "etcd-ca"),
		EtcdCertFile:      filepath.Join(e.secrets, "etcd-cert"),
		EtcdKeyFile:       filepath.Join(e.secrets, "etcd-key"),
		Source:            e.source,
	}
}

func mustNew(t *testing.T, cfg Config) *Installer {
	t.Helper()
	in, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return in
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldentest.Check(t, filepath.Join("testdata", name), got)
}

func readFile(t *testing.T, path string, wantMode os.FileMode) []byte {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode() != wantMode {
		t.Errorf("%s mode = %v, want %v", path, st.Mode(), wantMode)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestSeedTemplate installs the seed ConfigMap's template and checks every
// file a node ends up with.
func TestSeedTemplate(t *testing.T) {
	e := newEnv(t)
	in := mustNew(t, e.config(t))
	changed, err := in.Sync()
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if len(changed) != 9 { // calico, calico-ipam, portmap, bandwidth, 3 TLS files, kubeconfig, config
		t.Errorf("first Sync wrote %d files, want 9: %v", len(changed), changed)
	}

	conf := readFile(t, filepath.Join(e.conf, "10-calico.conflist"), 0o600)
	golden(t, "seed.conflist", conf)

	// The runtime's view: the list loads, and is the list libcni makes of
	// the template as a .conf (same name, version and plugin settings).
	list, err := libcni.ConfListFromBytes(conf)
	if err != nil {
		t.Fatalf("libcni cannot load the conflist: %v", err)
	}
	if list.Name != "k8s-pod-network" || list.CNIVersion != "0.1.0" || len(list.Plugins) != 1 || list.Plugins[0].Network.Type != "calico" {
		t.Errorf("conflist = %s %s %d plugins", list.Name, list.CNIVersion, len(list.Plugins))
	}
	var plugin map[string]any
	if err := json.Unmarshal(list.Plugins[0].Bytes, &plugin); err != nil {
		t.Fatal(err)
	}
	policy := plugin["policy"].(map[string]any)
	if policy["k8s_api_root"] != "https://10.96.0.1:443" || policy["k8s_auth_token"] != "token-one" {
		t.Errorf("policy section = %v", policy)
	}
	if plugin["etcd_ca_cert_file"] != "/etc/cni/net.d/calico-tls/etcd-ca" {
		t.Errorf("etcd_ca_cert_file = %v, want the host path of the copy", plugin["etcd_ca_cert_file"])
	}

	kc := readFile(t, filepath.Join(e.conf, "calico-kubeconfig"), 0o600)
	golden(t, "seed.kubeconfig", kc)

	for _, f := range []string{"etcd-ca", "etcd-cert", "etcd-key"} {
		got := readFile(t, filepath.Join(e.conf, "calico-tls", f), 0o600)
		if string(got) != f+" content\n" {
			t.Errorf("calico-tls/%s = %q", f, got)
		}
	}

	src, _ := os.ReadFile(e.source)
	if got := readFile(t, filepath.Join(e.bin, "calico"), 0o755); !bytes.Equal(got, src) {
		t.Error("installed calico differs from the source binary")
	}
	if target, err := os.Readlink(filepath.Join(e.bin, "calico-ipam")); err != nil || target != "calico" {
		t.Errorf("calico-ipam: readlink = %q, %v; want a symlink to calico", target, err)
	}
	assertNoTemp(t, e.conf, e.bin)
}

func assertNoTemp(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		filepath.Walk(d, func(p string, _ os.FileInfo, _ error) error {
			if strings.HasSuffix(p, ".tmp") {
				t.Errorf("temporary file left behind: %s", p)
			}
			return nil
		})
	}
}

// TestIdempotent: a second pass writes nothing; a file changed behind the
// installer's back (content, mode, a foreign plugin binary) is restored.
func TestIdempotent(t *testing.T) {
	e := newEnv(t)
	in := mustNew(t, e.config(t))
	if _, err := in.Sync(); err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(e.conf, "10-calico.conflist")
	before, _ := os.Stat(confPath)
	time.Sleep(10 * time.Millisecond)

	changed, err := in.Sync()
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 0 {
		t.Errorf("second Sync rewrote %v, want nothing", changed)
	}
	// A new installer (agent restart) also writes nothing.
	changed, err = mustNew(t, e.config(t)).Sync()
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 0 {
		t.Errorf("Sync after restart rewrote %v, want nothing", changed)
	}
	after, _ := os.Stat(confPath)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Error("conflist modification time changed although nothing changed")
	}

	want, _ := os.ReadFile(confPath)
	os.WriteFile(confPath, []byte("{}"), 0o600)
	os.Chmod(filepath.Join(e.conf, "calico-kubeconfig"), 0o644)
	os.Remove(filepath.Join(e.bin, "calico-ipam"))
	os.WriteFile(filepath.Join(e.bin, "calico"), []byte("someone else's plugin"), 0o755)
	changed, err = in.Sync()
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 4 {
		t.Errorf("Sync after tampering rewrote %v, want conflist, kubeconfig, calico, calico-ipam", changed)
	}
	if got, _ := os.ReadFile(confPath); !bytes.Equal(got, want) {
		t.Error("conflist not restored")
	}
	readFile(t, filepath.Join(e.conf, "calico-kubeconfig"), 0o600)
	src, _ := os.ReadFile(e.source)
	if got, _ := os.ReadFile(filepath.Join(e.bin, "calico")); !bytes.Equal(got, src) {
		t.Error("calico binary not restored")
	}
}

// TestTokenRotation: kubelet replaces the projected token; the running
// installer rewrites the kubeconfig and the conflist that embed it.
func TestTokenRotation(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(t)
	cfg.Interval = 20 * time.Millisecond
	in := mustNew(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	kcPath := filepath.Join(e.conf, "calico-kubeconfig")
	confPath := filepath.Join(e.conf, "10-calico.conflist")
	waitFor(t, func() bool { return fileContains(kcPath, "token: token-one\n") })

	// Kubelet swaps the ..data symlink; a plain rename is the same to a reader.
	tmp := filepath.Join(e.sa, "token.new")
	os.WriteFile(tmp, []byte("token-two"), 0o600)
	os.Rename(tmp, filepath.Join(e.sa, "token"))

	waitFor(t, func() bool {
		return fileContains(kcPath, "token: token-two\n") && fileContains(confPath, `"k8s_auth_token": "token-two"`)
	})
	readFile(t, kcPath, 0o600)
	if fileContains(kcPath, "token-one") {
		t.Error("old token still in kubeconfig")
	}
}

func fileContains(path, s string) bool {
	data, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(data), s)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	polltest.Until(t, 10*time.Second, "the condition", cond)
}

// TestBadTemplate: a broken template stops the agent at start with the
// reason.
func TestBadTemplate(t *testing.T) {
	tests := []struct {
		name, template, confName, want string
	}{
		{"not JSON", `{"name": "n", "cniVersion": "0.3.1", "type": "calico",`, "", "is not a JSON object"},
		{"unquoted placeholder", `{"name": "n", "cniVersion": "0.3.1", "type": "calico", "mtu": __KUBERNETES_NODE_NAME__}`, "", "is not a JSON object"},
		{"no type", `{"name": "n", "cniVersion": "0.3.1"}`, "", `neither "plugins" nor a plugin "type"`},
		{"empty plugins", `{"name": "n", "cniVersion": "0.3.1", "plugins": []}`, "", `"plugins" must be a non-empty list`},
		{"plugin without type", `{"name": "n", "cniVersion": "0.3.1", "plugins": [{"ipam": {}}]}`, "", `plugin 0 has no "type"`},
		{"no name", `{"cniVersion": "0.3.1", "type": "calico"}`, "", `"name" is missing`},
		{"no version", `{"name": "n", "type": "calico"}`, "", `"cniVersion" is missing`},
		{"path as name", `{"name": "n", "cniVersion": "0.3.1", "type": "calico"}`, "../x.conf", "must be a file name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{ConfDir: t.TempDir(), BinDir: t.TempDir(), Template: tt.template, ConfName: tt.confName, Source: "/bin/true"})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: err = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestNotInPod: without a service account there is no kubeconfig and the
// token placeholder is empty; a plain .conf name keeps the template as is.
func TestNotInPod(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(t)
	cfg.ServiceAccountDir = filepath.Join(t.TempDir(), "none")
	cfg.ConfName = "10-calico.conf"
	if _, err := mustNew(t, cfg).Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.conf, "calico-kubeconfig")); !os.IsNotExist(err) {
		t.Errorf("kubeconfig written outside a pod (stat: %v)", err)
	}
	conf := readFile(t, filepath.Join(e.conf, "10-calico.conf"), 0o600)
	tmpl, _ := os.ReadFile("testdata/seed-template.conf")
	want := strings.NewReplacer(
		"__ETCD_ENDPOINTS__", "https://10.142.21.21:2379",
		"__ETCD_KEY_FILE__", "/etc/cni/net.d/calico-tls/etcd-key",
		"__ETCD_CERT_FILE__", "/etc/cni/net.d/calico-tls/etcd-cert",
		"__ETCD_CA_CERT_FILE__", "/etc/cni/net.d/calico-tls/etcd-ca",
		"__KUBERNETES_SERVICE_HOST__", "10.96.0.1",
		"__KUBERNETES_SERVICE_PORT__", "443",
		"__SERVICEACCOUNT_TOKEN__", "",
		"__KUBECONFIG_FILEPATH__", "/etc/cni/net.d/calico-kubeconfig",
	).Replace(string(tmpl))
	if string(conf) != want {
		t.Errorf(".conf = \n%s\nwant\n%s", conf, want)
	}
}

// TestDefaultTemplate: with no CNI_NETWORK_CONFIG the built-in list is a
// valid Calico conflist on etcd, and no etcd TLS means empty file names.
func TestDefaultTemplate(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(t)
	cfg.Template = ""
	cfg.EtcdCACertFile, cfg.EtcdCertFile, cfg.EtcdKeyFile = "", "", ""
	cfg.EtcdEndpoints = "http://127.0.0.1:2379"
	cfg.MTU = "1440"
	if _, err := mustNew(t, cfg).Sync(); err != nil {
		t.Fatal(err)
	}
	conf := readFile(t, filepath.Join(e.conf, "10-calico.conflist"), 0o600)
	golden(t, "default.conflist", conf)
	if _, err := libcni.ConfListFromBytes(conf); err != nil {
		t.Fatalf("libcni: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.conf, "calico-tls")); !os.IsNotExist(err) {
		t.Errorf("calico-tls created without etcd TLS files (stat: %v)", err)
	}
}

// TestKeepBinaries: UPDATE_CNI_BINARIES=false leaves a plugin in place.
func TestKeepBinaries(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(t)
	cfg.KeepBinaries = true
	os.MkdirAll(e.bin, 0o755)
	os.WriteFile(filepath.Join(e.bin, "calico"), []byte("baked into the image"), 0o755)
	if _, err := mustNew(t, cfg).Sync(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(e.bin, "calico")); string(got) != "baked into the image" {
		t.Error("existing calico replaced although KeepBinaries is set")
	}
}

// TestPluginRuns: the installed calico and calico-ipam are this binary and
// answer the CNI VERSION command, dispatching on argv[0].
func TestPluginRuns(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(t)
	cfg.Source = testbin.Path(t)
	if _, err := mustNew(t, cfg).Sync(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"calico", "calico-ipam"} {
		cmd := exec.Command(filepath.Join(e.bin, name))
		cmd.Env = []string{"CNI_COMMAND=VERSION"}
		cmd.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "supportedVersions") {
			t.Errorf("%s VERSION: %v\n%s", name, err, out)
		}
	}
}

// TestChainedPlugins: portmap and bandwidth, found beside the calico
// binary, are installed with it; a config that chains one the installer
// has not got and the bin dir lacks is refused (every pod's ADD would
// fail on it), one that does not chain them is written without them.
func TestChainedPlugins(t *testing.T) {
	t.Run("installed beside calico", func(t *testing.T) {
		e := newEnv(t)
		cfg := e.config(t)
		cfg.Template = ""
		if _, err := mustNew(t, cfg).Sync(); err != nil {
			t.Fatal(err)
		}
		for _, p := range ChainedPlugins {
			if got := readFile(t, filepath.Join(e.bin, p), 0o755); string(got) != p+" plugin binary" {
				t.Errorf("%s installed as %q", p, got)
			}
		}
	})
	t.Run("chained but missing", func(t *testing.T) {
		e := newEnv(t)
		os.Remove(filepath.Join(filepath.Dir(e.source), "bandwidth"))
		cfg := e.config(t)
		cfg.Template = ""
		_, err := mustNew(t, cfg).Sync()
		if err == nil || !strings.Contains(err.Error(), "bandwidth") {
			t.Fatalf("Sync with the chained bandwidth plugin missing: %v, want an error naming it", err)
		}
		if _, err := os.Stat(filepath.Join(e.conf, "10-calico.conflist")); err == nil {
			t.Error("config written although it chains a missing plugin")
		}
	})
	t.Run("not chained, missing", func(t *testing.T) {
		e := newEnv(t)
		for _, p := range ChainedPlugins {
			os.Remove(filepath.Join(filepath.Dir(e.source), p))
		}
		if _, err := mustNew(t, e.config(t)).Sync(); err != nil {
			t.Fatalf("Sync of a calico-only template: %v", err)
		}
	})
}

// TestChainedPluginsBuilt: the test binaries' builder (testbin) builds
// every plugin the installer installs.
func TestChainedPluginsBuilt(t *testing.T) {
	if !slices.Equal(testbin.ChainedPlugins, ChainedPlugins) {
		t.Errorf("testbin builds %v, the installer installs %v", testbin.ChainedPlugins, ChainedPlugins)
	}
}
