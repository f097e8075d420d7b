package node

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/vishvananda/netns"
	"k8s.io/klog/v2"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/epstatus"
	"github.com/projectcalico/calico-node/agent/routes"
	"github.com/projectcalico/calico-node/agent/routetable"
	"github.com/projectcalico/calico-node/bgp"
	"github.com/projectcalico/calico-node/cniinstall"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/controllers"
	"github.com/projectcalico/calico-node/internal/cni"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/connect"
	"github.com/projectcalico/calico-node/internal/kube"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/node/embedetcd"
	"github.com/projectcalico/calico-node/internal/node/health"
)

// actors are the parts of `calico-node run`, built and not started. A nil
// field is a part this configuration does not run.
type actors struct {
	log *slog.Logger

	health  *health.Server
	etcd    *embedetcd.Server
	startup *startupActor
	store   *storeFuture // resolved by startup
	// watchKV is where the IPAM watches (BGP's, the blocks') read: the
	// datastore's, or the fan-out's when the agent reads one.
	watchKV      datastore.KV
	confwatch    *confwatch.Watcher
	routes       *routetable.Table // nil unless BGP or the dataplane feeds it
	felixConfig  *agent.FelixConfig
	felixMetrics *agent.MetricsServer // FelixConfiguration prometheusMetrics*: Felix's port (9091)
	ctrlMetrics  *ctrlMetrics         // KubeControllersConfiguration prometheusMetricsPort (9094)
	bgp          *bgp.Actor
	bgpServices  *bgp.ServiceWatcher // nil without a Kubernetes API
	dataplane    *dataplane
	epstatus     *epstatus.Tracker // what the dataplane programmed; nil without it
	statusAPI    *epstatus.Server
	cniServer    *cni.Server
	installCNI   *cniinstall.Installer
	controllers  *controllers.Controllers
	memory       *memoryTrimmer // nil: --memory-trim-interval 0
	// felixEnv is FelixConfiguration from the FELIX_* environment (the
	// debug port's, read at start).
	felixEnv *api.FelixConfigurationSpec

	nl *routetable.Netlink // the routes' and overlay's; closed by close
}

// close releases what building opened.
func (a *actors) close() {
	if a.nl != nil {
		a.nl.Close()
	}
}

// builder is what every actor is built from.
type builder struct {
	cfg   runConfig
	log   *slog.Logger
	level *slog.LevelVar // the process's log level
	// reg holds the agent's metrics (calico_* and felix_*), ctrlReg the
	// kube-controllers' (ipam_*, calico_kube_controllers_*), runtime the
	// go_* and process_* ones: /metrics on the health address serves all
	// three, Felix's port reg and runtime, kube-controllers' port ctrlReg
	// and runtime, as the processes calico-node replaces did.
	reg, ctrlReg, runtime *prometheus.Registry
	agg                   *health.Aggregator
}

// build makes every actor cfg asks for and starts none: a configuration
// error (a missing iptables, an unreadable file, a Kubernetes API that
// cannot be configured) stops the process here, before anything has
// listened, written a file or touched the kernel.
func build(ctx context.Context, cfg runConfig, logger *slog.Logger, level *slog.LevelVar) (_ *actors, err error) {
	b := &builder{cfg: cfg, log: logger, level: level, agg: health.NewAggregator(),
		reg: prometheus.NewRegistry(), ctrlReg: prometheus.NewRegistry(), runtime: prometheus.NewRegistry()}
	b.runtime.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a := &actors{log: logger, store: newStoreFuture(), felixEnv: cfg.kube.felix.Spec}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	if err := b.controlPlane(a); err != nil {
		return nil, err
	}
	if cfg.memoryTrim > 0 {
		a.memory = newMemoryTrimmer(cfg.memoryTrim, logger)
	}
	if cfg.dataplane {
		// Told by the policy actor, the route table and BGP what they
		// programmed (built first: BGP is built in routing).
		a.epstatus = epstatus.New(epstatus.Config{
			Node: cfg.node.NodeName, Env: cfg.kube.felix.Spec, Registerer: b.reg, Logger: logger,
		}, a.confwatch)
		if cfg.statusSocket != "" {
			a.statusAPI = epstatus.NewServer(cfg.statusSocket, a.epstatus, logger)
		}
	}
	if err := b.routing(a); err != nil {
		return nil, err
	}
	if cfg.dataplane {
		if a.dataplane, err = b.dataplane(ctx, a); err != nil {
			return nil, err
		}
	}
	if cfg.cniSocket != "" {
		// The plugin processes on this node hand their commands to it
		// (package cnientry) and fall back to running them themselves
		// while it is not there. It needs no dataplane: it does what
		// the plugin would, so --dataplane=none serves it too. With the
		// dataplane, ADD returns once the pod's policy and routes are
		// programmed.
		a.cniServer = cni.NewServer(cfg.cniSocket, b.reg, logger)
		if a.epstatus != nil {
			a.cniServer.Dataplane = a.epstatus
			a.cniServer.PolicySetupTimeout = cfg.policySetupTimeout
		}
	}
	if err := b.kube(a); err != nil { // run_k8s.go
		return nil, err
	}
	return a, nil
}

