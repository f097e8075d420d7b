package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/epstatus"
	"github.com/projectcalico/calico-node/bgp"
	"github.com/projectcalico/calico-node/internal/buildinfo"
	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/node/startup"
)

// runConfig is everything `calico-node run` is told by flags and env.
type runConfig struct {
	// datastore is where Calico data lives: etcd (embedded when no
	// endpoints are given) or the Kubernetes API.
	datastore   datastore.Config
	dataDir     string
	embedClient string
	embedPeer   string
	healthAddr  string
	logLevel    slog.Level
	// logLevelSet: the level came from --log-level, CALICO_LOG_LEVEL or
	// FELIX_LOGSEVERITYSCREEN, and outranks FelixConfiguration's
	// logSeverityScreen.
	logLevelSet   bool
	node          startup.Config
	startupBudget time.Duration
	bgp           bgpConfig
	kube          kubeConfig // run_k8s.go
	dataplane     bool       // program routes, policy and overlays in this namespace
	cniSocket     string     // where plugin processes forward CNI commands; "" off
	// statusSocket serves the endpoint timelines (`calicoctl node
	// timeline`); "" off.
	statusSocket string
	// policySetupTimeout is how long a CNI ADD the agent serves waits
	// for the endpoint's policy and routes when the network config does
	// not say; negative: not at all.
	policySetupTimeout time.Duration
	// memoryTrim is how often the agent returns free heap to the kernel
	// (memory.go); 0: never.
	memoryTrim time.Duration
	// fanout, when its address is set, is the `calico-node fanout` the
	// agent reads Calico's resources and IPAM watches from instead of
	// watching the datastore itself (fanout.go).
	fanout fanoutClientConfig
}

// bgpConfig is the BGP speaker's part of runConfig.
type bgpConfig struct {
	enabled      bool   // CALICO_NETWORKING_BACKEND=bird
	statusSocket string // where `node status` asks
	listenPort   int    // 0: BGPConfiguration's listenPort
	secretsDir   string // BGP passwords: <dir>/<secret>/<key>
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "run the node agent (datastore watch, node registration, health; embedded etcd when no endpoints are given)",
		Flags: runFlags(),
		Action: func(c *cli.Context) error {
			cfg, err := runConfigFrom(c, os.Getenv)
			if err != nil {
				return err
			}
			release, err := holdAgentLock(cfg.dataDir)
			if err != nil {
				return err
			}
			defer release()
			// One level for every logger of the process; FelixConfiguration
			// may change it at runtime (agent.FelixConfig).
			level := new(slog.LevelVar)
			level.Set(cfg.logLevel)
			logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			return runNode(c.Context, cfg, logger, level)
		},
	}
}

