package ctl

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/agent/epstatus"
	"github.com/projectcalico/calico-node/bgp"
)

// statusSocketFlag names the agent's BGP status socket. It is defined on
// `node` (so that NormalizeArgs, which moves a verb's flags in front of its
// sub-verb, finds it there) and on the top-level `calico-node status`.
func statusSocketFlag() cli.Flag {
	return &cli.StringFlag{
		Name: "bgp-status-socket", EnvVars: []string{"CALICO_BGP_STATUS_SOCKET"}, Value: bgp.DefaultStatusSocket,
		Usage: "the agent's BGP status socket",
	}
}

// agentSocketsFlag names the agents' status sockets `node timeline`
// asks; like statusSocketFlag it is defined on `node`.
func agentSocketsFlag() cli.Flag {
	return &cli.StringSliceFlag{
		Name: "status-socket", EnvVars: []string{"CALICO_STATUS_SOCKET"}, Value: cli.NewStringSlice(epstatus.DefaultSocket),
		Usage: "the agents' status sockets `node timeline` asks (repeat the flag, or give a glob such as '/run/calico-demo/*/status.sock'): the pod's node's agent tells its stages, the others when they had it programmed",
	}
}

// nodeCommand is `calicoctl node`.
func nodeCommand() *cli.Command {
	return &cli.Command{
		Name:            "node",
		Usage:           "node-level operations: status, routes, bgp why, timeline",
		Flags:           []cli.Flag{statusSocketFlag(), nodeOutputFlag(), agentSocketsFlag()},
		HideHelpCommand: true,
		Subcommands: []*cli.Command{{
			Name:   "status",
			Usage:  "show the BGP sessions of the agent on this host",
			Action: nodeStatus,
		}, nodeRoutesCommand(), nodeBGPCommand(), {
			Name:      "timeline",
			Usage:     "show when each step of a pod's network setup happened: ADD, IPAM, veth, policy, routes, BGP, other nodes",
			ArgsUsage: "[NAMESPACE/]POD",
			Action:    nodeTimeline,
		}},
	}
}

// nodeTimeline asks every agent named by --status-socket for the pod's
// timeline and prints it; an agent that does not answer is reported, not
// fatal ("what is known").
func nodeTimeline(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("usage: calicoctl node timeline [NAMESPACE/]POD", 1)
	}
	namespace, name, ok := strings.Cut(c.Args().First(), "/")
	if !ok {
		namespace, name = "default", namespace
	}
	if namespace == "" || name == "" {
		return cli.Exit("usage: calicoctl node timeline [NAMESPACE/]POD", 1)
	}
	var sockets []string
	for _, p := range c.StringSlice("status-socket") {
		matches, err := filepath.Glob(p)
		if err != nil || len(matches) == 0 {
			matches = []string{p} // asked anyway: its error says what is wrong
		}
		sockets = append(sockets, matches...)
	}
	ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
	defer cancel()
	sources := make([]epstatus.Source, len(sockets))
	var wg sync.WaitGroup
	for i, sock := range sockets {
		wg.Go(func() {
			a, err := epstatus.Query(ctx, sock, namespace, name)
			sources[i] = epstatus.Source{Socket: sock, Answer: a, Err: err}
		})
	}
	wg.Wait()
	if err := epstatus.WriteTimeline(c.App.Writer, namespace, name, sources); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	return nil
}

// StatusCommand is `calico-node status`: the same report as `calicoctl
// node status`.
func StatusCommand() *cli.Command {
	return &cli.Command{
		Name:   "status",
		Usage:  "show the BGP sessions of the agent on this host (as calicoctl node status)",
		Flags:  []cli.Flag{statusSocketFlag()},
		Action: nodeStatus,
	}
}

// nodeStatus asks the running agent over its socket; it needs no datastore.
func nodeStatus(c *cli.Context) error {
	ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
	defer cancel()
	st, err := bgp.QueryStatus(ctx, c.String("bgp-status-socket"))
	if err != nil {
		if errors.Is(err, bgp.ErrNotRunning) {
			// calicoctl's exact words, on stdout, and a failing exit status.
			fmt.Fprintln(c.App.Writer, bgp.ErrNotRunning.Error())
			return cli.Exit("", 1)
		}
		return err
	}
	return bgp.WriteStatus(c.App.Writer, st, time.Now())
}
