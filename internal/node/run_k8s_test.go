package node

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/errtest"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// parseRun runs `calico-node run` flag parsing with args and env, without
// starting anything, and returns what runConfigFrom made of them.
func parseRun(t *testing.T, args []string, env map[string]string) (runConfig, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	cmd := runCommand()
	var cfg runConfig
	var cfgErr error
	cmd.Action = func(c *cli.Context) error {
		cfg, cfgErr = runConfigFrom(c, func(k string) string { return env[k] })
		return nil
	}
	app := &cli.App{Commands: []*cli.Command{cmd}}
	if err := app.Run(append([]string{"calico-node", "run", "--nodename", "n1"}, args...)); err != nil {
		t.Fatalf("parse flags: %v", err)
	}
	return cfg, cfgErr
}

func TestKubeSettings(t *testing.T) {
	template := `{"name": "k8s-pod-network", "cniVersion": "0.3.1", "type": "calico", "mtu": __CNI_MTU__}`
	tests := []struct {
		name    string
		env     map[string]string
		check   func(t *testing.T, cfg runConfig)
		wantErr string
	}{
		{
			name: "seed daemonset",
			env: map[string]string{
				"ENABLED_CONTROLLERS":               "policy,namespace,serviceaccount,workloadendpoint,node,ipamgc",
				"CALICO_K8S_NODE_REF":               "worker-1",
				"CNI_NETWORK_CONFIG":                template,
				"FELIX_DEFAULTENDPOINTTOHOSTACTION": "ACCEPT",
				"FELIX_IPV6SUPPORT":                 "false",
				"FELIX_IPINIPMTU":                   "1440",
				"FELIX_HEALTHENABLED":               "true",
				"FELIX_TYPHAK8SSERVICENAME":         "none",
				"FELIX_SOMETHINGNEW":                "1",
				"CALICO_DISABLE_FILE_LOGGING":       "true",
				"KUBERNETES_SERVICE_HOST":           "10.96.0.1",
				"KUBERNETES_SERVICE_PORT":           "443",
			},
			check: func(t *testing.T, cfg runConfig) {
				if len(cfg.kube.controllers) != 6 {
					t.Errorf("controllers = %v", cfg.kube.controllers)
				}
				if cfg.node.K8sNodeRef != "worker-1" {
					t.Errorf("K8sNodeRef = %q", cfg.node.K8sNodeRef)
				}
				if !cfg.kube.installCNI || cfg.kube.cni.Template != template || cfg.kube.cni.KubernetesHost != "10.96.0.1" || cfg.kube.cni.NodeName != "n1" {
					t.Errorf("install-cni config = %+v", cfg.kube.cni)
				}
				f := cfg.kube.felix
				if f.Spec == nil || f.Spec.DefaultEndpointToHostAction != "Accept" || *f.Spec.IPIPMTU != 1440 {
					t.Errorf("felix overrides = %+v", f.Spec)
				}
				if strings.Join(f.Unknown, ",") != "FELIX_SOMETHINGNEW" || strings.Join(f.Bootstrap, ",") != "FELIX_TYPHAK8SSERVICENAME" {
					t.Errorf("unknown %v, bootstrap %v", f.Unknown, f.Bootstrap)
				}
				if cfg.kube.fileLogging {
					t.Error("file logging on with CALICO_DISABLE_FILE_LOGGING=true")
				}
			},
		},
		{
			name: "nothing set",
			env:  map[string]string{},
			check: func(t *testing.T, cfg runConfig) {
				if cfg.kube.installCNI || len(cfg.kube.controllers) != 0 || cfg.kube.felix.Spec != nil || cfg.node.K8sNodeRef != "" {
					t.Errorf("kube config = %+v", cfg.kube)
				}
			},
		},
		{name: "unknown controller", env: map[string]string{"ENABLED_CONTROLLERS": "namespace,flannelmigration"}, wantErr: `unknown controller "flannelmigration"`},
		{name: "bad felix value", env: map[string]string{"FELIX_IPV6SUPPORT": "maybe"}, wantErr: "FELIX_IPV6SUPPORT"},
		{name: "bad template", env: map[string]string{"CNI_NETWORK_CONFIG": `{"name": "x",`}, wantErr: "CNI_NETWORK_CONFIG"},
		{name: "bad file logging", env: map[string]string{"CALICO_DISABLE_FILE_LOGGING": "sometimes"}, wantErr: "CALICO_DISABLE_FILE_LOGGING"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseRun(t, nil, tt.env)
			if !errtest.Want(t, err, tt.wantErr) {
				return
			}
			tt.check(t, cfg)
		})
	}
}