// runFlags are `calico-node run`'s flags (and `plan`'s, which reads the
// same configuration).
func runFlags() []cli.Flag {
	env := func(names ...string) []string { return names }
	return append([]cli.Flag{
		&cli.StringFlag{Name: "datastore-type", EnvVars: env("DATASTORE_TYPE"), Value: datastore.TypeEtcd, Usage: "etcdv3, or kubernetes: Calico data in the Kubernetes API (KUBECONFIG, else the pod's service account)"},
		&cli.StringFlag{Name: "etcd-endpoints", EnvVars: env("ETCD_ENDPOINTS"), Usage: "comma-separated etcd endpoints; empty starts an embedded etcd"},
		&cli.StringFlag{Name: "etcd-ca-cert-file", EnvVars: env("ETCD_CA_CERT_FILE")},
		&cli.StringFlag{Name: "etcd-cert-file", EnvVars: env("ETCD_CERT_FILE")},
		&cli.StringFlag{Name: "etcd-key-file", EnvVars: env("ETCD_KEY_FILE")},
		&cli.StringFlag{Name: "etcd-username", EnvVars: env("ETCD_USERNAME")},
		&cli.StringFlag{Name: "etcd-password", EnvVars: env("ETCD_PASSWORD")},
		&cli.StringFlag{Name: "data-dir", EnvVars: env("CALICO_DATA_DIR"), Value: "/var/lib/calico", Usage: "state directory (embedded etcd data, nodename file)"},
		&cli.StringFlag{Name: "embedded-etcd-client-url", Value: "http://127.0.0.1:2379", Usage: "client URL of the embedded etcd"},
		&cli.StringFlag{Name: "embedded-etcd-peer-url", Value: "http://127.0.0.1:2380", Usage: "peer URL of the embedded etcd"},
		&cli.StringFlag{Name: "health-addr", Usage: "health and metrics listen address (default FELIX_HEALTHHOST:FELIX_HEALTHPORT, else 127.0.0.1:9099)"},
		&cli.StringFlag{Name: "log-level", EnvVars: env("CALICO_LOG_LEVEL", "FELIX_LOGSEVERITYSCREEN"), Value: "info", Usage: "debug, info, warning, error (default: FelixConfiguration logSeverityScreen, else info)"},
		&cli.StringFlag{Name: "nodename", EnvVars: env("NODENAME"), Usage: "this node's name (default: HOSTNAME, then the hostname)"},
		&cli.StringFlag{Name: "ip", EnvVars: env("IP"), Usage: "IPv4 address: an address, autodetect, none, or empty to keep the registered one"},
		&cli.StringFlag{Name: "ip6", EnvVars: env("IP6"), Usage: "IPv6 address: an address, autodetect or none (default none)"},
		&cli.StringFlag{Name: "ip-autodetection-method", EnvVars: env("IP_AUTODETECTION_METHOD"), Value: "first-found"},
		&cli.StringFlag{Name: "ip6-autodetection-method", EnvVars: env("IP6_AUTODETECTION_METHOD"), Value: "first-found"},
		&cli.StringFlag{Name: "as", EnvVars: env("AS"), Usage: "this node's AS number (default: BGPConfiguration's)"},
		&cli.StringFlag{Name: "ipv4pool-cidr", EnvVars: env("CALICO_IPV4POOL_CIDR"), Value: "192.168.0.0/16"},
		&cli.StringFlag{Name: "ipv4pool-ipip", EnvVars: env("CALICO_IPV4POOL_IPIP"), Value: "Never"},
		&cli.StringFlag{Name: "ipv4pool-vxlan", EnvVars: env("CALICO_IPV4POOL_VXLAN"), Value: "Never"},
		&cli.StringFlag{Name: "ipv4pool-nat-outgoing", EnvVars: env("CALICO_IPV4POOL_NAT_OUTGOING"), Value: "true"},
		&cli.IntFlag{Name: "ipv4pool-block-size", EnvVars: env("CALICO_IPV4POOL_BLOCK_SIZE")},
		&cli.StringFlag{Name: "ipv4pool-node-selector", EnvVars: env("CALICO_IPV4POOL_NODE_SELECTOR")},
		&cli.StringFlag{Name: "ipv6pool-cidr", EnvVars: env("CALICO_IPV6POOL_CIDR")},
		&cli.StringFlag{Name: "ipv6pool-vxlan", EnvVars: env("CALICO_IPV6POOL_VXLAN"), Value: "Never"},
		&cli.StringFlag{Name: "ipv6pool-nat-outgoing", EnvVars: env("CALICO_IPV6POOL_NAT_OUTGOING"), Value: "false"},
		&cli.IntFlag{Name: "ipv6pool-block-size", EnvVars: env("CALICO_IPV6POOL_BLOCK_SIZE")},
		&cli.StringFlag{Name: "ipv6pool-node-selector", EnvVars: env("CALICO_IPV6POOL_NODE_SELECTOR")},
		&cli.BoolFlag{Name: "no-default-pools", EnvVars: env("NO_DEFAULT_POOLS")},
		&cli.StringFlag{Name: "cluster-type", EnvVars: env("CLUSTER_TYPE")},
		&cli.StringFlag{Name: "dataplane", EnvVars: env("CALICO_DATAPLANE"), Value: "iptables", Usage: "iptables: program routes, policy and overlays; none: control plane only (no kernel changes)"},
		&cli.StringFlag{Name: "networking-backend", EnvVars: env("CALICO_NETWORKING_BACKEND"), Value: "bird", Usage: "bird: run the BGP speaker; vxlan or none: no BGP"},
		&cli.StringFlag{Name: "bgp-status-socket", EnvVars: env("CALICO_BGP_STATUS_SOCKET"), Value: bgp.DefaultStatusSocket, Usage: "unix socket answering `calicoctl node status`"},
		&cli.IntFlag{Name: "bgp-listen-port", EnvVars: env("CALICO_BGP_LISTEN_PORT"), Usage: "BGP listen port of this node (default: BGPConfiguration listenPort, else 179)"},
		&cli.StringFlag{Name: "cni-socket", EnvVars: env("CALICO_CNI_SOCKET"), Value: cnientry.DefaultSocket, Usage: "unix socket on which the agent runs the CNI commands the calico and calico-ipam plugins forward (none: off)"},
		&cli.StringFlag{Name: "status-socket", EnvVars: env("CALICO_STATUS_SOCKET"), Value: epstatus.DefaultSocket, Usage: "unix socket serving the endpoint timelines of `calicoctl node timeline` (none: off)"},
		&cli.StringFlag{Name: "policy-setup-timeout", EnvVars: env("CALICO_POLICY_SETUP_TIMEOUT"), Value: "5s", Usage: "how long a CNI ADD the agent serves waits for the pod's policy and routes to be programmed before failing, when the CNI config's policy_setup_timeout_seconds does not say (seconds or a duration; 0: do not wait)"},
		&cli.StringFlag{Name: "memory-trim-interval", EnvVars: env("CALICO_MEMORY_TRIM_INTERVAL"), Value: "2s", Usage: "how often the agent returns free heap memory (from 1 MiB of it) to the kernel, so that its RSS falls back after a burst (seconds or a duration; 0: never, the Go runtime's own pace)"},
		&cli.StringFlag{Name: "bgp-secrets-dir", EnvVars: env("CALICO_BGP_SECRETS_DIR"), Value: "/etc/calico/bgp-secrets", Usage: "BGP passwords (secretKeyRef) as files <dir>/<secret name>/<key>, the layout of a mounted Secret"},
	}, append(kubeFlags(), fanoutClientFlags()...)...)
}

