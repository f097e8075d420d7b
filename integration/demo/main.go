// Command calico-demo is `make demo` (and `make demo-kdd`, the same on the
// Kubernetes datastore): a three-node Calico cluster on one machine, built
// from network namespaces, that shows BGP, IPAM and policy working across
// nodes, and is left running to explore. `make demo-down` (calico-demo
// down) removes it.
//
// # Model
//
// Every node is a network namespace (<prefix>-node-N, eth0 = 192.0.2.1N/24)
// with a veth into one bridge namespace (<prefix>-br, br0 = 192.0.2.1, the
// nodes' default gateway). Each node runs `calico-node run` (BGP full
// mesh, iptables dataplane) on one of Calico's two datastores:
//
//   - etcd (--datastore=etcdv3, the default): Debian's etcd-server runs in
//     the machine's own namespace on 127.0.0.1 for calicoctl and on a unix
//     socket in the state directory for the agents: a socket is a file, so
//     the node namespaces reach it without any address or route in the
//     host namespace.
//   - the Kubernetes API (--datastore=kubernetes, KDD): a real
//     kube-apiserver (the binaries `make kube-bins` caches) on 127.0.0.1,
//     its storage an etcd embedded in a `calico-demo etcd` process, its
//     certificates made in-process; Calico's CRDs (deploy/crds.yaml), the
//     three Kubernetes Nodes, the namespaces and the pods are Kubernetes
//     objects, as kubelet and a user would make them (no kubelet and no
//     scheduler run: pods carry spec.nodeName). The API server's port is
//     relayed into every node namespace's loopback by a `calico-demo
//     forward` process, as a node reaches the API server through the
//     kubernetes service, so one kubeconfig serves calicoctl, kubectl, the
//     agents and the CNI plugin.
//
// Pods are namespaces <prefix>-<k8s namespace>-N made by the real CNI
// plugin through libcni, called from inside the node's namespace as a
// container runtime on that node would; pod addresses come from
// 198.51.100.0/24. Each pod runs `calico-demo serve`, a TCP listener that
// answers with the pod's name, so a connection proves which pod answered.
//
// # Design
//
// Everything the demo creates is recorded in <state-dir>/state.json before
// it is created (namespaces) or right after (processes, by PID and start
// time, so a reused PID is never signalled). `down` undoes exactly that
// record and removes the state directory (processes in three rounds:
// clients first, then kube-apiserver, etcd last, so that each stops while
// what it talks to still answers); `up` runs `down` first, which is why
// running it twice in a row works. The demo builds nothing: the Makefile
// builds the binaries first (and, for the Kubernetes datastore, has
// kube-bins cache kube-apiserver and kubectl, whose directory it passes
// as --kube-bin-dir).
//
// # Thread safety
//
// A single-threaded command; the matrix probes run in parallel goroutines
// that each lock their OS thread while inside a pod's namespace. The
// hidden `forward` command opens each listener on a locked thread inside
// its node's namespace and relays every connection in goroutines of its
// own, in the machine's namespace.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "calico-demo:", err)
		os.Exit(1)
	}
}

// options are the demo's settings; the defaults are what `make demo` uses,
// the test overrides them to run beside a user's demo.
type options struct {
	binDir    string // calico-node, calicoctl, calico, calico-ipam
	stateDir  string
	prefix    string // namespace name prefix
	etcdPort  int    // client port; the peer port is the next one
	results   string // optional JSON report of what up observed
	datastore string // etcdv3 or kubernetes

	// The Kubernetes datastore's settings.
	kubeBinDir    string // kube-apiserver and kubectl
	apiserverPort int
	crds          string // deploy/crds.yaml
}

// Calico's names of its datastores (DATASTORE_TYPE).
const (
	datastoreEtcd = "etcdv3"
	datastoreKube = "kubernetes"
)