// controlPlane builds the health server, the datastore (embedded etcd,
// startup) and confwatch.
func (b *builder) controlPlane(a *actors) error {
	ds := b.cfg.datastore
	if ds.EffectiveType() == datastore.TypeEtcd && len(ds.Endpoints) == 0 {
		a.etcd = embedetcd.New(embedetcd.Config{
			DataDir:   filepath.Join(b.cfg.dataDir, "etcd"),
			ClientURL: b.cfg.embedClient,
			PeerURL:   b.cfg.embedPeer,
			Name:      b.cfg.node.NodeName,
			Logger:    b.log,
		})
		ds.Endpoints = a.etcd.Endpoints()
	}
	if err := connect.Check(ds); err != nil {
		return err
	}
	b.cfg.datastore = ds // install-cni writes the embedded etcd's endpoints into the CNI config
	a.health = health.NewServer(b.cfg.healthAddr, b.agg, prometheus.Gatherers{b.reg, b.ctrlReg, b.runtime}, b.log)
	a.startup = &startupActor{
		datastore: ds, node: b.cfg.node, future: a.store,
		health: b.agg.Register("startup", false, true, 0), log: b.log,
	}
	// Built before the group runs, reading the datastore through the
	// future, so that every other actor can subscribe before it runs.
	var src confwatch.Source = a.store
	a.watchKV = a.store.ipam()
	if fo := b.cfg.fanout; fo.addr != "" {
		// Resources and IPAM watches from `calico-node fanout`
		// (fanout.go); reads and writes still go to the datastore.
		dial, err := fo.dialer()
		if err != nil {
			return err
		}
		remote := confwatch.NewRemote(dial, b.log)
		src = afterReady{ready: a.store.Ready(), Source: remote}
		a.watchKV = remote.KV(a.store.ipam())
		b.log.Info("reading Calico's resources from the fan-out, not the datastore", "fanout", fo.addr, "tls", fo.caFile != "")
	}
	a.confwatch = confwatch.New(src, b.log, b.reg)
	confwatchHealth := b.agg.Register("confwatch", true, true, 0)
	confwatchHealth.Report(true, false, "waiting for datastore")
	a.confwatch.ReportHealthTo(confwatchHealth)
	return nil
}