// datastoreConfigFrom reads the datastore flags (and the K8S_*
// variables) that `run` and `fanout` share.
func datastoreConfigFrom(c *cli.Context, getenv func(string) string) (datastore.Config, error) {
	var ds datastore.Config
	if eps := c.String("etcd-endpoints"); eps != "" {
		for _, e := range strings.Split(eps, ",") {
			if e = strings.TrimSpace(e); e != "" {
				ds.Endpoints = append(ds.Endpoints, e)
			}
		}
	}
	ds.CACertFile = c.String("etcd-ca-cert-file")
	ds.CertFile = c.String("etcd-cert-file")
	ds.KeyFile = c.String("etcd-key-file")
	ds.Username = c.String("etcd-username")
	ds.Password = c.String("etcd-password")
	switch t := strings.ToLower(c.String("datastore-type")); t {
	case datastore.TypeEtcd, "":
		ds.Type = datastore.TypeEtcd
	case datastore.TypeKubernetes:
		ds.Type = datastore.TypeKubernetes
		ds.Kube = datastore.KubeConfig{
			Kubeconfig:  c.String("kubeconfig"),
			APIEndpoint: getenv("K8S_API_ENDPOINT"),
			CAFile:      getenv("K8S_CA_FILE"),
			CertFile:    getenv("K8S_CERT_FILE"),
			KeyFile:     getenv("K8S_KEY_FILE"),
			Token:       getenv("K8S_API_TOKEN"),
		}
		if len(ds.Endpoints) > 0 {
			return ds, errors.New("DATASTORE_TYPE=kubernetes does not use etcd: unset ETCD_ENDPOINTS")
		}
	default:
		return ds, fmt.Errorf("DATASTORE_TYPE=%q: want %s or %s", t, datastore.TypeEtcd, datastore.TypeKubernetes)
	}
	return ds, nil
}