// TestRunKubernetes runs the agent the way the DaemonSet does, against a
// real API server: it installs the CNI plugin and config, registers the
// node with its Kubernetes reference, and (holding the Lease) runs the
// controllers.
func TestRunKubernetes(t *testing.T) {
	kube := kubetest.Start(t)
	etcd := etcdtest.Start(t)
	root := t.TempDir()
	conf, bin, sa := filepath.Join(root, "net.d"), filepath.Join(root, "bin"), filepath.Join(root, "sa")
	os.MkdirAll(sa, 0o755)
	ca, _ := os.ReadFile(kube.CAFile)
	os.WriteFile(filepath.Join(sa, "ca.crt"), ca, 0o644)
	os.WriteFile(filepath.Join(sa, "token"), []byte(kube.Token(t, "default", "default", time.Hour)), 0o600)
	tmpl, err := os.ReadFile(filepath.Join(testbin.RepoRoot(), "cniinstall", "testdata", "seed-template.conf"))
	if err != nil {
		t.Fatal(err)
	}

	// The controllers' metrics on KubeControllersConfiguration's port
	// (9094 by default; a free one here, the machine is shared).
	metricsPort := proctest.FreePort(t)
	kcc := &api.KubeControllersConfiguration{Spec: api.KubeControllersConfigurationSpec{PrometheusMetricsPort: &metricsPort}}
	kcc.Kind, kcc.APIVersion, kcc.Name = "KubeControllersConfiguration", api.GroupVersion, "default"
	pre := connectStore(t, etcd.Endpoints)
	if _, err := pre.Create(context.Background(), kcc); err != nil {
		t.Fatal(err)
	}
	// A pool and an address of this node in it, for the gauges to count
	// (start-up then makes no default pool).
	pool := &api.IPPool{Spec: api.IPPoolSpec{CIDR: "10.70.0.0/24", BlockSize: 26}}
	pool.Kind, pool.APIVersion, pool.Name = "IPPool", api.GroupVersion, "metrics-pool"
	if _, err := pre.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ipam.New(pre.IPAM(), pre, nil).AutoAssign(context.Background(), ipam.AutoAssignArgs{Num4: 1, HandleID: "metrics-pod", Node: "calico-1"}); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, []string{"--data-dir", t.TempDir(), "--cni-conf-dir", conf, "--cni-bin-dir", bin, "--service-account-dir", sa},
		"ETCD_ENDPOINTS="+strings.Join(etcd.Endpoints, ","),
		"NODENAME=calico-1", "CALICO_K8S_NODE_REF=node-1", "IP=198.51.100.9/24",
		"CALICO_NETWORKING_BACKEND=none",
		"KUBECONFIG="+kube.Kubeconfig, "ENABLED_CONTROLLERS=namespace,serviceaccount,ipamgc",
		"CALICO_CONTROLLERS_LEASE_NAMESPACE=default",
		"CNI_NETWORK_CONFIG="+string(tmpl),
		"KUBERNETES_SERVICE_HOST="+kube.Host, "KUBERNETES_SERVICE_PORT="+kube.Port,
		"FELIX_IPV6SUPPORT=false", "FELIX_NOSUCHSETTING=1")
	a.waitReady(t)

	store := connectStore(t, etcd.Endpoints)
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := store.Get(ctx, "Profile", "", "kns.default")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("controllers made no profile for namespace default: %v\n%s", err, a.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	n, err := store.Get(ctx, "Node", "", "calico-1")
	if err != nil {
		t.Fatal(err)
	}
	if refs := n.(*api.Node).Spec.OrchRefs; len(refs) != 1 || refs[0].NodeName != "node-1" || refs[0].Orchestrator != "k8s" {
		t.Errorf("node orchRefs = %+v", refs)
	}
	if _, err := os.Stat(filepath.Join(conf, "10-calico.conflist")); err != nil {
		t.Errorf("CNI config not installed: %v", err)
	}
	if st, err := os.Stat(filepath.Join(conf, "calico-kubeconfig")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("calico-kubeconfig: %v %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(bin, "calico")); err != nil {
		t.Errorf("plugin not installed: %v", err)
	}
	if l, err := kube.Client.CoordinationV1().Leases("default").Get(ctx, "calico-kube-controllers", metav1.GetOptions{}); err != nil || *l.Spec.HolderIdentity != "calico-1" {
		t.Errorf("lease: %v %v", l, err)
	}
	// The leader's IPAM gauges, as Calico kube-controllers serves them:
	// the pool's size, this node's address and block in it.
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	polltest.Until(t, 30*time.Second, "ipam_* on the controllers' metrics port", func() bool {
		resp, err := http.Get(metricsURL)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return proctest.Metric(t, metricsURL, `ipam_ippool_size{ippool="metrics-pool"}`) == 256
	})
	for sample, want := range map[string]float64{
		`ipam_allocations_in_use{ippool="metrics-pool",node="calico-1"}`:   1,
		`ipam_blocks{ippool="metrics-pool",node="calico-1"}`:               1,
		`ipam_allocations_borrowed{ippool="metrics-pool",node="calico-1"}`: 0,
		`ipam_allocations_per_node{node="calico-1"}`:                       1,
		`ipam_blocks_per_node{node="calico-1"}`:                            1,
	} {
		if v := proctest.Metric(t, metricsURL, sample); v != want {
			t.Errorf("%s = %v, want %v", sample, v, want)
		}
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, a.logs)
	}
	logs := a.logs.String()
	if !strings.Contains(logs, "FELIX_NOSUCHSETTING") {
		t.Errorf("unknown FELIX_ setting not warned about:\n%s", logs)
	}
	// Stopping released the Lease for the next instance.
	if l, err := kube.Client.CoordinationV1().Leases("default").Get(ctx, "calico-kube-controllers", metav1.GetOptions{}); err != nil || (l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "") {
		t.Errorf("lease after stop: %v %v", l.Spec.HolderIdentity, err)
	}
}