func newApp() *cli.App {
	var o options
	flags := []cli.Flag{
		&cli.StringFlag{Name: "bin-dir", Usage: "directory with calico-node and its calicoctl/calico/calico-ipam links (default: this program's directory)", Destination: &o.binDir},
		&cli.StringFlag{Name: "state-dir", Value: "/run/calico-demo", Usage: "where the demo keeps its state, logs and etcd data", Destination: &o.stateDir},
		&cli.StringFlag{Name: "prefix", Value: "cdemo", Usage: "prefix of every network namespace the demo creates", Destination: &o.prefix},
		&cli.IntFlag{Name: "etcd-port", Value: 12379, Usage: "etcd client port on 127.0.0.1 (the peer port is the next one); with --datastore=kubernetes the API server's etcd", Destination: &o.etcdPort},
	}
	// The datastore's flags; down accepts them too (and needs none: it
	// undoes what the state records), so one DEMO_ARGS serves both.
	flags = append(flags,
		&cli.StringFlag{Name: "datastore", Value: datastoreEtcd, Usage: "Calico's datastore: etcdv3, or kubernetes (a real kube-apiserver, Calico's CRDs)", Destination: &o.datastore},
		&cli.StringFlag{Name: "kube-bin-dir", Usage: "directory with kube-apiserver and kubectl for --datastore=kubernetes (make kube-bins builds them; default: PATH)", Destination: &o.kubeBinDir},
		&cli.IntFlag{Name: "apiserver-port", Value: 16443, Usage: "kube-apiserver's port on 127.0.0.1 (and on every node's loopback) for --datastore=kubernetes", Destination: &o.apiserverPort},
		&cli.StringFlag{Name: "crds", Usage: "Calico's CustomResourceDefinitions for --datastore=kubernetes (default: deploy/crds.yaml here or beside the bin dir)", Destination: &o.crds},
	)
	upFlags := append(flags[:len(flags):len(flags)],
		&cli.StringFlag{Name: "results", Usage: "also write what was observed as JSON to `FILE`", Destination: &o.results})
	return &cli.App{
		Name:  "calico-demo",
		Usage: "a three-node Calico cluster in network namespaces",
		Commands: []*cli.Command{
			{
				Name:  "up",
				Usage: "remove a previous demo, then bring the cluster up and show it working",
				Flags: upFlags,
				Action: func(c *cli.Context) error {
					if err := o.resolve(); err != nil {
						return err
					}
					if err := o.resolveUp(); err != nil {
						return err
					}
					ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
					defer stop()
					_, err := up(ctx, o, os.Stdout)
					return err
				},
			},
			{
				Name:  "down",
				Usage: "remove every namespace, process and file the demo created",
				Flags: flags,
				Action: func(c *cli.Context) error {
					if err := o.resolve(); err != nil {
						return err
					}
					return down(o, os.Stdout)
				},
			},
			{
				// The API server's storage on --datastore=kubernetes: not
				// for users.
				Name:   "etcd",
				Hidden: true,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "data-dir", Required: true},
					&cli.StringFlag{Name: "client-url", Required: true},
					&cli.StringFlag{Name: "peer-url", Required: true},
				},
				Action: func(c *cli.Context) error {
					ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
					defer stop()
					return serveEtcd(ctx, c.String("data-dir"), c.String("client-url"), c.String("peer-url"))
				},
			},
			{
				// Relays the API server into the node namespaces: not for
				// users.
				Name:      "forward",
				Hidden:    true,
				ArgsUsage: "ADDR NETNS...",
				Action: func(c *cli.Context) error {
					if c.NArg() < 2 {
						return fmt.Errorf("usage: forward ADDR NETNS...")
					}
					ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
					defer stop()
					return forward(ctx, c.Args().First(), c.Args().Tail())
				},
			},
			{
				// Runs inside a pod namespace: not for users.
				Name:      "serve",
				Hidden:    true,
				ArgsUsage: "ADDR NAME",
				Action: func(c *cli.Context) error {
					if c.NArg() != 2 {
						return fmt.Errorf("usage: serve ADDR NAME")
					}
					return serve(context.Background(), c.Args().Get(0), c.Args().Get(1))
				},
			},
		},
	}
}

func (o *options) resolve() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the demo creates network namespaces and must run as root: sudo make demo")
	}
	if o.binDir == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this program: %w", err)
		}
		o.binDir = filepath.Dir(self)
	}
	var err error
	if o.binDir, err = filepath.Abs(o.binDir); err != nil {
		return fmt.Errorf("bin dir: %w", err)
	}
	if o.stateDir, err = filepath.Abs(o.stateDir); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	return nil
}

// resolveUp checks up's own options and finds the Kubernetes datastore's
// files.
func (o *options) resolveUp() error {
	switch o.datastore {
	case datastoreEtcd, "etcd":
		o.datastore = datastoreEtcd
		return nil
	case datastoreKube:
	default:
		return fmt.Errorf("--datastore=%q: want %s or %s", o.datastore, datastoreEtcd, datastoreKube)
	}
	if o.crds == "" {
		// make demo runs in the repository; a copied bin/ has deploy/ beside it.
		o.crds = filepath.Join("deploy", "crds.yaml")
		if _, err := os.Stat(o.crds); err != nil {
			o.crds = filepath.Join(o.binDir, "..", "deploy", "crds.yaml")
		}
	}
	var err error
	if o.crds, err = filepath.Abs(o.crds); err != nil {
		return fmt.Errorf("CRDs: %w", err)
	}
	if o.kubeBinDir != "" {
		if o.kubeBinDir, err = filepath.Abs(o.kubeBinDir); err != nil {
			return fmt.Errorf("kube bin dir: %w", err)
		}
	}
	return nil
}