func runConfigFrom(c *cli.Context, getenv func(string) string) (runConfig, error) {
	var cfg runConfig
	var err error
	if cfg.datastore, err = datastoreConfigFrom(c, getenv); err != nil {
		return cfg, err
	}
	cfg.dataDir = c.String("data-dir")
	cfg.embedClient = c.String("embedded-etcd-client-url")
	cfg.embedPeer = c.String("embedded-etcd-peer-url")
	cfg.startupBudget = 2 * time.Minute

	cfg.healthAddr = c.String("health-addr")
	if cfg.healthAddr == "" {
		host, port := getenv("FELIX_HEALTHHOST"), getenv("FELIX_HEALTHPORT")
		if host == "" || host == "localhost" {
			host = "127.0.0.1"
		}
		if port == "" {
			port = "9099"
		}
		cfg.healthAddr = host + ":" + port
	}
	lvl, err := agent.ParseLogLevel(c.String("log-level"))
	if err != nil {
		return cfg, err
	}
	cfg.logLevel = lvl
	cfg.logLevelSet = c.IsSet("log-level")

	name, err := startup.NodeName(c.String("nodename"), getenv)
	if err != nil {
		return cfg, err
	}
	nat4, err := parseBool("CALICO_IPV4POOL_NAT_OUTGOING", c.String("ipv4pool-nat-outgoing"))
	if err != nil {
		return cfg, err
	}
	nat6, err := parseBool("CALICO_IPV6POOL_NAT_OUTGOING", c.String("ipv6pool-nat-outgoing"))
	if err != nil {
		return cfg, err
	}
	cfg.node = startup.Config{
		NodeName:  name,
		IP:        c.String("ip"),
		IP6:       c.String("ip6"),
		IPMethod:  c.String("ip-autodetection-method"),
		IP6Method: c.String("ip6-autodetection-method"),
		ASNumber:  c.String("as"),
		IPv4Pool: startup.PoolConfig{
			CIDR: c.String("ipv4pool-cidr"), BlockSize: c.Int("ipv4pool-block-size"),
			IPIPMode: c.String("ipv4pool-ipip"), VXLANMode: c.String("ipv4pool-vxlan"),
			NATOutgoing: nat4, NodeSelector: c.String("ipv4pool-node-selector"),
		},
		IPv6Pool: startup.PoolConfig{
			CIDR: c.String("ipv6pool-cidr"), BlockSize: c.Int("ipv6pool-block-size"),
			VXLANMode: c.String("ipv6pool-vxlan"), NATOutgoing: nat6,
			NodeSelector: c.String("ipv6pool-node-selector"),
		},
		NoDefaultPools: c.Bool("no-default-pools"),
		ClusterType:    c.String("cluster-type"),
		Version:        buildinfo.Version,
		NodenameFile:   filepath.Join(cfg.dataDir, "nodename"),
	}
	switch backend := strings.ToLower(c.String("networking-backend")); backend {
	case "bird", "":
		cfg.bgp.enabled = true
	case "vxlan", "none":
	default:
		return cfg, fmt.Errorf("CALICO_NETWORKING_BACKEND=%q: want bird, vxlan or none", backend)
	}
	switch dp := strings.ToLower(c.String("dataplane")); dp {
	case "iptables", "":
		cfg.dataplane = true
	case "none":
	default:
		return cfg, fmt.Errorf("CALICO_DATAPLANE=%q: want iptables or none", dp)
	}
	if cfg.cniSocket = c.String("cni-socket"); cfg.cniSocket == "none" {
		cfg.cniSocket = ""
	}
	if cfg.statusSocket = c.String("status-socket"); cfg.statusSocket == "none" {
		cfg.statusSocket = ""
	}
	timeout, err := parseSeconds("CALICO_POLICY_SETUP_TIMEOUT", c.String("policy-setup-timeout"))
	if err != nil {
		return cfg, err
	}
	cfg.policySetupTimeout = timeout
	if timeout == 0 {
		cfg.policySetupTimeout = -1 // the CNI server's "do not wait"
	}
	if cfg.memoryTrim, err = parseSeconds("CALICO_MEMORY_TRIM_INTERVAL", c.String("memory-trim-interval")); err != nil {
		return cfg, err
	}
	cfg.bgp.statusSocket = c.String("bgp-status-socket")
	cfg.bgp.listenPort = c.Int("bgp-listen-port")
	if p := cfg.bgp.listenPort; p < 0 || p > 65535 {
		return cfg, fmt.Errorf("bgp-listen-port %d: not a port", p)
	}
	cfg.bgp.secretsDir = c.String("bgp-secrets-dir")
	if cfg.fanout, err = fanoutClientConfigFrom(c); err != nil { // fanout.go
		return cfg, err
	}
	if err := kubeConfigInto(c, getenv, os.Environ(), &cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// parseSeconds reads a duration given as seconds ("5", "0.5") or as a Go
// duration ("5s", "250ms").
func parseSeconds(name, v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 {
		return time.Duration(f * float64(time.Second)), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return d, nil
	}
	return 0, fmt.Errorf("%s=%q is not a duration (seconds, or e.g. 5s)", name, v)
}

func parseBool(name, v string) (bool, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("%s=%q is not true or false", name, v)
	}
	return b, nil
}

// runNode is `calico-node run`: it builds every actor, so that a
// configuration error stops the process before anything has started;
// installs the CNI plugin once; then runs the actors in one group until
// the first returns. level is logger's level, which FelixConfiguration's
// logSeverityScreen steers unless cfg.logLevelSet.
func runNode(ctx context.Context, cfg runConfig, logger *slog.Logger, level *slog.LevelVar) error {
	logger.Info("starting", "version", buildinfo.String(), "node", cfg.node.NodeName)
	a, err := build(ctx, cfg, logger, level)
	if err != nil {
		return err
	}
	defer a.close()
	// Install once before any actor runs, as Calico's install-cni init
	// container does: when the node reports ready, kubelet already finds
	// the plugin and its config.
	if a.installCNI != nil {
		if _, err := a.installCNI.Sync(); err != nil {
			return fmt.Errorf("install CNI plugin: %w", err)
		}
	}
	return a.run(ctx)
}

// run adds every actor to the group, each behind what it must wait for,
// and runs them. The first actor to return stops all the others.
func (a *actors) run(ctx context.Context) error {
	g := newGroup(ctx, a.log)
	// Signal handler: SIGINT/SIGTERM stop the group.
	g.add("signal handler", waitForSignal(a.log))
	// /liveness, /readiness and /metrics.
	g.add("health server", a.health.Run)
	// The embedded etcd, when no external endpoints are configured.
	etcdReady := closed()
	if a.etcd != nil {
		g.add("embedded etcd", a.etcd.Run)
		etcdReady = a.etcd.Ready()
	}
	// Startup: connect to the datastore once it serves, register the node,
	// then resolve a.store for the actors below that need it.
	g.add("startup", after(etcdReady, a.startup.Run))
	// confwatch: the typed cache every later actor subscribes to; its
	// first read waits for a.store.
	g.add("confwatch", a.runConfwatch)
	// Nothing below is applied to the kernel before confwatch is in sync.
	synced := a.confwatch.Synced()
	// Kernel routes: the one owner of proto-80 routes (which also waits
	// for every producer to publish once).
	if a.routes != nil {
		g.add("route table", after(synced, a.routes.Run))
	}
	// BGP: the speaker that replaces BIRD and confd.
	if a.bgpServices != nil {
		g.add("bgp services", a.bgpServices.Run)
	}
	if a.bgp != nil {
		g.add("bgp", after(a.store.Ready(), a.bgp.Run))
	}
	// The dataplane (dataplane.go), once the datastore's lock flag is
	// known (which implies confwatch is in sync): while it says locked,
	// the actors keep the kernel as it is.
	if dp := a.dataplane; dp != nil {
		g.add("datastore ready", dp.ready.Run)
		known := dp.ready.Known()
		// What the dataplane has programmed: CNI ADD waits on it; the
		// status files and timelines.
		g.add("endpoint status", after(synced, a.epstatus.Run))
		g.add("endpoints", after(known, dp.endpoints.Run))
		g.add("blackholes", after(known, dp.blackholes.Run))
		g.add("policy", after(known, dp.policy.Run))
		g.add("overlay", after(known, dp.overlay.Run))
	}
	// The CNI server needs no state of the agent's, only to run in the
	// node's namespace, so it serves from the start.
	if a.cniServer != nil {
		g.add("cni server", a.cniServer.Run)
	}
	// The endpoint timelines, for `calicoctl node timeline`.
	if a.statusAPI != nil {
		g.add("status api", a.statusAPI.Run)
	}
	// Go's pprof, when FELIX_DEBUGPORT asks for it (debug.go).
	if addr := debugAddr(a.felixEnv); addr != "" {
		g.add("debug server", debugServer(addr, a.log))
	}
	// Free heap back to the kernel after bursts (memory.go).
	if a.memory != nil {
		g.add("memory trimmer", a.memory.Run)
	}
	// FelixConfiguration settings applied at runtime.
	g.add("felixconfig", a.felixConfig.Run)
	// Felix's metrics port, while FelixConfiguration enables it.
	g.add("felix metrics", a.felixMetrics.Run)
	// install-cni keeps the plugin and its config up to date.
	if a.installCNI != nil {
		g.add("install-cni", a.installCNI.Run)
	}
	// kube-controllers: leader-elected, on the datastore once connected.
	if a.controllers != nil {
		g.add("kube-controllers", after(a.store.Ready(), a.controllers.Run))
	}
	// kube-controllers' metrics port (KubeControllersConfiguration).
	if a.ctrlMetrics != nil {
		g.add("kube-controllers metrics", a.ctrlMetrics.Run)
	}
	return g.run()
}

// runConfwatch runs the cache, which reports its health itself (in
// sync, or the datastore unreachable).
func (a *actors) runConfwatch(ctx context.Context) error {
	err := a.confwatch.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
