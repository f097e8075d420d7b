package node

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/felixenv"
	"github.com/projectcalico/calico-node/cniinstall"
	"github.com/projectcalico/calico-node/controllers"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/kube"
)

// kubeConfig is the Kubernetes side of `calico-node run`: install-cni, the
// kube-controllers, and the Calico environment a DaemonSet sets.
type kubeConfig struct {
	controllers []string // ENABLED_CONTROLLERS
	kubeconfig  string   // "" = in-cluster
	leaseNS     string

	installCNI bool
	cni        cniinstall.Config

	// felix are the FELIX_* overrides of FelixConfiguration; the
	// dataplane gives felix.Spec the highest precedence.
	felix felixenv.Overrides
	// fileLogging is !CALICO_DISABLE_FILE_LOGGING; this agent only logs
	// to stderr, so it is reported, not honoured.
	fileLogging bool
}

// kubeFlags are the flags of `calico-node run` for the Kubernetes side.
func kubeFlags() []cli.Flag {
	env := func(names ...string) []string { return names }
	return []cli.Flag{
		&cli.StringFlag{Name: "controllers", EnvVars: env("ENABLED_CONTROLLERS"), Usage: "kube-controllers to run, leader-elected: " + strings.Join(controllers.All, ",")},
		&cli.StringFlag{Name: "kubeconfig", EnvVars: env("KUBECONFIG"), Usage: "kubeconfig for the Kubernetes datastore and the controllers (default: in-cluster service account)"},
		&cli.StringFlag{Name: "controllers-lease-namespace", EnvVars: env("CALICO_CONTROLLERS_LEASE_NAMESPACE"), Value: controllers.DefaultLeaseNamespace},
		&cli.StringFlag{Name: "k8s-node-ref", EnvVars: env("CALICO_K8S_NODE_REF"), Usage: "this node's Kubernetes name, recorded in the Node's spec.orchRefs"},
		&cli.BoolFlag{Name: "install-cni", EnvVars: env("CALICO_INSTALL_CNI"), Usage: "install the CNI plugin and config (implied by CNI_NETWORK_CONFIG or CNI_NETWORK_CONFIG_FILE)"},
		&cli.StringFlag{Name: "cni-conf-dir", EnvVars: env("CALICO_CNI_CONF_DIR"), Value: cniinstall.DefaultConfDir, Usage: "CNI config directory as mounted in this container"},
		&cli.StringFlag{Name: "cni-bin-dir", EnvVars: env("CALICO_CNI_BIN_DIR"), Value: cniinstall.DefaultBinDir, Usage: "CNI plugin directory as mounted in this container"},
		&cli.StringFlag{Name: "cni-net-dir", EnvVars: env("CNI_NET_DIR"), Usage: "the CNI config directory as the host sees it (default: --cni-conf-dir)"},
		&cli.StringFlag{Name: "cni-conf-name", EnvVars: env("CNI_CONF_NAME"), Value: cniinstall.DefaultConfName},
		&cli.StringFlag{Name: "cni-network-config", EnvVars: env("CNI_NETWORK_CONFIG"), Usage: "CNI config template with __PLACEHOLDERS__"},
		&cli.StringFlag{Name: "cni-network-config-file", EnvVars: env("CNI_NETWORK_CONFIG_FILE"), Usage: "file holding the CNI config template"},
		&cli.StringFlag{Name: "cni-mtu", EnvVars: env("CNI_MTU"), Value: cniinstall.DefaultMTU},
		&cli.StringFlag{Name: "service-account-dir", EnvVars: env("CALICO_SERVICE_ACCOUNT_DIR"), Value: cniinstall.DefaultServiceAccountDir, Usage: "where the pod's service account token and ca.crt are mounted"},
		&cli.BoolFlag{Name: "update-cni-binaries", EnvVars: env("UPDATE_CNI_BINARIES"), Value: true, Usage: "replace calico/calico-ipam already in the CNI bin dir"},
		&cli.BoolFlag{Name: "skip-tls-verify", EnvVars: env("SKIP_TLS_VERIFY"), Usage: "CNI kubeconfig without API server certificate check"},
		&cli.StringFlag{Name: "disable-file-logging", EnvVars: env("CALICO_DISABLE_FILE_LOGGING"), Value: "true", Usage: "accepted for compatibility: this agent logs to stderr only"},
	}
}

