// Command calico-demo is `make demo`: a three-node Calico cluster on one
// machine, built from network namespaces, that shows BGP, IPAM and policy
// working across nodes, and is left running to explore. `make demo-down`
// (calico-demo down) removes it.
//
// # Model
//
// Every node is a network namespace (<prefix>-node-N, eth0 = 192.0.2.1N/24)
// with a veth into one bridge namespace (<prefix>-br, br0 = 192.0.2.1, the
// nodes' default gateway). etcd (Debian's etcd-server) runs in the
// machine's own namespace on 127.0.0.1 for calicoctl and on a unix socket
// in the state directory for the agents: a socket is a file, so the node
// namespaces reach it without any address or route in the host namespace.
// Each node runs `calico-node run` (BGP full mesh, iptables dataplane).
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
// record and removes the state directory; `up` runs `down` first, which is
// why running it twice in a row works. The demo builds nothing: the
// Makefile builds the binaries first.
//
// # Thread safety
//
// A single-threaded command; the matrix probes run in parallel goroutines
// that each lock their OS thread while inside a pod's namespace.
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
	binDir   string // calico-node, calicoctl, calico, calico-ipam
	stateDir string
	prefix   string // namespace name prefix
	etcdPort int    // client port; the peer port is the next one
	results  string // optional JSON report of what up observed
}

func newApp() *cli.App {
	var o options
	flags := []cli.Flag{
		&cli.StringFlag{Name: "bin-dir", Usage: "directory with calico-node and its calicoctl/calico/calico-ipam links (default: this program's directory)", Destination: &o.binDir},
		&cli.StringFlag{Name: "state-dir", Value: "/run/calico-demo", Usage: "where the demo keeps its state, logs and etcd data", Destination: &o.stateDir},
		&cli.StringFlag{Name: "prefix", Value: "cdemo", Usage: "prefix of every network namespace the demo creates", Destination: &o.prefix},
		&cli.IntFlag{Name: "etcd-port", Value: 12379, Usage: "etcd client port on 127.0.0.1 (the peer port is the next one)", Destination: &o.etcdPort},
	}
	return &cli.App{
		Name:  "calico-demo",
		Usage: "a three-node Calico cluster in network namespaces",
		Commands: []*cli.Command{
			{
				Name:  "up",
				Usage: "remove a previous demo, then bring the cluster up and show it working",
				Flags: append(flags, &cli.StringFlag{Name: "results", Usage: "also write what was observed as JSON to `FILE`", Destination: &o.results}),
				Action: func(c *cli.Context) error {
					if err := o.resolve(); err != nil {
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
