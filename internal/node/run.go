package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"
	"github.com/vishvananda/netlink"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/overlay"
	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/bgp"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/buildinfo"
	"github.com/projectcalico/calico-node/internal/cni"
	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/connect"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/node/autodetect"
	"github.com/projectcalico/calico-node/internal/node/embedetcd"
	"github.com/projectcalico/calico-node/internal/node/health"
	"github.com/projectcalico/calico-node/internal/node/startup"
)

// runConfig is everything `calico-node run` is told by flags and env.
type runConfig struct {
	etcd        datastore.Config
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
}

// bgpConfig is the BGP speaker's part of runConfig.
type bgpConfig struct {
	enabled      bool   // CALICO_NETWORKING_BACKEND=bird
	statusSocket string // where `node status` asks
	listenPort   int    // 0: BGPConfiguration's listenPort
	secretsDir   string // BGP passwords: <dir>/<secret>/<key>
}

func runCommand() *cli.Command {
	env := func(names ...string) []string { return names }
	return &cli.Command{
		Name:  "run",
		Usage: "run the node agent (datastore watch, node registration, health; embedded etcd when no endpoints are given)",
		Flags: append([]cli.Flag{
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
			&cli.StringFlag{Name: "bgp-secrets-dir", EnvVars: env("CALICO_BGP_SECRETS_DIR"), Value: "/etc/calico/bgp-secrets", Usage: "BGP passwords (secretKeyRef) as files <dir>/<secret name>/<key>, the layout of a mounted Secret"},
		}, kubeFlags()...),
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

func runConfigFrom(c *cli.Context, getenv func(string) string) (runConfig, error) {
	var cfg runConfig
	if eps := c.String("etcd-endpoints"); eps != "" {
		for _, e := range strings.Split(eps, ",") {
			if e = strings.TrimSpace(e); e != "" {
				cfg.etcd.Endpoints = append(cfg.etcd.Endpoints, e)
			}
		}
	}
	cfg.etcd.CACertFile = c.String("etcd-ca-cert-file")
	cfg.etcd.CertFile = c.String("etcd-cert-file")
	cfg.etcd.KeyFile = c.String("etcd-key-file")
	cfg.etcd.Username = c.String("etcd-username")
	cfg.etcd.Password = c.String("etcd-password")
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
	cfg.bgp.statusSocket = c.String("bgp-status-socket")
	cfg.bgp.listenPort = c.Int("bgp-listen-port")
	if p := cfg.bgp.listenPort; p < 0 || p > 65535 {
		return cfg, fmt.Errorf("bgp-listen-port %d: not a port", p)
	}
	cfg.bgp.secretsDir = c.String("bgp-secrets-dir")
	if err := kubeConfigInto(c, getenv, os.Environ(), &cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func parseBool(name, v string) (bool, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("%s=%q is not true or false", name, v)
	}
	return b, nil
}

// datastoreFuture hands the connected store from the startup actor to the
// actors that need it, once node registration is done.
type datastoreFuture struct {
	ready chan struct{}
	store datastore.Store
}

func (f *datastoreFuture) wait(ctx context.Context) (datastore.Store, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-f.ready:
		return f.store, nil
	}
}

// runNode is the one run.Group of `calico-node run`. The first actor to
// return stops all the others. level is logger's level, which
// FelixConfiguration's logSeverityScreen steers unless cfg.logLevelSet.
func runNode(parent context.Context, cfg runConfig, logger *slog.Logger, level *slog.LevelVar) error {
	logger.Info("starting", "version", buildinfo.String(), "node", cfg.node.NodeName)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	agg := health.NewAggregator()

	var g run.Group
	// Signal handler: SIGINT/SIGTERM stop the group.
	{
		ctx, cancel := context.WithCancel(parent)
		g.Add(func() error {
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sig)
			select {
			case s := <-sig:
				logger.Info("received signal, stopping", "signal", s.String())
				return nil
			case <-ctx.Done():
				return nil
			}
		}, func(error) { cancel() })
	}
	// Health and metrics server.
	{
		srv := health.NewServer(cfg.healthAddr, agg, reg, logger)
		ctx, cancel := context.WithCancel(parent)
		g.Add(func() error {
			err := srv.Run(ctx)
			logger.Info("health server stopped")
			return err
		}, func(error) { cancel() })
	}
	// Embedded etcd, only when no external endpoints are configured.
	var etcdReady <-chan struct{}
	if len(cfg.etcd.Endpoints) == 0 {
		srv := embedetcd.New(embedetcd.Config{
			DataDir:   filepath.Join(cfg.dataDir, "etcd"),
			ClientURL: cfg.embedClient,
			PeerURL:   cfg.embedPeer,
			Name:      cfg.node.NodeName,
			Logger:    logger,
		})
		cfg.etcd.Endpoints = srv.Endpoints()
		etcdReady = srv.Ready()
		ctx, cancel := context.WithCancel(parent)
		g.Add(func() error {
			err := srv.Run(ctx)
			logger.Info("embedded etcd stopped")
			return err
		}, func(error) { cancel() })
	}
	// Startup: connect to the datastore, register the node, then hold the
	// connection for the other actors until the group stops.
	future := &datastoreFuture{ready: make(chan struct{})}
	{
		rep := agg.Register("startup", false, true, 0)
		ctx, cancel := context.WithCancel(parent)
		g.Add(func() error {
			if etcdReady != nil {
				select {
				case <-etcdReady:
				case <-ctx.Done():
					return nil
				}
			}
			store, err := connectRetrying(ctx, cfg.etcd, logger)
			if err != nil {
				return err
			}
			defer store.Close()
			rep.Report(true, false, "registering node")
			node, err := startup.Run(ctx, store, autodetect.NetlinkSource{Handle: &netlink.Handle{}}, cfg.node, logger)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("node startup: %w", err)
			}
			rep.Report(true, true, "node "+node.Name+" registered")
			future.store = store
			close(future.ready)
			<-ctx.Done()
			logger.Info("datastore connection closing")
			return nil
		}, func(error) { cancel() })
	}
	// confwatch: the typed cache every later actor subscribes to. It is
	// built before the group (reading the datastore through the future) so
	// that the other actors can subscribe before it runs.
	w := confwatch.New(futureSource{future}, logger, reg)
	{
		rep := agg.Register("confwatch", true, true, 0)
		rep.Report(true, false, "waiting for datastore")
		ctx, cancel := context.WithCancel(parent)
		g.Add(func() error {
			go func() {
				select {
				case <-w.Synced():
					rep.Report(true, true, "in sync")
				case <-ctx.Done():
				}
			}()
			err := w.Run(ctx)
			logger.Info("confwatch stopped")
			if ctx.Err() != nil {
				return nil
			}
			return err
		}, func(error) { cancel() })
	}
	// Kernel routes: the one owner of proto-80 routes. Producers (BGP,
	// workloads, overlays) publish into it; it touches the kernel only
	// after confwatch is in sync, and only runs when a producer does: a
	// table nobody feeds would delete every proto-80 route it finds.
	// A handle with its own socket: the zero netlink.Handle opens and closes
	// a socket per request, which dominates installing thousands of routes.
	nlh, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("open netlink: %w", err)
	}
	defer nlh.Close()
	// Until FelixConfiguration is read, the environment's (or Felix's
	// default) routeRefreshInterval.
	envRefresh := agent.RouteRefreshInterval(cfg.kube.felix.Spec)
	routeTable := routes.New(nlh, envRefresh, logger)
	if cfg.bgp.enabled {
		routeTable.Expect(routes.SourceBGP)
	}
	if cfg.dataplane {
		routeTable.Expect(routes.SourceWorkloads, routes.SourceBlackhole, routes.SourceTunnels)
	}
	if cfg.bgp.enabled || cfg.dataplane {
		ctx, cancel := context.WithCancel(parent)
		g.Add(func() error {
			select {
			case <-w.Synced():
			case <-ctx.Done():
				return nil
			}
			err := routeTable.Run(ctx)
			logger.Info("route table stopped")
			return err
		}, func(error) { cancel() })
	}
	// FelixConfiguration settings applied at runtime: logSeverityScreen
	// (the log level) and routeRefreshInterval (the route table's and the
	// endpoints' resync); the policy actor reads its own settings.
	felixOpts := agent.FelixConfigOptions{Node: cfg.node.NodeName, Env: cfg.kube.felix.Spec}
	if !cfg.logLevelSet {
		felixOpts.Level = level // flag and environment outrank the datastore
	}
	felixCfg := agent.NewFelixConfig(felixOpts, w, logger)
	if cfg.bgp.enabled || cfg.dataplane {
		felixCfg.AddRouteRefresher(routeTable)
	}
	// BGP: the speaker that replaces BIRD and confd (sessions, export of
	// this node's blocks, learned routes into routeTable).
	if cfg.bgp.enabled {
		sub := w.Subscribe(bgp.Kinds()...)
		rep := agg.Register("bgp", true, true, 0)
		ctx, cancel := context.WithCancel(parent)
		g.Add(func() error {
			store, err := future.wait(ctx)
			if err != nil {
				return nil
			}
			a := bgp.New(bgp.Config{
				NodeName:     cfg.node.NodeName,
				StatusSocket: cfg.bgp.statusSocket,
				ListenPort:   cfg.bgp.listenPort,
				Secrets:      bgp.SecretsDir(cfg.bgp.secretsDir),
				Logger:       logger,
				Registerer:   reg,
			}, sub, store.IPAM(), routeTable, rep)
			err = a.Run(ctx)
			logger.Info("bgp stopped")
			return err
		}, func(error) { cancel() })
	}
	// The dataplane: workload routes and sysctls, blackholes for our
	// blocks, policy in iptables/ipsets (dataplane.go), and the overlays.
	if cfg.dataplane {
		if err := addDataplane(&g, parent, cfg.node.NodeName, w, routeTable, felixCfg, cfg.kube.felix.Spec, future, reg, logger); err != nil {
			return err
		}
		sub := w.Subscribe(overlay.Kinds()...)
		rep := agg.Register("overlay", true, true, 0)
		ctx, cancel := context.WithCancel(parent)
		g.Add(func() error {
			store, err := future.wait(ctx)
			if err != nil {
				return nil
			}
			err = overlay.New(overlay.Config{NodeName: cfg.node.NodeName, Resync: dataplaneResync, Logger: logger, FelixEnv: cfg.kube.felix.Spec}, overlay.Deps{
				Updates: sub, Blocks: overlay.StoreBlocks(store.IPAM(), logger),
				Store: store, IPAM: ipam.New(store.IPAM(), store, logger),
				Kernel: nlh, Routes: routeTable, Health: rep,
			}).Run(ctx)
			logger.Info("overlay stopped")
			return err
		}, func(error) { cancel() })
	}
	// The CNI server: the plugin processes on this node hand their
	// commands to it (package cnientry) and fall back to running them
	// themselves while it is not there. It needs no state of the agent's,
	// only to run in the node's namespace, so it serves from the start.
	if cfg.dataplane && cfg.cniSocket != "" {
		ctx, cancel := context.WithCancel(parent)
		srv := cni.NewServer(cfg.cniSocket, reg, logger)
		g.Add(func() error {
			err := srv.Run(ctx)
			logger.Info("cni server stopped")
			return err
		}, func(error) { cancel() })
	}
	// The FelixConfig actor, added after addDataplane has registered the
	// endpoints actor with it.
	{
		ctx, cancel := context.WithCancel(parent)
		g.Add(func() error {
			err := felixCfg.Run(ctx)
			logger.Info("felixconfig stopped")
			return err
		}, func(error) { cancel() })
	}
	// install-cni and the leader-elected kube-controllers (run_k8s.go).
	if err := addKubeActors(&g, parent, cfg, future, reg, logger); err != nil {
		return err
	}
	return g.Run()
}

// futureSource is the datastore as confwatch reads it, once the startup
// actor has connected: its calls wait for the future.
type futureSource struct{ f *datastoreFuture }

func (s futureSource) List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error) {
	store, err := s.f.wait(ctx)
	if err != nil {
		return nil, 0, err
	}
	return store.List(ctx, kind, namespace)
}

func (s futureSource) Watch(ctx context.Context, kind string, fromRevision int64) <-chan datastore.Event {
	store, err := s.f.wait(ctx)
	if err != nil {
		ch := make(chan datastore.Event)
		close(ch)
		return ch
	}
	return store.Watch(ctx, kind, fromRevision)
}

// connectRetrying retries until the datastore answers: at start-up etcd may still
// be coming up (embedded, or a pod on the same node).
func connectRetrying(ctx context.Context, cfg datastore.Config, logger *slog.Logger) (datastore.Store, error) {
	backoff := 200 * time.Millisecond
	for {
		store, err := connect.New(ctx, cfg)
		if err == nil {
			return store, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var cfgErr *datastore.ConfigError
		if errors.As(err, &cfgErr) {
			return nil, err // bad TLS files etc.: retrying won't help
		}
		logger.Warn("datastore not reachable, retrying", "endpoints", cfg.Endpoints, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