// routing builds the route table, the FelixConfiguration actor and the
// BGP speaker.
func (b *builder) routing(a *actors) error {
	felix := b.cfg.kube.felix.Spec
	// FelixConfiguration settings applied at runtime: logSeverityScreen
	// (the log level) and routeRefreshInterval (the route table's and the
	// endpoints' resync); the policy actor reads its own settings.
	// Also: Felix's metrics port (prometheusMetrics*), the Go runtime
	// (goGCThreshold, goMemoryLimitMB, goMaxProcs), and the report of
	// fields set to values calico-node does not honour (readiness detail
	// of "felixconfig", and the log).
	a.felixMetrics = agent.NewMetricsServer("felix", prometheus.Gatherers{b.reg, b.runtime}, b.log)
	opts := agent.FelixConfigOptions{
		Node: b.cfg.node.NodeName, Env: felix,
		Health:  b.agg.Register("felixconfig", false, false, 0), // news, not a readiness condition
		Runtime: agent.NewProcessRuntime(),
		Metrics: a.felixMetrics,
	}
	if !b.cfg.logLevelSet {
		opts.Level = b.level // flag and environment outrank the datastore
	}
	a.felixConfig = agent.NewFelixConfig(opts, a.confwatch, b.log)

	// The route table runs only when a producer does: a table nobody
	// feeds would delete every proto-80 route it finds.
	if !b.cfg.bgp.enabled && !b.cfg.dataplane {
		return nil
	}
	// A handle with its own socket: the zero netlink.Handle opens and
	// closes a socket per request, which dominates installing thousands
	// of routes; and a second socket that writes routes in batches.
	nl, err := routetable.NewNetlink(netns.None())
	if err != nil {
		return fmt.Errorf("open netlink: %w", err)
	}
	a.nl = nl
	// Until FelixConfiguration is read, the environment's (or Felix's
	// default) routeRefreshInterval.
	a.routes = routetable.New(nl, agent.RouteRefreshInterval(felix), b.log)
	if err := a.routes.RegisterMetrics(b.reg); err != nil {
		return err
	}
	if b.cfg.bgp.enabled {
		a.routes.Expect(routes.SourceBGP)
	}
	if b.cfg.dataplane {
		a.routes.Expect(routes.SourceWorkloads, routes.SourceBlackhole, routes.SourceTunnels)
	}
	a.felixConfig.AddRouteRefresher(a.routes)

	if b.cfg.bgp.enabled {
		// Services whose addresses this node advertises one by one
		// (BGPConfiguration serviceClusterIPs, serviceExternalIPs,
		// serviceLoadBalancerIPs), as Calico's confd watches them: from
		// the Kubernetes API whatever the datastore, when there is one.
		var services bgp.ServiceSource
		if b.cfg.kube.kubeconfig != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
			restCfg, err := kubeRESTConfig(b.cfg.kube.kubeconfig)
			switch {
			case err != nil && b.cfg.kube.kubeconfig != "":
				return fmt.Errorf("service advertisement: %w", err)
			case err != nil:
				// In a pod without a usable service account: as confd,
				// whose route generator then does not start.
				b.log.Warn("per-Service BGP advertisement needs Kubernetes API access; only the service ranges are advertised", "err", err)
			default:
				// client-go logs through klog; send it where everything else goes.
				klog.SetSlogLogger(b.log.With("component", "client-go"))
				kc, err := kube.New(restCfg)
				if err != nil {
					return fmt.Errorf("kubernetes client for service advertisement: %w", err)
				}
				node := b.cfg.node.K8sNodeRef
				if node == "" {
					node = b.cfg.node.NodeName
				}
				a.bgpServices = bgp.NewServiceWatcher(kc, node, b.log)
				services = a.bgpServices
			}
		} else {
			b.log.Info("per-Service BGP advertisement needs Kubernetes API access (KUBECONFIG or in-cluster), and there is none: only the serviceClusterIPs, serviceExternalIPs and serviceLoadBalancerIPs ranges are advertised")
		}
		// Sessions, export of this node's blocks, learned routes into
		// the route table.
		a.bgp = bgp.New(bgp.Config{
			NodeName:     b.cfg.node.NodeName,
			StatusSocket: b.cfg.bgp.statusSocket,
			ListenPort:   b.cfg.bgp.listenPort,
			Secrets:      bgp.SecretsDir(b.cfg.bgp.secretsDir),
			Logger:       b.log,
			Registerer:   b.reg,
			Advertised:   advertised(a.epstatus),
			Services:     services,
			Routes:       a.routes,
		}, a.confwatch.Subscribe(bgp.Kinds()...), a.watchKV, a.routes, b.agg.Register("bgp", true, true, 0))
	}
	return nil
}

// advertised is BGP's report of what it originates to the tracker (nil
// without a dataplane).
func advertised(t *epstatus.Tracker) func([]netip.Prefix) {
	if t == nil {
		return nil
	}
	return t.Advertised
}