// kubeConfigInto reads the Kubernetes flags and environment into cfg.
func kubeConfigInto(c *cli.Context, getenv func(string) string, environ []string, cfg *runConfig) error {
	k := &cfg.kube
	var err error
	if k.controllers, err = controllers.ParseEnabled(c.String("controllers")); err != nil {
		return fmt.Errorf("ENABLED_CONTROLLERS: %w", err)
	}
	k.kubeconfig = c.String("kubeconfig")
	k.leaseNS = c.String("controllers-lease-namespace")
	cfg.node.K8sNodeRef = c.String("k8s-node-ref")

	disable, err := parseBool("CALICO_DISABLE_FILE_LOGGING", c.String("disable-file-logging"))
	if err != nil {
		return err
	}
	k.fileLogging = !disable

	if k.felix, err = felixenv.Parse(environ); err != nil {
		return err
	}

	template := c.String("cni-network-config")
	if f := c.String("cni-network-config-file"); f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("CNI_NETWORK_CONFIG_FILE: %w", err)
		}
		template = string(data)
	}
	k.installCNI = c.Bool("install-cni") || template != ""
	if !k.installCNI {
		return nil
	}
	nodeName := getenv("KUBERNETES_NODE_NAME")
	if nodeName == "" {
		nodeName = cfg.node.NodeName
	}
	k.cni = cniinstall.Config{
		ConfDir:            c.String("cni-conf-dir"),
		BinDir:             c.String("cni-bin-dir"),
		HostConfDir:        c.String("cni-net-dir"),
		ConfName:           c.String("cni-conf-name"),
		Template:           template,
		ServiceAccountDir:  c.String("service-account-dir"),
		KubernetesHost:     getenv("KUBERNETES_SERVICE_HOST"),
		KubernetesPort:     getenv("KUBERNETES_SERVICE_PORT"),
		KubernetesProtocol: getenv("KUBERNETES_SERVICE_PROTOCOL"),
		SkipTLSVerify:      c.Bool("skip-tls-verify"),
		NodeName:           nodeName,
		MTU:                c.String("cni-mtu"),
		EtcdEndpoints:      strings.Join(cfg.datastore.Endpoints, ","),
		EtcdCACertFile:     cfg.datastore.CACertFile,
		EtcdCertFile:       cfg.datastore.CertFile,
		EtcdKeyFile:        cfg.datastore.KeyFile,
		Getenv:             getenv,
		KeepBinaries:       !c.Bool("update-cni-binaries"),
	}
	// A bad template stops the agent now, with the reason.
	if _, err := cniinstall.New(k.cni); err != nil {
		return err
	}
	return nil
}

// kube builds install-cni and the kube-controllers, and says which
// FELIX_* settings it takes and which it ignores.
func (b *builder) kube(a *actors) error {
	k := b.cfg.kube
	for _, name := range k.felix.Unknown {
		b.log.Warn("ignoring unknown Felix setting: no FelixConfiguration field has this name", "env", name)
	}
	for _, name := range k.felix.Bootstrap {
		b.log.Info("ignoring Felix bootstrap setting: calico-node takes it from its own configuration", "env", name)
	}
	if len(k.felix.Set) > 0 {
		b.log.Info("FELIX_* settings override FelixConfiguration", "env", k.felix.Set)
	}
	if k.fileLogging {
		b.log.Info("CALICO_DISABLE_FILE_LOGGING=false: calico-node logs to stderr only")
	}

	// install-cni: the CNI plugin and its configuration on this node.
	if k.installCNI {
		cni := k.cni
		cni.Logger = b.log
		// With an embedded etcd the endpoints are known only now.
		if cni.EtcdEndpoints == "" {
			cni.EtcdEndpoints = strings.Join(b.cfg.datastore.Endpoints, ",")
		}
		in, err := cniinstall.New(cni)
		if err != nil {
			return err
		}
		a.installCNI = in
	}

	// kube-controllers: leader-elected, on the datastore once connected.
	if len(k.controllers) > 0 {
		restCfg, err := kubeRESTConfig(k.kubeconfig)
		if err != nil {
			return err
		}
		// client-go logs through klog; send it where everything else goes.
		klog.SetSlogLogger(b.log.With("component", "client-go"))
		// Not client-go's clientset: see package kube.
		kc, err := kube.New(restCfg)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		a.controllers, err = controllers.New(controllers.Config{
			Enabled:        k.controllers,
			LeaseNamespace: k.leaseNS,
			Identity:       b.cfg.node.NodeName,
			Logger:         b.log,
			Registerer:     b.ctrlReg,
			Datastore:      b.cfg.datastore.EffectiveType(),
			LogLevelFixed:  b.cfg.logLevelSet,
		}, kc, a.store, ipam.New(a.store.ipam(), a.store, b.log.With("component", "ipam")))
		if err != nil {
			return err
		}
		// Their metrics on kube-controllers' own port, as
		// KubeControllersConfiguration says.
		a.ctrlMetrics = &ctrlMetrics{
			server: agent.NewMetricsServer("kube-controllers", prometheus.Gatherers{b.ctrlReg, b.runtime}, b.log),
			watch:  a.confwatch,
		}
	}
	return nil
}

// kubeRESTConfig is the kubeconfig's client configuration, or the pod's
// in-cluster one.
func kubeRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, errors.New("ENABLED_CONTROLLERS is set but there is no Kubernetes API to talk to: run in a pod or set KUBECONFIG")
	}
	if err != nil {
		return nil, fmt.Errorf("in-cluster Kubernetes config: %w", err)
	}
	return c, nil
}
